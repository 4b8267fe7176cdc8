package plugin

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	splisters "sigs.k8s.io/scheduler-plugins/pkg/generated/listers/scheduling/v1alpha1"

	"github.com/kubeslurm/kubeslurm/pkg/slurm"
	"github.com/kubeslurm/kubeslurm/pkg/slurm/slurmtest"
	"github.com/kubeslurm/kubeslurm/pkg/slurmjob"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
	"github.com/kubeslurm/kubeslurm/pkg/workload"
)

// testHandle is the part of fwk.Handle the plugin uses.
type testHandle struct {
	fwk.Handle
	cs        *fake.Clientset
	informers informers.SharedInformerFactory
	recorder  *events.FakeRecorder

	mu        sync.Mutex
	activated []string
	waiting   map[types.UID]*fakeWaitingPod
}

func (h *testHandle) GetWaitingPod(uid types.UID) fwk.WaitingPod {
	h.mu.Lock()
	defer h.mu.Unlock()
	if wp, ok := h.waiting[uid]; ok {
		return wp
	}
	return nil
}

func (h *testHandle) IterateOverWaitingPods(f func(fwk.WaitingPod)) {
	h.mu.Lock()
	list := make([]*fakeWaitingPod, 0, len(h.waiting))
	for _, wp := range h.waiting {
		list = append(list, wp)
	}
	h.mu.Unlock()
	for _, wp := range list {
		f(wp)
	}
}

// fakeWaitingPod is a pod the test put in Permit's waiting state; Allow and Reject
// record the verdict.
type fakeWaitingPod struct {
	fwk.WaitingPod
	pod      *v1.Pod
	verdict  string
	rejected string
}

func (w *fakeWaitingPod) GetPod() *v1.Pod { return w.pod }
func (w *fakeWaitingPod) Allow(string)    { w.verdict = "allowed" }
func (w *fakeWaitingPod) Reject(_, msg string) bool {
	w.verdict, w.rejected = "rejected", msg
	return true
}
func (h *testHandle) wait(pod *v1.Pod) *fakeWaitingPod {
	h.mu.Lock()
	defer h.mu.Unlock()
	wp := &fakeWaitingPod{pod: pod}
	h.waiting[pod.UID] = wp
	return wp
}

func (h *testHandle) ClientSet() clientset.Interface                         { return h.cs }
func (h *testHandle) SharedInformerFactory() informers.SharedInformerFactory { return h.informers }
func (h *testHandle) EventRecorder() events.EventRecorderLogger              { return h.recorder }
func (h *testHandle) ProfileName() string                                    { return wellknown.SchedulerName }
func (h *testHandle) Activate(_ klog.Logger, pods map[string]*v1.Pod) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k := range pods {
		h.activated = append(h.activated, k)
	}
}

type fixture struct {
	t       *testing.T
	handle  *testHandle
	slurm   *slurmtest.Fake
	watcher *slurm.Watcher
	plugin  *Plugin
	nodes   []*v1.Node
	// podGroups backs the scheduler-plugins PodGroup lister.
	podGroups cache.Indexer
}

func newFixture(t *testing.T, pods ...*v1.Pod) *fixture {
	f := &fixture{t: t, slurm: slurmtest.New("n1", "n2", "n3")}
	objs := []runtime.Object{}
	for _, p := range pods {
		objs = append(objs, p)
	}
	for _, n := range []string{"n1", "n2", "n3"} {
		f.nodes = append(f.nodes, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}})
	}
	cs := fake.NewClientset(objs...)
	f.handle = &testHandle{cs: cs, informers: informers.NewSharedInformerFactory(cs, 0), recorder: events.NewFakeRecorder(100),
		waiting: map[types.UID]*fakeWaitingPod{}}
	for _, p := range pods {
		require.NoError(t, f.handle.informers.Core().V1().Pods().Informer().GetStore().Add(p))
	}
	f.podGroups = cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	groups := &workload.Resolver{
		Pods:      f.handle.informers.Core().V1().Pods().Lister(),
		Jobs:      f.handle.informers.Batch().V1().Jobs().Lister(),
		PodGroups: splisters.NewPodGroupLister(f.podGroups),
	}
	f.watcher = slurm.NewWatcher(f.slurm, time.Hour, time.Hour)
	f.plugin = NewWithClient(f.handle, f.slurm, f.watcher, groups)
	return f
}

func (f *fixture) poll() { require.NoError(f.t, f.watcher.Poll(context.Background())) }

func (f *fixture) events() []string {
	var out []string
	for {
		select {
		case e := <-f.handle.recorder.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// cycle runs PreFilter, Filter on every node and, when no node fits, PostFilter, as the
// framework would with the plugin last in the filter chain; otherFilters rejects nodes
// as the in-tree filters before ours would.
func (f *fixture) cycle(pod *v1.Pod, otherFilters map[string]*fwk.Status) (feasible []string, status *fwk.Status) {
	ctx := context.Background()
	state := framework.NewCycleState()
	res, st := f.plugin.PreFilter(ctx, state, pod, nil)
	statuses := framework.NewDefaultNodeToStatus()
	if !st.IsSuccess() {
		statuses.SetAbsentNodesStatus(st.WithPlugin(Name))
		_, post := f.plugin.PostFilter(ctx, state, pod, statuses)
		if !st.IsRejected() {
			return nil, st
		}
		return nil, mergeStatus(st, post)
	}
	for _, node := range f.nodes {
		if res != nil && !res.AllNodes() && !res.NodeNames.Has(node.Name) {
			statuses.Set(node.Name, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "not in PreFilterResult"))
			continue
		}
		if other, ok := otherFilters[node.Name]; ok {
			statuses.Set(node.Name, other)
			continue
		}
		ni := framework.NewNodeInfo()
		ni.SetNode(node)
		if s := f.plugin.Filter(ctx, state, pod, ni); !s.IsSuccess() {
			statuses.Set(node.Name, s.WithPlugin(Name))
			continue
		}
		feasible = append(feasible, node.Name)
	}
	if len(feasible) > 0 {
		return feasible, nil
	}
	_, post := f.plugin.PostFilter(ctx, state, pod, statuses)
	return nil, post
}

func mergeStatus(pre, post *fwk.Status) *fwk.Status {
	if post == nil || post.Message() == "" {
		return pre
	}
	return fwk.NewStatus(pre.Code(), pre.Message()+"; "+post.Message())
}

func newPod(name string, annotations map[string]string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name), Annotations: annotations},
		Spec:       v1.PodSpec{SchedulerName: wellknown.SchedulerName, Containers: []v1.Container{{Name: "c"}}},
	}
}

func TestNewPodSubmitsOneJobExcludingFilteredNodes(t *testing.T) {
	pod := newPod("p", nil)
	f := newFixture(t, pod)
	f.poll()

	taint := fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "untolerated taint").WithPlugin("TaintToleration")
	feasible, st := f.cycle(pod, map[string]*fwk.Status{"n1": taint})
	assert.Empty(t, feasible, "no node before Slurm allocates")
	require.Equal(t, fwk.Unschedulable, st.Code())
	assert.Contains(t, st.Message(), "Slurm job 1 submitted")
	assert.Equal(t, []string{"n1"}, []string(*f.slurm.LastSubmit.ExcludedNodes))
	assert.Nil(t, f.slurm.LastSubmit.RequiredNodes)

	got, err := f.handle.cs.CoreV1().Pods("default").Get(context.Background(), "p", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "1", got.Labels[wellknown.JobIDLabel])
	assert.Equal(t, "1", got.Annotations[wellknown.JobIDLabel])
	assert.Contains(t, strings.Join(f.events(), "\n"), wellknown.EventSlurmJobSubmitted)

	// A second attempt while the job is pending submits nothing and costs no request.
	f.slurm.Requests()
	_, st = f.cycle(pod, nil)
	assert.Equal(t, fwk.UnschedulableAndUnresolvable, st.Code())
	assert.Contains(t, st.Message(), "Slurm job 1 is PENDING")
	assert.Empty(t, f.slurm.Requests())
}

func TestAllocatedPodGoesToSlurmsNode(t *testing.T) {
	pod := newPod("p", nil)
	f := newFixture(t, pod)
	f.poll()
	_, _ = f.cycle(pod, nil)
	require.NoError(t, f.slurm.Allocate(1, "n3"))
	f.poll()
	assert.Contains(t, f.handle.activated, "default/p", "the watcher re-activates the pod whose job changed")

	feasible, st := f.cycle(pod, nil)
	require.True(t, st.IsSuccess(), st.Message())
	assert.Equal(t, []string{"n3"}, feasible)
	assert.True(t, f.plugin.PreBind(context.Background(), framework.NewCycleState(), pod, "n3").IsSuccess())
	assert.False(t, f.plugin.PreBind(context.Background(), framework.NewCycleState(), pod, "n1").IsSuccess())
}

func TestPendingReasonIsShown(t *testing.T) {
	pod := newPod("p", nil)
	f := newFixture(t, pod)
	f.watcher.PendingRefresh = 0 // a pending job's record is read again on every poll
	f.poll()
	_, _ = f.cycle(pod, nil)
	require.NoError(t, f.slurm.SetState(1, "PENDING", "Resources"))
	f.poll()
	_, st := f.cycle(pod, nil)
	assert.Contains(t, st.Message(), "Slurm job 1 is PENDING (Resources)")
}

func TestInvalidAnnotationSubmitsNothing(t *testing.T) {
	pod := newPod("p", map[string]string{slurmjob.Annotation("time-limit"): "-5"})
	f := newFixture(t, pod)
	f.poll()
	f.slurm.Requests()
	_, st := f.cycle(pod, nil)
	assert.Equal(t, fwk.UnschedulableAndUnresolvable, st.Code())
	assert.Contains(t, st.Message(), "slurmjob.kubeslurm.io/time-limit")
	assert.Zero(t, f.slurm.Requests()["create"])
	assert.Contains(t, strings.Join(f.events(), "\n"), wellknown.EventInvalidSlurmJobSpec)
}

func TestSlurmRejectionSurfacesSlurmsWords(t *testing.T) {
	pod := newPod("p", map[string]string{slurmjob.Annotation("partition"): "nosuch"})
	f := newFixture(t, pod)
	f.poll()
	f.slurm.RejectSubmit = "Invalid partition name specified"
	_, st := f.cycle(pod, nil)
	assert.Equal(t, fwk.UnschedulableAndUnresolvable, st.Code())
	assert.Contains(t, st.Message(), "Invalid partition name specified")
	ev := strings.Join(f.events(), "\n")
	assert.Contains(t, ev, wellknown.EventSlurmJobSubmitFailed)
	assert.Contains(t, ev, "Invalid partition name specified")
}

func TestFailClosed(t *testing.T) {
	pod := newPod("p", nil)
	f := newFixture(t, pod)

	// Before Slurm was ever read, nothing is submitted.
	_, st := f.cycle(pod, nil)
	assert.Equal(t, fwk.Unschedulable, st.Code())
	assert.Contains(t, st.Message(), "waiting for the first read")
	assert.Zero(t, f.slurm.Requests()["create"])

	// Slurm unreachable at submit: an Error (retried with backoff), no label.
	f.poll()
	f.slurm.FailWith = &slurm.Error{Kind: slurm.KindUnavailable, Op: "submit"}
	_, st = f.cycle(pod, nil)
	assert.Equal(t, fwk.Error, st.Code())
	got, _ := f.handle.cs.CoreV1().Pods("default").Get(context.Background(), "p", metav1.GetOptions{})
	assert.NotContains(t, got.Labels, wellknown.JobIDLabel)
}

func TestNoFeasibleNodeSubmitsNothing(t *testing.T) {
	pod := newPod("p", nil)
	f := newFixture(t, pod)
	f.poll()
	full := fwk.NewStatus(fwk.Unschedulable, "Insufficient cpu").WithPlugin("NodeResourcesFit")
	_, st := f.cycle(pod, map[string]*fwk.Status{"n1": full, "n2": full, "n3": full})
	assert.Equal(t, fwk.Unschedulable, st.Code())
	assert.Nil(t, f.slurm.LastSubmit, "a job that could never start is not submitted")
}

func TestUnusableAllocationIsReplaced(t *testing.T) {
	pod := newPod("p", nil)
	f := newFixture(t, pod)
	f.poll()
	_, _ = f.cycle(pod, nil)
	require.NoError(t, f.slurm.Allocate(1, "n2"))
	f.poll()

	taint := fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "untolerated taint").WithPlugin("TaintToleration")
	_, st := f.cycle(pod, map[string]*fwk.Status{"n2": taint})
	assert.Equal(t, fwk.Unschedulable, st.Code())
	assert.Contains(t, []string(*f.slurm.LastSubmit.ExcludedNodes), "n2")
	old, err := f.slurm.GetJob(context.Background(), 1)
	require.NoError(t, err)
	assert.Equal(t, slurm.StateCancelled, old.State)
	got, _ := f.handle.cs.CoreV1().Pods("default").Get(context.Background(), "p", metav1.GetOptions{})
	assert.Equal(t, "2", got.Labels[wellknown.JobIDLabel], "the pod names its new job before the old one is cancelled")
}

func TestQueueingHint(t *testing.T) {
	pod := newPod("p", map[string]string{slurmjob.Annotation("priority"): "x"})
	fixed := pod.DeepCopy()
	fixed.Annotations[slurmjob.Annotation("priority")] = "5"
	labelled := pod.DeepCopy()
	labelled.Labels = map[string]string{wellknown.JobIDLabel: "1"}

	h, err := slurmAnnotationsChanged(klog.Background(), pod, pod, fixed)
	require.NoError(t, err)
	assert.Equal(t, fwk.Queue, h)
	h, _ = slurmAnnotationsChanged(klog.Background(), pod, pod, labelled)
	assert.Equal(t, fwk.QueueSkip, h, "our own label patch does not requeue the pod")
}

// A submit whose answer was lost (a client timeout after slurmctld took the job) is not
// repeated before a full listing of Slurm's jobs, which finds the job: one job, not two.
func TestSubmitWithUnknownOutcomeIsNotRepeated(t *testing.T) {
	pod := newPod("p", nil)
	f := newFixture(t, pod)
	f.watcher.MinListingGap = 0
	f.poll()
	f.slurm.Requests()

	f.slurm.LoseSubmitAnswers = true
	_, st := f.cycle(pod, nil)
	require.Equal(t, fwk.Error, st.Code(), st.Message())
	f.slurm.LoseSubmitAnswers = false

	_, st = f.cycle(pod, nil)
	assert.Contains(t, st.Message(), "outcome is unknown")
	assert.Equal(t, 1, f.slurm.Requests()["create"], "no second submit before a listing")

	f.poll() // the full listing the failed submit asked for
	require.NoError(t, f.slurm.Allocate(1, "n2"))
	f.poll()
	feasible, st := f.cycle(pod, nil)
	require.True(t, st.IsSuccess(), st.Message())
	assert.Equal(t, []string{"n2"}, feasible, "placed by the job the lost submit made")
	assert.Zero(t, f.slurm.Requests()["create"])
}

// A replica that never runs a scheduling cycle (a standby) never reads Slurm; the first
// cycle starts the watcher, and the pod waits until it has read Slurm once.
func TestStandbyReplicaDoesNotReadSlurm(t *testing.T) {
	pod := newPod("p", nil)
	f := newFixture(t, pod)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f.watcher = slurm.NewWatcher(f.slurm, 10*time.Millisecond, time.Hour)
	f.plugin = NewWithClient(f.handle, f.slurm, f.watcher, f.plugin.groups).WithContext(ctx)
	f.slurm.Requests()

	time.Sleep(100 * time.Millisecond)
	assert.Empty(t, f.slurm.Requests(), "no request before the first scheduling cycle")

	_, st := f.cycle(pod, nil)
	assert.Contains(t, st.Message(), "waiting for the first read of Slurm")
	require.Eventually(t, f.watcher.Synced, 5*time.Second, 10*time.Millisecond)
	_, st = f.cycle(pod, nil)
	assert.Contains(t, st.Message(), "Slurm job 1 submitted")
}
