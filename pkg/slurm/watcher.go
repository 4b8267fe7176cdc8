package slurm

import (
	"context"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/kubeslurm/kubeslurm/pkg/metrics"
)

// Change is what one poll of Slurm found different.
type Change struct {
	// Jobs are our placeholder jobs that appeared, changed, or (Gone) left Slurm's records.
	Jobs []JobChange
	// NodesChanged is set when any node's state or reason changed.
	NodesChanged bool
	// Nodes are the names of the nodes that appeared, changed state or reason, or left
	// Slurm's records (sorted).
	Nodes []string
	// Resync is set on the first successful poll and on every periodic full resync: the
	// consumer should treat all jobs as changed (level-based safety net).
	Resync bool
}

// JobChange is one job in a Change. Gone means a successful listing no longer had it.
type JobChange struct {
	Job  Job
	Gone bool
}

// Watcher is the one shared view of Slurm: it polls slurmrestd on an interval (one list of
// jobs and one of nodes per poll, whoever consumes it), keeps our placeholder jobs indexed
// by job id and by pod UID, and tells subscribers what changed. A failed poll changes
// nothing: cached state stays as last seen and Synced() stays as it was (fail closed).
type Watcher struct {
	client       Client
	interval     time.Duration
	resyncPeriod time.Duration

	mu    sync.RWMutex
	jobs  map[int32]*Job
	byPod map[types.UID]int32
	byKey map[string]map[int32]bool
	// byGroup maps a pod group's key to its newest job.
	byGroup map[string]int32
	// observed records when Observe added a job, so a poll that was already under way
	// (and so could not list it) does not drop it as gone.
	observed map[int32]time.Time
	nodes    map[string]Node
	synced   bool
	lastErr  error
	handlers []func(Change)
	lastFull time.Time
	pollNow  chan struct{}
}

// NewWatcher returns a watcher polling every interval, with a full resync (every job
// reported as changed) every resyncPeriod.
func NewWatcher(c Client, interval, resyncPeriod time.Duration) *Watcher {
	return &Watcher{
		client: c, interval: interval, resyncPeriod: resyncPeriod,
		jobs: map[int32]*Job{}, byPod: map[types.UID]int32{}, byKey: map[string]map[int32]bool{}, byGroup: map[string]int32{}, observed: map[int32]time.Time{}, nodes: map[string]Node{},
		pollNow: make(chan struct{}, 1),
	}
}

// OnChange subscribes to changes. Handlers run on the poll goroutine: keep them short.
func (w *Watcher) OnChange(h func(Change)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.handlers = append(w.handlers, h)
}

// Run polls until ctx ends.
func (w *Watcher) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithName("slurm-watcher")
	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		if err := w.Poll(ctx); err != nil {
			logger.Error(err, "Polling Slurm failed; keeping the last state seen")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-w.pollNow:
		}
	}
}

// Trigger asks for a poll as soon as possible (after a submit or cancel, say).
func (w *Watcher) Trigger() {
	select {
	case w.pollNow <- struct{}{}:
	default:
	}
}

// Poll lists jobs and nodes once and publishes the differences.
func (w *Watcher) Poll(ctx context.Context) error {
	started := time.Now()
	jobs, err := w.client.ListJobs(ctx)
	if err == nil {
		var nodes []Node
		nodes, err = w.client.ListNodes(ctx)
		if err == nil {
			w.apply(started, jobs, nodes)
			return nil
		}
	}
	w.mu.Lock()
	w.lastErr = err
	w.mu.Unlock()
	return err
}

func (w *Watcher) apply(started time.Time, list []Job, nodes []Node) {
	w.mu.Lock()
	now := time.Now()
	change := Change{Resync: !w.synced || now.Sub(w.lastFull) >= w.resyncPeriod}
	if change.Resync {
		w.lastFull = now
	}
	seen := make(map[int32]bool, len(w.jobs))
	for i := range list {
		j := list[i]
		if !j.Ours() {
			continue
		}
		seen[j.ID] = true
		old, ok := w.jobs[j.ID]
		// A job recorded by Observe (a submit) is reported by the first poll begun after
		// that lists it, even when it is as recorded: the submitter may have read it back
		// already allocated (Slurm can start a job within milliseconds), and the pods
		// waiting for it went back to the queue after that read, so they learn of the
		// allocation from this change (else only from the next resync).
		at, observed := w.observed[j.ID]
		first := observed && at.Before(started)
		if !ok || !old.equal(&j) || change.Resync || first {
			change.Jobs = append(change.Jobs, JobChange{Job: j})
		}
		w.store(&j)
		if observed && !first {
			w.observed[j.ID] = at // listed by a poll begun before the submit: the next one is the first
		}
	}
	for id, old := range w.jobs {
		if at, ok := w.observed[id]; ok {
			if !at.Before(started) {
				continue // submitted while this poll ran: the listing could not have it
			}
			delete(w.observed, id)
		}
		if !seen[id] {
			change.Jobs = append(change.Jobs, JobChange{Job: *old, Gone: true})
			w.forget(old)
		}
	}
	newNodes := make(map[string]Node, len(nodes))
	for _, n := range nodes {
		newNodes[n.Name] = n
		if old, ok := w.nodes[n.Name]; !ok || !old.equal(&n) {
			change.Nodes = append(change.Nodes, n.Name)
		}
	}
	for name := range w.nodes {
		if _, ok := newNodes[name]; !ok {
			change.Nodes = append(change.Nodes, name)
		}
	}
	slices.Sort(change.Nodes)
	change.NodesChanged = len(change.Nodes) > 0
	w.nodes = newNodes
	w.synced, w.lastErr = true, nil
	handlers := w.handlers
	counts := stateCounts(w.jobs)
	w.mu.Unlock()
	metrics.SetPlaceholderJobs(counts)

	if len(change.Jobs) > 0 || change.NodesChanged || change.Resync {
		for _, h := range handlers {
			h(change)
		}
	}
}

func (w *Watcher) store(j *Job) {
	if old, ok := w.jobs[j.ID]; ok {
		w.forget(old)
	}
	cp := *j
	w.jobs[j.ID] = &cp
	for _, p := range j.Pods {
		if w.byKey[p.Key()] == nil {
			w.byKey[p.Key()] = map[int32]bool{}
		}
		w.byKey[p.Key()][j.ID] = true
		// A pod maps to its newest job: a resubmission replaces an ended one.
		if cur, ok := w.byPod[p.UID]; !ok || cur <= j.ID {
			w.byPod[p.UID] = j.ID
		}
	}
	if j.Group != "" {
		if cur, ok := w.byGroup[j.Group]; !ok || cur <= j.ID {
			w.byGroup[j.Group] = j.ID
		}
	}
}

func (w *Watcher) forget(j *Job) {
	delete(w.jobs, j.ID)
	delete(w.observed, j.ID)
	for _, p := range j.Pods {
		if ids := w.byKey[p.Key()]; ids != nil {
			delete(ids, j.ID)
			if len(ids) == 0 {
				delete(w.byKey, p.Key())
			}
		}
		if w.byPod[p.UID] == j.ID {
			delete(w.byPod, p.UID)
		}
	}
	if j.Group != "" && w.byGroup[j.Group] == j.ID {
		delete(w.byGroup, j.Group)
	}
}

// Observe records a job we just submitted or fetched, before the next poll sees it.
func (w *Watcher) Observe(j *Job) {
	if !j.Ours() {
		return
	}
	w.mu.Lock()
	w.store(j)
	w.observed[j.ID] = time.Now()
	w.mu.Unlock()
}

// Synced reports whether at least one poll has succeeded.
func (w *Watcher) Synced() bool {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.synced
}

// LastError is the error of the last poll, nil when it succeeded.
func (w *Watcher) LastError() error {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.lastErr
}

// JobForPod returns the newest placeholder job recorded for the pod UID.
func (w *Watcher) JobForPod(uid types.UID) (Job, bool) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	id, ok := w.byPod[uid]
	if !ok {
		return Job{}, false
	}
	return *w.jobs[id], true
}

// JobForGroup returns the newest placeholder job recorded for a pod group's key.
func (w *Watcher) JobForGroup(key string) (Job, bool) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	id, ok := w.byGroup[key]
	if !ok {
		return Job{}, false
	}
	return *w.jobs[id], true
}

// JobsForPodKey returns every cached job recorded for a pod namespace/name, whatever its
// UID: a pod deleted and recreated under the same name leaves the old one's jobs here.
func (w *Watcher) JobsForPodKey(key string) []Job {
	w.mu.RLock()
	defer w.mu.RUnlock()
	out := make([]Job, 0, len(w.byKey[key]))
	for id := range w.byKey[key] {
		out = append(out, *w.jobs[id])
	}
	return out
}

// Job returns a cached placeholder job by id.
func (w *Watcher) Job(id int32) (Job, bool) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	j, ok := w.jobs[id]
	if !ok {
		return Job{}, false
	}
	return *j, true
}

// Jobs returns every cached placeholder job.
func (w *Watcher) Jobs() []Job {
	w.mu.RLock()
	defer w.mu.RUnlock()
	out := make([]Job, 0, len(w.jobs))
	for _, j := range w.jobs {
		out = append(out, *j)
	}
	return out
}

// AnyPending returns one pending placeholder job (the oldest), if there is one.
func (w *Watcher) AnyPending() (Job, bool) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	var best *Job
	for _, j := range w.jobs {
		if j.State == StatePending && (best == nil || j.ID < best.ID) {
			best = j
		}
	}
	if best == nil {
		return Job{}, false
	}
	return *best, true
}

// Node returns a Slurm node by name.
func (w *Watcher) Node(name string) (Node, bool) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	n, ok := w.nodes[name]
	return n, ok
}

// NodeNames returns the names of all Slurm nodes.
func (w *Watcher) NodeNames() []string {
	w.mu.RLock()
	defer w.mu.RUnlock()
	out := make([]string, 0, len(w.nodes))
	for n := range w.nodes {
		out = append(out, n)
	}
	return out
}

// Release cancels a placeholder job and has slurmctld schedule what it freed right away
// (see Client.Nudge). A failed nudge is only logged: the periodic scheduler still runs.
func Release(ctx context.Context, c Client, w *Watcher, id int32) error {
	if err := c.Cancel(ctx, id); err != nil {
		return err
	}
	if p, ok := w.AnyPending(); ok && p.ID != id {
		if err := c.Nudge(ctx, &p); err != nil {
			klog.FromContext(ctx).Error(err, "Nudging Slurm's scheduler after a cancel", "cancelled", id)
		}
	}
	w.Trigger()
	return nil
}
