package e2e

import (
	"context"
	"fmt"
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
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubeslurm/kubeslurm/deploy/local/mountns"
)

// startPodRunner runs bin/kubeslurm-podrunner for the test (log in .local/logs/podrunner.log;
// its containers log to .local/podrunner/logs/; Slurm images run in .local/slurm-root)
// and stops it at the end, which also removes its node.
func startPodRunner(t *testing.T) { startPodRunnerOn(t, runnerNode, "podrunner", runnerBinds) }

// runnerRole is what a pod runner of the test does with its node.
type runnerRole int

const (
	// runnerBinds registers its node and binds the unscheduled pods of our images to it
	// (one runner only should).
	runnerBinds runnerRole = iota
	// runnerOnly registers its node and runs the pods bound to it.
	runnerOnly
	// runnerAdopts runs, on an existing kwok node, the pods of images under localhost/
	// (--adopt-node); the node stays when it stops.
	runnerAdopts
)

// podRunner is the pod runner process a test runs for a node: the node's kubelet.
type podRunner struct {
	node    string
	role    runnerRole
	args    []string
	logPath string
	// cmd is the running process; nil after crash, until start.
	cmd    *exec.Cmd
	exited chan error
}

// startPodRunnerOn runs a pod runner for node, with its state (and its containers' logs)
// in .local/<stateDir>, and stops it at the end.
func startPodRunnerOn(t *testing.T, node, stateDir string, role runnerRole) *podRunner {
	t.Helper()
	r := &podRunner{node: node, role: role, logPath: filepath.Join(runDir, "logs", stateDir+".log"),
		args: []string{"--kubeconfig", filepath.Join(runDir, "admin.kubeconfig"), "--node-name", node,
			"--state-dir", filepath.Join(runDir, stateDir), "--slurm-root", filepath.Join(runDir, "slurm-root"),
			fmt.Sprintf("--bind-unscheduled=%t", role == runnerBinds), fmt.Sprintf("--adopt-node=%t", role == runnerAdopts)}}
	r.start(t)
	t.Cleanup(func() {
		r.stop(t)
		_, err := kube.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		if role == runnerAdopts {
			assert.NoError(t, err, "adopted node %s must stay after the runner stopped", node)
		} else {
			assert.True(t, apierrors.IsNotFound(err), "node %s left after the runner stopped: %v", node, err)
		}
	})
	return r
}

// start starts the runner process and waits until its node is Ready.
func (r *podRunner) start(t *testing.T) {
	t.Helper()
	log, err := os.OpenFile(r.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	require.NoError(t, err)
	defer log.Close() // the process has its own descriptor
	cmd := exec.Command(filepath.Join(repoRoot, "bin", "kubeslurm-podrunner"), r.args...)
	cmd.Stdout, cmd.Stderr = log, log
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	r.cmd, r.exited = cmd, exited
	eventually(t, 30*time.Second, "node "+r.node+" Ready", func() bool {
		n, err := kube.CoreV1().Nodes().Get(context.Background(), r.node, metav1.GetOptions{})
		return err == nil && readyOf(n) == v1.ConditionTrue
	})
}

// stop stops the runner as a node's shutdown would (SIGTERM: its pods stop within their
// grace periods).
func (r *podRunner) stop(t *testing.T) {
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-r.exited:
		assert.NoError(t, err, "pod runner exit (log %s)", r.logPath)
	case <-time.After(60 * time.Second):
		// A second signal kills its containers at once (a worker may still be waiting
		// for a job to drain): none is left running for the tests after this one.
		_ = r.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-r.exited:
		case <-time.After(30 * time.Second):
			_ = r.cmd.Process.Kill()
		}
		t.Errorf("pod runner did not stop within 60s of SIGTERM (log %s)", r.logPath)
	}
	r.cmd = nil
}

// crash kills the runner and every process it started at once (SIGKILL), those that left
// its process tree (a job step slurmstepd daemonized) by their container's mount namespace,
// as the loss of its machine would: no container stops gracefully (a worker's wrapper cannot drain), no
// pod status is written, and the node keeps the status it had. Only an adopted node's
// runner crashes in the tests: kwok keeps that node Ready, as the API server would see it
// for the minute before the node lifecycle controller acts. start brings the machine back.
func (r *podRunner) crash(t *testing.T) {
	t.Helper()
	require.NotNil(t, r.cmd, "the runner of %s runs", r.node)
	procs := freezeTree(r.cmd.Process.Pid)
	// The containers' namespaces, held (the frozen processes are in them) until killed.
	own, err := mountns.Of(os.Getpid())
	require.NoError(t, err)
	containers := map[string]*mountns.Namespace{}
	for _, pid := range procs[1:] {
		ns, err := mountns.Open(pid)
		if err != nil {
			continue
		}
		if _, seen := containers[ns.String()]; seen || ns.String() == own { // the runner's own, and the tests'
			_ = ns.Close()
			continue
		}
		containers[ns.String()] = ns
	}
	for _, pid := range procs {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	for _, ns := range containers {
		assert.NoError(t, ns.Kill(), "the crashed machine's processes")
		_ = ns.Close()
	}
	select {
	case <-r.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("pod runner of %s still running 30 s after SIGKILL", r.node)
	}
	r.cmd = nil
	t.Logf("crashed the machine of %s: killed the pod runner and its %d processes", r.node, len(procs)-1)
}

// killAlone kills the runner process alone (SIGKILL), as a kubelet may die while its
// machine and its containers go on.
func (r *podRunner) killAlone(t *testing.T) {
	t.Helper()
	require.NotNil(t, r.cmd, "the runner of %s runs", r.node)
	require.NoError(t, r.cmd.Process.Kill())
	select {
	case <-r.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("pod runner of %s still running 30 s after SIGKILL", r.node)
	}
	r.cmd = nil
}

// A pod runner killed alone leaves its containers running. Started again, it ends them (a
// process that left the container's process group with them) before it starts the
// container again: the pod's processes run once, and the container counts a restart, its
// last run ended Unknown as after a machine's reboot.
func TestPodRunnerStartedAgainEndsWhatItLeftRunning(t *testing.T) {
	ns := namespace(t)
	r := startPodRunnerOn(t, runnerNode, "podrunner", runnerBinds)
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "left", Namespace: ns}, Spec: v1.PodSpec{
		NodeName: runnerNode, TerminationGracePeriodSeconds: ptrTo[int64](1),
		Containers: []v1.Container{{Name: "main", Image: "kubeslurm/slurmd:26.05",
			Command: []string{"/bin/sh", "-c", "setsid sleep 3600 & exec sleep 3600"}}},
	}}
	_, err := kube.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{})
	require.NoError(t, err)
	var first v1.ContainerStatus
	eventually(t, 60*time.Second, "the container running", func() bool {
		p := getPod(t, ns, pod.Name)
		if len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].State.Running == nil {
			return false
		}
		first = p.Status.ContainerStatuses[0]
		return true
	})
	pid, err := strconv.Atoi(strings.TrimPrefix(first.ContainerID, "podrunner://"))
	require.NoError(t, err, first.ContainerID)
	container, err := mountns.Open(pid)
	require.NoError(t, err)
	t.Cleanup(func() { // nothing left behind should the runner not end them
		assert.NoError(t, container.Kill())
		_ = container.Close()
	})
	processes := func() []int {
		pids, err := container.Processes()
		require.NoError(t, err)
		return pids
	}
	eventually(t, 10*time.Second, "the container's two processes", func() bool { return len(processes()) == 2 })

	r.killAlone(t)
	time.Sleep(time.Second)
	require.Len(t, processes(), 2, "the container's processes outlive its runner")

	r.start(t)
	eventually(t, 60*time.Second, "the container running again, with a restart", func() bool {
		p := getPod(t, ns, pod.Name)
		s := p.Status.ContainerStatuses
		return len(s) == 1 && s[0].State.Running != nil && s[0].RestartCount == first.RestartCount+1 && s[0].ContainerID != first.ContainerID
	})
	assert.Empty(t, processes(), "the processes of the container's run before are gone")
	last := getPod(t, ns, pod.Name).Status.ContainerStatuses[0].LastTerminationState.Terminated
	require.NotNil(t, last)
	assert.Equal(t, "Unknown", last.Reason)
	assert.Equal(t, first.ContainerID, last.ContainerID)
}

// freezeTree stops (SIGSTOP) the process pid and all its descendants, found by their
// parent in /proc, looking again until no new one appears (a stopped process forks no
// more), and returns them, pid first.
func freezeTree(pid int) []int {
	frozen := []int{pid}
	seen := map[int]bool{pid: true}
	_ = syscall.Kill(pid, syscall.SIGSTOP)
	for grew := true; grew; {
		grew = false
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			child, err := strconv.Atoi(e.Name())
			if err != nil || seen[child] {
				continue
			}
			if parent, ok := parentOf(child); ok && seen[parent] {
				_ = syscall.Kill(child, syscall.SIGSTOP)
				seen[child], grew = true, true
				frozen = append(frozen, child)
			}
		}
	}
	return frozen
}

// parentOf is the parent pid of a process, from /proc/<pid>/stat ("pid (comm) state ppid
// ...", where comm may hold spaces and parentheses).
func parentOf(pid int) (int, bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, false
	}
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(fields[1])
	return ppid, err == nil
}
