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
	own, err := Of(os.Getpid())
	require.NoError(t, err)
	assert.Error(t, Kill(own))
	assert.Error(t, Kill(""))
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
	ns, err := Of(cmd.Process.Pid)
	require.NoError(t, err)
	var escaped int
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(pidFile)
		escaped, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && escaped > 0
	}, 10*time.Second, 20*time.Millisecond)
	t.Cleanup(func() { _ = syscall.Kill(escaped, syscall.SIGKILL) })

	pids, err := Processes(ns)
	require.NoError(t, err)
	assert.ElementsMatch(t, []int{cmd.Process.Pid, escaped}, pids)

	require.NoError(t, syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL))
	_ = cmd.Wait()
	assert.True(t, alive(escaped), "the process in a session of its own outlived its group's SIGKILL")

	require.NoError(t, Kill(ns))
	assert.Eventually(t, func() bool { return !alive(escaped) }, 5*time.Second, 20*time.Millisecond)
	pids, err = Processes(ns)
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
