package pod

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubeslurm/kubeslurm/pkg/slurm"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

// jobAnnotations is what the annotations of a pod (uid) or of a group's workload (uid
// empty) say of its job; a member of a group also gets its rank in the allocation.
func jobAnnotations(job *slurm.Job, uid types.UID) map[string]string {
	a := map[string]string{
		wellknown.JobIDLabel:             strconv.Itoa(int(job.ID)),
		wellknown.JobStateAnnotation:     job.State,
		wellknown.JobReasonAnnotation:    job.Reason,
		wellknown.JobNodesAnnotation:     strings.Join(job.Nodes, ","),
		wellknown.JobStartTimeAnnotation: formatTime(job.StartTime),
		wellknown.JobEndTimeAnnotation:   formatTime(job.EndTime),
	}
	if i, ok := job.Rank(uid); ok && len(job.Pods) > 1 {
		a[wellknown.JobRankAnnotation] = strconv.Itoa(i)
	}
	// Written while the job holds its nodes and kept after, as job-nodes is.
	if idx, err := gpuIndices(job, uid); err == nil && idx != "" {
		a[wellknown.GPUIndicesAnnotation] = idx
	}
	return a
}

// gpuIndices is the GPU indices ("0,1") Slurm allocated the pod's (uid) job on the pod's
// node, or why there are none although the job holds GPUs there; "" for a job without
// GPUs or not holding its nodes now.
func gpuIndices(job *slurm.Job, uid types.UID) (string, error) {
	i, ok := job.Rank(uid)
	if !ok || !job.Allocated() || !job.WantsGPUs() || i >= len(job.Nodes) {
		return "", nil
	}
	idx, err := job.GPUIndices(job.Nodes[i])
	if err != nil {
		return "", fmt.Errorf("Slurm job %d on %s: %w", job.ID, job.Nodes[i], err)
	}
	parts := make([]string, len(idx))
	for k, n := range idx {
		parts[k] = strconv.Itoa(n)
	}
	return strings.Join(parts, ","), nil
}

// podJobCondition is the pod's SlurmJob condition (jobCondition), which also names the
// GPUs the pod's job holds on its node, or why it cannot.
func podJobCondition(job *slurm.Job, uid types.UID) (c v1.PodCondition, gpuErr error) {
	c = jobCondition(job)
	idx, err := gpuIndices(job, uid)
	switch {
	case err != nil:
		c.Reason = wellknown.EventSlurmGPUIndicesMissing
		c.Message += "; " + err.Error()
	case idx != "":
		c.Message += " with GPU indices " + idx
	}
	return c, err
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// jobCondition is the pod's SlurmJob condition: True while the job holds its allocation.
func jobCondition(job *slurm.Job) v1.PodCondition {
	c := v1.PodCondition{
		Type:    wellknown.SlurmJobCondition,
		Status:  v1.ConditionFalse,
		Reason:  camel(job.State),
		Message: "Slurm job " + strconv.Itoa(int(job.ID)) + " is " + job.StateString(),
	}
	if job.Allocated() {
		c.Status = v1.ConditionTrue
		c.Message += " on " + strings.Join(job.Nodes, ",")
	}
	return c
}

// camel turns a Slurm state ("NODE_FAIL") into a condition reason ("NodeFail").
func camel(s string) string {
	if s == "" {
		return "Unknown"
	}
	return slurm.CamelCase(s)
}

// transitionEvent is the event for a change from the state the pod's annotations recorded
// (before) to the job's state now; empty when nothing worth saying happened.
func transitionEvent(before map[string]string, job *slurm.Job) (reason, note string) {
	prevState, prevReason := before[wellknown.JobStateAnnotation], before[wellknown.JobReasonAnnotation]
	switch {
	case job.State == slurm.StateRunning && prevState != slurm.StateRunning:
		return wellknown.EventSlurmJobAllocated, fmt.Sprintf("Slurm job %d allocated node(s) %s", job.ID, strings.Join(job.Nodes, ","))
	case job.State == slurm.StatePending && prevState != slurm.StatePending && !hasReason(job):
		return wellknown.EventSlurmJobPending, fmt.Sprintf("Slurm job %d is pending", job.ID)
	case job.State == slurm.StatePending && (prevState != slurm.StatePending || prevReason != job.Reason) && hasReason(job):
		return wellknown.EventSlurmJobPending, fmt.Sprintf("Slurm job %d is pending: %s", job.ID, job.Reason)
	}
	return "", ""
}

// hasReason reports whether Slurm gave a reason ("None" is Slurm's word for none yet).
func hasReason(job *slurm.Job) bool { return job.Reason != "" && job.Reason != "None" }

// endEvent names why an ended job ends its pod: the event reason by cause, and a note.
func endEvent(job *slurm.Job) (reason, note string) {
	note = fmt.Sprintf("Slurm job %d ended: %s", job.ID, job.StateString())
	switch job.State {
	case slurm.StateCancelled:
		return wellknown.EventSlurmJobCancelled, note
	case slurm.StateTimeout, slurm.StateDeadline:
		return wellknown.EventSlurmJobTimeLimit, note + " (time limit reached)"
	case slurm.StatePreempted:
		return wellknown.EventSlurmJobPreempted, note + " (preempted by Slurm)"
	case slurm.StateNodeFail, slurm.StateBootFail:
		return wellknown.EventSlurmJobNodeFail, note + " (node failure)"
	}
	return wellknown.EventSlurmJobEnded, note
}

// nodeNotReadyFor is how long the node has been NotReady (or Unknown); 0 when Ready.
func nodeNotReadyFor(node *v1.Node, now time.Time) time.Duration {
	for _, c := range node.Status.Conditions {
		if c.Type == v1.NodeReady {
			if c.Status == v1.ConditionTrue {
				return 0
			}
			return now.Sub(c.LastTransitionTime.Time)
		}
	}
	return 0 // no Ready condition yet: a node still registering, not a dead one
}
