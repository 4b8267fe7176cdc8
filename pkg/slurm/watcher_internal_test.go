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
