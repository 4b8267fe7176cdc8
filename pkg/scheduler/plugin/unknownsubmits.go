package plugin

import (
	"sync"
	"time"
)

// unknownSubmits remembers, per job key (group key, or pod UID), when a submit failed
// with no answer from Slurm. slurmctld may have taken such a submit (a client timeout
// after the request was sent), so the pod is not submitted again before a full listing
// of Slurm's jobs, begun after the failure, had its chance to find that job.
type unknownSubmits struct {
	mu     sync.Mutex
	failed map[string]time.Time
}

// unknownSubmitMemory bounds how long an entry is kept for a pod that never came back
// (deleted meanwhile, say).
const unknownSubmitMemory = time.Hour

func newUnknownSubmits() *unknownSubmits {
	return &unknownSubmits{failed: map[string]time.Time{}}
}

func (u *unknownSubmits) record(key string, at time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for k, t := range u.failed {
		if at.Sub(t) > unknownSubmitMemory {
			delete(u.failed, k)
		}
	}
	u.failed[key] = at
}

// since returns when the key's last submit failed with an unknown outcome.
func (u *unknownSubmits) since(key string) (time.Time, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	t, ok := u.failed[key]
	return t, ok
}

func (u *unknownSubmits) forget(key string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.failed, key)
}
