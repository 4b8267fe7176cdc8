package plugin

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/utils/ptr"
	spv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	"github.com/kubeslurm/kubeslurm/pkg/slurm"
	"github.com/kubeslurm/kubeslurm/pkg/slurmjob"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
	"github.com/kubeslurm/kubeslurm/pkg/workload"
)

// groupPod is a member of the scheduler-plugins PodGroup "train", created i seconds in.
func groupPod(name string, i int, annotations map[string]string) *v1.Pod {
	p := newPod(name, annotations)
	p.Labels = map[string]string{workload.PodGroupLabel: "train"}
	p.CreationTimestamp = metav1.Unix(int64(1000+i), 0)
	return p
}

func (f *fixture) addPodGroup(minMember int32, annotations map[string]string) {
	pg := &spv1alpha1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "train", Annotations: annotations},
		Spec:       spv1alpha1.PodGroupSpec{MinMember: minMember},
	}
	require.NoError(f.t, f.podGroups.Add(pg))
}

// addPods makes pods known to the lister and the API server, as the informer would.
func (f *fixture) addPods(pods ...*v1.Pod) {
	for _, p := range pods {
		require.NoError(f.t, f.handle.informers.Core().V1().Pods().Informer().GetStore().Add(p))
		_, err := f.handle.cs.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{})
		require.NoError(f.t, err)
	}
}

func (f *fixture) removePod(p *v1.Pod) {
	require.NoError(f.t, f.handle.informers.Core().V1().Pods().Informer().GetStore().Delete(p))
}

func (f *fixture) labelOf(name string) string {
	got, err := f.handle.cs.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(f.t, err)
	return got.Labels[wellknown.JobIDLabel]
}

func TestGroupIsOneJobSubmittedOnceWhole(t *testing.T) {
	a, b, c := groupPod("a", 1, nil), groupPod("b", 2, nil), groupPod("c", 3, nil)
	f := newFixture(t)
	f.addPodGroup(3, map[string]string{slurmjob.Annotation("partition"): "gpu"})
	f.addPods(b, a)
	f.poll()

	st := f.plugin.PreEnqueue(context.Background(), a)
	require.Equal(t, fwk.UnschedulableAndUnresolvable, st.Code(), "two of three members: held before the queue")
	assert.Contains(t, st.Message(), "2 of 3 pods exist")

	f.addPods(c)
	require.True(t, f.plugin.PreEnqueue(context.Background(), a).IsSuccess())
	_, st = f.cycle(b, nil)
	require.Equal(t, fwk.Unschedulable, st.Code(), st.Message())
	assert.Contains(t, st.Message(), "Slurm job 1 submitted")

	sub := f.slurm.LastSubmit
	assert.Equal(t, "3", *sub.Nodes)
	assert.Equal(t, int32(3), *sub.MinimumNodes)
	assert.Equal(t, "gpu", *sub.Partition, "annotations come from the PodGroup")
	assert.NotNil(t, sub.Shared, "a group gets whole nodes by default")
	id, ok := slurmjob.DecodeIdentity(*sub.AdminComment)
	require.True(t, ok)
	assert.Equal(t, "PodGroup/default/train", id.Group)
	assert.Equal(t, []types.UID{"uid-a", "uid-b", "uid-c"}, []types.UID{id.Pods[0].UID, id.Pods[1].UID, id.Pods[2].UID}, "rank order is creation order")
	for _, n := range []string{"a", "b", "c"} {
		assert.Equal(t, "1", f.labelOf(n), "every member names the job")
	}

	// The other members find the job by their UID: no second submit, no Slurm request.
	f.slurm.Requests()
	for _, p := range []*v1.Pod{a, c} {
		_, st = f.cycle(p, nil)
		assert.Contains(t, st.Message(), "Slurm job 1 is PENDING")
	}
	assert.Empty(t, f.slurm.Requests())
}

// submittedTrio is a PodGroup of three members a, b, c whose job (1) a submitted.
func submittedTrio(t *testing.T) (f *fixture, a, b, c *v1.Pod) {
	a, b, c = groupPod("a", 1, nil), groupPod("b", 2, nil), groupPod("c", 3, nil)
	f = newFixture(t)
	f.addPodGroup(3, nil)
	f.addPods(a, b, c)
	f.poll()
	_, _ = f.cycle(a, nil)
	f.poll()
	return f, a, b, c
}

func TestGroupMembersGetTheirRankNode(t *testing.T) {
	f, a, b, c := submittedTrio(t)
	f.handle.activated = nil
	require.NoError(t, f.slurm.Allocate(1, "n3", "n1", "n2"))
	f.poll()
	assert.ElementsMatch(t, []string{"default/a", "default/b", "default/c"}, f.handle.activated, "one change activates every member")

	for pod, node := range map[*v1.Pod]string{a: "n3", b: "n1", c: "n2"} {
		feasible, st := f.cycle(pod, nil)
		require.True(t, st.IsSuccess(), st.Message())
		assert.Equal(t, []string{node}, feasible, pod.Name)
	}
}

func TestPermitIsAllOrNothing(t *testing.T) {
	f, a, b, c := submittedTrio(t)
	require.NoError(t, f.slurm.Allocate(1, "n1", "n2", "n3"))
	f.poll()

	permit := func(p *v1.Pod) (*fwk.Status, fwk.CycleState) {
		state := framework.NewCycleState()
		_, st := f.plugin.PreFilter(context.Background(), state, p, nil)
		require.True(t, st.IsSuccess(), st.Message())
		st, _ = f.plugin.Permit(context.Background(), state, p, "")
		return st, state
	}
	st, _ := permit(a)
	require.Equal(t, fwk.Wait, st.Code())
	assert.Contains(t, st.Message(), "waiting for 2 other members")
	wa := f.handle.wait(a)

	st, stateB := permit(b)
	require.Equal(t, fwk.Wait, st.Code())
	wb := f.handle.wait(b)

	// b fails after Permit (say, binding): the waiting members go back, none binds.
	f.plugin.Unreserve(context.Background(), stateB, b, "n2")
	assert.Equal(t, "rejected", wa.verdict)

	// Next round: with a and b waiting, c completes the group and all are let go.
	wa.verdict, wb.verdict = "", ""
	st, _ = permit(c)
	assert.True(t, st.IsSuccess(), st.Message())
	assert.Equal(t, "allowed", wa.verdict)
	assert.Equal(t, "allowed", wb.verdict)
}

func TestSurplusMemberWaitsWithoutASecondJob(t *testing.T) {
	a, b, late := groupPod("a", 1, nil), groupPod("b", 2, nil), groupPod("late", 3, nil)
	f := newFixture(t)
	f.addPodGroup(2, nil)
	f.addPods(a, b)
	f.poll()
	_, _ = f.cycle(a, nil)
	f.addPods(late)
	f.poll()

	_, st := f.cycle(late, nil)
	assert.Equal(t, fwk.UnschedulableAndUnresolvable, st.Code())
	assert.Contains(t, st.Message(), "already stands for the 2 pods")
	assert.Equal(t, 1, f.slurm.Requests()["create"], "one job for the group, none for the late pod")
}

func TestGroupLosingAMemberBeforeStartIsResubmitted(t *testing.T) {
	a, b := groupPod("a", 1, nil), groupPod("b", 2, nil)
	f := newFixture(t)
	f.addPodGroup(2, nil)
	f.addPods(a, b)
	f.poll()
	_, _ = f.cycle(a, nil)
	f.poll()

	// b is deleted while the job is pending, and its workload makes b2.
	f.removePod(b)
	_, st := f.cycle(a, nil)
	assert.Contains(t, st.Message(), "1 of 2 pods exist", "a waits for the group to be whole again")
	assert.Equal(t, 1, f.slurm.Requests()["create"])

	b2 := groupPod("b2", 3, nil)
	b2.UID = "uid-b2"
	f.addPods(b2)
	_, st = f.cycle(b2, nil)
	require.Equal(t, fwk.Unschedulable, st.Code(), st.Message())
	assert.Contains(t, st.Message(), "Slurm job 2 submitted")
	id, _ := slurmjob.DecodeIdentity(*f.slurm.LastSubmit.AdminComment)
	assert.Equal(t, []types.UID{"uid-a", "uid-b2"}, []types.UID{id.Pods[0].UID, id.Pods[1].UID})
	old, err := f.slurm.GetJob(context.Background(), 1)
	require.NoError(t, err)
	assert.Equal(t, slurm.StateCancelled, old.State)
	assert.Equal(t, "2", f.labelOf("a"), "the remaining member names the new job before the old one ends")
}

func TestIndexedJobGangKeepsIndexRankOrder(t *testing.T) {
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "train", UID: "job-uid",
			Annotations: map[string]string{slurmjob.Annotation(slurmjob.AnnotationGang): "true"}},
		Spec: batchv1.JobSpec{Parallelism: ptr.To[int32](3), Completions: ptr.To[int32](3), CompletionMode: ptr.To(batchv1.IndexedCompletion)},
	}
	var pods []*v1.Pod
	for i, idx := range []string{"2", "0", "1"} { // created out of index order
		p := newPod("train-"+idx, map[string]string{batchv1.JobCompletionIndexAnnotation: idx})
		p.CreationTimestamp = metav1.Unix(int64(1000+i), 0)
		p.Labels = map[string]string{batchv1.ControllerUidLabel: "job-uid"}
		p.OwnerReferences = []metav1.OwnerReference{{Kind: "Job", Name: "train", UID: "job-uid", Controller: ptr.To(true)}}
		pods = append(pods, p)
	}
	f := newFixture(t)
	require.NoError(t, f.handle.informers.Batch().V1().Jobs().Informer().GetStore().Add(job))
	f.addPods(pods...)
	f.poll()
	_, st := f.cycle(pods[0], nil)
	require.Contains(t, st.Message(), "Slurm job 1 submitted")
	id, _ := slurmjob.DecodeIdentity(*f.slurm.LastSubmit.AdminComment)
	assert.Equal(t, []string{"train-0", "train-1", "train-2"}, []string{id.Pods[0].Name, id.Pods[1].Name, id.Pods[2].Name})
	assert.Equal(t, "Job/default/train", id.Group)

	// A Job whose pods would not all run at once cannot be one job.
	job.Spec.Completions = ptr.To[int32](6)
	require.NoError(t, f.handle.informers.Batch().V1().Jobs().Informer().GetStore().Update(job))
	other := pods[1].DeepCopy()
	other.UID = "uid-other"
	_, st = f.cycle(other, nil)
	assert.Equal(t, fwk.UnschedulableAndUnresolvable, st.Code())
	assert.Contains(t, st.Message(), "parallelism (3) and completions (6) differ")
	assert.Contains(t, strings.Join(f.events(), "\n"), wellknown.EventInvalidSlurmJobSpec)
}

func TestJobWithoutGangAnnotationPlacesPodsOneByOne(t *testing.T) {
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "batch", UID: "job-uid"},
		Spec:       batchv1.JobSpec{Parallelism: ptr.To[int32](2), Completions: ptr.To[int32](2)},
	}
	p := newPod("batch-x", nil)
	p.Labels = map[string]string{batchv1.ControllerUidLabel: "job-uid"}
	p.OwnerReferences = []metav1.OwnerReference{{Kind: "Job", Name: "batch", UID: "job-uid", Controller: ptr.To(true)}}
	f := newFixture(t)
	require.NoError(t, f.handle.informers.Batch().V1().Jobs().Informer().GetStore().Add(job))
	f.addPods(p)
	f.poll()
	_, st := f.cycle(p, nil)
	require.Contains(t, st.Message(), "Slurm job 1 submitted")
	assert.Equal(t, "1", *f.slurm.LastSubmit.Nodes)
}

func TestGroupMembersMustAgreeOnAnnotations(t *testing.T) {
	a := groupPod("a", 1, map[string]string{slurmjob.Annotation("qos"): "high"})
	b := groupPod("b", 2, map[string]string{slurmjob.Annotation("qos"): "low"})
	f := newFixture(t)
	f.addPodGroup(2, nil)
	f.addPods(a, b)
	f.poll()
	_, st := f.cycle(a, nil)
	assert.Equal(t, fwk.UnschedulableAndUnresolvable, st.Code())
	assert.Contains(t, st.Message(), "slurmjob.kubeslurm.io/qos")
	assert.Zero(t, f.slurm.Requests()["create"])
}

func TestMissingPodGroupHoldsThePod(t *testing.T) {
	a := groupPod("a", 1, nil)
	f := newFixture(t)
	f.addPods(a)
	f.poll()
	st := f.plugin.PreEnqueue(context.Background(), a)
	assert.Equal(t, fwk.UnschedulableAndUnresolvable, st.Code())
	assert.Contains(t, st.Message(), "PodGroup default/train not found")
}

func TestLeaderWorkerSetGroupFromLabels(t *testing.T) {
	var pods []*v1.Pod
	for i, w := range []string{"1", "0"} {
		p := newPod("lws-0-"+w, map[string]string{workload.LWSSizeAnnotation: "2"})
		p.CreationTimestamp = metav1.Unix(int64(1000+i), 0)
		p.Labels = map[string]string{workload.LWSNameLabel: "lws", workload.LWSGroupIndexLabel: "0", workload.LWSWorkerIndexLabel: w}
		pods = append(pods, p)
	}
	f := newFixture(t)
	f.addPods(pods...)
	f.poll()
	_, st := f.cycle(pods[0], nil)
	require.Contains(t, st.Message(), "Slurm job 1 submitted")
	id, _ := slurmjob.DecodeIdentity(*f.slurm.LastSubmit.AdminComment)
	assert.Equal(t, "LeaderWorkerSet/default/lws/0", id.Group)
	assert.Equal(t, "lws-0-0", id.Pods[0].Name, "the leader is rank 0")
}

func TestGroupLargerThanSlurmWaitsForNodes(t *testing.T) {
	a, b := groupPod("a", 1, nil), groupPod("b", 2, nil)
	f := newFixture(t)
	f.addPodGroup(2, nil)
	f.addPods(a, b)
	f.poll()
	f.slurm.RejectSubmit = "Requested node configuration is not available"
	_, st := f.cycle(a, nil)
	assert.Equal(t, fwk.UnschedulableAndUnresolvable, st.Code())
	assert.Contains(t, st.Message(), "Requested node configuration is not available")
	assert.Contains(t, strings.Join(f.events(), "\n"), wellknown.EventSlurmJobSubmitFailed)

	// The other member waits on the same refusal without asking Slurm again.
	f.slurm.Requests()
	_, st = f.cycle(b, nil)
	assert.Contains(t, st.Message(), "submitting again when Slurm's nodes change")
	assert.Zero(t, f.slurm.Requests()["create"])

	// A node joins Slurm: both are re-activated, and the next attempt submits.
	f.handle.activated = nil
	f.slurm.RejectSubmit = ""
	require.NoError(t, f.slurm.SetNode("n4", "", "IDLE"))
	f.poll()
	assert.ElementsMatch(t, []string{"default/a", "default/b"}, f.handle.activated)
	_, st = f.cycle(b, nil)
	assert.Contains(t, st.Message(), "Slurm job 1 submitted")
}

func TestSinglePodReadsItsJobsAnnotations(t *testing.T) {
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "batch", UID: "job-uid",
			Annotations: map[string]string{slurmjob.Annotation("time-limit"): "45"}},
		Spec: batchv1.JobSpec{Parallelism: ptr.To[int32](2)},
	}
	p := newPod("batch-x", map[string]string{slurmjob.Annotation("qos"): "low"})
	p.Labels = map[string]string{batchv1.ControllerUidLabel: "job-uid"}
	p.OwnerReferences = []metav1.OwnerReference{{Kind: "Job", Name: "batch", UID: "job-uid", Controller: ptr.To(true)}}
	f := newFixture(t)
	f.addPods(p)
	f.poll()

	// The Job is not in the lister yet: the pod waits instead of losing the Job's settings.
	_, st := f.cycle(p, nil)
	assert.Equal(t, fwk.UnschedulableAndUnresolvable, st.Code())
	assert.Contains(t, st.Message(), "Job default/batch not found")

	require.NoError(t, f.handle.informers.Batch().V1().Jobs().Informer().GetStore().Add(job))
	_, st = f.cycle(p, nil)
	require.Contains(t, st.Message(), "Slurm job 1 submitted")
	assert.Equal(t, int32(45), *f.slurm.LastSubmit.TimeLimit.Number, "from the Job")
	assert.Equal(t, "low", *f.slurm.LastSubmit.Qos, "from the pod")
}
