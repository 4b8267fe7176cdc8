package pod

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubeslurm/kubeslurm/pkg/slurm"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

func TestCamel(t *testing.T) {
	for in, want := range map[string]string{"NODE_FAIL": "NodeFail", "RUNNING": "Running", "OUT_OF_MEMORY": "OutOfMemory", "": "Unknown"} {
		assert.Equal(t, want, camel(in))
	}
}

func TestJobCondition(t *testing.T) {
	c := jobCondition(&slurm.Job{ID: 3, State: "PENDING", Reason: "Priority"})
	assert.Equal(t, v1.ConditionFalse, c.Status)
	assert.Equal(t, "Pending", c.Reason)
	assert.Equal(t, "Slurm job 3 is PENDING (Priority)", c.Message)

	c = jobCondition(&slurm.Job{ID: 3, State: "RUNNING", Nodes: []string{"n1"}})
	assert.Equal(t, v1.ConditionTrue, c.Status)
	assert.Equal(t, "Slurm job 3 is RUNNING on n1", c.Message)

	c = jobCondition(&slurm.Job{ID: 3, State: "TIMEOUT"})
	assert.Equal(t, v1.ConditionFalse, c.Status)
	assert.Equal(t, "Timeout", c.Reason)
}

func TestTransitionEvent(t *testing.T) {
	pending := func(reason string) map[string]string {
		return map[string]string{wellknown.JobStateAnnotation: "PENDING", wellknown.JobReasonAnnotation: reason}
	}
	tests := []struct {
		name   string
		before map[string]string
		job    slurm.Job
		want   string
	}{
		{"first seen pending", nil, slurm.Job{State: "PENDING", Reason: "Priority"}, wellknown.EventSlurmJobPending},
		{"pending reason changed", pending("Priority"), slurm.Job{State: "PENDING", Reason: "Resources"}, wellknown.EventSlurmJobPending},
		{"pending unchanged", pending("Priority"), slurm.Job{State: "PENDING", Reason: "Priority"}, ""},
		{"allocated", pending("Resources"), slurm.Job{State: "RUNNING", Nodes: []string{"n1"}}, wellknown.EventSlurmJobAllocated},
		{"still running", map[string]string{wellknown.JobStateAnnotation: "RUNNING"}, slurm.Job{State: "RUNNING"}, ""},
	}
	for _, tt := range tests {
		got, _ := transitionEvent(tt.before, &tt.job)
		assert.Equal(t, tt.want, got, tt.name)
	}
}

func TestEndEvent(t *testing.T) {
	for state, want := range map[string]string{
		"CANCELLED": wellknown.EventSlurmJobCancelled,
		"TIMEOUT":   wellknown.EventSlurmJobTimeLimit,
		"PREEMPTED": wellknown.EventSlurmJobPreempted,
		"NODE_FAIL": wellknown.EventSlurmJobNodeFail,
		"FAILED":    wellknown.EventSlurmJobEnded,
	} {
		got, note := endEvent(&slurm.Job{ID: 9, State: state})
		assert.Equal(t, want, got, state)
		assert.Contains(t, note, "Slurm job 9 ended: "+state)
	}
}

func TestNodeNotReadyFor(t *testing.T) {
	now := time.Now()
	node := func(status v1.ConditionStatus, since time.Duration) *v1.Node {
		return &v1.Node{Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{
			Type: v1.NodeReady, Status: status, LastTransitionTime: metav1.NewTime(now.Add(-since)),
		}}}}
	}
	assert.Zero(t, nodeNotReadyFor(node(v1.ConditionTrue, time.Hour), now))
	assert.Equal(t, time.Minute, nodeNotReadyFor(node(v1.ConditionFalse, time.Minute), now))
	assert.Equal(t, time.Minute, nodeNotReadyFor(node(v1.ConditionUnknown, time.Minute), now))
	assert.Zero(t, nodeNotReadyFor(&v1.Node{}, now))
}
