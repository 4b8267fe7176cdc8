package slurm

import (
	"context"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
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

// Watcher is the one shared view of Slurm: it keeps our placeholder jobs indexed by job
// id and by pod UID, and Slurm's nodes, and tells subscribers what changed.
//
// Its reads cost what changed, not what Slurm holds. A full listing of every job (which
// at 10,000 queued sbatch jobs is about 100 MB that slurmctld packs under its job lock)
// happens at the first poll and then every FullListPeriod, or when RequestFullListing
// asks for one. Every other poll reads the state of our own jobs alone (a few bytes
// each), the full record of only those whose state changed, and the nodes only when
// Slurm says one changed. A job missing from a state read counts as gone only once a
// read of that job says it is. A failed poll changes nothing: cached state stays as
// last seen and Synced() stays as it was (fail closed).
type Watcher struct {
	client       Client
	interval     time.Duration
	resyncPeriod time.Duration
	// FullListPeriod is how often every job is listed, to find jobs of ours that this
	// process did not submit or fetch (another replica's, say). Set before Run.
	FullListPeriod time.Duration
	// PendingRefresh is how often a pending job's full record is read again, for the
	// reason Slurm gives (a state read has none); at most maxRefreshPerPoll a poll.
	PendingRefresh time.Duration
	// MaxBackoff bounds the wait between failed polls.
	MaxBackoff time.Duration
	// MinListingGap is the least time between a full listing and one RequestFullListing
	// asks for.
	MinListingGap time.Duration

	mu    sync.RWMutex
	jobs  map[int32]*Job
	byPod map[types.UID]int32
	byKey map[string]map[int32]bool
	// byGroup maps a pod group's key to its newest job.
	byGroup map[string]int32
	// observed records when Observe added a job, so a poll that was already under way
	// (and so could not list it) does not drop it as gone.
	observed map[int32]time.Time
	// readAt records when each job's full record was last read.
	readAt map[int32]time.Time
	nodes  map[string]Node
	// nodesUpdate is Slurm's last_update of the nodes held.
	nodesUpdate int64
	synced      bool
	lastErr     error
	handlers    []func(Change)
	lastFull    time.Time
	// lastListing is when the last full listing that succeeded began.
	lastListing time.Time
	// listingWanted is set by RequestFullListing.
	listingWanted bool
	pollNow       chan struct{}
	start         sync.Once
}

// Defaults of the Watcher's tunables.
const (
	DefaultFullListPeriod = 5 * time.Minute
	DefaultPendingRefresh = 10 * time.Second
	// DefaultMaxBackoff bounds how long reading resumes after slurmrestd comes back, too.
	DefaultMaxBackoff = 8 * time.Second
	// DefaultMinListingGap spaces the full listings RequestFullListing asks for.
	DefaultMinListingGap = 30 * time.Second
	// parallelJobReads bounds the job reads of one poll under way at once.
	parallelJobReads = 8
	// maxRefreshPerPoll bounds the pending jobs re-read in one poll, so a burst of
	// thousands of pending pods costs a bounded number of reads a poll.
	maxRefreshPerPoll = 20
)

// NewWatcher returns a watcher polling every interval, with every cached job reported
// as changed every resyncPeriod (from the cache: no full listing).
func NewWatcher(c Client, interval, resyncPeriod time.Duration) *Watcher {
	return &Watcher{
		client: c, interval: interval, resyncPeriod: resyncPeriod,
		FullListPeriod: DefaultFullListPeriod, PendingRefresh: DefaultPendingRefresh, MaxBackoff: DefaultMaxBackoff, MinListingGap: DefaultMinListingGap,
		jobs: map[int32]*Job{}, byPod: map[types.UID]int32{}, byKey: map[string]map[int32]bool{}, byGroup: map[string]int32{},
		observed: map[int32]time.Time{}, readAt: map[int32]time.Time{}, nodes: map[string]Node{},
		pollNow: make(chan struct{}, 1),
	}
}

// OnChange subscribes to changes. Handlers run on the poll goroutine: keep them short.
func (w *Watcher) OnChange(h func(Change)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.handlers = append(w.handlers, h)
}

// Start runs the watcher in the background until ctx ends; later calls do nothing. A
// scheduler replica calls it on its first scheduling cycle, which only the elected
// leader runs, so a standby replica never reads Slurm.
func (w *Watcher) Start(ctx context.Context) {
	w.start.Do(func() { go w.Run(ctx) })
}

// Run polls until ctx ends. Failed polls are retried with exponential backoff up to
// MaxBackoff, and logged when reading starts or stops failing, not on every attempt.
func (w *Watcher) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithName("slurm-watcher")
	failures := 0
	for {
		err := w.Poll(ctx)
		switch {
		case err != nil && failures == 0:
			logger.Error(err, "Reading Slurm failed; keeping the last state seen and retrying with backoff")
		case err != nil:
			logger.V(4).Info("Reading Slurm failed again", "failures", failures+1, "err", err)
		case failures > 0:
			logger.Info("Reading Slurm works again", "failedPolls", failures)
		}
		if err != nil {
			failures++
		} else {
			failures = 0
		}
		t := time.NewTimer(Backoff(w.interval, w.MaxBackoff, failures))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-w.pollNow:
			t.Stop()
		}
	}
}

// Backoff is the wait before the next poll after failures failed polls in a row: the
// interval, doubled for each failure, at most max.
func Backoff(interval, limit time.Duration, failures int) time.Duration {
	limit = max(interval, limit)
	d := interval
	for i := 0; i < failures && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

// Trigger asks for a poll as soon as possible (after a submit or cancel, say).
func (w *Watcher) Trigger() {
	select {
	case w.pollNow <- struct{}{}:
	default:
	}
}

// RequestFullListing makes a poll list every job, as after a submit whose outcome is
// unknown: only a listing can find a job Slurm accepted but never answered for. The
// listing comes at least MinListingGap after the one before: one serves every submit
// that waits for it, and under load (submits timing out as slurmrestd is busy) a listing
// at each request would feed the load that made them time out.
func (w *Watcher) RequestFullListing() {
	w.mu.Lock()
	w.listingWanted = true
	w.mu.Unlock()
	w.Trigger()
}

// ListedSince reports whether a full listing that began after t has succeeded.
func (w *Watcher) ListedSince(t time.Time) bool {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.lastListing.After(t)
}

// Poll reads Slurm once, as a full listing or a read of changes, and publishes the
// differences.
func (w *Watcher) Poll(ctx context.Context) error {
	started := time.Now()
	w.mu.RLock()
	sinceListing := started.Sub(w.lastListing)
	full := !w.synced || sinceListing >= w.FullListPeriod ||
		(w.listingWanted && sinceListing >= w.MinListingGap)
	w.mu.RUnlock()
	var err error
	if full {
		err = w.pollFull(ctx, started)
	} else {
		err = w.pollChanges(ctx, started)
	}
	if err != nil {
		w.mu.Lock()
		w.lastErr = err
		w.mu.Unlock()
	}
	return err
}

// pollFull lists every job and every node.
func (w *Watcher) pollFull(ctx context.Context, started time.Time) error {
	jobs, err := w.client.ListJobs(ctx)
	if err != nil {
		return err
	}
	nodes, err := w.client.ListNodesSince(ctx, 0)
	if err != nil {
		return err
	}
	w.apply(started, jobs, nodes)
	return nil
}

// pollChanges reads the state of the cached jobs, the full record of those whose state
// changed or that the state read lacks, of pending jobs due a refresh, and the nodes if
// Slurm changed any. Nothing is applied unless every read succeeded.
func (w *Watcher) pollChanges(ctx context.Context, started time.Time) error {
	type pending struct {
		id     int32
		readAt time.Time
	}
	w.mu.RLock()
	ids := make([]int32, 0, len(w.jobs))
	known := make(map[int32]JobStatus, len(w.jobs))
	var stale []pending
	for id, j := range w.jobs {
		ids = append(ids, id)
		known[id] = statusOf(j)
		if j.State == StatePending && started.Sub(w.readAt[id]) >= w.PendingRefresh {
			stale = append(stale, pending{id, w.readAt[id]})
		}
	}
	nodesSince := w.nodesUpdate
	w.mu.RUnlock()
	slices.Sort(ids)
	// The longest unrefreshed first, so every pending job gets its turn.
	slices.SortFunc(stale, func(a, b pending) int { return a.readAt.Compare(b.readAt) })
	var due []int32
	for _, p := range stale[:min(len(stale), maxRefreshPerPoll)] {
		due = append(due, p.id)
	}

	var states map[int32]JobStatus
	if len(ids) > 0 {
		var err error
		if states, err = w.client.JobStates(ctx, ids); err != nil {
			return err
		}
	}
	want := due
	for _, id := range ids {
		if st, ok := states[id]; (!ok || !st.equal(known[id])) && !slices.Contains(due, id) {
			want = append(want, id)
		}
	}
	read, gone, err := w.readJobs(ctx, want)
	if err != nil {
		return err
	}
	nodes, err := w.client.ListNodesSince(ctx, nodesSince)
	if err != nil {
		return err
	}
	w.applyChanges(started, read, gone, nodes)
	return nil
}

// readJobs reads the full records of jobs, parallelJobReads at a time (a burst can change
// thousands of jobs in one poll), and sorts them into ours and gone: not found, or the id
// names another job now (slurmctld lost its state and reused it). Any other failure fails
// the whole read.
func (w *Watcher) readJobs(ctx context.Context, ids []int32) (map[int32]*Job, []int32, error) {
	var (
		mu   sync.Mutex
		read = make(map[int32]*Job, len(ids))
		gone []int32
	)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(parallelJobReads)
	for _, id := range ids {
		g.Go(func() error {
			j, err := w.client.GetJob(gctx, id)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case IsNotFound(err):
				gone = append(gone, id)
			case err != nil:
				return err
			case !j.Ours():
				gone = append(gone, id)
			default:
				read[id] = j
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, nil, err
	}
	return read, gone, nil
}

// apply publishes a full listing: jobs of ours it lacks are gone.
func (w *Watcher) apply(started time.Time, list []Job, nodes *NodeListing) {
	w.mu.Lock()
	now := time.Now()
	// Every full listing is also a resync: consumers treat all jobs as changed.
	change := Change{Resync: true}
	w.lastFull, w.lastListing, w.listingWanted = now, started, false
	seen := make(map[int32]bool, len(w.jobs))
	for i := range list {
		j := list[i]
		if !j.Ours() {
			continue
		}
		seen[j.ID] = true
		change.Jobs = append(change.Jobs, JobChange{Job: j})
		at, observed := w.observed[j.ID]
		w.store(&j, now)
		if observed && !at.Before(started) {
			// Observe'd while this listing ran: the next poll still reports it.
			w.observed[j.ID] = at
		}
	}
	for id, old := range w.jobs {
		if seen[id] || w.observedSince(id, started) {
			continue
		}
		change.Jobs = append(change.Jobs, JobChange{Job: *old, Gone: true})
		w.forget(old)
	}
	w.applyNodes(&change, nodes)
	w.publish(change)
}

// applyChanges publishes a read of changes: the jobs read again, those confirmed gone,
// and the nodes if they changed.
func (w *Watcher) applyChanges(started time.Time, read map[int32]*Job, gone []int32, nodes *NodeListing) {
	w.mu.Lock()
	now := time.Now()
	change := Change{Resync: now.Sub(w.lastFull) >= w.resyncPeriod}
	if change.Resync {
		w.lastFull = now
	}
	// Jobs Observe'd before this poll began are reported by it (see below).
	first := map[int32]bool{}
	for id, at := range w.observed {
		if at.Before(started) {
			first[id] = true
			delete(w.observed, id)
		}
	}
	reported := map[int32]bool{}
	for id, j := range read {
		if w.observedSince(id, started) {
			continue // Observe'd a newer record while this poll ran
		}
		if old, ok := w.jobs[id]; !ok || !old.equal(j) {
			change.Jobs = append(change.Jobs, JobChange{Job: *j})
			reported[id] = true
		}
		w.store(j, now)
	}
	for _, id := range gone {
		if old, ok := w.jobs[id]; ok && !w.observedSince(id, started) {
			change.Jobs = append(change.Jobs, JobChange{Job: *old, Gone: true})
			w.forget(old)
		}
	}
	for id, j := range w.jobs {
		// A job recorded by Observe (a submit) is reported by the first poll begun after
		// it, even when it is as recorded: the submitter may have read it back already
		// allocated (Slurm can start a job within milliseconds), and the pods waiting for
		// it went back to the queue after that read, so they learn of the allocation from
		// this change (else only from the next resync).
		if !reported[id] && (change.Resync || first[id]) {
			change.Jobs = append(change.Jobs, JobChange{Job: *j})
		}
	}
	w.applyNodes(&change, nodes)
	w.publish(change)
}

// observedSince reports whether Observe recorded job id after the poll began.
func (w *Watcher) observedSince(id int32, started time.Time) bool {
	at, ok := w.observed[id]
	return ok && !at.Before(started)
}

// applyNodes takes a node listing into the cache and the change (w.mu held).
func (w *Watcher) applyNodes(change *Change, l *NodeListing) {
	if l.Unchanged {
		return
	}
	newNodes := make(map[string]Node, len(l.Nodes))
	for _, n := range l.Nodes {
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
	w.nodes, w.nodesUpdate = newNodes, l.LastUpdate
}

// publish ends a successful poll (w.mu held, and released here) and tells the handlers.
func (w *Watcher) publish(change Change) {
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

func (w *Watcher) store(j *Job, readAt time.Time) {
	if old, ok := w.jobs[j.ID]; ok {
		w.forget(old)
	}
	cp := *j
	w.jobs[j.ID] = &cp
	w.readAt[j.ID] = readAt
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
	delete(w.readAt, j.ID)
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
	now := time.Now()
	w.store(j, now)
	w.observed[j.ID] = now
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
