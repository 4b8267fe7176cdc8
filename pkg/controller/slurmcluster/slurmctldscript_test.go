package slurmcluster

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

// fakeSlurmctld behaves as slurmctld does toward its script (measured: docs/slurm-cluster.md):
// started, it daemonizes (the foreground exits 0 whatever follows); a slurm.conf holding
// "fatal" ends it at start with an error and a fatal line; otherwise it writes its PID file
// (in $RUN, the parent of its configuration directory), logs the hash and key it read and
// "Running as primary controller", and then answers pings ($RUN/up names it, for
// fakeScontrolPing) unless its slurm.conf holds "hangstart": then it runs a program that
// never ends and answers nothing (as a hung SlurmctldPrimaryOnProg makes it). On SIGHUP it
// reads its slurm.conf again: one holding
// "refuse" is refused ("Resuming operation, reconfigure failed.", same process); one holding
// "hang" starts a new process that never takes over (as a hung SlurmctldPrimaryOnProg
// makes it), and the running one waits for it, then goes on as it was; another is run by a
// new process that takes over the PID file, the old one ending. SIGTERM ends it.
const fakeSlurmctld = `#!/bin/sh
if [ "$FAKE_DAEMON" != 1 ]; then FAKE_DAEMON=1 "$0" "$@" >/dev/null 2>&1 & exit 0; fi
conf=$2 log=$4
dir=$(dirname "$conf"); pidfile=$(dirname "$dir")/slurmctld.pid
if [ "$FAKE_HANG" = 1 ]; then
  echo "[t] _run_primary_prog: Running SlurmctldPrimaryOnProg" >>"$log"
  sleep 1000 & echo $! >"$(dirname "$dir")/hang-sleep.pid"; wait; exit 0
fi
if grep -q fatal "$conf"; then echo "[t] error: bad \"thing\" \\ here" >>"$log"; echo "[t] fatal: cannot start" >>"$log"; exit 1; fi
hup= 
trap 'hup=1' HUP
trap 'echo "[t] terminated" >>"$log"; exit 0' TERM
echo $$ >"$pidfile"
echo "[t] started $(cat "$dir/kubeslurm-config-hash") key=$(cat "$dir/slurm.key")" >>"$log"
echo "[t] Running as primary controller" >>"$log"
if grep -q hangstart "$conf"; then
  echo "[t] _run_primary_prog: Running SlurmctldPrimaryOnProg" >>"$log"
  sleep 1000 & echo $! >"$(dirname "$dir")/hang-sleep.pid"; wait
fi
echo $$ >"$(dirname "$dir")/up"
while :; do
  sleep 0.1
  [ -n "$hup" ] || continue
  hup=
  echo "[t] Reconfigure signal (SIGHUP) received" >>"$log"
  if grep -q refuse "$conf"; then
    echo "[t] fatal: refused" >>"$log"; echo "[t] Resuming operation, reconfigure failed." >>"$log"
  elif grep -q hang "$conf"; then
    FAKE_HANG=1 "$0" "$@" & wait $!
    echo "[t] Resuming operation, reconfigure failed." >>"$log"
  else
    "$0" "$@" & exit 0
  fi
done
`

// fakeScontrolPing answers `scontrol ping` as slurmctld would: UP while the fakeSlurmctld
// process $RUN/up names runs. It takes the ping's slurm.conf ($SLURM_CONF, in a directory
// of $RUN) only if it sends the ping to 127.0.0.1.
const fakeScontrolPing = `#!/bin/sh
[ "$1" = ping ] || exit 2
grep -q '^SlurmctldHost=slurm-controller-0(127.0.0.1)$' "$SLURM_CONF" || { echo "ping not sent to 127.0.0.1" >&2; exit 1; }
pid=$(cat "$(dirname "$(dirname "$SLURM_CONF")")/up" 2>/dev/null)
if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then echo "Slurmctld(primary) at slurm-controller-0 is UP"; exit 0; fi
echo "Slurmctld(primary) at slurm-controller-0 is DOWN"; exit 1
`

// fakeCurl keeps the body of each request (--data-binary) as a line of $RUN/../curl.log,
// and fails while $RUN/../curl-fails exists.
const fakeCurl = `#!/bin/sh
top=$(dirname "$RUN")
while [ $# -gt 0 ]; do [ "$1" = --data-binary ] && body=$2; shift; done
[ -e "$top/curl-fails" ] && exit 22
printf '%s\n' "$body" >>"$top/curl.log"
`

// slurmctldRun is slurmctld's script run by startSlurmctldScript in dir (daemonRun's),
// with its configuration in conf and the kept one in apply.
type slurmctldRun struct {
	*daemonRun
	conf, apply string
}

// writeConf writes dir's configuration: slurm.conf with SlurmctldHost and content, its
// hash file and (if key is not empty) slurm.key.
func writeConf(t *testing.T, dir, content, hash, key string) {
	require.NoError(t, os.MkdirAll(dir, 0o755))
	conf := "SlurmctldHost=slurm-controller-0(slurm-controller-0.slurm-controller.hpc.svc)\n" + content + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "slurm.conf"), []byte(conf), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, ConfigHashFile), []byte(hash), 0o644))
	if key != "" {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "slurm.key"), []byte(key), 0o600))
	}
}

// startSlurmctldScript runs slurmctld's script with fakeSlurmctld and fakeCurl, on
// $top/etc/slurm (content, hash) and, if applied is not empty, $top/etc/slurm-applied,
// with env added to its environment.
func startSlurmctldScript(t *testing.T, content, hash, applied, appliedHash string, env ...string) *slurmctldRun {
	top := t.TempDir()
	r := &slurmctldRun{conf: filepath.Join(top, "etc/slurm"), apply: filepath.Join(top, "etc/slurm-applied")}
	writeConf(t, r.conf, content, hash, "k1")
	if applied != "" {
		writeConf(t, r.apply, applied, appliedHash, "")
	}
	bin := filepath.Join(top, "bin")
	require.NoError(t, os.MkdirAll(bin, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(bin, "slurmctld"), []byte(fakeSlurmctld), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(bin, "curl"), []byte(fakeCurl), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(bin, "scontrol"), []byte(fakeScontrolPing), 0o755))
	paths := slurmctldPaths{Conf: r.conf, Applied: r.apply, Run: filepath.Join(top, "run"),
		Daemon: filepath.Join(bin, "slurmctld"), ServiceAccount: filepath.Join(top, "sa")}
	r.daemonRun = startScript(t, top, slurmctldScript(paths), append([]string{"PATH=" + bin + ":" + os.Getenv("PATH"), "RUN=" + paths.Run,
		"CONFIG_POLL_SECONDS=0.2", "START_RETRY_SECONDS=0.2", "RESTART_SECONDS=1", "POD_NAME=slurm-controller-0", "POD_NAMESPACE=hpc",
		"KUBERNETES_SERVICE_HOST=127.0.0.1", "KUBERNETES_SERVICE_PORT=6443"}, env...), "slurmctld")
	t.Cleanup(func() { // the daemon left the script's group; so did a hung one's program
		for _, f := range []string{"slurmctld.pid", "hang-sleep.pid"} {
			if b, err := os.ReadFile(filepath.Join(paths.Run, f)); err == nil {
				if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
	})
	return r
}

// waitHangStopped waits until the program a hung fakeSlurmctld ran has been killed.
func (r *slurmctldRun) waitHangStopped() {
	sleeper, err := strconv.Atoi(strings.TrimSpace(r.file("run/hang-sleep.pid")))
	require.NoError(r.t, err, "a hung slurmctld's program ran")
	require.Eventually(r.t, func() bool { return syscall.Kill(sleeper, 0) == syscall.ESRCH },
		5*time.Second, 50*time.Millisecond, "the program a hung slurmctld ran is killed")
}

// takesNextAndEnds checks that a later configuration (hash next) is run, refused still
// reported, and that SIGTERM ends the script 0.
func (r *slurmctldRun) takesNextAndEnds(next, refused string) {
	writeConf(r.t, r.conf, "ok", next, "")
	r.waitReport(next, refused)
	require.NoError(r.t, r.cmd.Process.Signal(syscall.SIGTERM))
	assert.Equal(r.t, 0, r.exited())
}

// reports are the annotations of every report the script made.
func (r *slurmctldRun) reports() []map[string]string {
	b, _ := os.ReadFile(filepath.Join(r.dir, "curl.log"))
	var out []map[string]string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if line == "" {
			continue
		}
		var patch struct {
			Metadata struct{ Annotations map[string]string } `json:"metadata"`
		}
		require.NoError(r.t, json.Unmarshal([]byte(line), &patch), "a JSON merge patch: %s", line)
		out = append(out, patch.Metadata.Annotations)
	}
	return out
}

// waitReport waits for a report with slurmctld running running and the refused hash
// refused, and returns it.
func (r *slurmctldRun) waitReport(running, refused string) map[string]string {
	var got map[string]string
	require.Eventually(r.t, func() bool {
		for _, a := range r.reports() {
			if a[wellknown.SlurmctldConfigAnnotation] == running && a[wellknown.SlurmctldRefusedConfigAnnotation] == refused {
				got = a
				return true
			}
		}
		return false
	}, 15*time.Second, 50*time.Millisecond, "reports: %v\nstderr: %s", r.reports(), r.stderr())
	return got
}

func (r *slurmctldRun) file(name string) string {
	b, _ := os.ReadFile(filepath.Join(r.dir, name))
	return string(b)
}

// In place: a new configuration is read by slurmctld (a new process) and reported; one it
// refuses is reported with its lines while it runs on, and the files before go back, so a
// key change's SIGHUP reads those; a report the API server does not take is made again;
// SIGTERM is passed on and the script ends 0.
func TestSlurmctldScriptReconfiguresInPlace(t *testing.T) {
	r := startSlurmctldScript(t, "ok", "h1", "", "")
	first := r.waitReport("h1", "")
	assert.Equal(t, "", first[wellknown.SlurmctldRefusedReasonAnnotation])

	writeConf(t, r.conf, "ok again", "h2", "")
	r.waitReport("h2", "")
	assert.Contains(t, r.file("run/slurmctld.log"), "started h2 key=k1")
	assert.Equal(t, "h2", r.file("run/conf/"+ConfigHashFile))

	require.NoError(t, os.WriteFile(filepath.Join(r.dir, "curl-fails"), nil, 0o644))
	writeConf(t, r.conf, "refuse", "h3", "")
	require.Eventually(t, func() bool { return strings.Contains(r.stderr(), "not annotated") }, 15*time.Second, 50*time.Millisecond)
	require.NoError(t, os.Remove(filepath.Join(r.dir, "curl-fails")))
	refusal := r.waitReport("h2", "h3")
	assert.Equal(t, "[t] fatal: refused", refusal[wellknown.SlurmctldRefusedReasonAnnotation])
	assert.Equal(t, "h2", r.file("run/conf/"+ConfigHashFile), "the files slurmctld runs are back")
	assert.Contains(t, r.stderr(), "slurmctld refused configuration h3: [t] fatal: refused")

	// A key change: slurmctld reads the key again, with the configuration it runs.
	require.NoError(t, os.WriteFile(filepath.Join(r.conf, "slurm.key"), []byte("k2"), 0o600))
	require.Eventually(t, func() bool { return strings.Contains(r.file("run/slurmctld.log"), "started h2 key=k2") },
		15*time.Second, 50*time.Millisecond, "log: %s", r.file("run/slurmctld.log"))
	assert.NotContains(t, r.file("run/slurmctld.log"), "started h3")

	require.NoError(t, r.cmd.Process.Signal(syscall.SIGTERM))
	assert.Equal(t, 0, r.exited())
	assert.Contains(t, r.file("run/slurmctld.log"), "[t] terminated")
	assert.Contains(t, r.stderr(), "Running as primary controller", "the log is followed onto stderr")
}

// A reconfigure that does not end (slurmctld's new process hung, the running one waiting
// for it) is stopped after RECONFIGURE_TIMEOUT_SECONDS: the new process and what it
// started are killed, slurmctld goes on as it was, and the configuration is refused with
// why. A later configuration is taken as before.
func TestSlurmctldScriptStopsAHungReconfigure(t *testing.T) {
	r := startSlurmctldScript(t, "ok", "h1", "", "", "RECONFIGURE_TIMEOUT_SECONDS=1")
	r.waitReport("h1", "")
	running := r.file("run/slurmctld.pid")

	writeConf(t, r.conf, "hang", "h2", "")
	got := r.waitReport("h1", "h2")
	assert.Equal(t, "the reconfigure had not ended after 1 s (its last log line: _run_primary_prog: Running SlurmctldPrimaryOnProg): its new slurmctld process was stopped",
		strings.TrimSpace(got[wellknown.SlurmctldRefusedReasonAnnotation]))
	assert.Equal(t, running, r.file("run/slurmctld.pid"), "the same slurmctld runs on")
	assert.Equal(t, "h1", r.file("run/conf/"+ConfigHashFile), "the files slurmctld runs are back")
	r.waitHangStopped()
	r.takesNextAndEnds("h3", "h2")
}

// A start that slurmctld does not answer after (here) 1 s, its SlurmctldPrimaryOnProg hung:
// slurmctld is stopped with the program, at once, not tried again, the configuration is
// refused with why, and slurmctld starts on the kept one.
func TestSlurmctldScriptStopsAHungStart(t *testing.T) {
	r := startSlurmctldScript(t, "hangstart", "h2", "ok", "h1", "RECONFIGURE_TIMEOUT_SECONDS=1")
	got := r.waitReport("h1", "h2")
	assert.Equal(t, "slurmctld had not answered 1 s after its start (its last log line: _run_primary_prog: Running SlurmctldPrimaryOnProg): it was stopped",
		strings.TrimSpace(got[wellknown.SlurmctldRefusedReasonAnnotation]))
	assert.Equal(t, 1, strings.Count(r.file("run/slurmctld.log"), "started h2"), "a hang is not tried again")
	assert.Equal(t, "h1", r.file("run/conf/"+ConfigHashFile))
	r.waitHangStopped()
	r.takesNextAndEnds("h3", "h2")
}

// A configuration slurmctld cannot start on (twice): refused, and slurmctld starts on the
// kept one, reported as running with the refusal and its lines (escaped into JSON). A later
// start on a good configuration is reported too.
func TestSlurmctldScriptStartRefused(t *testing.T) {
	t.Run("kept configuration", func(t *testing.T) {
		r := startSlurmctldScript(t, "fatal", "h3", "ok", "h1")
		got := r.waitReport("h1", "h3")
		assert.Equal(t, "[t] error: bad \"thing\" \\ here\n[t] fatal: cannot start", got[wellknown.SlurmctldRefusedReasonAnnotation])
		assert.Equal(t, 2, strings.Count(r.file("run/slurmctld.log"), "fatal: cannot start"), "tried twice")
		assert.Equal(t, "h1", r.file("run/conf/"+ConfigHashFile))
		assert.NotContains(t, r.stderr(), "to the workers", "started on the kept configuration: nothing to send")

		r.takesNextAndEnds("h4", "h3")
	})
	// Nothing to go back to: the refusal is reported, slurmctld started again a while later
	// (RESTART_SECONDS; twice each time) and at once when the files change; SIGTERM
	// meanwhile ends the script 0.
	t.Run("nothing kept", func(t *testing.T) {
		r := startSlurmctldScript(t, "fatal", "h3", "", "")
		got := r.waitReport("", "h3")
		assert.Contains(t, got[wellknown.SlurmctldRefusedReasonAnnotation], "fatal: cannot start")
		require.Eventually(t, func() bool { return strings.Count(r.file("run/slurmctld.log"), "fatal: cannot start") >= 4 },
			15*time.Second, 50*time.Millisecond, "started again later: %s", r.file("run/slurmctld.log"))
		assert.Contains(t, r.stderr(), "slurmctld is not running: starting it again when")

		writeConf(t, r.conf, "ok", "h4", "")
		r.waitReport("h4", "h3")
		assert.NotContains(t, r.stderr(), "to the workers", "nothing kept: nothing to send")
		require.NoError(t, r.cmd.Process.Signal(syscall.SIGTERM))
		assert.Equal(t, 0, r.exited())
	})
	t.Run("kept configuration is the refused one", func(t *testing.T) {
		r := startSlurmctldScript(t, "fatal", "h3", "fatal", "h3")
		r.waitReport("", "h3")
		require.Eventually(t, func() bool { return strings.Contains(r.stderr(), "slurmctld is not running") },
			15*time.Second, 50*time.Millisecond, "stderr: %s", r.stderr())
		require.NoError(t, r.cmd.Process.Signal(syscall.SIGTERM))
		assert.Equal(t, 0, r.exited())
		assert.NotContains(t, r.stderr(), "the one it ran before", "not started on the same refused files")
	})
}

// A start on another configuration than the kept one is followed by one reconfigure (it
// sends the configless workers the new configuration; the start does not); a start on the
// kept one is not, so the only reconfigure logged is a later change's.
func TestSlurmctldScriptStartOnNewConfigurationReconfigures(t *testing.T) {
	reconfigures := func(r *slurmctldRun) int {
		return strings.Count(r.file("run/slurmctld.log"), "Reconfigure signal (SIGHUP) received")
	}
	t.Run("new configuration", func(t *testing.T) {
		r := startSlurmctldScript(t, "ok", "h2", "ok before", "h1")
		r.waitReport("h2", "")
		require.Eventually(t, func() bool { return strings.Contains(r.stderr(), "slurmctld sent configuration h2 to the workers") },
			15*time.Second, 50*time.Millisecond, "stderr: %s", r.stderr())
		assert.Equal(t, 1, reconfigures(r))
		assert.Equal(t, 2, strings.Count(r.file("run/slurmctld.log"), "started h2"), "a new process read it again")
	})
	t.Run("kept configuration", func(t *testing.T) {
		r := startSlurmctldScript(t, "ok", "h1", "ok", "h1")
		r.waitReport("h1", "")
		writeConf(t, r.conf, "ok again", "h2", "")
		r.waitReport("h2", "")
		assert.Equal(t, 1, reconfigures(r), "the change's reconfigure alone")
		assert.NotContains(t, r.stderr(), "to the workers")
	})
}

// The script's diagnostic ours() lists this mount namespace's slurmctld processes, a
// re-executed one too: it runs under its binary's own name (Debian's slurmctld-wlm, behind
// the slurmctld link), not the name it was started by.
func TestSlurmctldScriptOursFindsReexecutedSlurmctld(t *testing.T) {
	ours := regexp.MustCompile(`(?s)\nours\(\) \{\n.*?\n\}\n`).FindString(slurmctldShell)
	require.NotEmpty(t, ours, "ours() in slurmctldShell")
	dir := t.TempDir()
	binary := filepath.Join(dir, "slurmctld-wlm")
	require.NoError(t, os.WriteFile(binary, []byte("#!/bin/sh\nwhile :; do sleep 0.1; done\n"), 0o755))
	require.NoError(t, os.Symlink(binary, filepath.Join(dir, "slurmctld")))
	for _, name := range []string{"slurmctld", "slurmctld-wlm"} {
		cmd := exec.Command(filepath.Join(dir, name))
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		out, err := exec.Command("/bin/sh", "-c", "DAEMON="+filepath.Join(dir, "slurmctld")+ours+"ours").Output()
		require.NoError(t, err)
		assert.Contains(t, strings.Fields(string(out)), strconv.Itoa(cmd.Process.Pid), "started as %s", name)
	}
}
