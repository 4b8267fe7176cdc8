package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

// The SlurmJob condition and the job's annotations tell the story on the pod.
func TestJobStateOnThePod(t *testing.T) {
	jobStateOnThePod(t, localStack(), namespace(t))
}

// 6. A time limit and a preemption each end the pod with the right reason in its events
// (scancel is covered by TestPodAndJobEndTogether).
func TestSlurmEndsThePodWithTheReason(t *testing.T) {
	ns := namespace(t)
	node := nodes[0]

	timed := createPod(t, ns, "timed", onlyOnNode(nodes[len(nodes)-1]), withAnnotation("time-limit", "1"))
	timed = waitBound(t, ns, "timed", 60*time.Second)

	victim := createPod(t, ns, "victim", onlyOnNode(node), withAnnotation("exclusive", "true"))
	victim = waitBound(t, ns, "victim", 60*time.Second)
	// A job in the higher-tier partition preempts the placeholder holding the node.
	out := slurmCmd(t, "sbatch", "--parsable", "-p", "urgent", "--exclusive", "-N1", "-w", node, "-J", ns+"/urgent", "--wrap", "sleep 300")
	urgent := strings.Split(out, ";")[0]
	t.Cleanup(func() { _, _ = runCmd(filepath.Join(runDir, "bin", "scancel"), urgent) })
	waitGone(t, ns, "victim", 60*time.Second)
	ev := podEvents(t, victim)
	assert.Contains(t, ev, wellknown.EventSlurmJobPreempted)
	assert.Contains(t, ev, "PREEMPTED")

	// Slurm enforces the one-minute limit (plus its KillWait).
	waitGone(t, ns, "timed", 150*time.Second)
	ev = podEvents(t, timed)
	assert.Contains(t, ev, wellknown.EventSlurmJobTimeLimit)
	assert.Contains(t, ev, "TIMEOUT")
}

// A node failure ends the pod: the slurmd of the node running a placeholder job stops, Slurm
// marks the node DOWN after SlurmdTimeout (30 s) and ends the job NODE_FAIL, and the pod
// goes with a SlurmJobNodeFail event; once slurmd is back, so is the node.
//
// A requeued job ending its pod (SlurmJobRequeued) has no e2e test: Slurm 26.05 refuses to
// requeue a placeholder job (EXTERNAL_JOB, BatchFlag=0). `scontrol requeue <id>` and
// `scontrol requeuehold <id>` of a running one both exit 1 with
// "Only batch jobs are accepted or processed for job <id>"; the unit tests cover it.
func TestSlurmNodeFailureEndsThePod(t *testing.T) {
	slurmNodeFailureEndsThePod(t, localStack(), namespace(t))
}

// 3. kubectl drain of a node running a placeholder job waits until the job ends, then completes.
func TestDrainWaitsForTheSlurmJob(t *testing.T) {
	ns := namespace(t)
	node := nodes[1]
	p := createPod(t, ns, "busy", onlyOnNode(node))
	p = waitBound(t, ns, "busy", 60*time.Second)
	// Only a running pod is protected: the eviction API lets Pending pods go whatever
	// the budgets say, as it should.
	eventually(t, 30*time.Second, "busy Running and Ready", func() bool {
		cur := getPod(t, ns, "busy")
		return cur.Status.Phase == v1.PodRunning && podConditionOf(cur, v1.PodReady) != nil && podConditionOf(cur, v1.PodReady).Status == v1.ConditionTrue
	})
	eventually(t, 30*time.Second, "eviction guard in place", func() bool {
		_, err := kube.PolicyV1().PodDisruptionBudgets(ns).Get(context.Background(), "slurmjob-"+strconv.Itoa(int(jobIDOf(t, getPod(t, ns, "busy")))), metav1.GetOptions{})
		return err == nil
	})
	t.Cleanup(func() {
		_, _ = runCmd(filepath.Join(repoRoot, "bin", "kubectl"), "--kubeconfig", filepath.Join(runDir, "admin.kubeconfig"), "uncordon", node)
		eventually(t, 30*time.Second, "Slurm node "+node+" undrained", func() bool {
			out, err := runCmd(filepath.Join(runDir, "bin", "sinfo"), "-h", "-n", node, "-o", "%t")
			return err == nil && !strings.Contains(out, "drain")
		})
	})

	drain := exec.Command(filepath.Join(repoRoot, "bin", "kubectl"), "--kubeconfig", filepath.Join(runDir, "admin.kubeconfig"),
		// --force: the test pod is a bare pod; eviction still honours disruption budgets.
		"drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--force", "--timeout=120s")
	var outBuf strings.Builder
	drain.Stdout, drain.Stderr = &outBuf, &outBuf
	require.NoError(t, drain.Start())
	done := make(chan error, 1)
	go func() { done <- drain.Wait() }()

	select {
	case err := <-done:
		t.Fatalf("drain finished while the Slurm job still ran (err=%v): %s", err, outBuf.String())
	case <-time.After(10 * time.Second):
	}
	assert.Equal(t, node, getPod(t, ns, "busy").Spec.NodeName, "the pod was not evicted")

	// The job ends in Slurm; the pod goes with it, and the drain completes.
	slurmCmd(t, "scancel", strconv.Itoa(int(jobIDOf(t, p))))
	select {
	case err := <-done:
		require.NoError(t, err, outBuf.String())
	case <-time.After(90 * time.Second):
		_ = drain.Process.Kill()
		t.Fatalf("drain did not complete after the job ended: %s", outBuf.String())
	}
	_, err := kube.CoreV1().Pods(ns).Get(context.Background(), "busy", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err))
}

// 7. A node that goes NotReady with a running pod: after the grace period the job is
// cancelled and the pod removed; nothing else is touched.
func TestNotReadyNodeReleasesItsJob(t *testing.T) {
	notReadyNodeReleasesItsJob(t, localStack(), namespace(t))
}

// 5. slurmrestd stopped for 60 s: no pod deleted, no job cancelled, no taint lifted; state
// converges after.
func TestSlurmrestdOutageIsHarmless(t *testing.T) {
	// An admin's drain, tainted before the outage: nothing read during it may lift that.
	drained := nodes[0]
	restoreNodeAtEnd(t, drained)
	ns := namespace(t) // its cleanup runs before restoreNodeAtEnd's, which waits for idle nodes
	slurmCmd(t, "scontrol", "update", "nodename="+drained, "state=drain", "reason=e2e outage test")
	eventually(t, 5*time.Second, "taint on "+drained, func() bool { return hasSlurmTaint(getNode(t, drained)) })

	p := waitBound(t, ns, createPod(t, ns, "steady").Name, 60*time.Second)
	id := jobIDOf(t, p)

	component(t, "stop", "slurmrestd")
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			component(t, "start", "slurmrestd")
		}
	})
	// While it is down, a pod's job ends in Slurm and a pod ends in Kubernetes: nothing may
	// be concluded until slurmrestd answers again.
	late := createPod(t, ns, "late")
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		cur := getPod(t, ns, "steady")
		require.Nil(t, cur.DeletionTimestamp, "no pod deleted while Slurm cannot be read")
		assert.Empty(t, getPod(t, ns, "late").Spec.NodeName, "nothing bound without Slurm")
		require.True(t, hasSlurmTaint(getNode(t, drained)), "no taint lifted while Slurm cannot be read")
		time.Sleep(2 * time.Second)
	}
	j, ok := jobByID(t, id)
	require.True(t, ok)
	assert.Equal(t, "RUNNING", j.State, "no job cancelled")

	component(t, "start", "slurmrestd")
	restarted = true
	waitBound(t, ns, late.Name, 10*time.Second+5*time.Second)
	assert.Equal(t, v1.PodRunning, getPod(t, ns, "steady").Status.Phase)
	assert.True(t, hasSlurmTaint(getNode(t, drained)), "the admin's drain still tainted after the outage")

	slurmCmd(t, "scontrol", "update", "nodename="+drained, "state=resume")
	eventually(t, 10*time.Second, "taint lifted from "+drained+" after resume", func() bool {
		return !hasSlurmTaint(getNode(t, drained))
	})
}

func podConditionOf(p *v1.Pod, t v1.PodConditionType) *v1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == t {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

func readyOf(n *v1.Node) v1.ConditionStatus {
	if c := nodeConditionOf(n, v1.NodeReady); c != nil {
		return c.Status
	}
	return ""
}

// waitSlurmNodeIdle waits until the local Slurm reports the node plain idle (no drain, no job).
func waitSlurmNodeIdle(t *testing.T, node string) { localStack().waitNodeIdle(t, node) }
