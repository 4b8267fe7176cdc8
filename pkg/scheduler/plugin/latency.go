package plugin

import (
	"sync"
	"time"

	"github.com/kubeslurm/kubeslurm/pkg/metrics"
	"github.com/kubeslurm/kubeslurm/pkg/slurm"
)

// latency times placeholder jobs for pkg/metrics: submit to the first poll that shows the
// allocation (AllocationWait), and that poll to each pod's binding (BindLatency). Only
// jobs this process submitted are timed; a restart forgets the ones under way.
type latency struct {
	mu        sync.Mutex
	submitted map[int32]time.Time
	allocated map[int32]time.Time
}

func newLatency() *latency {
	return &latency{submitted: map[int32]time.Time{}, allocated: map[int32]time.Time{}}
}

// submit records a job's submit.
func (l *latency) submit(id int32, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.submitted[id] = at
}

// jobChanged reads one job the watcher reported: its first allocation ends the wait; an
// ended or gone job is forgotten.
func (l *latency) jobChanged(c slurm.JobChange, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	id := c.Job.ID
	switch {
	case c.Gone || c.Job.Ended():
		delete(l.submitted, id)
		delete(l.allocated, id)
	case c.Job.Allocated():
		if t, ok := l.submitted[id]; ok {
			metrics.AllocationWait.Observe(at.Sub(t).Seconds())
			delete(l.submitted, id)
			l.allocated[id] = at
		}
	}
}

// bound records the binding of one pod of the job (each member of a group counts).
func (l *latency) bound(id int32, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t, ok := l.allocated[id]; ok {
		metrics.BindLatency.Observe(at.Sub(t).Seconds())
	}
}
