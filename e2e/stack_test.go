package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slurmv1 "github.com/kubeslurm/kubeslurm/api/v1alpha1"
	"github.com/kubeslurm/kubeslurm/pkg/controller/slurmcluster"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

// stack is a Slurm and the kubeslurm scheduler that places pods through it: the local
// cluster's own (localStack), or a SlurmCluster's with its own release (clusterStack). The
// scheduler scenarios of this file run on both.
type stack struct {
	// pod makes a test pod the stack's: its schedulerName, and an image its nodes run.
	pod podOpt
	// scheduler is the schedulerName of the stack's scheduler.
	scheduler string
	// nodes are the Kubernetes nodes the Slurm has workers on, all the test's.
	nodes []string
	// partition is the Slurm partition of those nodes the stack's pods go to by default.
	partition string
	// slurm runs one of Slurm's commands (sbatch, scancel, scontrol, ...) against the Slurm
	// and returns its output.
	slurm func(t *testing.T, command string, args ...string) string
	// restartScheduler restarts the scheduler and returns once it runs again.
	restartScheduler func(t *testing.T)
	// restartController restarts the controller and returns once it runs again.
	restartController func(t *testing.T)
	// loseNode makes node's slurmd stop answering Slurm, with no drain first, and returns
	// what brings it back (see loseNodeUntilEnd).
	loseNode func(t *testing.T, node string) (back func())
	// addNode adds a Kubernetes node with a Slurm worker, returns once Slurm lists it, and
	// takes both away at the end of the test (after ending the pods bound there).
	addNode func(t *testing.T) string
	// reactIn bounds how long the controller's reaction to a change on one side takes to
	// show on the other, as the test sees it: the local cluster's targets (2 s); on a
	// SlurmCluster, where each Slurm command the test runs is a pod, longer.
	reactIn time.Duration
	// stopRestAPI stops the Slurm's slurmrestd and returns what starts it again, which
	// returns once it runs.
	stopRestAPI func(t *testing.T) (start func())
}

// loseNodeUntilEnd loses node (stack.loseNode) and returns what brings it back, which also
// runs at the end of the test if the test has not run it.
func (st stack) loseNodeUntilEnd(t *testing.T, node string) (back func()) {
	t.Helper()
	return undoneByEnd(t, st.loseNode(t, node))
}

// stopRestAPIUntilEnd stops slurmrestd (stack.stopRestAPI) and returns what starts it
// again, which also runs at the end of the test if the test has not run it.
func (st stack) stopRestAPIUntilEnd(t *testing.T) (start func()) {
	t.Helper()
	return undoneByEnd(t, st.stopRestAPI(t))
}

// undoneByEnd returns undo, run at most once: by the test, or else at its end.
func undoneByEnd(t *testing.T, undo func()) func() {
	var once sync.Once
	undoOnce := func() { once.Do(undo) }
	t.Cleanup(undoOnce)
	return undoOnce
}

// applyExample applies examples/<file> in ns with the stack's schedulerName for the local
// kubeslurm's, deleting it at the test's end.
func (st stack) applyExample(t *testing.T, ns, file string) {
	t.Helper()
	applyEditedExample(t, ns, file, func(example string) string {
		return strings.ReplaceAll(example, "schedulerName: "+wellknown.SchedulerName, "schedulerName: "+st.scheduler)
	})
}

// allocation is the nodes the Slurm allocated job id, in its rank order: the order of the
// job's resources, the SLURM_NODEID order in which kubeslurm binds a group's members.
// (squeue's and scontrol's NodeList are sorted by name, which is that order only when the
// nodes joined Slurm in name order.)
func (st stack) allocation(t *testing.T, id int32) []string {
	t.Helper()
	out := st.slurm(t, "scontrol", "--json", "show", "job", strconv.Itoa(int(id)))
	var shown struct {
		Jobs []struct {
			JobResources struct {
				Nodes struct {
					Allocation []struct {
						Name string `json:"name"`
					} `json:"allocation"`
				} `json:"nodes"`
			} `json:"job_resources"`
		} `json:"jobs"`
	}
	require.NoError(t, json.Unmarshal([]byte(out[strings.IndexByte(out, '{'):]), &shown), out)
	require.Len(t, shown.Jobs, 1, out)
	var nodes []string
	for _, n := range shown.Jobs[0].JobResources.Nodes.Allocation {
		nodes = append(nodes, n.Name)
	}
	return nodes
}

// sinfoNode is node's compact state ("idle", "drain", "down*", ...) and reason. sinfo
// prints a line per partition of the node, all alike: the first one says it.
func (st stack) sinfoNode(t *testing.T, node string) (state, reason string) {
	t.Helper()
	state, reason, _ = strings.Cut(st.sinfoLine(t, node, "%t|%E"), "|")
	return state, reason
}

// sinfoLine is sinfo's first line for the node in the given -o format.
func (st stack) sinfoLine(t *testing.T, node, format string) string {
	t.Helper()
	line, _, _ := strings.Cut(st.slurm(t, "sinfo", "-h", "-N", "-n", node, "-o", format), "\n")
	return line
}

// nodeFlags are node's state flags (DOWN, DRAIN, NOT_RESPONDING, ...).
func (st stack) nodeFlags(t *testing.T, node string) []string {
	t.Helper()
	return stateFlags(t, st.slurm(t, "scontrol", "-o", "show", "node", node))
}

// waitNodeIdle waits until the Slurm reports node plain idle (no drain, no job).
func (st stack) waitNodeIdle(t *testing.T, node string) {
	t.Helper()
	eventually(t, 60*time.Second, "Slurm node "+node+" idle", func() bool {
		// One line per partition the node is in: idle in every one.
		states := strings.Fields(st.slurm(t, "sinfo", "-h", "-n", node, "-o", "%t"))
		idle := len(states) > 0
		for _, s := range states {
			idle = idle && s == "idle"
		}
		return idle
	})
}

// restoreNodeAtEnd puts node back as the test found it at its end: uncordoned, no drain
// reason of ours, resumed in Slurm if drained; then every node of the Slurm idle, and no
// taint of ours on node.
func (st stack) restoreNodeAtEnd(t *testing.T, node string) {
	t.Helper()
	t.Cleanup(func() {
		ctx := context.Background()
		_, err := kube.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType,
			fmt.Appendf(nil, `{"spec":{"unschedulable":null},"metadata":{"annotations":{%q:null}}}`, wellknown.DrainReasonAnnotation), metav1.PatchOptions{})
		require.NoError(t, err)
		if state, _ := st.sinfoNode(t, node); strings.HasPrefix(state, "drain") {
			st.slurm(t, "scontrol", "update", "nodename="+node, "state=resume")
		}
		for _, n := range st.nodes {
			st.waitNodeIdle(t, n)
		}
		eventually(t, 5*time.Second, "no taint of ours on "+node, func() bool { return !hasSlurmTaint(getNode(t, node)) })
	})
}

// jobsNamed lists the Slurm's jobs (any state still on record) whose name starts with prefix.
func (st stack) jobsNamed(t *testing.T, prefix string) []slurmJob {
	t.Helper()
	return parseSqueue(t, st.slurm(t, "squeue", "-h", "--states=all", "-o", squeueFormat), prefix)
}

// jobByID is the Slurm's job id, if it still has it on record.
func (st stack) jobByID(t *testing.T, id int32) (slurmJob, bool) {
	t.Helper()
	for _, j := range st.jobsNamed(t, "") {
		if j.ID == id {
			return j, true
		}
	}
	return slurmJob{}, false
}

// activeJobsNamed is jobsNamed without the jobs that ended.
func (st stack) activeJobsNamed(t *testing.T, prefix string) []slurmJob {
	t.Helper()
	var out []slurmJob
	for _, j := range st.jobsNamed(t, prefix) {
		if j.active() {
			out = append(out, j)
		}
	}
	return out
}

// hasNode: the Slurm lists node (in any state).
func (st stack) hasNode(t *testing.T, node string) bool {
	t.Helper()
	return slices.Contains(strings.Fields(st.slurm(t, "sinfo", "-h", "-N", "-o", "%N")), node)
}

// jobState is the JobState of the Slurm job id as scontrol shows it; an ended job stays
// there for MinJobAge (300 s in both stacks), longer than any scenario waits on it.
func (st stack) jobState(t *testing.T, id string) string {
	t.Helper()
	return regexpField(st.slurm(t, "scontrol", "show", "job", "-o", id), "JobState")
}

// sbatch submits a batch job (sbatch --parsable with args) to the Slurm, cancelled at the
// end of the test if it is still active then, and returns its id. Its output goes nowhere
// unless args say (the submitting directory need not exist on the job's node).
func (st stack) sbatch(t *testing.T, args ...string) int32 {
	t.Helper()
	out := st.slurm(t, "sbatch", append([]string{"--parsable", "--chdir", "/tmp", "--output", "/dev/null"}, args...)...)
	id := mustAtoi(t, strings.Split(lastLine(out), ";")[0])
	t.Cleanup(func() {
		if j, ok := st.jobByID(t, id); ok && j.active() {
			st.slurm(t, "scancel", strconv.Itoa(int(id)))
		}
	})
	return id
}

// waitJobState waits until the Slurm shows job id in state.
func (st stack) waitJobState(t *testing.T, id int32, state string) {
	t.Helper()
	eventually(t, 60*time.Second, fmt.Sprintf("Slurm job %d %s", id, state), func() bool {
		j, ok := st.jobByID(t, id)
		return ok && j.State == state
	})
}

// nextNode is the first name of format (with %d) from index from on that no Kubernetes
// node has, and its index: a test may add several.
func nextNode(t *testing.T, format string, from int) (int, string) {
	t.Helper()
	for i := from; ; i++ {
		name := fmt.Sprintf(format, i)
		_, err := kube.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return i, name
		}
		require.NoError(t, err)
	}
}

// localStack is the local cluster's kubeslurm and Slurm (deploy/local).
func localStack() stack {
	return stack{pod: func(*v1.Pod) {}, scheduler: wellknown.SchedulerName, nodes: nodes, partition: "k8s", slurm: slurmCmd, reactIn: 2 * time.Second,
		restartScheduler:  func(t *testing.T) { component(t, "restart", "scheduler") },
		restartController: func(t *testing.T) { component(t, "restart", "controller") },
		addNode: func(t *testing.T) string {
			_, name := nextNode(t, "node-%d", len(nodes)+1)
			addNode(t, name)
			return name
		},
		// The node's slurmd stopped (SIGTERM: slurmd exits without draining its node).
		loseNode: func(t *testing.T, node string) func() {
			component(t, "stop", "slurmd-"+node)
			return func() { component(t, "start", "slurmd-"+node) }
		},
		stopRestAPI: func(t *testing.T) func() {
			component(t, "stop", "slurmrestd")
			return func() { component(t, "start", "slurmrestd") }
		}}
}

// clusterStack is the SlurmCluster c's Slurm, its workers on nodes, each node's pods run by
// its runner of runners, with the release of installClusterRelease placing pods through it.
func clusterStack(c *slurmv1.SlurmCluster, runners map[string]*podRunner) stack {
	nodes := slices.Sorted(maps.Keys(runners))
	st := stack{pod: onCluster, scheduler: clusterScheduler, nodes: nodes, partition: c.Spec.Partitions[0].Name, reactIn: 30 * time.Second, restartScheduler: func(t *testing.T) { restartReleasePod(t, c.Namespace, "scheduler") },
		restartController: func(t *testing.T) { restartReleasePod(t, c.Namespace, "controller") },
		// The node's machine fails (its runner and every process crash) and later starts
		// again: its runner, started anew, starts the worker pod's containers again, as a
		// kubelet does after a reboot, counting a restart.
		loseNode: func(t *testing.T, node string) func() {
			r := runners[node]
			require.NotNil(t, r, "no pod runner of %s", node)
			worker := workerPodOn(t, node)
			require.NotNil(t, worker, "no worker pod on %s", node)
			restarts := worker.Status.ContainerStatuses[0].RestartCount
			r.crash(t)
			return func() {
				r.start(t)
				eventually(t, 60*time.Second, "worker "+worker.Name+" running again, one restart more", func() bool {
					p, err := kube.CoreV1().Pods(worker.Namespace).Get(context.Background(), worker.Name, metav1.GetOptions{})
					require.NoError(t, err)
					require.Equal(t, worker.UID, p.UID, "the same worker pod")
					if len(p.Status.ContainerStatuses) != 1 {
						return false
					}
					cs := p.Status.ContainerStatuses[0]
					last := cs.LastTerminationState.Terminated
					return cs.State.Running != nil && cs.RestartCount == restarts+1 && last != nil && last.Reason == "Unknown"
				})
			}
		},
		// As an admin would: spec.restApi.replicas 0, and back to 1.
		stopRestAPI: func(t *testing.T) func() {
			scaleRestAPI(t, c, 0)
			return func() { scaleRestAPI(t, c, 1) }
		},
		slurm: func(t *testing.T, command string, args ...string) string {
			t.Helper()
			out, ok := slurmCommand(t, c, append([]string{"/usr/bin/" + command}, args...)...)
			// A node joining or leaving has slurmctld re-read slurm.conf (its NodeSet changes
			// it), a re-execution of itself: a read in that moment is asked again, as an
			// admin would.
			for try := 1; !ok && try < 5 && readOnlySlurmCommand(command, args) && slurmctldRestarting(out); try++ {
				time.Sleep(2 * time.Second)
				out, ok = slurmCommand(t, c, append([]string{"/usr/bin/" + command}, args...)...)
			}
			require.True(t, ok, "%s %v: %s", command, args, out)
			return commandOutput(out)
		}}
	// A kwok node with its runner, and a NodeSet of its own in the default partition
	// (each slurmd has a port of its own: see TestSlurmClusterWorkersOnKwokNodes).
	st.addNode = func(t *testing.T) string {
		i, name := nextNode(t, "kwok-worker-%d", len(runners)+1)
		addAdoptedKwokNode(t, name)
		kc, key := slurmClient(t), client.ObjectKeyFromObject(c)
		cur := &slurmv1.SlurmCluster{}
		set := kwokNodeSet(i, name).Name
		updateCluster(t, kc, key, cur, func(c *slurmv1.SlurmCluster) {
			c.Spec.NodeSets = append(c.Spec.NodeSets, kwokNodeSet(i, name))
			c.Spec.Partitions[0].NodeSets = append(c.Spec.Partitions[0].NodeSets, set)
		})
		// Runs before the runner stops and the node goes (registered after them).
		t.Cleanup(func() {
			endPodsOn(t, name, wellknown.SlurmComponentLabel+"!=slurmd") // the test's pods, not the worker
			updateCluster(t, kc, key, cur, func(c *slurmv1.SlurmCluster) {
				c.Spec.NodeSets = slices.DeleteFunc(c.Spec.NodeSets, func(s slurmv1.NodeSetSpec) bool { return s.Name == set })
				c.Spec.Partitions[0].NodeSets = slices.DeleteFunc(c.Spec.Partitions[0].NodeSets, func(s string) bool { return s == set })
			})
			eventually(t, 180*time.Second, "the worker on "+name+" gone, and its Slurm node", func() bool {
				return workerPodOn(t, name) == nil && !st.hasNode(t, name)
			})
		})
		eventually(t, 180*time.Second, name+"'s worker registered in Slurm", func() bool {
			return st.hasNode(t, name)
		})
		return name
	}
	return st
}

// podIsPlacedBySlurm: a pod is bound to the node Slurm allocated to its placeholder job,
// which squeue shows running under the name asked for, with no batch script (BatchFlag=0)
// and the time limit asked for; the job's state and nodes are written onto the pod.
func podIsPlacedBySlurm(t *testing.T, st stack, ns string) {
	createPod(t, ns, "placed", st.pod, withAnnotation("job-name", ns+"/placed"), withAnnotation("time-limit", "30"))
	p := waitBound(t, ns, "placed", 60*time.Second)

	id := jobIDOf(t, p)
	jobs := st.jobsNamed(t, ns+"/placed")
	require.Len(t, jobs, 1, "squeue shows the pod's job")
	job := jobs[0]
	assert.Equal(t, id, job.ID)
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
	show := st.slurm(t, "scontrol", "show", "job", strconv.Itoa(int(id)))
	assert.Contains(t, show, "BatchFlag=0")
	assert.Contains(t, show, "TimeLimit=00:30:00")
}

// jobStateOnThePod: the SlurmJob condition, the job's annotations and an event tell the
// story on the pod.
func jobStateOnThePod(t *testing.T, st stack, ns string) {
	p := createPod(t, ns, "told", st.pod)
	p = waitBound(t, ns, "told", 60*time.Second)
	// 30 s: this may run just after another test restarted the controller (TestHelmInstall).
	eventually(t, 30*time.Second, "SlurmJob condition True with the node", func() bool {
		c := podConditionOf(getPod(t, ns, "told"), wellknown.SlurmJobCondition)
		if c != nil {
			t.Logf("SlurmJob condition: %s %s %q", c.Status, c.Reason, c.Message)
		}
		return c != nil && c.Status == v1.ConditionTrue && strings.Contains(c.Message, p.Spec.NodeName)
	})
	p = getPod(t, ns, "told")
	assert.NotEmpty(t, p.Annotations[wellknown.JobStartTimeAnnotation])
	assert.Contains(t, podEvents(t, p), wellknown.EventSlurmJobAllocated)
}

// notReadyNodeReleasesItsJob: a node that goes NotReady with a running pod: after the
// controller's grace period the job is cancelled and the pod removed; nothing else is
// touched.
func notReadyNodeReleasesItsJob(t *testing.T, st stack, ns string) {
	deadNode, liveNode := st.nodes[len(st.nodes)-2], st.nodes[len(st.nodes)-1]
	stuck := waitBound(t, ns, createPod(t, ns, "stuck", st.pod, onlyOnNode(deadNode)).Name, 60*time.Second)
	fine := waitBound(t, ns, createPod(t, ns, "fine", st.pod, onlyOnNode(liveNode)).Name, 60*time.Second)
	stuckJob, fineJob := jobIDOf(t, stuck), jobIDOf(t, fine)

	// The kubelet dies. kwok plays every node's kubelet, so it is stopped for the test (no
	// node controller marks the others NotReady meanwhile), and the node's Ready condition
	// is set Unknown as the node lifecycle controller would.
	for _, name := range []string{"stuck", "fine"} {
		eventually(t, 30*time.Second, name+" Running", func() bool { return getPod(t, ns, name).Status.Phase == v1.PodRunning })
	}
	component(t, "stop", "kwok")
	t.Cleanup(func() {
		component(t, "start", "kwok")
		eventually(t, 60*time.Second, deadNode+" Ready again", func() bool {
			n, err := kube.CoreV1().Nodes().Get(context.Background(), deadNode, metav1.GetOptions{})
			return err == nil && readyOf(n) == v1.ConditionTrue
		})
	})
	setNodeCondition(t, deadNode, v1.NodeCondition{Type: v1.NodeReady, Status: v1.ConditionUnknown,
		Reason: "NodeStatusUnknown", Message: "e2e: kubelet stopped posting node status"})

	waitGone(t, ns, "stuck", 90*time.Second)
	assert.Contains(t, podEvents(t, stuck), wellknown.EventNodeNotReady)
	j, ok := st.jobByID(t, stuckJob)
	assert.True(t, !ok || j.State == "CANCELLED", "job %d cancelled: %+v", stuckJob, j)

	j, ok = st.jobByID(t, fineJob)
	require.True(t, ok)
	assert.Equal(t, "RUNNING", j.State, "the pod on a healthy node keeps its job")
	assert.Equal(t, v1.PodRunning, getPod(t, ns, "fine").Status.Phase)
}

// sbatchJobAndPodShareNodes: an sbatch --exclusive job holding a node makes a pod that
// needs that node wait, Pending with Slurm's reason, then land when the sbatch job ends.
func sbatchJobAndPodShareNodes(t *testing.T, st stack, ns string) {
	node := st.nodes[len(st.nodes)-1]
	sbatchID := strconv.Itoa(int(st.sbatch(t, "--exclusive", "-N1", "-w", node, "-J", ns+"/sbatch", "--wrap", "sleep 600")))
	eventually(t, 60*time.Second, "sbatch job running on "+node, func() bool {
		return st.jobState(t, sbatchID) == "RUNNING"
	})

	createPod(t, ns, "needs-node", st.pod, onlyOnNode(node))
	var p *v1.Pod
	eventually(t, 60*time.Second, "pod Pending with Slurm's reason in its PodScheduled condition", func() bool {
		p = getPod(t, ns, "needs-node")
		for _, c := range p.Status.Conditions {
			if c.Type == v1.PodScheduled && c.Status == v1.ConditionFalse && strings.Contains(c.Message, "PENDING (Resources)") {
				return true
			}
		}
		return false
	})
	assert.Empty(t, p.Spec.NodeName)
	// An event says it too: the scheduler's FailedScheduling (written after the condition,
	// asynchronously) or the controller's SlurmJobPending. The scheduler's may keep an
	// earlier attempt's words: events.k8s.io makes a series of a pod's events with the same
	// reason and keeps the first one's note ("waiting for Slurm to allocate a node" when the
	// first attempt came before Slurm's reason, seen once in a fresh-clone run).
	eventually(t, 60*time.Second, "an event with Slurm's reason", func() bool {
		ev := podEvents(t, p)
		return strings.Contains(ev, "PENDING (Resources)") || strings.Contains(ev, "is pending: Resources")
	})
	// The placeholder job waits behind the sbatch job. The nodes the affinity rules out
	// reach Slurm as excluded nodes, never as required ones.
	show := st.slurm(t, "scontrol", "show", "job", "-o", strconv.Itoa(int(jobIDOf(t, p))))
	assert.Equal(t, "PENDING", regexpField(show, "JobState"), show)
	assert.Equal(t, "Resources", regexpField(show, "Reason"), show)
	assert.Regexp(t, `ExcNodeList=\S+`, show)
	assert.NotRegexp(t, `ExcNodeList=\S*`+node, show)
	assert.Contains(t, show, "ReqNodeList=(null)")

	st.slurm(t, "scancel", sbatchID)
	p = waitBound(t, ns, "needs-node", 60*time.Second)
	assert.Equal(t, node, p.Spec.NodeName)
}

// podAndJobEndTogether: deleting a bound pod ends its Slurm job; scancel of a pod's job
// ends the pod, with an event that says so.
func podAndJobEndTogether(t *testing.T, st stack, ns string) {
	p := createPod(t, ns, "deleted", st.pod)
	p = waitBound(t, ns, "deleted", 60*time.Second)
	id := strconv.Itoa(int(jobIDOf(t, p)))
	require.NoError(t, kube.CoreV1().Pods(ns).Delete(context.Background(), "deleted", metav1.DeleteOptions{}))
	eventually(t, 60*time.Second, "job "+id+" ended after its pod was deleted", func() bool {
		state := st.jobState(t, id)
		return state != "RUNNING" && state != "PENDING"
	})

	p = createPod(t, ns, "scancelled", st.pod)
	p = waitBound(t, ns, "scancelled", 60*time.Second)
	st.slurm(t, "scancel", strconv.Itoa(int(jobIDOf(t, p))))
	waitGone(t, ns, "scancelled", 60*time.Second)
	ev := podEvents(t, p)
	assert.Contains(t, ev, wellknown.EventSlurmJobCancelled)
	assert.Contains(t, ev, "CANCELLED")
}

// podTimeLimitEndsThePod: Slurm enforces a pod's time limit, and the pod goes with a
// SlurmJobTimeLimit event.
func podTimeLimitEndsThePod(t *testing.T, st stack, ns string) {
	podEndsAtItsTimeLimit(t, ns, startTimedPod(t, st, ns))
}

// startTimedPod creates a pod with a one-minute time limit (made also by opts) and returns
// it bound: podTimeLimitEndsThePod's first half, so a test can do more while the minute runs.
func startTimedPod(t *testing.T, st stack, ns string, opts ...podOpt) *v1.Pod {
	t.Helper()
	createPod(t, ns, "timed", append([]podOpt{st.pod, withAnnotation("time-limit", "1")}, opts...)...)
	return waitBound(t, ns, "timed", 60*time.Second)
}

// podEndsAtItsTimeLimit is podTimeLimitEndsThePod's second half, for the pod of
// startTimedPod.
func podEndsAtItsTimeLimit(t *testing.T, ns string, timed *v1.Pod) {
	t.Helper()
	// The minute, Slurm's time-limit check (every 30 s or so) and its KillWait (30 s by
	// default, 5 s on the local Slurm).
	waitGone(t, ns, timed.Name, 180*time.Second)
	ev := podEvents(t, timed)
	assert.Contains(t, ev, wellknown.EventSlurmJobTimeLimit)
	assert.Contains(t, ev, "TIMEOUT")
}

// badInputGetsAnEventAndNoJob: a malformed annotation yields an event and no Slurm job;
// so does a partition the Slurm does not have, with Slurm's own words.
func badInputGetsAnEventAndNoJob(t *testing.T, st stack, ns string) {
	// The admission webhook would refuse these pods (e2e/webhook_test.go); this tests the
	// scheduler's own check, which stands behind it.
	labelNamespace(t, ns, wellknown.AdmissionIgnoreLabel, wellknown.AdmissionIgnoreValue)
	cases := map[string]struct {
		key, value, want string
	}{
		"bad-time":      {"time-limit", "-5", "time-limit"},
		"bad-priority":  {"priority", "urgent", "priority"},
		"bad-partition": {"partition", "gpu\nPartitionName=evil", "partition"},
		"bad-shell":     {"account", "x;rm -rf /", "account"},
	}
	for name, c := range cases {
		createPod(t, ns, name, st.pod, withAnnotation(c.key, c.value))
	}
	createPod(t, ns, "no-such-partition", st.pod, withAnnotation("partition", "nosuchpartition"))

	for name, c := range cases {
		eventually(t, 30*time.Second, name+" has an InvalidSlurmJobSpec event", func() bool {
			ev := podEvents(t, getPod(t, ns, name))
			return strings.Contains(ev, wellknown.EventInvalidSlurmJobSpec) && strings.Contains(ev, c.want)
		})
	}
	eventually(t, 30*time.Second, "Slurm's refusal of an unknown partition shown on the pod", func() bool {
		ev := podEvents(t, getPod(t, ns, "no-such-partition"))
		return strings.Contains(ev, wellknown.EventSlurmJobSubmitFailed) && strings.Contains(strings.ToLower(ev), "partition")
	})
	assert.Empty(t, st.jobsNamed(t, ns+"/"), "no Slurm job for any of them")
	for name := range cases {
		assert.Empty(t, getPod(t, ns, name).Spec.NodeName)
	}
}

// schedulerRestartKeepsOneJobPerPod: restarting the scheduler mid-way (while pods are
// created, and once all have their jobs) neither duplicates nor leaks jobs: two exclusive
// pods more than nodes each end with exactly one Slurm job, and all run in turn.
func schedulerRestartKeepsOneJobPerPod(t *testing.T, st stack, ns string) {
	total := len(st.nodes) + 2
	for i := 0; i < total; i++ {
		createPod(t, ns, fmt.Sprintf("r%d", i), st.pod, withAnnotation("exclusive", "true"))
		if i == 2 {
			st.restartScheduler(t)
		}
	}
	eventually(t, 90*time.Second, "every pod has its job", func() bool {
		return len(st.activeJobsNamed(t, ns+"/")) == total
	})
	st.restartScheduler(t)
	eventually(t, 60*time.Second, fmt.Sprintf("%d pods bound after the restarts", len(st.nodes)), func() bool {
		n := 0
		for i := 0; i < total; i++ {
			if getPod(t, ns, fmt.Sprintf("r%d", i)).Spec.NodeName != "" {
				n++
			}
		}
		return n == len(st.nodes)
	})
	// Complete the running ones: the remaining two get in, still on their first jobs.
	for i := 0; i < total; i++ {
		if p := getPod(t, ns, fmt.Sprintf("r%d", i)); p.Spec.NodeName != "" {
			complete(t, p)
		}
	}
	for i := 0; i < total; i++ {
		name := fmt.Sprintf("r%d", i)
		p := getPod(t, ns, name)
		if p.Status.Phase != v1.PodSucceeded {
			waitBound(t, ns, name, 60*time.Second)
		}
	}
	perPod := map[string]int{}
	for _, j := range st.jobsNamed(t, ns+"/") {
		perPod[j.Name]++
	}
	require.Len(t, perPod, total)
	for name, n := range perPod {
		assert.Equal(t, 1, n, "%s has exactly one Slurm job", name)
	}
}

// exclusivePodsQueueInPriorityOrder: five exclusive pods per node, with priorities shuffled
// against creation order; one runs on each node, the rest wait, and each completion lets
// exactly one more in, the highest-priority one waiting: the order can only come from
// Slurm's priorities.
func exclusivePodsQueueInPriorityOrder(t *testing.T, st stack, ns string) {
	total := 5 * len(st.nodes)
	prio := map[string]int{}
	for i := 0; i < total; i++ {
		name := fmt.Sprintf("p%02d", i)
		prio[name] = 100 + (i*7)%total // 7 is prime to total: every priority once
		createPod(t, ns, name, st.pod, withAnnotation("exclusive", "true"), withAnnotation("priority", strconv.Itoa(prio[name])))
	}
	eventually(t, 60*time.Second, fmt.Sprintf("all %d placeholder jobs submitted", total), func() bool {
		return len(st.activeJobsNamed(t, ns+"/")) == total
	})

	bound := func() (running []*v1.Pod, waiting []string) {
		list, err := kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
		require.NoError(t, err)
		for i := range list.Items {
			p := &list.Items[i]
			switch {
			case p.Status.Phase == v1.PodSucceeded:
			case p.Spec.NodeName != "":
				running = append(running, p)
			default:
				waiting = append(waiting, p.Name)
			}
		}
		return running, waiting
	}
	eventually(t, 60*time.Second, fmt.Sprintf("%d pods bound", len(st.nodes)), func() bool {
		r, _ := bound()
		return len(r) == len(st.nodes)
	})
	running, waiting := bound()
	require.Len(t, waiting, total-len(st.nodes))
	requireDistinctNodes(t, running)

	for len(waiting) > 0 {
		// Slurm must admit the highest-priority waiting pod next.
		sort.Slice(waiting, func(a, b int) bool { return prio[waiting[a]] > prio[waiting[b]] })
		next := waiting[0]
		complete(t, running[0])
		eventually(t, 30*time.Second, next+" (highest priority waiting) bound after one completion", func() bool {
			return getPod(t, ns, next).Spec.NodeName != ""
		})
		// Give the scheduler time to (wrongly) admit more; exactly one may have come in.
		time.Sleep(2 * time.Second)
		r, w := bound()
		require.Len(t, r, len(st.nodes), "still exactly one pod per node")
		require.Len(t, w, len(waiting)-1, "exactly one more pod admitted")
		requireDistinctNodes(t, r)
		running, waiting = r, w
	}
}

func requireDistinctNodes(t *testing.T, pods []*v1.Pod) {
	t.Helper()
	seen := map[string]string{}
	for _, p := range pods {
		require.NotContains(t, seen, p.Spec.NodeName, "%s and %s share node %s", seen[p.Spec.NodeName], p.Name, p.Spec.NodeName)
		seen[p.Spec.NodeName] = p.Name
	}
}

func mustAtoi(t *testing.T, s string) int32 {
	t.Helper()
	n, err := strconv.Atoi(s)
	require.NoError(t, err, s)
	return int32(n)
}

// slurmNodeFailureEndsThePod: the node of a running pod's job stops answering Slurm (no
// drain first): after SlurmdTimeout Slurm marks it DOWN and ends the job NODE_FAIL, and the
// pod goes with a SlurmJobNodeFail event. Once the node answers again, Slurm returns it to
// service (ReturnToService=2) and a new pod is placed there.
func slurmNodeFailureEndsThePod(t *testing.T, st stack, ns string) {
	node := st.nodes[len(st.nodes)-1]
	st.restoreNodeAtEnd(t, node)
	p := waitBound(t, ns, createPod(t, ns, "lost", st.pod, onlyOnNode(node)).Name, 60*time.Second)
	id := jobIDOf(t, p)
	eventually(t, 30*time.Second, "lost Running", func() bool { return getPod(t, ns, "lost").Status.Phase == v1.PodRunning })

	back := st.loseNodeUntilEnd(t, node) // brought back before restoreNodeAtEnd's checks
	waitGone(t, ns, "lost", 120*time.Second)
	ev := podEvents(t, p)
	assert.Contains(t, ev, wellknown.EventSlurmJobNodeFail)
	assert.Contains(t, ev, "NODE_FAIL")
	j, ok := st.jobByID(t, id)
	assert.True(t, !ok || j.State == "NODE_FAIL", "job %d ended NODE_FAIL: %+v", id, j)

	back()
	st.waitNodeIdle(t, node)
	again := waitBound(t, ns, createPod(t, ns, "after", st.pod, onlyOnNode(node)).Name, 60*time.Second)
	assert.NotEqual(t, id, jobIDOf(t, again))
	require.NoError(t, kube.CoreV1().Pods(ns).Delete(context.Background(), again.Name, metav1.DeleteOptions{}))
	waitGone(t, ns, again.Name, 60*time.Second)
}

// nodeDownDrainedNotRespondingConditions: a drained node whose slurmd stops answering goes
// DOWN+DRAIN+NOT_RESPONDING: exactly three SlurmNode* conditions on the Kubernetes node,
// each with Slurm's reason, the same on every look, through several kwok heartbeats.
func nodeDownDrainedNotRespondingConditions(t *testing.T, st stack) {
	node := st.nodes[len(st.nodes)-2]
	st.restoreNodeAtEnd(t, node)
	st.slurm(t, "scontrol", "update", "nodename="+node, "state=drain", "reason=e2e down test")
	st.loseNodeUntilEnd(t, node) // brought back before restoreNodeAtEnd's checks
	want := []string{"SlurmNodeDown", wellknown.SlurmNodeDrainedCondition, "SlurmNodeNotResponding"}
	var first map[string]v1.NodeCondition
	eventually(t, 90*time.Second, node+" DOWN+DRAIN+NOT_RESPONDING in Kubernetes (SlurmdTimeout is 30 s)", func() bool {
		first = slurmConditions(getNode(t, node))
		return slices.Equal(sortedKeys(first), want)
	})
	assert.Contains(t, st.nodeFlags(t, node), "DOWN", "Slurm agrees")
	for _, typ := range want {
		assert.True(t, strings.HasPrefix(first[typ].Message, "e2e down test"), "%s: %q is Slurm's reason", typ, first[typ].Message)
	}

	// Twice in a row, and through kwok's heartbeats (every 20-45 s), which patch only
	// kwok's own conditions: ours are neither wiped nor duplicated.
	time.Sleep(3 * time.Second)
	assert.Equal(t, first, slurmConditions(getNode(t, node)), "re-reconciling changes nothing")
	throughHeartbeats(t, node, 3, "our conditions intact", func(n *v1.Node) {
		require.Equal(t, first, slurmConditions(n))
	})
}

// podsWithoutMemoryRequestShareANode: two pods of one CPU and no memory request run on one
// node at once. Their jobs get Slurm's default memory per CPU (DefMemPerCPU); without one,
// each would hold all of the node's memory (CR_Core_Memory) and the second would wait.
func podsWithoutMemoryRequestShareANode(t *testing.T, st stack, ns string) {
	node := st.nodes[0]
	noMemory := func(p *v1.Pod) { delete(p.Spec.Containers[0].Resources.Requests, v1.ResourceMemory) }
	var ids []string
	for _, name := range []string{"first", "second"} {
		p := waitBound(t, ns, createPod(t, ns, name, st.pod, noMemory, onlyOnNode(node)).Name, 60*time.Second)
		require.Equal(t, node, p.Spec.NodeName)
		ids = append(ids, strconv.Itoa(int(jobIDOf(t, p))))
	}
	for _, id := range ids {
		show := st.slurm(t, "scontrol", "show", "job", "-o", id)
		assert.Equal(t, "RUNNING", regexpField(show, "JobState"), show)
		assert.Equal(t, node, regexpField(show, "NodeList"), show)
		t.Logf("job %s: MinMemoryCPU=%s", id, regexpField(show, "MinMemoryCPU"))
	}
}

// drainWaitsForTheSlurmJob: kubectl drain of a node running a placeholder job waits until
// the job ends, then completes. Where the node's slurmd is a SlurmCluster's worker pod, that
// pod is drained too: its busy-workers budget keeps it until the job has ended, and the
// worker made in its place registers drained, as the node is cordoned, until uncordon.
func drainWaitsForTheSlurmJob(t *testing.T, st stack, ns string) {
	ctx := context.Background()
	node := st.nodes[1]
	// Uncordons, and waits until the Slurm node (the new worker's) is idle; ns holds no
	// pod by then.
	st.restoreNodeAtEnd(t, node)
	p := waitBound(t, ns, createPod(t, ns, "busy", st.pod, onlyOnNode(node)).Name, 60*time.Second)
	id := jobIDOf(t, p)
	// Only a running pod is protected: the eviction API lets Pending pods go whatever
	// the budgets say, as it should.
	eventually(t, 30*time.Second, "busy Running and Ready", func() bool {
		cur := getPod(t, ns, "busy")
		return cur.Status.Phase == v1.PodRunning && podReady(cur)
	})
	eventually(t, 30*time.Second, "eviction guard in place", func() bool {
		_, err := kube.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "slurmjob-"+strconv.Itoa(int(id)), metav1.GetOptions{})
		return err == nil
	})
	worker := workerPodOn(t, node) // nil on the local Slurm: its slurmd are no pods
	if worker != nil {
		eventually(t, 60*time.Second, "the worker of "+node+" labelled busy", func() bool {
			w := workerPodOn(t, node)
			return w != nil && w.Labels[slurmcluster.BusyLabel] == "true"
		})
	}

	drain := exec.Command(filepath.Join(repoRoot, "bin", "kubectl"), "--kubeconfig", filepath.Join(runDir, "admin.kubeconfig"),
		// --force: the test pod is a bare pod; eviction still honours disruption budgets.
		"drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--force", "--timeout=180s")
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
	if worker != nil {
		w := workerPodOn(t, node)
		require.NotNil(t, w, "the busy worker of %s was evicted", node)
		assert.True(t, w.UID == worker.UID && w.DeletionTimestamp == nil, "the busy worker of %s kept, not terminating", node)
		j, ok := st.jobByID(t, id)
		assert.True(t, ok && j.State == "RUNNING", "job %d still running: %+v", id, j)
	}

	// The job ends in Slurm; the pod goes with it, and the drain completes.
	st.slurm(t, "scancel", strconv.Itoa(int(id)))
	select {
	case err := <-done:
		require.NoError(t, err, outBuf.String())
	case <-time.After(150 * time.Second):
		_ = drain.Process.Kill()
		t.Fatalf("drain did not complete after the job ended: %s", outBuf.String())
	}
	_, err := kube.CoreV1().Pods(ns).Get(ctx, "busy", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err))
	t.Logf("kubectl drain %s: %s", node, strings.ReplaceAll(strings.TrimSpace(outBuf.String()), "\n", "; "))
	if worker == nil {
		return
	}
	// The worker went (kubectl drain waits for the pods it evicts); its replacement, on the
	// cordoned node, registers, and the Slurm node is drained for the cordon.
	assert.Contains(t, outBuf.String(), "evicting pod "+worker.Namespace+"/"+worker.Name)
	want := wellknown.ReasonPrefix + "node " + node + " cordoned in Kubernetes"
	eventually(t, 120*time.Second, "a new worker on "+node+", its Slurm node drained for the cordon", func() bool {
		w := workerPodOn(t, node)
		if w == nil || w.UID == worker.UID || !podReady(w) {
			return false
		}
		state, reason := st.sinfoNode(t, node)
		return strings.HasPrefix(state, "drain") && reason == want
	})
}

// workerPodOn is the slurmd worker pod a SlurmCluster runs on node, if any.
func workerPodOn(t *testing.T, node string) *v1.Pod {
	t.Helper()
	pods, err := kube.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{
		LabelSelector: wellknown.SlurmComponentLabel + "=slurmd", FieldSelector: "spec.nodeName=" + node})
	require.NoError(t, err)
	var live []*v1.Pod
	for i := range pods.Items {
		if pods.Items[i].Status.Phase != v1.PodSucceeded && pods.Items[i].Status.Phase != v1.PodFailed {
			live = append(live, &pods.Items[i])
		}
	}
	require.LessOrEqual(t, len(live), 1, "at most one worker per node")
	if len(live) == 0 {
		return nil
	}
	return live[0]
}

// slurmrestdOutageIsHarmless: slurmrestd stopped for 30 s (the watcher's backoff reaches
// its 8 s bound within it): no pod deleted, no job cancelled, no pod bound, no taint
// lifted; state converges after.
func slurmrestdOutageIsHarmless(t *testing.T, st stack, ns string) {
	// An admin's drain, tainted before the outage: nothing read during it may lift that.
	drained := st.nodes[0]
	st.restoreNodeAtEnd(t, drained) // waits for idle nodes: the pods of ns are deleted below
	st.slurm(t, "scontrol", "update", "nodename="+drained, "state=drain", "reason=e2e outage test")
	eventually(t, max(5*time.Second, st.reactIn), "taint on "+drained, func() bool { return hasSlurmTaint(getNode(t, drained)) })

	p := waitBound(t, ns, createPod(t, ns, "steady", st.pod).Name, 60*time.Second)
	id := jobIDOf(t, p)
	eventually(t, 30*time.Second, "steady Running", func() bool { return getPod(t, ns, "steady").Status.Phase == v1.PodRunning })

	restart := st.stopRestAPIUntilEnd(t)
	// While it is down, a pod comes that needs Slurm: nothing may be concluded, or bound,
	// until slurmrestd answers again.
	late := createPod(t, ns, "late", st.pod)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		cur := getPod(t, ns, "steady")
		require.Nil(t, cur.DeletionTimestamp, "no pod deleted while Slurm cannot be read")
		require.Equal(t, v1.PodRunning, cur.Status.Phase, "no pod ended while Slurm cannot be read")
		assert.Empty(t, getPod(t, ns, "late").Spec.NodeName, "nothing bound without Slurm")
		require.True(t, hasSlurmTaint(getNode(t, drained)), "no taint lifted while Slurm cannot be read")
		time.Sleep(2 * time.Second)
	}
	j, ok := st.jobByID(t, id)
	require.True(t, ok)
	assert.Equal(t, "RUNNING", j.State, "no job cancelled")

	restart()
	waitBound(t, ns, late.Name, max(15*time.Second, st.reactIn))
	assert.Equal(t, v1.PodRunning, getPod(t, ns, "steady").Status.Phase)
	assert.True(t, hasSlurmTaint(getNode(t, drained)), "the admin's drain still tainted after the outage")

	st.slurm(t, "scontrol", "update", "nodename="+drained, "state=resume")
	eventually(t, max(10*time.Second, st.reactIn), "taint lifted from "+drained+" after resume", func() bool {
		return !hasSlurmTaint(getNode(t, drained))
	})
	// Before restoreNodeAtEnd's check for idle nodes, which runs before ns's cleanup.
	for _, name := range []string{"steady", "late"} {
		require.NoError(t, kube.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{}))
		waitGone(t, ns, name, 60*time.Second)
	}
}

// nodeUnhealthyConditionDrainsInSlurm: a condition listed in the controller's
// --drain-on-node-conditions drains the Slurm node with its reason while it is True, through
// kwok's heartbeats; a cordon meanwhile adds its cause, and its uncordon leaves the
// condition's drain; False, or the condition gone, undrains.
func nodeUnhealthyConditionDrainsInSlurm(t *testing.T, st stack) {
	node := st.nodes[1]
	st.restoreNodeAtEnd(t, node)
	t.Cleanup(func() { removeNodeCondition(t, node, gpuCondition) }) // runs before restoreNodeAtEnd's
	ours := wellknown.ReasonPrefix + "node " + node + " "
	const cause = "condition GPUUnhealthy is True (XidError: e2e: GPU 0 fell off the bus)"
	drainedFor := func(want string) func() bool {
		return func() bool {
			state, reason := st.sinfoNode(t, node)
			return strings.HasPrefix(state, "drain") && reason == want
		}
	}
	undrained := func() bool {
		state, _ := st.sinfoNode(t, node)
		return !strings.HasPrefix(state, "drain")
	}
	unhealthy := v1.NodeCondition{Type: gpuCondition, Status: v1.ConditionTrue, Reason: "XidError", Message: "e2e: GPU 0 fell off the bus"}

	setNodeCondition(t, node, unhealthy)
	eventually(t, st.reactIn, "sinfo shows "+node+" drained for the condition", drainedFor(ours+cause))
	eventually(t, st.reactIn, "taint on "+node, func() bool { return hasSlurmTaint(getNode(t, node)) })
	assert.Contains(t, nodeEvents(t, node), wellknown.EventDrainedInSlurm+": Drained Slurm node "+node)

	// kwok's heartbeat patches only its own conditions: the health check's stays, and so
	// does the drain.
	throughHeartbeats(t, node, 1, "GPUUnhealthy True and the drain kept", func(n *v1.Node) {
		c := nodeConditionOf(n, gpuCondition)
		require.True(t, c != nil && c.Status == v1.ConditionTrue, "GPUUnhealthy on %s: %+v", node, c)
		require.True(t, drainedFor(ours+cause)(), "drained for the condition")
	})

	nodeKubectl(t, "cordon", node)
	eventually(t, st.reactIn, "both causes in the reason", drainedFor(ours+"cordoned in Kubernetes; "+cause))
	nodeKubectl(t, "uncordon", node)
	eventually(t, st.reactIn, "the condition's drain left after uncordon", drainedFor(ours+cause))
	consistently(t, 2*time.Second, "still drained for the condition", drainedFor(ours+cause))

	healthy := unhealthy
	healthy.Status, healthy.Reason, healthy.Message = v1.ConditionFalse, "GPUHealthy", "e2e: all GPUs fine"
	setNodeCondition(t, node, healthy)
	eventually(t, st.reactIn, node+" undrained once the condition is False", undrained)
	st.waitNodeIdle(t, node)
	eventually(t, st.reactIn, "taint gone from "+node, func() bool { return !hasSlurmTaint(getNode(t, node)) })

	// A health check that removes its condition instead of setting it False.
	setNodeCondition(t, node, unhealthy)
	eventually(t, st.reactIn, "drained again", drainedFor(ours+cause))
	removeNodeCondition(t, node, gpuCondition)
	eventually(t, st.reactIn, node+" undrained once the condition is gone", undrained)
	assert.Contains(t, nodeEvents(t, node), wellknown.EventUndrainedInSlurm)
}

// controllerRestartKeepsDrainAndJob: a controller restart neither drains twice nor loses
// an undrain: a cordoned node running a placeholder job keeps its drain (the same reason,
// set by the same user at the same time) through the restart, the pod and its job are
// untouched, and an uncordon after the restart undrains.
func controllerRestartKeepsDrainAndJob(t *testing.T, st stack, ns string) {
	ctx := context.Background()
	node := st.nodes[2]
	st.restoreNodeAtEnd(t, node)
	p := waitBound(t, ns, createPod(t, ns, "kept", st.pod, onlyOnNode(node)).Name, 60*time.Second)
	// Gone before restoreNodeAtEnd waits for idle nodes (clean-ups run last in, first out).
	t.Cleanup(func() {
		if err := kube.CoreV1().Pods(ns).Delete(ctx, "kept", metav1.DeleteOptions{}); !apierrors.IsNotFound(err) {
			require.NoError(t, err)
		}
		waitGone(t, ns, "kept", 60*time.Second)
	})
	id := jobIDOf(t, p)
	guard := "slurmjob-" + strconv.Itoa(int(id))
	eventually(t, 30*time.Second, "kept Running with its eviction guard", func() bool {
		_, err := kube.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, guard, metav1.GetOptions{})
		return err == nil && getPod(t, ns, "kept").Status.Phase == v1.PodRunning
	})

	nodeKubectl(t, "cordon", node)
	want := wellknown.ReasonPrefix + "node " + node + " cordoned in Kubernetes"
	drain := func() string { return st.sinfoLine(t, node, "%E|%u|%H") } // reason|user|time
	var drained string
	eventually(t, st.reactIn, node+" draining in Slurm with our reason, its job still on it", func() bool {
		drained = drain()
		return slices.Contains(st.nodeFlags(t, node), "DRAIN") && strings.HasPrefix(drained, want+"|")
	})
	drains := strings.Count(nodeEvents(t, node), wellknown.EventDrainedInSlurm+": ")

	st.restartController(t)
	untouched := func() bool {
		cur := getPod(t, ns, "kept")
		j, ok := st.jobByID(t, id)
		return drain() == drained && slices.Contains(st.nodeFlags(t, node), "DRAIN") &&
			cur.UID == p.UID && cur.DeletionTimestamp == nil && cur.Status.Phase == v1.PodRunning &&
			ok && j.State == "RUNNING" && j.Nodes == node
	}
	// The restarted controller reconciles every node and pod at once; a drain made again
	// would show as a new reason time in Slurm (seconds) and a new event. Watched for as long
	// as the controller may take to act (its lease, then its first reconcile), 5 s at least.
	consistently(t, max(5*time.Second, st.reactIn), "the drain, the pod and its job as they were", untouched)
	assert.Equal(t, drains, strings.Count(nodeEvents(t, node), wellknown.EventDrainedInSlurm+": "), "no second drain")
	_, err := kube.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, guard, metav1.GetOptions{})
	assert.NoError(t, err, "the eviction guard stays")

	nodeKubectl(t, "uncordon", node)
	eventually(t, st.reactIn, node+" undrained after the restart", func() bool {
		return !slices.Contains(st.nodeFlags(t, node), "DRAIN")
	})
	eventually(t, st.reactIn, "taint gone from "+node, func() bool { return !hasSlurmTaint(getNode(t, node)) })
	j, ok := st.jobByID(t, id)
	assert.True(t, ok && j.State == "RUNNING" && j.Nodes == node, "job %d still running on %s: %+v", id, node, j)
}

// readOnlySlurmCommand: the Slurm command changes nothing, so it may be run again.
func readOnlySlurmCommand(command string, args []string) bool {
	return command == "sinfo" || command == "squeue" || command == "scontrol" && len(args) > 0 && args[0] == "show"
}

// slurmctldRestarting: a Slurm command's output says slurmctld could not be reached.
func slurmctldRestarting(out string) bool {
	for _, s := range []string{"Connection reset by peer", "Connection refused", "Unable to contact slurm controller"} {
		if strings.Contains(out, s) {
			return true
		}
	}
	return false
}
