package e2e

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	v1 "k8s.io/api/core/v1"

	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

// The SlurmJob condition and the job's annotations tell the story on the pod.
func TestJobStateOnThePod(t *testing.T) {
	jobStateOnThePod(t, localStack(), namespace(t))
}

// 6. A time limit (podTimeLimitEndsThePod) and a preemption each end the pod with the right
// reason in its events (scancel is covered by TestPodAndJobEndTogether).
func TestSlurmEndsThePodWithTheReason(t *testing.T) {
	ns := namespace(t)
	node := nodes[0]

	// Timed on another node than the preemption's; it ends while that one runs.
	timed := startTimedPod(t, localStack(), ns, onlyOnNode(nodes[len(nodes)-1]))

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

	podEndsAtItsTimeLimit(t, ns, timed)
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
	drainWaitsForTheSlurmJob(t, localStack(), namespace(t))
}

// 7. A node that goes NotReady with a running pod: after the grace period the job is
// cancelled and the pod removed; nothing else is touched.
func TestNotReadyNodeReleasesItsJob(t *testing.T) {
	notReadyNodeReleasesItsJob(t, localStack(), namespace(t))
}

// 5. slurmrestd stopped for 60 s: no pod deleted, no job cancelled, no taint lifted; state
// converges after.
func TestSlurmrestdOutageIsHarmless(t *testing.T) {
	slurmrestdOutageIsHarmless(t, localStack(), namespace(t))
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
