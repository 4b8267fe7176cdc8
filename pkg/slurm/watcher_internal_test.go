package slurm

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/kubeslurm/kubeslurm/pkg/slurmjob"
)

// A poll that started before a submit cannot list the new job; it must not drop it, or
// the next scheduling attempt would submit a second job for the same pod.
func TestPollUnderWayKeepsJustSubmittedJob(t *testing.T) {
	w := NewWatcher(nil, time.Hour, time.Hour)
	w.apply(time.Now(), nil, nil)

	started := time.Now()
	job := &Job{ID: 7, State: StatePending, Pods: []slurmjob.PodRef{{Namespace: "ns", Name: "p", UID: "u"}}}
	w.Observe(job)
	w.apply(started, nil, nil) // listed before the submit
	_, ok := w.JobForPod("u")
	assert.True(t, ok, "kept: the poll began before the job existed")

	w.apply(time.Now(), nil, nil) // a later poll that still does not list it
	_, ok = w.JobForPod("u")
	assert.False(t, ok, "a poll begun after the submit is believed")
}

// A job the submitter read back already allocated is still reported by the first poll that
// lists it: its pods went back to the queue after that read, and wait for this change.
func TestFirstListingOfASubmittedJobIsAChange(t *testing.T) {
	w := NewWatcher(nil, time.Hour, time.Hour)
	var changes []Change
	w.OnChange(func(c Change) { changes = append(changes, c) })
	w.apply(time.Now(), nil, nil)
	changes = nil

	job := Job{ID: 7, State: StateRunning, Nodes: []string{"n1"}, Pods: []slurmjob.PodRef{{Namespace: "ns", Name: "p", UID: "u"}}}
	started := time.Now()
	w.Observe(&job)
	w.apply(started, []Job{job}, nil) // begun before the submit: not the first listing
	assert.Empty(t, changes)

	w.apply(time.Now(), []Job{job}, nil)
	if assert.Len(t, changes, 1) && assert.Len(t, changes[0].Jobs, 1) {
		assert.Equal(t, int32(7), changes[0].Jobs[0].Job.ID)
	}

	changes = nil
	w.apply(time.Now(), []Job{job}, nil)
	assert.Empty(t, changes, "only the first listing: unchanged after that")
}
