package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A deleted pod's containers get its deletion's grace period; a later delete with a shorter
// one shortens it, a longer one does not lengthen it (as a kubelet).
func TestGracePeriod(t *testing.T) {
	sec := func(n int64) *int64 { return &n }
	pod := func(termination *int64) *v1.Pod {
		return &v1.Pod{Spec: v1.PodSpec{TerminationGracePeriodSeconds: termination}}
	}
	for _, tc := range []struct {
		name        string
		termination *int64
		deletions   []*int64
		want        time.Duration
	}{
		{"not deleted, no grace set", nil, nil, 30 * time.Second},
		{"not deleted", sec(3600), nil, time.Hour},
		{"deleted with the pod's grace", sec(3600), []*int64{sec(3600)}, time.Hour},
		{"shortened", sec(3600), []*int64{sec(3600), sec(1)}, time.Second},
		{"not lengthened", sec(3600), []*int64{sec(5), sec(60)}, 5 * time.Second},
		{"deleted without a grace period field", sec(20), []*int64{nil}, 20 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pr := &podRun{pod: pod(tc.termination)}
			pr.grace.Store(-1)
			for _, d := range tc.deletions {
				pr.deleted(&v1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionGracePeriodSeconds: d}})
			}
			assert.Equal(t, tc.want, pr.gracePeriod())
		})
	}
}

// A container a runner before this one ran goes on with its restart count, and its next
// start is a restart (after the end the old runner's stop was, or its own end if it had
// ended); one never started starts afresh, and one of a pod that never restarts ends with
// the lost run.
func TestResumedContainer(t *testing.T) {
	started := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	running := v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: started}}
	exited := &v1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}
	crashed := &v1.ContainerStateTerminated{ExitCode: 1, Reason: "Error"}
	for _, tc := range []struct {
		name         string
		policy       v1.RestartPolicy
		status       *v1.ContainerStatus
		wantRestarts int32
		wantReason   string // of the last termination; "" for none
		wantStart    bool
		wantEnded    bool // terminated, not waiting
	}{
		{"never started", v1.RestartPolicyAlways, nil, 0, "", true, false},
		{"creating", v1.RestartPolicyAlways, &v1.ContainerStatus{State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "ContainerCreating"}}}, 0, "", true, false},
		{"running", v1.RestartPolicyAlways, &v1.ContainerStatus{RestartCount: 3, State: running}, 3, "Unknown", true, false},
		{"running, OnFailure", v1.RestartPolicyOnFailure, &v1.ContainerStatus{RestartCount: 1, State: running}, 1, "Unknown", true, false},
		{"in back-off", v1.RestartPolicyAlways, &v1.ContainerStatus{RestartCount: 2, State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}, LastTerminationState: v1.ContainerState{Terminated: crashed}}, 2, "Error", true, false},
		{"ended well, OnFailure", v1.RestartPolicyOnFailure, &v1.ContainerStatus{State: v1.ContainerState{Terminated: exited}}, 0, "Completed", false, true},
		{"running, Never", v1.RestartPolicyNever, &v1.ContainerStatus{RestartCount: 0, State: running}, 0, "Unknown", false, true},
		{"creating, Never", v1.RestartPolicyNever, &v1.ContainerStatus{State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "ContainerCreating"}}}, 0, "", true, false},
		{"never started, Never", v1.RestartPolicyNever, nil, 0, "", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &v1.Pod{Spec: v1.PodSpec{RestartPolicy: tc.policy, Containers: []v1.Container{{Name: "c"}}}}
			if tc.status != nil {
				tc.status.Name = "c"
				pod.Status.ContainerStatuses = []v1.ContainerStatus{{Name: "other", RestartCount: 9, State: running}, *tc.status}
			}
			c := resumedContainer(pod, pod.Spec.Containers[0])
			assert.Equal(t, tc.wantRestarts, c.restarts)
			if tc.wantReason == "" {
				assert.Nil(t, c.lastTerm)
			} else if assert.NotNil(t, c.lastTerm) {
				assert.Equal(t, tc.wantReason, c.lastTerm.Reason)
				if tc.wantReason == "Unknown" {
					assert.Equal(t, int32(255), c.lastTerm.ExitCode)
					assert.Equal(t, started, c.lastTerm.StartedAt)
				}
			}
			assert.Equal(t, tc.wantStart, (&podRun{pod: pod}).shouldStart(c))
			assert.Equal(t, tc.wantEnded, c.waiting == nil, "waiting: %v", c.waiting)
		})
	}
}
