package slurm

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/kubeslurm/kubeslurm/pkg/slurmjob"
)

var noNodeChange = &NodeListing{Unchanged: true}

// A poll that started before a submit cannot list the new job; it must not drop it, or
// the next scheduling attempt would submit a second job for the same pod. That holds for
// a full listing and for a read of changes that found the job gone.
func TestPollUnderWayKeepsJustSubmittedJob(t *testing.T) {
	for name, poll := range map[string]func(w *Watcher, started time.Time){
		"full listing":    func(w *Watcher, started time.Time) { w.apply(started, nil, noNodeChange) },
		"read of changes": func(w *Watcher, started time.Time) { w.applyChanges(started, nil, []int32{7}, noNodeChange) },
	} {
		t.Run(name, func(t *testing.T) {
			w := NewWatcher(nil, time.Hour, time.Hour)
			w.apply(time.Now(), nil, noNodeChange)

			started := time.Now()
			job := &Job{ID: 7, State: StatePending, Pods: []slurmjob.PodRef{{Namespace: "ns", Name: "p", UID: "u"}}}
			w.Observe(job)
			poll(w, started) // began before the submit
			_, ok := w.JobForPod("u")
			assert.True(t, ok, "kept: the poll began before the job existed")

			poll(w, time.Now()) // a later poll that still does not have it
			_, ok = w.JobForPod("u")
			assert.False(t, ok, "a poll begun after the submit is believed")
		})
	}
}

// A job the submitter read back already allocated is still reported by the first poll
// begun after the submit, though its state did not change: its pods went back to the
// queue after that read, and wait for this change.
func TestFirstPollAfterASubmitReportsIt(t *testing.T) {
	w := NewWatcher(nil, time.Hour, time.Hour)
	var changes []Change
	w.OnChange(func(c Change) { changes = append(changes, c) })
	w.apply(time.Now(), nil, noNodeChange)
	changes = nil

	job := Job{ID: 7, State: StateRunning, Nodes: []string{"n1"}, Pods: []slurmjob.PodRef{{Namespace: "ns", Name: "p", UID: "u"}}}
	started := time.Now()
	w.Observe(&job)
	w.applyChanges(started, nil, nil, noNodeChange) // begun before the submit
	assert.Empty(t, changes)

	w.applyChanges(time.Now(), nil, nil, noNodeChange)
	if assert.Len(t, changes, 1) && assert.Len(t, changes[0].Jobs, 1) {
		assert.Equal(t, int32(7), changes[0].Jobs[0].Job.ID)
	}

	changes = nil
	w.applyChanges(time.Now(), map[int32]*Job{7: &job}, nil, noNodeChange)
	assert.Empty(t, changes, "only the first poll: unchanged after that")
}

func TestBackoff(t *testing.T) {
	for _, tc := range []struct {
		failures int
		want     time.Duration
	}{
		{0, time.Second}, {1, 2 * time.Second}, {2, 4 * time.Second}, {4, 16 * time.Second},
		{5, 30 * time.Second}, {50, 30 * time.Second},
	} {
		assert.Equal(t, tc.want, Backoff(time.Second, 30*time.Second, tc.failures), "after %d failures", tc.failures)
	}
	assert.Equal(t, time.Minute, Backoff(time.Minute, 30*time.Second, 3), "never below the interval")
}
