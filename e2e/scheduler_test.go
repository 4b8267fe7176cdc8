package e2e

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
	ns := namespace(t)
	node := nodes[len(nodes)-1]
	out := slurmCmd(t, "sbatch", "--parsable", "--exclusive", "-N1", "-w", node, "-J", ns+"/sbatch", "--wrap", "sleep 600")
	sbatchID := strings.TrimSpace(strings.Split(out, ";")[0])
	t.Cleanup(func() { _, _ = runCmd(runDir+"/bin/scancel", sbatchID) })
	eventually(t, 30*time.Second, "sbatch job running on "+node, func() bool {
		j, ok := jobByID(t, mustAtoi(t, sbatchID))
		return ok && j.State == "RUNNING"
	})

	createPod(t, ns, "needs-node", onlyOnNode(node))
	eventually(t, 30*time.Second, "placeholder job pending behind the sbatch job", func() bool {
		jobs := activeJobsNamed(t, ns+"/needs-node")
		return len(jobs) == 1 && jobs[0].State == "PENDING" && jobs[0].Reason == "Resources"
	})
	var p *v1.Pod
	eventually(t, 30*time.Second, "pod Pending with Slurm's reason in its PodScheduled condition", func() bool {
		p = getPod(t, ns, "needs-node")
		for _, c := range p.Status.Conditions {
			if c.Type == v1.PodScheduled && c.Status == v1.ConditionFalse && strings.Contains(c.Message, "PENDING (Resources)") {
				return true
			}
		}
		return false
	})
	assert.Empty(t, p.Spec.NodeName)
	assert.Contains(t, podEvents(t, p), "PENDING (Resources)")
	// The nodes the affinity rules out reach Slurm as excluded nodes, never as required ones.
	show := slurmCmd(t, "scontrol", "show", "job", strconv.Itoa(int(jobIDOf(t, p))))
	assert.Regexp(t, `ExcNodeList=\S+`, show)
	assert.NotRegexp(t, `ExcNodeList=\S*`+node, show)
	assert.Contains(t, show, "ReqNodeList=(null)")

	slurmCmd(t, "scancel", sbatchID)
	p = waitBound(t, ns, "needs-node", 30*time.Second)
	assert.Equal(t, node, p.Spec.NodeName)
}

// 3. Deleting the pod removes the job; scancel of the job ends the pod.
func TestPodAndJobEndTogether(t *testing.T) {
	ns := namespace(t)
	p := createPod(t, ns, "deleted")
	p = waitBound(t, ns, "deleted", 60*time.Second)
	id := jobIDOf(t, p)
	require.NoError(t, kube.CoreV1().Pods(ns).Delete(context.Background(), "deleted", metav1.DeleteOptions{}))
	eventually(t, 30*time.Second, fmt.Sprintf("job %d ended after its pod was deleted", id), func() bool {
		j, ok := jobByID(t, id)
		return !ok || (j.State != "RUNNING" && j.State != "PENDING")
	})

	p = createPod(t, ns, "scancelled")
	p = waitBound(t, ns, "scancelled", 60*time.Second)
	id = jobIDOf(t, p)
	slurmCmd(t, "scancel", strconv.Itoa(int(id)))
	waitGone(t, ns, "scancelled", 30*time.Second)
	ev := podEvents(t, p)
	assert.Contains(t, ev, wellknown.EventSlurmJobCancelled)
	assert.Contains(t, ev, "CANCELLED")
}

// 4. 20 exclusive pods on 4 nodes: 4 run, 16 wait in Slurm priority order; each completion
// lets exactly one more in.
func TestExclusivePodsQueueInSlurmPriorityOrder(t *testing.T) {
	ns := namespace(t)
	const total = 20
	// Priorities are shuffled against creation order, so the order of admission can only
	// come from Slurm's priorities.
	prio := map[string]int{}
	for i := 0; i < total; i++ {
		name := fmt.Sprintf("p%02d", i)
		prio[name] = 100 + (i*7)%total
		createPod(t, ns, name, withAnnotation("exclusive", "true"), withAnnotation("priority", strconv.Itoa(prio[name])))
	}
	eventually(t, 60*time.Second, "all 20 placeholder jobs submitted", func() bool {
		return len(activeJobsNamed(t, ns+"/")) == total
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
	eventually(t, 60*time.Second, "4 pods bound", func() bool {
		r, _ := bound()
		return len(r) == len(nodes)
	})
	running, waiting := bound()
	require.Len(t, waiting, total-len(nodes))
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
		require.Len(t, r, len(nodes), "still exactly one pod per node")
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

// 5. A malformed annotation yields an event and no Slurm job; so does a partition Slurm
// does not have, with Slurm's own words.
func TestBadInputGetsAnEventAndNoJob(t *testing.T) {
	ns := namespace(t)
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
		createPod(t, ns, name, withAnnotation(c.key, c.value))
	}
	createPod(t, ns, "no-such-partition", withAnnotation("partition", "nosuchpartition"))

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
	assert.Empty(t, jobsNamed(t, ns+"/"), "no Slurm job for any of them")
	for name := range cases {
		assert.Empty(t, getPod(t, ns, name).Spec.NodeName)
	}
}

// 6. Restarting the scheduler mid-way neither duplicates nor leaks jobs.
func TestSchedulerRestartKeepsOneJobPerPod(t *testing.T) {
	ns := namespace(t)
	const total = 6
	for i := 0; i < total; i++ {
		createPod(t, ns, fmt.Sprintf("r%d", i), withAnnotation("exclusive", "true"))
		if i == 2 {
			component(t, "restart", "scheduler")
		}
	}
	eventually(t, 90*time.Second, "every pod has its job", func() bool {
		return len(activeJobsNamed(t, ns+"/")) == total
	})
	component(t, "restart", "scheduler")
	eventually(t, 60*time.Second, "4 pods bound after the restarts", func() bool {
		n := 0
		for i := 0; i < total; i++ {
			if getPod(t, ns, fmt.Sprintf("r%d", i)).Spec.NodeName != "" {
				n++
			}
		}
		return n == len(nodes)
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
	for _, j := range jobsNamed(t, ns+"/") {
		perPod[j.Name]++
	}
	require.Len(t, perPod, total)
	for name, n := range perPod {
		assert.Equal(t, 1, n, "%s has exactly one Slurm job", name)
	}
}

func mustAtoi(t *testing.T, s string) int32 {
	t.Helper()
	n, err := strconv.Atoi(s)
	require.NoError(t, err, s)
	return int32(n)
}
