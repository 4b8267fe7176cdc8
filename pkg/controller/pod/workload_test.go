package pod

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"
	spv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	"github.com/kubeslurm/kubeslurm/pkg/controller/controllertest"
	"github.com/kubeslurm/kubeslurm/pkg/slurm"
	"github.com/kubeslurm/kubeslurm/pkg/slurm/slurmtest"
	"github.com/kubeslurm/kubeslurm/pkg/slurmjob"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

func TestPodGroupPhase(t *testing.T) {
	pending := &slurm.Job{State: slurm.StatePending}
	running := &slurm.Job{State: slurm.StateRunning, Nodes: []string{"n1", "n2"}}
	ended := &slurm.Job{State: slurm.StateCancelled}
	tests := []struct {
		job                *slurm.Job
		running, succeeded int64
		want               spv1alpha1.PodGroupPhase
	}{
		{job: pending, want: spv1alpha1.PodGroupPending},
		{job: running, running: 1, want: spv1alpha1.PodGroupScheduling},
		{job: running, running: 2, want: spv1alpha1.PodGroupRunning},
		{job: ended, succeeded: 2, want: spv1alpha1.PodGroupFinished},
		{job: ended, succeeded: 1, want: spv1alpha1.PodGroupFailed},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, podGroupPhase(tt.job, 2, tt.running, tt.succeeded), "%s %d/%d", tt.job.State, tt.running, tt.succeeded)
	}
}

func TestWorkloadStatusWritesTheGroupsJobOntoItsPodGroup(t *testing.T) {
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	require.NoError(t, spv1alpha1.AddToScheme(scheme))
	pg := &spv1alpha1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "g"}, Spec: spv1alpha1.PodGroupSpec{MinMember: 2}}
	a, b := newPod("a", "n1", v1.PodRunning, "1"), newPod("b", "n2", v1.PodPending, "1")
	f := controllertest.New(t, slurmtest.New("n1", "n2"), fake.NewClientBuilder().WithScheme(scheme).WithObjects(pg, a, b).WithStatusSubresource(pg))
	job, err := f.Slurm.Submit(context.Background(), slurmjob.JobSpec{Nodes: 2, CPUsPerNode: 1, Group: "PodGroup/default/g",
		Pods: []slurmjob.PodRef{slurmjob.RefOf(a), slurmjob.RefOf(b)}})
	require.NoError(t, err)
	ws := &WorkloadStatus{Client: f.Kube, Watcher: f.Watcher, Recorder: f.Recorder}
	req := ctrl.Request{NamespacedName: types.NamespacedName{Name: "PodGroup/default/g"}}
	get := func() *spv1alpha1.PodGroup {
		out := &spv1alpha1.PodGroup{}
		require.NoError(t, f.Kube.Get(context.Background(), types.NamespacedName{Namespace: "default", Name: "g"}, out))
		return out
	}

	// Not read Slurm yet: nothing written.
	_, err = ws.Reconcile(context.Background(), req)
	require.NoError(t, err)
	assert.Empty(t, get().Annotations)

	f.Poll()
	_, err = ws.Reconcile(context.Background(), req)
	require.NoError(t, err)
	assert.Equal(t, spv1alpha1.PodGroupPending, get().Status.Phase)
	assert.Equal(t, "1", get().Annotations[wellknown.JobIDLabel])

	require.NoError(t, f.Slurm.Allocate(job.ID, "n1", "n2"))
	f.Poll()
	_, err = ws.Reconcile(context.Background(), req)
	require.NoError(t, err)
	got := get()
	assert.Equal(t, spv1alpha1.PodGroupScheduling, got.Status.Phase, "allocated, one member not running yet")
	assert.Equal(t, int32(1), got.Status.Running)
	assert.Equal(t, "n1,n2", got.Annotations[wellknown.JobNodesAnnotation])
	assert.Contains(t, f.Events(), wellknown.EventSlurmJobAllocated, "events on the PodGroup")
}

func TestMemberChangeQueuesItsGroup(t *testing.T) {
	f, _, _ := runningPair(t, v1.PodRunning)
	f.r.workloads = &WorkloadStatus{changes: make(chan event.TypedGenericEvent[string], 4)}
	_, err := f.reconcile("a")
	require.NoError(t, err)
	select {
	case e := <-f.r.workloads.changes:
		assert.Equal(t, "PodGroup/default/g", e.Object)
	default:
		t.Fatal("the member's reconcile did not queue its group")
	}
}
