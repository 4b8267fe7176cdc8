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

// fakeDaemon logs its starts and SIGHUPs, and ends with code 7 on SIGTERM. Its traps are
// set before it says it started: a SIGHUP before them would end it.
const fakeDaemon = `#!/bin/sh
trap 'echo hup >>"$LOG"' HUP
trap 'exit 7' TERM
echo start >>"$LOG"
while :; do sleep 0.1; done
`

// supervise (the daemons' script) runs the daemon, passes SIGTERM on and ends with the
// daemon's code; a changed key file (here a slurm.jwks that appears, then changes) makes it
// SIGHUP the daemon (hup) or start it again (restart). Run with a real /bin/sh.
func TestSuperviseReloadsChangedKeys(t *testing.T) {
	// Under nohup (a `make test` may run so) SIGHUP is ignored, children inherit that, and
	// a shell cannot trap a signal ignored when it started. Handled here, it starts at its
	// default in the children.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGHUP)
	defer signal.Reset(syscall.SIGHUP)
	for _, tc := range []struct {
		reload string
		want   []string
	}{
		{"hup", []string{"start", "hup", "hup"}},
		{"restart", []string{"start", "start", "start"}},
	} {
		t.Run(tc.reload, func(t *testing.T) {
			dir := t.TempDir()
			log := filepath.Join(dir, "log")
			daemon := filepath.Join(dir, "daemon")
			require.NoError(t, os.WriteFile(daemon, []byte(fakeDaemon), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(dir, "slurm.key"), []byte("old"), 0o600))
			cmd := exec.Command("/bin/sh", "-c", supervisedScript(dir, tc.reload, daemon), "daemon", "-D")
			cmd.Env = append(os.Environ(), "LOG="+log, "KEY_WATCH_SECONDS=0.2")
			require.NoError(t, cmd.Start())
			t.Cleanup(func() { _ = cmd.Process.Kill() })
			lines := func() []string {
				b, _ := os.ReadFile(log)
				return strings.Fields(string(b))
			}
			waitFor := func(n int) {
				require.Eventually(t, func() bool { return len(lines()) >= n }, 10*time.Second, 50*time.Millisecond, "log: %v", lines())
			}
			waitFor(1)
			time.Sleep(500 * time.Millisecond)
			assert.Equal(t, []string{"start"}, lines(), "no reload while the keys stay")

			require.NoError(t, os.WriteFile(filepath.Join(dir, "slurm.jwks"), []byte(`{"keys":[]}`), 0o600))
			waitFor(2)
			require.NoError(t, os.WriteFile(filepath.Join(dir, "slurm.jwks"), []byte(`{"keys":[{}]}`), 0o600))
			waitFor(3)
			time.Sleep(500 * time.Millisecond)
			assert.Equal(t, tc.want, lines())

			require.NoError(t, cmd.Process.Signal(os.Interrupt))
			var exit *exec.ExitError
			require.True(t, errors.As(cmd.Wait(), &exit), "the script ends with the daemon's code")
			assert.Equal(t, 7, exit.ExitCode())
		})
	}
}
