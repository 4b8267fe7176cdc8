package slurmcluster

import (
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	slurmv1 "github.com/kubeslurm/kubeslurm/api/v1alpha1"
)

// The auth/slurm key is mounted from the generated or the referenced Secret, with the same
// Secret's key set as an optional second file.
func TestSlurmKeyProjections(t *testing.T) {
	for _, tc := range []struct {
		name      string
		ref       *v1.SecretKeySelector
		secret    string
		secretKey string
	}{
		{"generated", nil, "hpc-slurm-key", "slurm.key"},
		{"referenced", &v1.SecretKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "site-key"}, Key: "key"}, "site-key", "key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &slurmv1.SlurmCluster{ObjectMeta: metav1.ObjectMeta{Name: "hpc"}}
			c.Spec.Auth.SlurmKeyRef = tc.ref
			p := slurmKeyProjections(c)
			require.Len(t, p, 2)
			assert.Equal(t, tc.secret, p[0].Secret.Name)
			assert.Equal(t, []v1.KeyToPath{{Key: tc.secretKey, Path: "slurm.key"}}, p[0].Secret.Items)
			assert.Nil(t, p[0].Secret.Optional, "the key itself is required")
			assert.Equal(t, tc.secret, p[1].Secret.Name)
			assert.Equal(t, []v1.KeyToPath{{Key: "slurm.jwks", Path: "slurm.jwks"}}, p[1].Secret.Items)
			assert.True(t, *p[1].Secret.Optional)
		})
	}
}

// supervisedScript runs the daemon at path under supervise (keyWatchShell), with the key
// files read from keyDir, as the daemons' scripts do.
func supervisedScript(keyDir, reload, path string) string {
	return "KEY_DIR=" + keyDir + "\n" + keyWatchShell + "supervise " + reload + " " + path + ` "$@"` + "\n"
}

// fakeDaemon logs its starts and SIGHUPs, and ends with code 7 on SIGTERM. Its traps are
// set before it says it started: a SIGHUP before them would end it.
const fakeDaemon = `#!/bin/sh
trap 'echo hup >>"$LOG"' HUP
trap 'exit 7' TERM
echo start >>"$LOG"
while :; do sleep 0.1; done
`

// fakeReexecutingDaemon is fakeDaemon whose first run has no SIGHUP handler, as a daemon
// re-executing itself has none for a moment: the first SIGHUP ends it (code 129).
const fakeReexecutingDaemon = `#!/bin/sh
[ -e "$LOG" ] && trap 'echo hup >>"$LOG"' HUP
trap 'exit 7' TERM
echo start >>"$LOG"
while :; do sleep 0.1; done
`

// daemonRun is a daemon's script run with a real /bin/sh from a temporary directory that
// holds the key files and the daemon's log.
type daemonRun struct {
	t   *testing.T
	dir string
	cmd *exec.Cmd
}

// startDaemonScript writes daemon into a temporary directory and starts script(dir, daemon)
// (the key files in dir) with extraPath first on PATH.
func startDaemonScript(t *testing.T, daemon string, script func(dir, daemon string) string, extraPath string) *daemonRun {
	dir := t.TempDir()
	path := filepath.Join(dir, "daemon")
	require.NoError(t, os.WriteFile(path, []byte(daemon), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "slurm.key"), []byte("old"), 0o600))
	env := []string{"LOG=" + filepath.Join(dir, "log"), "KEY_WATCH_SECONDS=0.2", "DRAIN_POLL_SECONDS=0.2"}
	if extraPath != "" {
		env = append(env, "PATH="+extraPath+":"+os.Getenv("PATH"))
	}
	return startScript(t, dir, script(dir, path), env, "daemon", "-D")
}

// startScript runs script with /bin/sh, its $0 and arguments args, in a process group of
// its own, with env added to the environment and its standard error in dir/stderr.
func startScript(t *testing.T, dir, script string, env []string, args ...string) *daemonRun {
	// Under nohup (a `make test` may run so) SIGHUP is ignored, children inherit that, and
	// a shell cannot trap a signal ignored when it started. Handled here, it starts at its
	// default in the children.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGHUP)
	t.Cleanup(func() { signal.Reset(syscall.SIGHUP) })
	cmd := exec.Command("/bin/sh", append([]string{"-c", script}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	stderr, err := os.Create(filepath.Join(dir, "stderr"))
	require.NoError(t, err)
	defer stderr.Close() // the process has its own descriptor
	cmd.Stderr = stderr
	// A group of its own: the cleanup ends the daemon too, should the script not have.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	return &daemonRun{t: t, dir: dir, cmd: cmd}
}

// lines are the daemon's log lines.
func (d *daemonRun) lines() []string {
	b, _ := os.ReadFile(filepath.Join(d.dir, "log"))
	return strings.Fields(string(b))
}

// waitFor waits until the log has n lines.
func (d *daemonRun) waitFor(n int) {
	require.Eventually(d.t, func() bool { return len(d.lines()) >= n }, 10*time.Second, 50*time.Millisecond, "log: %v", d.lines())
}

// writeKeySet writes the key set file, which the script watches with the key.
func (d *daemonRun) writeKeySet(content string) {
	require.NoError(d.t, os.WriteFile(filepath.Join(d.dir, "slurm.jwks"), []byte(content), 0o600))
}

// stderr is what the script wrote to its standard error.
func (d *daemonRun) stderr() string {
	b, _ := os.ReadFile(filepath.Join(d.dir, "stderr"))
	return string(b)
}

// exitCode signals the script and returns its exit code.
func (d *daemonRun) exitCode(sig os.Signal) int {
	require.NoError(d.t, d.cmd.Process.Signal(sig))
	return d.exited()
}

// exited waits (10 s at most) for the script to end and returns its exit code.
func (d *daemonRun) exited() int {
	done := make(chan error, 1)
	go func() { done <- d.cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		_ = d.cmd.Process.Kill()
		require.FailNow(d.t, "the script did not end within 10 s", "stderr: %s", d.stderr())
	}
	if err == nil {
		return 0
	}
	var exit *exec.ExitError
	require.True(d.t, errors.As(err, &exit), "the script ends with an exit code: %v", err)
	return exit.ExitCode()
}

// supervise (the daemons' script) runs the daemon, passes SIGTERM on and ends with the
// daemon's code; a changed key file (here a slurm.jwks that appears, then changes) makes it
// SIGHUP the daemon (hup) or start it again (restart). A daemon ended by that SIGHUP
// (during a re-execution) is started again.
func TestSuperviseReloadsChangedKeys(t *testing.T) {
	for _, tc := range []struct {
		name, reload, daemon string
		want                 []string
	}{
		{"hup", "hup", fakeDaemon, []string{"start", "hup", "hup"}},
		{"restart", "restart", fakeDaemon, []string{"start", "start", "start"}},
		{"hup during a re-execution", "hup", fakeReexecutingDaemon, []string{"start", "start", "hup"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := startDaemonScript(t, tc.daemon, func(dir, daemon string) string {
				return supervisedScript(dir, tc.reload, daemon)
			}, "")
			d.waitFor(1)
			time.Sleep(500 * time.Millisecond)
			assert.Equal(t, []string{"start"}, d.lines(), "no reload while the keys stay")

			d.writeKeySet(`{"keys":[]}`)
			d.waitFor(2)
			d.writeKeySet(`{"keys":[{}]}`)
			d.waitFor(3)
			time.Sleep(500 * time.Millisecond)
			assert.Equal(t, tc.want, d.lines())
			assert.Equal(t, 7, d.exitCode(os.Interrupt), "the script ends with the daemon's code")
		})
	}
}
