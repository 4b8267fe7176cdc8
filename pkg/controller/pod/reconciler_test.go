package pod

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/kubeslurm/kubeslurm/pkg/controller/controllertest"
	"github.com/kubeslurm/kubeslurm/pkg/slurm"
	"github.com/kubeslurm/kubeslurm/pkg/slurm/slurmtest"
	"github.com/kubeslurm/kubeslurm/pkg/slurmjob"
	"github.com/kubeslurm/kubeslurm/pkg/topology"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

type fixture struct {
	*controllertest.Fixture
	r *Reconciler
}

// newFixture has idle Slurm nodes n1 and n2 and the given objects.
func newFixture(t *testing.T, objs ...client.Object) *fixture {
	return newFixtureWith(t, fake.NewClientBuilder().WithObjects(objs...))
}

// newFixtureWith is newFixture with the fake API server b.
func newFixtureWith(t *testing.T, b *fake.ClientBuilder) *fixture {
	f := &fixture{Fixture: controllertest.New(t, slurmtest.New("n1", "n2"), b)}
	f.r = &Reconciler{Client: f.Kube, APIReader: f.Kube, Slurm: f.Slurm, Watcher: f.Watcher,
		Recorder: f.Recorder, SchedulerName: wellknown.SchedulerName, NotSyncedRetry: time.Second}
	return f
}

func (f *fixture) submitFor(pod *v1.Pod) int32 { return f.submitWithGPUs(pod, 0) }

// runJobFor submits pod's job and has Slurm start it on the pod's node.
func (f *fixture) runJobFor(pod *v1.Pod) int32 {
	id := f.submitFor(pod)
	require.NoError(f.T, f.Slurm.Allocate(id, pod.Spec.NodeName))
	return id
}

func (f *fixture) submitWithGPUs(pod *v1.Pod, gpus int64) int32 {
	job, err := f.Slurm.Submit(context.Background(), slurmjob.JobSpec{Nodes: 1, CPUsPerNode: 1, GPUsPerNode: gpus, Pods: []slurmjob.PodRef{slurmjob.RefOf(pod)}})
	require.NoError(f.T, err)
	return job.ID
}

// runGPUJob runs a 2-GPU job for pod on its node, with the GRES detail Slurm reports for it.
func (f *fixture) runGPUJob(pod *v1.Pod, gresDetail string) {
	id := f.submitWithGPUs(pod, 2)
	require.NoError(f.T, f.Slurm.Allocate(id, pod.Spec.NodeName))
	require.NoError(f.T, f.Slurm.SetGRESDetail(id, gresDetail))
	f.Poll()
}

// sync polls Slurm and reconciles the pod, as the watcher's change would.
func (f *fixture) sync(name string) {
	f.Poll()
	_, err := f.reconcile(name)
	require.NoError(f.T, err)
}

func (f *fixture) reconcile(name string) (ctrl.Result, error) {
	return f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "default", Name: name}})
}

func (f *fixture) jobState(id int32) string {
	j, err := f.Slurm.GetJob(context.Background(), id)
	require.NoError(f.T, err)
	return j.State
}

func (f *fixture) pod(name string) (*v1.Pod, error) {
	p := &v1.Pod{}
	err := f.Kube.Get(context.Background(), types.NamespacedName{Namespace: "default", Name: name}, p)
	return p, err
}

func newPod(name, node string, phase v1.PodPhase, jobID string) *v1.Pod {
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)},
		Spec:       v1.PodSpec{SchedulerName: wellknown.SchedulerName, NodeName: node},
		Status:     v1.PodStatus{Phase: phase},
	}
	if jobID != "" {
		p.Labels = map[string]string{wellknown.JobIDLabel: jobID}
	}
	return p
}

func TestTerminalPodCancelsItsJob(t *testing.T) {
	pod := newPod("p", "n1", v1.PodSucceeded, "1")
	f := newFixture(t, pod)
	id := f.runJobFor(pod)
	waiting := f.submitFor(newPod("waiting", "", v1.PodPending, ""))
	f.Poll()
	f.Slurm.Requests()

	_, err := f.reconcile("p")
	require.NoError(t, err)
	assert.Equal(t, slurm.StateCancelled, f.jobState(id))
	assert.Equal(t, slurm.StatePending, f.jobState(waiting))
	assert.Equal(t, 1, f.Slurm.Requests()["update"], "Slurm's scheduler is nudged to use the freed node now")
	assert.Contains(t, f.Events(), wellknown.EventSlurmJobReleased)
}

func TestDeletedPodCancelsItsJob(t *testing.T) {
	gone := newPod("gone", "n1", v1.PodRunning, "1")
	f := newFixture(t)
	id := f.submitFor(gone)

	f.sync("gone")
	assert.Equal(t, slurm.StateCancelled, f.jobState(id))
}

func TestRecreatedPodCancelsTheOldPodsJob(t *testing.T) {
	old := newPod("p", "", v1.PodPending, "")
	current := newPod("p", "", v1.PodPending, "")
	current.UID = "uid-new"
	f := newFixture(t, current)
	oldID := f.submitFor(old)
	newID := f.submitFor(current)

	f.sync("p")
	assert.Equal(t, slurm.StateCancelled, f.jobState(oldID))
	assert.Equal(t, slurm.StatePending, f.jobState(newID))
}

func TestEndedJobEndsItsPod(t *testing.T) {
	pod := newPod("p", "n1", v1.PodRunning, "1")
	f := newFixture(t, pod)
	id := f.submitFor(pod)
	require.NoError(t, f.Slurm.SetState(id, slurm.StateCancelled, "None"))

	f.sync("p")
	_, err := f.pod("p")
	assert.True(t, apierrors.IsNotFound(err), "pod deleted")
	ev := f.Events()
	assert.Contains(t, ev, wellknown.EventSlurmJobCancelled)
	assert.Contains(t, ev, "CANCELLED")
}

func TestReplacedJobDoesNotEndThePod(t *testing.T) {
	pod := newPod("p", "", v1.PodPending, "2")
	f := newFixture(t, pod)
	first := f.submitFor(pod)
	second := f.submitFor(pod)
	require.Equal(t, int32(2), second)
	require.NoError(t, f.Slurm.SetState(first, slurm.StateCancelled, "None"))

	f.sync("p")
	_, err := f.pod("p")
	assert.NoError(t, err, "the pod names job 2; job 1's end is not its end")
}

func TestJobStateIsWrittenOntoThePod(t *testing.T) {
	pod := newPod("p", "", v1.PodPending, "1")
	f := newFixture(t, pod)
	id := f.submitFor(pod)
	require.NoError(t, f.Slurm.SetState(id, slurm.StatePending, "Priority"))
	f.sync("p")
	got, _ := f.pod("p")
	assert.Equal(t, "PENDING", got.Annotations[wellknown.JobStateAnnotation])
	assert.Equal(t, "Priority", got.Annotations[wellknown.JobReasonAnnotation])

	require.NoError(t, f.Slurm.Allocate(id, "n2"))
	f.sync("p")
	got, _ = f.pod("p")
	assert.Equal(t, "RUNNING", got.Annotations[wellknown.JobStateAnnotation])
	assert.Equal(t, "n2", got.Annotations[wellknown.JobNodesAnnotation])
	assert.Contains(t, f.Events(), wellknown.EventSlurmJobAllocated)
}

func TestFailClosed(t *testing.T) {
	pod := newPod("p", "n1", v1.PodSucceeded, "1")
	f := newFixture(t, pod)
	id := f.submitFor(pod)

	// Not synced yet: requeue, touch nothing.
	res, err := f.reconcile("p")
	require.NoError(t, err)
	assert.NotZero(t, res.RequeueAfter)
	assert.Equal(t, slurm.StatePending, f.jobState(id))

	// Slurm unreachable: the cancel fails loudly and is retried; nothing is assumed.
	f.Poll()
	f.Slurm.FailWith = errors.New("connection refused")
	_, err = f.reconcile("p")
	assert.Error(t, err)

	// A bound pod whose job cannot be read is not deleted.
	bound := newPod("b", "n1", v1.PodRunning, "77")
	f2 := newFixture(t, bound)
	f2.Poll()
	f2.Slurm.FailWith = errors.New("connection refused")
	_, err = f2.reconcile("b")
	assert.Error(t, err)
	_, err = f2.pod("b")
	assert.NoError(t, err)
}

func TestBoundPodWhoseJobSlurmNoLongerHasIsEnded(t *testing.T) {
	bound := newPod("b", "n1", v1.PodRunning, "77")
	f := newFixture(t, bound)
	f.sync("b")
	_, err := f.pod("b")
	assert.True(t, apierrors.IsNotFound(err))
}

// Another kubeslurm scheduler's pod (another Slurm cluster's job id on it) is not ours to
// end, though this Slurm has no job 77, nor to count in podsOnNode.
func TestAnotherSchedulersPodIsLeftAlone(t *testing.T) {
	other := newPod("o", "n1", v1.PodRunning, "77")
	other.Spec.SchedulerName = "kubeslurm-other"
	mine := newPod("mine", "n1", v1.PodRunning, "1")
	f := newFixtureWith(t, fake.NewClientBuilder().WithObjects(other, mine).WithIndex(&v1.Pod{}, podNodeField, podNodeName))
	f.sync("o")
	p, err := f.pod("o")
	require.NoError(t, err)
	assert.Equal(t, v1.PodRunning, p.Status.Phase)
	assert.Equal(t, []ctrl.Request{{NamespacedName: types.NamespacedName{Namespace: "default", Name: "mine"}}},
		f.r.podsOnNode(context.Background(), &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}))
}

func TestConditionsTellTheStory(t *testing.T) {
	pod := newPod("p", "n1", v1.PodRunning, "1")
	f := newFixture(t, pod)
	id := f.runJobFor(pod)
	f.sync("p")
	got, _ := f.pod("p")
	c := podCondition(got, wellknown.SlurmJobCondition)
	require.NotNil(t, c)
	assert.Equal(t, v1.ConditionTrue, c.Status)
	assert.Equal(t, "Running", c.Reason)

	// Reconciling again writes nothing new.
	rv := got.ResourceVersion
	_, err := f.reconcile("p")
	require.NoError(t, err)
	got, _ = f.pod("p")
	assert.Equal(t, rv, got.ResourceVersion)

	require.NoError(t, f.Slurm.SetState(id, slurm.StatePreempted, "None"))
	f.sync("p")
	assert.Contains(t, f.Events(), wellknown.EventSlurmJobPreempted)
}

func TestEvictionGuard(t *testing.T) {
	pod := newPod("p", "n1", v1.PodRunning, "1")
	free := newPod("free", "n2", v1.PodRunning, "2")
	free.Annotations = map[string]string{wellknown.AllowEvictionAnnotation: "true"}
	f := newFixture(t, pod, free)
	f.r.EvictionGuard = true
	for _, p := range []*v1.Pod{pod, free} {
		f.runJobFor(p)
	}
	f.Poll()
	for _, name := range []string{"p", "free"} {
		_, err := f.reconcile(name)
		require.NoError(t, err)
	}
	pdb := &policyv1.PodDisruptionBudget{}
	require.NoError(t, f.Kube.Get(context.Background(), types.NamespacedName{Namespace: "default", Name: "slurmjob-1"}, pdb))
	assert.Equal(t, int32(0), pdb.Spec.MaxUnavailable.IntVal)
	assert.Equal(t, "1", pdb.Spec.Selector.MatchLabels[wellknown.JobIDLabel])
	assert.Equal(t, pod.UID, pdb.OwnerReferences[0].UID)
	err := f.Kube.Get(context.Background(), types.NamespacedName{Namespace: "default", Name: "slurmjob-2"}, pdb)
	assert.True(t, apierrors.IsNotFound(err), "allow-eviction opts out")
}

func TestNotReadyNodeReleasesItsPodsAfterGrace(t *testing.T) {
	now := time.Now()
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{
		Type: v1.NodeReady, Status: v1.ConditionUnknown, LastTransitionTime: metav1.NewTime(now.Add(-time.Minute)),
	}}}}
	healthy := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"}, Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{
		Type: v1.NodeReady, Status: v1.ConditionTrue,
	}}}}
	stuck := newPod("stuck", "n1", v1.PodRunning, "1")
	fine := newPod("fine", "n2", v1.PodRunning, "2")
	f := newFixture(t, node, healthy, stuck, fine)
	f.r.now = func() time.Time { return now }
	stuckJob, fineJob := f.runJobFor(stuck), f.runJobFor(fine)
	f.Poll()

	f.r.NotReadyGrace = 5 * time.Minute
	res, err := f.reconcile("stuck")
	require.NoError(t, err)
	assert.InDelta(t, float64(4*time.Minute), float64(res.RequeueAfter), float64(time.Second), "comes back when the grace runs out")
	assert.Equal(t, slurm.StateRunning, f.jobState(stuckJob))

	f.r.NotReadyGrace = 30 * time.Second
	_, err = f.reconcile("stuck")
	require.NoError(t, err)
	assert.Equal(t, slurm.StateCancelled, f.jobState(stuckJob))
	_, err = f.pod("stuck")
	assert.True(t, apierrors.IsNotFound(err))
	assert.Contains(t, f.Events(), wellknown.EventNodeNotReady)

	_, err = f.reconcile("fine")
	require.NoError(t, err)
	assert.Equal(t, slurm.StateRunning, f.jobState(fineJob), "nothing else is touched")
	_, err = f.pod("fine")
	assert.NoError(t, err)
}

func TestRequeuedJobEndsItsBoundPod(t *testing.T) {
	pod := newPod("p", "n1", v1.PodRunning, "1")
	waiting := newPod("w", "", v1.PodPending, "2")
	f := newFixture(t, pod, waiting)
	id := f.runJobFor(pod)
	f.submitFor(waiting)

	f.sync("p")
	require.NoError(t, f.Slurm.SetState(id, slurm.StatePending, "BeginTime"))
	f.sync("p")
	_, err := f.pod("p")
	assert.True(t, apierrors.IsNotFound(err), "a bound pod whose job was requeued ends")
	assert.Contains(t, f.Events(), wellknown.EventSlurmJobRequeued)

	_, err = f.reconcile("w")
	require.NoError(t, err)
	_, err = f.pod("w")
	assert.NoError(t, err, "an unbound pod with a pending job is simply waiting")
}

func TestRunningPodAnnotatedWithItsNodesBlock(t *testing.T) {
	for _, tc := range []struct {
		name     string
		topology *topology.Config
		want     string // "": no annotation
	}{
		{name: "topology on: the node's block", want: "c7",
			topology: &topology.Config{Name: "kubeslurm", LabelKeys: []string{"nvidia.com/gpu.clique"}, DefaultBlock: "unlabelled"}},
		{name: "topology off: none, labelled node or not"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := newPod("p", "n1", v1.PodRunning, "1")
			n1 := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"nvidia.com/gpu.clique": "c7"}}}
			f := newFixture(t, pod, n1)
			f.r.Topology = tc.topology
			f.runJobFor(pod)

			f.sync("p")
			got, err := f.pod("p")
			require.NoError(t, err)
			assert.Equal(t, slurm.StateRunning, got.Annotations[wellknown.JobStateAnnotation])
			if tc.want == "" {
				assert.NotContains(t, got.Annotations, wellknown.TopologyBlockAnnotation)
			} else {
				assert.Equal(t, tc.want, got.Annotations[wellknown.TopologyBlockAnnotation])
			}
		})
	}
}

func TestGPUIndicesAreWrittenOntoThePod(t *testing.T) {
	pod := newPod("p", "n1", v1.PodRunning, "1")
	f := newFixture(t, pod)
	f.runGPUJob(pod, "gpu:2(IDX:1,3)")
	_, err := f.reconcile("p")
	require.NoError(t, err)
	got, _ := f.pod("p")
	assert.Equal(t, "1,3", got.Annotations[wellknown.GPUIndicesAnnotation])
	c := podCondition(got, wellknown.SlurmJobCondition)
	require.NotNil(t, c)
	assert.Equal(t, "Running", c.Reason)
	assert.Contains(t, c.Message, "with GPU indices 1,3")
}

func TestGPUsWithoutIndicesAreAnActionableError(t *testing.T) {
	pod := newPod("p", "n1", v1.PodRunning, "1")
	f := newFixture(t, pod)
	f.runGPUJob(pod, "gpu:2") // count-only GRES
	_, err := f.reconcile("p")
	require.NoError(t, err)
	got, _ := f.pod("p")
	assert.NotContains(t, got.Annotations, wellknown.GPUIndicesAnnotation)
	c := podCondition(got, wellknown.SlurmJobCondition)
	require.NotNil(t, c)
	assert.Equal(t, v1.ConditionTrue, c.Status, "the job does hold its node")
	assert.Equal(t, wellknown.EventSlurmGPUIndicesMissing, c.Reason)
	assert.Contains(t, c.Message, "configure File= for the GPUs in the node's gres.conf")
	ev := f.Events()
	assert.Contains(t, ev, wellknown.EventSlurmGPUIndicesMissing)
	assert.Contains(t, ev, "Slurm job")

	// The event is not repeated while nothing changes.
	_, err = f.reconcile("p")
	require.NoError(t, err)
	assert.NotContains(t, f.Events(), wellknown.EventSlurmGPUIndicesMissing)
}

// The watcher reads only jobs it knows between its full listings; the job the scheduler
// (another process) just submitted is read once from the pod's job-id label, and its state
// is written onto the pod, bound or not; from then on the watcher's reads follow it.
func TestLabelledPodsJobIsReadWhenTheWatcherLacksIt(t *testing.T) {
	pod := newPod("p", "", v1.PodPending, "1")
	f := newFixture(t, pod)
	f.Poll() // the first, full, listing: no job yet
	require.Equal(t, int32(1), f.submitFor(pod))
	f.Poll()
	_, known := f.Watcher.Job(1)
	require.False(t, known, "not listed again until the next full listing")

	_, err := f.reconcile("p")
	require.NoError(t, err)
	p, err := f.pod("p")
	require.NoError(t, err)
	assert.Equal(t, slurm.StatePending, p.Annotations[wellknown.JobStateAnnotation])
	_, known = f.Watcher.Job(1)
	assert.True(t, known)

	require.NoError(t, f.Slurm.Allocate(1, "n1"))
	f.sync("p")
	p, err = f.pod("p")
	require.NoError(t, err)
	assert.Equal(t, slurm.StateRunning, p.Annotations[wellknown.JobStateAnnotation])
}

// A pod deleted before the controller learnt of its job (the watcher reads only the jobs
// it knows between full listings) still has its job cancelled: the deletion's last state
// names it.
func TestPodDeletedBeforeItsJobWasSeenCancelsIt(t *testing.T) {
	pod := newPod("p", "n1", v1.PodRunning, "1")
	f := newFixture(t, pod)
	f.Poll()
	require.Equal(t, int32(1), f.runJobFor(pod))
	f.Poll()
	_, known := f.Watcher.Job(1)
	require.False(t, known)

	require.NoError(t, f.Kube.Delete(context.Background(), pod))
	f.r.rememberDeletedLink(pod) // as the pod's delete event does
	_, err := f.reconcile("p")
	require.NoError(t, err)
	assert.Equal(t, slurm.StateCancelled, f.jobState(1))
}
