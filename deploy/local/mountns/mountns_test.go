package mountns

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The caller's own mount namespace (the host's processes) is never killed.
func TestKillRefusesTheCallersOwn(t *testing.T) {
	own, err := Open(os.Getpid())
	require.NoError(t, err)
	defer own.Close()
	assert.Error(t, own.Kill())
}

// A namespace held open keeps its number after its last process is gone: a namespace made
// then gets another, so its processes are not taken for the old one's. (Without the hold the
// kernel hands out the freed number again at once.)
func TestHeldNamespaceIsNotReused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: it starts processes in mount namespaces of their own")
	}
	inNewNamespace := func() *exec.Cmd {
		cmd := exec.Command("sleep", "600")
		cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	first := inNewNamespace()
	held, err := Open(first.Process.Pid)
	require.NoError(t, err)
	defer held.Close()
	require.NoError(t, first.Process.Kill())
	_ = first.Wait()

	second := inNewNamespace()
	id, err := Of(second.Process.Pid)
	require.NoError(t, err)
	assert.NotEqual(t, held.String(), id)
	pids, err := held.Processes()
	require.NoError(t, err)
	assert.Empty(t, pids, "the held namespace's processes are gone; the new one's are not its")
	require.NoError(t, held.Kill())
	_, err = Of(second.Process.Pid)
	assert.NoError(t, err, "the process of the new namespace is alive after the old one's kill")
}

// A process that left the container's process group (setsid, as slurmstepd does) outlives
// the group's SIGKILL, not the kill of the container's mount namespace.
func TestKillEndsWhatLeftTheProcessGroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: it starts a process in a mount namespace of its own")
	}
	pidFile := filepath.Join(t.TempDir(), "escaped.pid")
	cmd := exec.Command("sh", "-c", `setsid sh -c 'echo $$ > "$1"; exec sleep 600' sh "$1" </dev/null >/dev/null 2>&1 & exec sleep 600`, "sh", pidFile)
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS, Setpgid: true}
	require.NoError(t, cmd.Start())
	ns, err := Open(cmd.Process.Pid)
	require.NoError(t, err)
	defer ns.Close()
	var escaped int
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(pidFile)
		escaped, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && escaped > 0
	}, 10*time.Second, 20*time.Millisecond)
	t.Cleanup(func() { _ = syscall.Kill(escaped, syscall.SIGKILL) })

	pids, err := ns.Processes()
	require.NoError(t, err)
	assert.ElementsMatch(t, []int{cmd.Process.Pid, escaped}, pids)

	require.NoError(t, syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL))
	_ = cmd.Wait()
	assert.True(t, alive(escaped), "the process in a session of its own outlived its group's SIGKILL")

	require.NoError(t, ns.Kill())
	assert.Eventually(t, func() bool { return !alive(escaped) }, 5*time.Second, 20*time.Millisecond)
	pids, err = ns.Processes()
	require.NoError(t, err)
	assert.Empty(t, pids)
}

// alive: pid runs (a zombie, ended but not yet reaped by its new parent, does not).
func alive(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	// The state follows the command's closing parenthesis.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z'
}
