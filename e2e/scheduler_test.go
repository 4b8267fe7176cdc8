package e2e

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"

	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

// 1. A pod is bound to the node Slurm chose, and squeue shows its job.
func TestPodIsPlacedBySlurm(t *testing.T) {
	ns := namespace(t)
	createPod(t, ns, "placed", withAnnotation("job-name", ns+"/placed"), withAnnotation("time-limit", "30"))
	p := waitBound(t, ns, "placed", 60*time.Second)

	id := jobIDOf(t, p)
	job, ok := jobByID(t, id)
	require.True(t, ok, "squeue shows job %d", id)
	assert.Equal(t, "RUNNING", job.State)
	assert.Equal(t, p.Spec.NodeName, job.Nodes, "the pod runs on the node Slurm allocated")
	assert.Equal(t, ns+"/placed", job.Name)

	eventually(t, 30*time.Second, "job state written onto the pod", func() bool {
		p = getPod(t, ns, "placed")
		return p.Annotations[wellknown.JobStateAnnotation] == "RUNNING" &&
			p.Annotations[wellknown.JobNodesAnnotation] == job.Nodes
	})
	eventually(t, 30*time.Second, "pod Running under kwok", func() bool {
		return getPod(t, ns, "placed").Status.Phase == v1.PodRunning
	})
	// The placeholder launched nothing on the node: Slurm sees no batch script.
	show := slurmCmd(t, "scontrol", "show", "job", strconv.Itoa(int(id)))
	assert.Contains(t, show, "BatchFlag=0")
	assert.Contains(t, show, "TimeLimit=00:30:00")
}

// 2. An sbatch --exclusive job holding a node makes a pod that needs it wait, Pending
// with Slurm's reason, then land when the sbatch job ends: pods and sbatch share nodes.
func TestSbatchJobAndPodShareNodes(t *testing.T) {
	sbatchJobAndPodShareNodes(t, localStack(), namespace(t))
}

// 3. Deleting the pod removes the job; scancel of the job ends the pod.
func TestPodAndJobEndTogether(t *testing.T) {
	podAndJobEndTogether(t, localStack(), namespace(t))
}

// 4. 20 exclusive pods on 4 nodes: 4 run, 16 wait in Slurm priority order; each completion
// lets exactly one more in.
func TestExclusivePodsQueueInSlurmPriorityOrder(t *testing.T) {
	exclusivePodsQueueInPriorityOrder(t, localStack(), namespace(t))
}

// 5. A malformed annotation yields an event and no Slurm job; so does a partition Slurm
// does not have, with Slurm's own words.
func TestBadInputGetsAnEventAndNoJob(t *testing.T) {
	badInputGetsAnEventAndNoJob(t, localStack(), namespace(t))
}

// 6. Restarting the scheduler mid-way neither duplicates nor leaks jobs.
func TestSchedulerRestartKeepsOneJobPerPod(t *testing.T) {
	schedulerRestartKeepsOneJobPerPod(t, localStack(), namespace(t))
}

func mustAtoi(t *testing.T, s string) int32 {
	t.Helper()
	n, err := strconv.Atoi(s)
	require.NoError(t, err, s)
	return int32(n)
}
