package pod

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/kubeslurm/kubeslurm/pkg/slurm"
	"github.com/kubeslurm/kubeslurm/pkg/slurmjob"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

// submitGroup submits one job for the pods, as the scheduler does for a pod group.
func (f *fixture) submitGroup(pods ...*v1.Pod) int32 {
	spec := slurmjob.JobSpec{Nodes: int32(len(pods)), CPUsPerNode: 1, Group: "PodGroup/default/g"}
	for _, p := range pods {
		spec.Pods = append(spec.Pods, slurmjob.RefOf(p))
	}
	job, err := f.Slurm.Submit(context.Background(), spec)
	require.NoError(f.T, err)
	return job.ID
}

func TestKeepGroupJob(t *testing.T) {
	two := []slurmjob.PodRef{{UID: "a"}, {UID: "b"}}
	pending := &slurm.Job{State: slurm.StatePending, Pods: two}
	running := &slurm.Job{State: slurm.StateRunning, Nodes: []string{"n1", "n2"}, Pods: two}
	single := &slurm.Job{State: slurm.StatePending, Pods: two[:1]}
	tests := []struct {
		name   string
		job    *slurm.Job
		phase  v1.PodPhase
		others int
		want   bool
	}{
		{name: "single pod", job: single, phase: "", others: 0, want: false},
		{name: "pending, member gone, others wait", job: pending, phase: "", others: 1, want: true},
		{name: "pending, every member gone", job: pending, phase: "", others: 0, want: false},
		{name: "running, member succeeded, others run", job: running, phase: v1.PodSucceeded, others: 1, want: true},
		{name: "running, last member succeeded", job: running, phase: v1.PodSucceeded, others: 0, want: false},
		{name: "running, member failed", job: running, phase: v1.PodFailed, others: 1, want: false},
		{name: "running, member deleted", job: running, phase: "", others: 1, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, keepGroupJob(tt.job, tt.phase, tt.others))
		})
	}
}

// runningPair is a group of two bound pods, a (in phase aPhase) and b (Running), whose
// job runs on n1 and n2.
func runningPair(t *testing.T, aPhase v1.PodPhase) (f *fixture, b *v1.Pod, id int32) {
	a := newPod("a", "n1", aPhase, "1")
	b = newPod("b", "n2", v1.PodRunning, "1")
	f = newFixture(t, a, b)
	id = f.submitGroup(a, b)
	require.NoError(t, f.Slurm.Allocate(id, "n1", "n2"))
	f.Poll()
	return f, b, id
}

func TestGroupMemberFailingEndsTheGroup(t *testing.T) {
	f, _, id := runningPair(t, v1.PodFailed)

	_, err := f.reconcile("a")
	require.NoError(t, err)
	assert.Equal(t, slurm.StateCancelled, f.jobState(id))
	ev := f.Events()
	assert.Contains(t, ev, wellknown.EventSlurmJobGroupMemberEnded, "the other member is told why")
	assert.Contains(t, ev, wellknown.EventSlurmJobReleased)

	// b then ends because its job did.
	f.sync("b")
	_, err = f.pod("b")
	assert.True(t, apierrors.IsNotFound(err), "the rest of the group ends with the job")
}

func TestGroupMemberSucceedingLeavesTheJobToTheOthers(t *testing.T) {
	f, b, id := runningPair(t, v1.PodSucceeded)

	_, err := f.reconcile("a")
	require.NoError(t, err)
	assert.Equal(t, slurm.StateRunning, f.jobState(id), "b still runs in the job")

	b.Status.Phase = v1.PodSucceeded
	require.NoError(t, f.Kube.Status().Update(context.Background(), b))
	_, err = f.reconcile("b")
	require.NoError(t, err)
	assert.Equal(t, slurm.StateCancelled, f.jobState(id), "the last member to end releases the job")
}

func TestPendingGroupLosingAMemberIsLeftToTheScheduler(t *testing.T) {
	a := newPod("a", "", v1.PodPending, "1")
	gone := newPod("gone", "", v1.PodPending, "1")
	f := newFixture(t, a)
	id := f.submitGroup(a, gone)

	f.sync("gone")
	assert.Equal(t, slurm.StatePending, f.jobState(id), "the scheduler resubmits once the group is whole again")
	_, err := f.reconcile("a")
	require.NoError(t, err)
	_, err = f.pod("a")
	require.NoError(t, err, "the waiting member is kept")

	// Once the job has started, a missing member ends the group.
	require.NoError(t, f.Slurm.Allocate(id, "n1", "n2"))
	f.sync("gone")
	assert.Equal(t, slurm.StateCancelled, f.jobState(id))
}
