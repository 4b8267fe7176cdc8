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
	batchv1 "k8s.io/api/batch/v1"
	v1 "k8s.io/api/core/v1"
	schedulingv1alpha2 "k8s.io/api/scheduling/v1alpha2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	spv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
	spclientset "sigs.k8s.io/scheduler-plugins/pkg/generated/clientset/versioned"

	"github.com/kubeslurm/kubeslurm/pkg/slurm"
	"github.com/kubeslurm/kubeslurm/pkg/slurmjob"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
	"github.com/kubeslurm/kubeslurm/pkg/workload"
)

// podGroups is a client of the scheduler-plugins PodGroup API on the local cluster.
func podGroups(t *testing.T) spclientset.Interface {
	t.Helper()
	return spclientset.NewForConfigOrDie(adminConfig)
}

// createPodGroup creates the PodGroup and its members name-0 … name-(size-1), in that
// order (their rank order), each with the given options.
func createPodGroup(t *testing.T, ns, name string, size int32, annotations map[string]string, opts ...podOpt) []*v1.Pod {
	t.Helper()
	pg := &spv1alpha1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: annotations},
		Spec:       spv1alpha1.PodGroupSpec{MinMember: size},
	}
	_, err := podGroups(t).SchedulingV1alpha1().PodGroups(ns).Create(context.Background(), pg, metav1.CreateOptions{})
	require.NoError(t, err)
	member := func(p *v1.Pod) { p.Labels = map[string]string{workload.PodGroupLabel: name} }
	var pods []*v1.Pod
	for i := int32(0); i < size; i++ {
		pods = append(pods, createPod(t, ns, fmt.Sprintf("%s-%d", name, i), append([]podOpt{member}, opts...)...))
	}
	return pods
}

// waitAllBound waits until every pod is bound and returns them as they are then.
func waitAllBound(t *testing.T, pods []*v1.Pod, timeout time.Duration) []*v1.Pod {
	t.Helper()
	out := make([]*v1.Pod, len(pods))
	eventually(t, timeout, fmt.Sprintf("%d pods of %s bound", len(pods), pods[0].Namespace), func() bool {
		for i, p := range pods {
			out[i] = getPod(t, p.Namespace, p.Name)
			if out[i].Spec.NodeName == "" {
				return false
			}
		}
		return true
	})
	return out
}

// boundCount is how many of the pods have a node now.
func boundCount(t *testing.T, pods []*v1.Pod) int {
	n := 0
	for _, p := range pods {
		if getPod(t, p.Namespace, p.Name).Spec.NodeName != "" {
			n++
		}
	}
	return n
}

// requireOneJobInRankOrder checks that the pods share one running Slurm job whose
// allocation, in Slurm's order, is exactly the pods' nodes in rank order.
func requireOneJobInRankOrder(t *testing.T, st stack, pods []*v1.Pod) int32 {
	t.Helper()
	eventually(t, 30*time.Second, "the controller annotated every member with its rank", func() bool {
		for i, p := range pods {
			pods[i] = getPod(t, p.Namespace, p.Name)
			if pods[i].Annotations[wellknown.JobRankAnnotation] == "" {
				return false
			}
		}
		return true
	})
	id := requireOneJobOnTheirNodes(t, st, pods)
	job, _ := st.jobByID(t, id)
	require.Equal(t, "RUNNING", job.State)
	for i, p := range pods {
		assert.Equal(t, strconv.Itoa(i), p.Annotations[wellknown.JobRankAnnotation], "rank of %s", p.Name)
	}
	return id
}

// requireOneJobOnTheirNodes checks that the pods, given in rank order, share one Slurm job
// that was allocated exactly their nodes, in that order. It holds after the job ended too
// (kwok completes a Job's pods a second after they run).
func requireOneJobOnTheirNodes(t *testing.T, st stack, pods []*v1.Pod) int32 {
	t.Helper()
	id := jobIDOf(t, pods[0])
	for _, p := range pods {
		require.Equal(t, id, jobIDOf(t, p), "every member of the group names the same Slurm job")
	}
	job, ok := st.jobByID(t, id)
	require.True(t, ok)
	require.NotEqual(t, "PENDING", job.State)
	nodes := st.allocation(t, id)
	require.ElementsMatch(t, slurm.ExpandHostlist(job.Nodes), nodes, "squeue's nodes")
	require.Len(t, nodes, len(pods), "one node per member: %s", job.Nodes)
	for i, p := range pods {
		assert.Equal(t, nodes[i], p.Spec.NodeName, "member %d (%s) runs on node %d of the allocation", i, p.Name, i)
	}
	return id
}

func TestPodGroupIsOneSlurmJob(t *testing.T) {
	podGroupIsOneSlurmJob(t, localStack(), namespace(t))
}

func TestPodGroupLosingAMemberEndsTheGroup(t *testing.T) {
	podGroupLosingAMemberEndsTheGroup(t, localStack(), namespace(t))
}

func TestPodGroupLargerThanSlurmWaitsForANode(t *testing.T) {
	podGroupLargerThanSlurmWaitsForANode(t, localStack(), namespace(t))
}

// podGroupLargerThanSlurmWaitsForANode: a group of one pod more than the stack has nodes
// is one job Slurm keeps pending (PartitionNodeLimit: the partition has too few nodes),
// with no member bound; once one more node joins Kubernetes and Slurm, the group starts on
// all of them, in rank order.
func podGroupLargerThanSlurmWaitsForANode(t *testing.T, st stack, ns string) {
	size := int32(len(st.nodes) + 1)
	pods := createPodGroup(t, ns, "big", size, nil, st.pod)
	eventually(t, 30*time.Second, "the group's one job pending in Slurm", func() bool {
		jobs := st.activeJobsNamed(t, ns+"/big")
		return len(jobs) == 1 && jobs[0].State == "PENDING"
	})
	consistently(t, 5*time.Second, "no member bound while the group cannot fit", func() bool {
		return boundCount(t, pods) == 0
	})
	t.Logf("pending reason: %s", st.activeJobsNamed(t, ns+"/big")[0].Reason)

	t.Logf("added node %s", st.addNode(t))
	bound := waitAllBound(t, pods, 90*time.Second)
	requireOneJobInRankOrder(t, st, bound)
}

func TestIndexedJobGangKeepsIndexRankOrder(t *testing.T) {
	ns := namespace(t)
	createIndexedGang(t, ns, "indexed", 3)
	requireOneJobOnTheirNodes(t, localStack(), waitIndexedJobPods(t, ns, "indexed", 3))
	assert.Contains(t, objectEvents(t, ns, "Job", "indexed"), wellknown.EventSlurmJobSubmitted)
}

// addNode adds a kwok node to Kubernetes and its dynamic slurmd to Slurm; at the test's
// end (after the namespace's pods are gone) it takes both away again.
func addNode(t *testing.T, name string) {
	t.Helper()
	_, err := kube.CoreV1().Nodes().Create(context.Background(), kwokNode(name, nil), metav1.CreateOptions{})
	require.NoError(t, err)
	slurmd := "slurmd-" + name
	component(t, "start", slurmd)
	t.Cleanup(func() {
		// Runs before the namespace's clean-up: end the pods on the node here.
		endPodsOn(t, name, "")
		waitSlurmNodeIdle(t, name)
		component(t, "stop", slurmd)
		err := kube.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
		if !apierrors.IsNotFound(err) {
			require.NoError(t, err)
		}
		eventually(t, 60*time.Second, "Slurm node "+name+" removed", func() bool {
			return !localStack().hasNode(t, name)
		})
	})
	eventually(t, 60*time.Second, name+" in Slurm and Ready in Kubernetes", func() bool {
		n, err := kube.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		// Not "idle": a job waiting for this node may take it the moment it registers.
		return err == nil && readyOf(n) == v1.ConditionTrue && localStack().hasNode(t, name)
	})
}

// endPodsOn deletes every pod bound to node that selector (a label selector, "" for all)
// matches at once (grace 0) and waits until none is left there: a test's clean-up that
// takes a node away runs before its namespace's.
func endPodsOn(t *testing.T, node, selector string) {
	t.Helper()
	onNode := metav1.ListOptions{FieldSelector: "spec.nodeName=" + node, LabelSelector: selector}
	list, err := kube.CoreV1().Pods("").List(context.Background(), onNode)
	require.NoError(t, err)
	for _, p := range list.Items {
		_ = kube.CoreV1().Pods(p.Namespace).Delete(context.Background(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptrTo[int64](0)})
	}
	eventually(t, 60*time.Second, "no pod left on "+node, func() bool {
		list, err := kube.CoreV1().Pods("").List(context.Background(), onNode)
		return err == nil && len(list.Items) == 0
	})
}

// deleteGroupMembers deletes the pods of a group. The controller ends a group's other
// members once one is gone, so some may be gone before the test gets to them.
func deleteGroupMembers(t *testing.T, pods []*v1.Pod) {
	t.Helper()
	for _, p := range pods {
		err := kube.CoreV1().Pods(p.Namespace).Delete(context.Background(), p.Name, metav1.DeleteOptions{})
		if !apierrors.IsNotFound(err) {
			require.NoError(t, err)
		}
	}
}

// kwokNode is a node kwok runs, sized like deploy/local/up.sh's (4 CPUs, 8Gi).
func kwokNode(name string, labels map[string]string) *v1.Node {
	capacity := v1.ResourceList{v1.ResourceCPU: resource.MustParse("4"), v1.ResourceMemory: resource.MustParse("8Gi"), v1.ResourcePods: resource.MustParse("110")}
	return &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"}},
		Status:     v1.NodeStatus{Capacity: capacity, Allocatable: capacity},
	}
}

// deleteJobAtEnd deletes a batch Job and its pods before the namespace's own clean-up, so
// the Job controller does not recreate pods while it runs.
func deleteJobAtEnd(t *testing.T, ns, name string) {
	t.Cleanup(func() {
		err := kube.BatchV1().Jobs(ns).Delete(context.Background(), name, metav1.DeleteOptions{PropagationPolicy: ptrTo(metav1.DeletePropagationForeground)})
		if !apierrors.IsNotFound(err) {
			require.NoError(t, err)
		}
		eventually(t, 60*time.Second, "Job "+name+" gone", func() bool {
			_, err := kube.BatchV1().Jobs(ns).Get(context.Background(), name, metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		})
	})
}

// jobStartTime is the job's StartTime as scontrol shows it (local time of the machine).
func jobStartTime(t *testing.T, st stack, id int32) time.Time {
	t.Helper()
	out := st.slurm(t, "scontrol", "show", "job", strconv.Itoa(int(id)))
	for _, f := range strings.Fields(out) {
		if v, ok := strings.CutPrefix(f, "StartTime="); ok {
			ts, err := time.ParseInLocation("2006-01-02T15:04:05", v, time.Local)
			require.NoError(t, err, f)
			return ts
		}
	}
	t.Fatalf("no StartTime in: %s", out)
	return time.Time{}
}

// objectEvents returns "Reason: message" lines of the events about one object.
func objectEvents(t *testing.T, ns, kind, name string) string {
	t.Helper()
	list, err := kube.EventsV1().Events(ns).List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	var lines []string
	for _, e := range list.Items {
		if e.Regarding.Kind == kind && e.Regarding.Name == name {
			lines = append(lines, e.Reason+": "+e.Note)
		}
	}
	return strings.Join(lines, "\n")
}

// podEventsByName returns the events of a pod that may be gone by now.
func podEventsByName(t *testing.T, ns, name string) string {
	return objectEvents(t, ns, "Pod", name)
}

// sbatchJob submits an sbatch job and cancels it at the test's end.
func sbatchJob(t *testing.T, args ...string) int32 {
	t.Helper()
	return localStack().sbatch(t, args...)
}

func waitJobState(t *testing.T, id int32, state string) {
	t.Helper()
	localStack().waitJobState(t, id, state)
}

// 3. An sbatch -N2 job and a 2-pod group compete for the same 3 free nodes
// (sbatchAndPodGroupCompeteInPriorityOrder), both ways round.
func TestSbatchAndPodGroupCompeteInSlurmPriorityOrder(t *testing.T) {
	for _, groupFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("groupFirst=%v", groupFirst), func(t *testing.T) {
			sbatchAndPodGroupCompeteInPriorityOrder(t, localStack(), namespace(t), groupFirst)
		})
	}
}

// sbatchAndPodGroupCompeteInPriorityOrder: with one of the stack's 4 nodes held, an sbatch
// -N2 job and a 2-pod group wait behind a job on the other 3; when it ends, whichever
// Slurm ranks higher (the group when groupFirst) starts, and the other, needing 2 of the
// 1 node left, waits.
func sbatchAndPodGroupCompeteInPriorityOrder(t *testing.T, st stack, ns string, groupFirst bool) {
	require.Len(t, st.nodes, 4, "sized for 4 nodes")
	hold := st.sbatch(t, "-N1", "--exclusive", "-J", ns+"/hold", "--wrap", "sleep 600")
	st.waitJobState(t, hold, "RUNNING")
	gate := st.sbatch(t, "-N3", "--exclusive", "-J", ns+"/gate", "--wrap", "sleep 600")
	st.waitJobState(t, gate, "RUNNING")

	sbatchPrio, groupPrio := "1000", "100000"
	if !groupFirst {
		sbatchPrio, groupPrio = groupPrio, sbatchPrio
	}
	sb := st.sbatch(t, "-N2", "--exclusive", "--priority="+sbatchPrio, "-J", ns+"/sbatch", "--wrap", "sleep 600")
	pods := createPodGroup(t, ns, "pair", 2, map[string]string{slurmjob.Annotation("priority"): groupPrio}, st.pod)
	eventually(t, 30*time.Second, "the group's job pending behind the gate", func() bool {
		jobs := st.activeJobsNamed(t, ns+"/pair")
		return len(jobs) == 1 && jobs[0].State == "PENDING"
	})
	st.waitJobState(t, sb, "PENDING")

	st.slurm(t, "scancel", strconv.Itoa(int(gate)))
	if groupFirst {
		waitAllBound(t, pods, 60*time.Second)
		requireOneJobInRankOrder(t, st, pods)
		j, _ := st.jobByID(t, sb)
		assert.Equal(t, "PENDING", j.State, "the lower-priority sbatch job waits")
		return
	}
	st.waitJobState(t, sb, "RUNNING")
	consistently(t, 5*time.Second, "the lower-priority group stays unbound", func() bool {
		return boundCount(t, pods) == 0
	})
	jobs := st.activeJobsNamed(t, ns+"/pair")
	require.Len(t, jobs, 1)
	assert.Equal(t, "PENDING", jobs[0].State)
}

// 6. No starvation (pendingGroupsDoNotStarveSmallPods).
func TestPendingGroupsDoNotStarveSmallPods(t *testing.T) {
	pendingGroupsDoNotStarveSmallPods(t, localStack(), namespace(t))
}

// pendingGroupsDoNotStarveSmallPods: high-priority groups Slurm cannot start now stay
// pending while lower-priority single pods that fit are all bound. Sized for nodes of 4
// CPUs: with two nodes added to the stack's four, one CPU of the first held by an sbatch
// job keeps every group of all six nodes out, and leaves room for all 20 single pods.
func pendingGroupsDoNotStarveSmallPods(t *testing.T, st stack, ns string) {
	st.addNode(t)
	st.addNode(t)
	// Before the nodes go (clean-ups run last-registered first): end every pod and job here.
	t.Cleanup(func() {
		_ = kube.CoreV1().Pods(ns).DeleteCollection(context.Background(), metav1.DeleteOptions{GracePeriodSeconds: ptrTo[int64](0)}, metav1.ListOptions{})
		eventually(t, 60*time.Second, "no Slurm job of "+ns+" left", func() bool { return len(st.activeJobsNamed(t, ns+"/")) == 0 })
	})
	hold := st.sbatch(t, "-n1", "-w", st.nodes[0], "-t", "60", "-J", ns+"/hold", "--wrap", "sleep 3000")
	st.waitJobState(t, hold, "RUNNING")
	size := int32(len(st.nodes) + 2)
	var groups [][]*v1.Pod
	for g := 0; g < 10; g++ {
		groups = append(groups, createPodGroup(t, ns, fmt.Sprintf("big%d", g), size,
			map[string]string{slurmjob.Annotation("priority"): "100000"}, st.pod))
	}
	eventually(t, 60*time.Second, "10 group jobs pending in Slurm", func() bool {
		n := 0
		for _, j := range st.activeJobsNamed(t, ns+"/big") {
			if j.State == "PENDING" {
				n++
			}
		}
		return n == 10
	})
	small := 20
	var singles []*v1.Pod
	for i := 0; i < small; i++ {
		singles = append(singles, createPod(t, ns, fmt.Sprintf("small-%d", i), st.pod,
			withAnnotation("priority", "10"), withAnnotation("time-limit", "10")))
	}
	// Slurm's backfill starts them around the pending groups (bf_interval: 30 s by default).
	waitAllBound(t, singles, 120*time.Second)
	for _, g := range groups {
		assert.Zero(t, boundCount(t, g), "group %s stays unbound", g[0].Labels[workload.PodGroupLabel])
	}
}

// Kubernetes' own PodGroup (scheduling.k8s.io/v1alpha2, GenericWorkload) with a gang policy.
func TestKubernetesPodGroupIsOneSlurmJob(t *testing.T) {
	kubernetesPodGroupIsOneSlurmJob(t, localStack(), namespace(t))
}

func TestGroupExamplesRun(t *testing.T) {
	groupExamplesRun(t, localStack())
}

// groupExamplesRun: the examples users start from run as the README says, each ONE Slurm
// job with a node per pod. On another stack their schedulerName is that stack's.
func groupExamplesRun(t *testing.T, st stack) {
	for _, ex := range []struct{ file, selector string }{
		{file: "podgroup.yaml", selector: workload.PodGroupLabel + "=train"},
		{file: "job-gang.yaml", selector: batchv1.JobNameLabel + "=indexed"},
		{file: "kubernetes-podgroup.yaml", selector: "app=wl"},
	} {
		t.Run(ex.file, func(t *testing.T) {
			ns := namespaceOn(t, st)
			st.applyExample(t, ns, ex.file)
			var pods []*v1.Pod
			eventually(t, 60*time.Second, "the example's 3 pods", func() bool {
				list, err := kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: ex.selector})
				require.NoError(t, err)
				pods = pods[:0]
				for i := range list.Items {
					pods = append(pods, &list.Items[i])
				}
				return len(pods) == 3
			})
			bound := waitAllBound(t, pods, 60*time.Second)
			// Rank order: the completion index of the Job's pods, the names of the PodGroup's
			// (created in one apply, so in the same second).
			rank := func(p *v1.Pod) string {
				if i, ok := p.Annotations[batchv1.JobCompletionIndexAnnotation]; ok {
					return i
				}
				return p.Name
			}
			sort.Slice(bound, func(i, j int) bool { return rank(bound[i]) < rank(bound[j]) })
			requireOneJobOnTheirNodes(t, st, bound)
		})
	}
}

// podGroupIsOneSlurmJob: a scheduler-plugins PodGroup of three is ONE Slurm job of three
// nodes, its members bound to them in rank order once all three are allocated, with the
// PodGroup's annotations, its phase and the job id on the PodGroup.
func podGroupIsOneSlurmJob(t *testing.T, st stack, ns string) {
	pods := createPodGroup(t, ns, "train", 3, map[string]string{slurmjob.Annotation("time-limit"): "30"}, st.pod)
	bound := waitAllBound(t, pods, 60*time.Second)
	id := requireOneJobInRankOrder(t, st, bound)

	active := st.activeJobsNamed(t, ns+"/")
	require.Len(t, active, 1, "squeue shows ONE job for the group")
	out := st.slurm(t, "scontrol", "show", "job", strconv.Itoa(int(id)))
	assert.Contains(t, out, "NumNodes=3")
	assert.Contains(t, out, "BatchFlag=0")
	assert.Contains(t, out, "TimeLimit=00:30:00", "annotations come from the PodGroup")

	// No member was bound before Slurm allocated all three nodes.
	start := jobStartTime(t, st, id)
	for _, p := range bound {
		c := podConditionOf(p, v1.PodScheduled)
		require.NotNil(t, c)
		assert.False(t, c.LastTransitionTime.Time.Before(start), "%s bound at %s, before the job started at %s", p.Name, c.LastTransitionTime, start)
	}

	pg, err := podGroups(t).SchedulingV1alpha1().PodGroups(ns).Get(context.Background(), "train", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Contains(t, objectEvents(t, ns, "PodGroup", "train"), wellknown.EventSlurmJobSubmitted)
	eventually(t, 60*time.Second, "PodGroup phase Running with its 3 members", func() bool {
		pg, err = podGroups(t).SchedulingV1alpha1().PodGroups(ns).Get(context.Background(), "train", metav1.GetOptions{})
		require.NoError(t, err)
		return pg.Status.Phase == spv1alpha1.PodGroupRunning && pg.Status.Running == 3
	})
	assert.Equal(t, strconv.Itoa(int(id)), pg.Annotations[wellknown.JobIDLabel], "kubectl describe podgroup names the Slurm job")
}

// podGroupLosingAMemberEndsTheGroup: deleting one member of a running PodGroup ends the
// group's Slurm job and its other members, with an event saying so.
func podGroupLosingAMemberEndsTheGroup(t *testing.T, st stack, ns string) {
	pods := waitAllBound(t, createPodGroup(t, ns, "train", 3, nil, st.pod), 60*time.Second)
	id := requireOneJobInRankOrder(t, st, pods)

	require.NoError(t, kube.CoreV1().Pods(ns).Delete(context.Background(), pods[1].Name, metav1.DeleteOptions{}))
	for _, p := range pods {
		waitGone(t, ns, p.Name, 60*time.Second)
	}
	eventually(t, 30*time.Second, "the group's Slurm job ended", func() bool {
		j, ok := st.jobByID(t, id)
		return !ok || (j.State != "RUNNING" && j.State != "PENDING")
	})
	events := podEventsByName(t, ns, pods[0].Name)
	assert.Contains(t, events, wellknown.EventSlurmJobGroupMemberEnded)
}

// kubernetesPodGroupIsOneSlurmJob: Kubernetes' own PodGroup (scheduling.k8s.io/v1alpha2,
// GenericWorkload) with a gang policy is ONE Slurm job, and PodGroupScheduled=True.
func kubernetesPodGroupIsOneSlurmJob(t *testing.T, st stack, ns string) {
	pg := &schedulingv1alpha2.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "wl"},
		Spec: schedulingv1alpha2.PodGroupSpec{SchedulingPolicy: schedulingv1alpha2.PodGroupSchedulingPolicy{
			Gang: &schedulingv1alpha2.GangSchedulingPolicy{MinCount: 2}}},
	}
	_, err := kube.SchedulingV1alpha2().PodGroups(ns).Create(context.Background(), pg, metav1.CreateOptions{})
	require.NoError(t, err)
	inGroup := func(p *v1.Pod) { p.Spec.SchedulingGroup = &v1.PodSchedulingGroup{PodGroupName: ptrTo("wl")} }
	pods := []*v1.Pod{createPod(t, ns, "wl-0", st.pod, inGroup), createPod(t, ns, "wl-1", st.pod, inGroup)}
	requireOneJobInRankOrder(t, st, waitAllBound(t, pods, 60*time.Second))
	eventually(t, 30*time.Second, "PodGroupScheduled=True on the PodGroup", func() bool {
		got, err := kube.SchedulingV1alpha2().PodGroups(ns).Get(context.Background(), "wl", metav1.GetOptions{})
		require.NoError(t, err)
		for _, c := range got.Status.Conditions {
			if c.Type == schedulingv1alpha2.PodGroupScheduled && c.Status == metav1.ConditionTrue {
				return true
			}
		}
		return false
	})
}
