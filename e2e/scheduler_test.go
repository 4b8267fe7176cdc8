package e2e

// The scheduler tests of the local cluster. Their scenarios are functions of a stack
// (stack_test.go), so that they run on a SlurmCluster's Slurm too
// (TestSlurmClusterWorkersOnKwokNodes).

import "testing"

// 1. A pod is bound to the node Slurm chose, and squeue shows its job.
func TestPodIsPlacedBySlurm(t *testing.T) {
	podIsPlacedBySlurm(t, localStack(), namespace(t))
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

// Pods without a memory request share a node: Slurm's DefMemPerCPU, not the whole node's
// memory, is what their jobs hold.
func TestPodsWithoutMemoryRequestShareANode(t *testing.T) {
	podsWithoutMemoryRequestShareANode(t, localStack(), namespace(t))
}
