// Package node keeps each Kubernetes node and the Slurm node of the same name in step,
// both ways. Kubernetes to Slurm: a cordon, or a listed node condition that holds, drains
// the Slurm node with a reason of ours; when neither holds any more our drain is undone
// (never anyone else's); a deleted Kubernetes node has its idle dynamic Slurm node
// removed. Slurm to Kubernetes: the node's Slurm state flags become SlurmNode* conditions,
// and a drained or down Slurm node is tainted. Reconcile is level-based: it reads both
// sides every time and changes only what differs.
package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/kubeslurm/kubeslurm/pkg/metrics"
	"github.com/kubeslurm/kubeslurm/pkg/slurm"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

// Reconciler reconciles one node name across Kubernetes and Slurm.
type Reconciler struct {
	// Client is the manager's cached client.
	Client client.Client
	// APIReader reads the API server directly: a node is only taken as deleted when the
	// API server itself says so, never because a cache has not caught up.
	APIReader client.Reader
	Slurm     slurm.Client
	Watcher   *slurm.Watcher
	Recorder  events.EventRecorder
	// DrainOnConditions are node condition types that, when True, mark the node unhealthy:
	// the Slurm node is drained while one holds.
	DrainOnConditions []string
	// TaintEffect of the wellknown.SlurmDrainTaint put on nodes Slurm drained or marked
	// down; empty puts none (and lifts one left from before).
	TaintEffect v1.TaintEffect
	// NotSyncedRetry is how soon to retry while Slurm has not been read yet.
	NotSyncedRetry time.Duration

	mu sync.Mutex
	// seen holds the Kubernetes nodes this process has read. Only a Slurm node whose
	// Kubernetes node was seen (or that we marked, see deletedReason) is ever removed: a
	// Slurm node Kubernetes never had (an sbatch-only machine) is not ours to delete.
	seen map[string]bool
	// since holds, per direction and node, when a drain change to carry across was first
	// noticed, for metrics.DrainSyncLag.
	since map[lagKey]time.Time
	now   func() time.Time
}

type lagKey struct{ direction, node string }

// Reconcile implements reconcile.Reconciler.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if !r.Watcher.Synced() {
		// Fail closed: without Slurm's state, do nothing either way.
		return ctrl.Result{RequeueAfter: r.NotSyncedRetry}, nil
	}
	node := &v1.Node{}
	err := r.Client.Get(ctx, req.NamespacedName, node)
	if apierrors.IsNotFound(err) {
		err = r.APIReader.Get(ctx, req.NamespacedName, node)
	}
	switch {
	case apierrors.IsNotFound(err):
		return ctrl.Result{}, r.reconcileDeleted(ctx, req.Name)
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("reading node: %w", err)
	}
	r.markSeen(node.Name, true)

	sn, ok := r.Watcher.Node(node.Name)
	if !ok {
		// Slurm lists no such node: nothing is known of it, so nothing is changed (a
		// condition or taint of ours stays until Slurm reports the node again).
		return ctrl.Result{}, nil
	}
	// Each direction on its own: Slurm unreachable for a drain still lets the last state
	// seen reach the node, and the other way round.
	drainErr := r.syncDrain(ctx, node, &sn, drainReason(node, r.DrainOnConditions))
	if err := r.syncConditions(ctx, node, &sn); err != nil {
		return ctrl.Result{}, errors.Join(drainErr, err)
	}
	return ctrl.Result{}, errors.Join(drainErr, r.syncTaint(ctx, node, &sn))
}

// syncDrain makes the Slurm node's drain match want (see decideDrain). A change is
// decided twice: on the watcher's cache, then again on a fresh read from slurmctld just
// before acting, so a cache a poll old never undoes a drain an admin has just set, and
// never drains twice.
func (r *Reconciler) syncDrain(ctx context.Context, node *v1.Node, cached *slurm.Node, want string) error {
	if decideDrain(want, cached) == keepDrain {
		r.lagDone(metrics.ToSlurm, cached.Name, false)
		return nil
	}
	r.lagStart(metrics.ToSlurm, cached.Name)
	sn, err := r.Slurm.GetNode(ctx, cached.Name)
	switch {
	case slurm.IsNotFound(err):
		return nil // gone meanwhile; the watcher reports it
	case err != nil:
		return fmt.Errorf("reading Slurm node %s: %w", cached.Name, err)
	}
	logger := log.FromContext(ctx)
	switch decideDrain(want, sn) {
	case setDrain:
		logger.Info("Draining Slurm node", "slurmNode", sn.Name, "reason", want, "was", sn.StateString())
		err = r.Slurm.DrainNode(ctx, sn.Name, want)
		if err == nil {
			r.Recorder.Eventf(node, nil, v1.EventTypeNormal, wellknown.EventDrainedInSlurm, "Drain",
				"Drained Slurm node %s (was %s): %q", sn.Name, sn.StateString(), want)
		}
	case clearDrain:
		logger.Info("Undraining Slurm node", "slurmNode", sn.Name, "reason", sn.Reason)
		err = r.Slurm.UndrainNode(ctx, sn.Name)
		if err == nil {
			r.Recorder.Eventf(node, nil, v1.EventTypeNormal, wellknown.EventUndrainedInSlurm, "Undrain",
				"Undrained Slurm node %s, drained by kubeslurm for %q", sn.Name, sn.Reason)
		}
	default:
		r.lagDone(metrics.ToSlurm, sn.Name, false)
		return nil
	}
	if slurm.IsRejected(err) {
		// Slurm's own verdict; retried on the next change or resync, not in a hot loop.
		r.Recorder.Eventf(node, nil, v1.EventTypeWarning, wellknown.EventSlurmNodeUpdateFailed, "Drain", "%v", err)
		return nil
	}
	if err != nil {
		return err
	}
	r.lagDone(metrics.ToSlurm, sn.Name, true)
	r.Watcher.Trigger()
	return nil
}

// syncConditions writes the Slurm node's state flags as SlurmNode* conditions. The
// strategic merge patch names only our condition types, so the kubelet's (here kwok's)
// conditions and heartbeats are never overwritten, even from a stale cache.
func (r *Reconciler) syncConditions(ctx context.Context, node *v1.Node, sn *slurm.Node) error {
	conds, changed := mergeConditions(node.Status.Conditions, slurmConditions(sn), metav1.NewTime(r.clock()))
	if !changed {
		return nil
	}
	orig := node.DeepCopy()
	node.Status.Conditions = conds
	if err := r.Client.Status().Patch(ctx, node, client.StrategicMergeFrom(orig)); err != nil {
		return fmt.Errorf("writing Slurm node conditions: %w", err)
	}
	return nil
}

// syncTaint puts wellknown.SlurmDrainTaint on a node Slurm drained or marked down, and
// lifts it when Slurm reports the node back in service. Taints are one atomic list, so
// the patch carries the resourceVersion: a concurrent change of them is never lost.
func (r *Reconciler) syncTaint(ctx context.Context, node *v1.Node, sn *slurm.Node) error {
	var have *v1.Taint
	for i := range node.Spec.Taints {
		if node.Spec.Taints[i].Key == wellknown.SlurmDrainTaint {
			have = &node.Spec.Taints[i]
			break
		}
	}
	want := r.TaintEffect != "" && wantTaint(sn, have != nil)
	if (have == nil && !want) || (want && have != nil && have.Effect == r.TaintEffect) {
		r.lagDone(metrics.ToKubernetes, node.Name, false)
		return nil
	}
	orig := node.DeepCopy()
	taints := make([]v1.Taint, 0, len(node.Spec.Taints)+1)
	for _, t := range node.Spec.Taints {
		if t.Key != wellknown.SlurmDrainTaint {
			taints = append(taints, t)
		}
	}
	taint := v1.Taint{Key: wellknown.SlurmDrainTaint, Effect: r.TaintEffect}
	if want {
		if r.TaintEffect == v1.TaintEffectNoExecute {
			taint.TimeAdded = &metav1.Time{Time: r.clock()}
		}
		taints = append(taints, taint)
	}
	node.Spec.Taints = taints
	if err := r.Client.Patch(ctx, node, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("writing taint %s: %w", wellknown.SlurmDrainTaint, err)
	}
	r.lagDone(metrics.ToKubernetes, node.Name, true)
	why := fmt.Sprintf("Slurm node %s is %s", sn.Name, strings.Join(sn.StateFlags(), "+"))
	if sn.Reason != "" {
		why += fmt.Sprintf(" (%q)", sn.Reason)
	}
	if want {
		r.Recorder.Eventf(node, nil, v1.EventTypeNormal, wellknown.EventSlurmTaintAdded, "Taint",
			"%s; tainted %s", why, taint.ToString())
	} else {
		r.Recorder.Eventf(node, nil, v1.EventTypeNormal, wellknown.EventSlurmTaintRemoved, "Untaint",
			"%s; removed taint %s", why, wellknown.SlurmDrainTaint)
	}
	return nil
}

// reconcileDeleted handles a node the API server says does not exist. Its Slurm node is
// removed only if it was ours to pair (seen as a Kubernetes node, or marked by us), is
// dynamic, and is idle; a busy one is drained (with deletedReason, unless someone else
// drained it) and removed once idle: the watcher re-enqueues it when its jobs end. No job
// is ever cancelled.
func (r *Reconciler) reconcileDeleted(ctx context.Context, name string) error {
	r.lagDone(metrics.ToKubernetes, name, false) // no node to taint
	sn, ok := r.Watcher.Node(name)
	if !ok {
		r.markSeen(name, false)
		return nil
	}
	marked := sn.Has(slurm.NodeDrain) && sameReason(sn.Reason, deletedReason(name))
	if !r.wasSeen(name) && !marked {
		return nil
	}
	logger := log.FromContext(ctx).WithValues("slurmNode", name)
	if !sn.Has(slurm.NodeDynamic) {
		logger.Info("Kubernetes node deleted; its Slurm node is not dynamic, so it stays", "state", sn.StateString())
		r.markSeen(name, false)
		return nil
	}
	stub := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if sn.Busy() {
		logger.Info("Kubernetes node deleted; its Slurm node is busy, removing it once idle", "state", sn.StateString())
		return r.syncDrain(ctx, stub, &sn, deletedReason(name))
	}
	if !sn.Removable() {
		return nil // a state Slurm does not know is not idle; the watcher reports the next one
	}
	fresh, err := r.Slurm.GetNode(ctx, name)
	switch {
	case slurm.IsNotFound(err):
		r.markSeen(name, false)
		return nil
	case err != nil:
		return fmt.Errorf("reading Slurm node %s: %w", name, err)
	case !fresh.Removable():
		return nil // busy again since the last poll: the watcher brings it back here
	}
	logger.Info("Kubernetes node deleted; removing its idle dynamic Slurm node", "state", fresh.StateString())
	err = r.Slurm.DeleteNode(ctx, name)
	if slurm.IsRejected(err) {
		r.Recorder.Eventf(stub, nil, v1.EventTypeWarning, wellknown.EventSlurmNodeUpdateFailed, "Remove", "%v", err)
		return nil
	}
	if err != nil {
		return err
	}
	r.Recorder.Eventf(stub, nil, v1.EventTypeNormal, wellknown.EventRemovedFromSlurm, "Remove",
		"Kubernetes node deleted; removed idle dynamic Slurm node %s (was %s)", name, fresh.StateString())
	r.markSeen(name, false)
	r.Watcher.Trigger()
	return nil
}

func (r *Reconciler) clock() time.Time {
	if r.now != nil {
		return r.now()
	}
	return time.Now()
}

// lagStart notes when a change to carry across was first noticed (later calls keep it).
func (r *Reconciler) lagStart(direction, node string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.since == nil {
		r.since = map[lagKey]time.Time{}
	}
	k := lagKey{direction, node}
	if _, ok := r.since[k]; !ok {
		r.since[k] = r.clock()
	}
}

// lagDone ends a change: applied (the lag is observed) or found not needed.
func (r *Reconciler) lagDone(direction, node string, applied bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := lagKey{direction, node}
	if t, ok := r.since[k]; ok && applied {
		metrics.DrainSyncLag.WithLabelValues(direction).Observe(r.clock().Sub(t).Seconds())
	}
	delete(r.since, k)
}

// noteSlurmChanges times each Slurm node change from the poll that saw it to its taint
// (syncTaint), for metrics.DrainSyncLag.
func (r *Reconciler) noteSlurmChanges(c slurm.Change) {
	for _, name := range c.Nodes {
		r.lagStart(metrics.ToKubernetes, name)
	}
}

func (r *Reconciler) markSeen(name string, seen bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = map[string]bool{}
	}
	if seen {
		r.seen[name] = true
	} else {
		delete(r.seen, name)
	}
}

func (r *Reconciler) wasSeen(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen[name]
}

// relevantChange filters node updates down to what the reconcile reads: the kubelet's
// heartbeats (every node, every few seconds) change only condition times.
func relevantChange(o, n *v1.Node) bool {
	if o.Spec.Unschedulable != n.Spec.Unschedulable ||
		o.Annotations[wellknown.DrainReasonAnnotation] != n.Annotations[wellknown.DrainReasonAnnotation] ||
		!equality.Semantic.DeepEqual(o.Spec.Taints, n.Spec.Taints) ||
		len(o.Status.Conditions) != len(n.Status.Conditions) {
		return true
	}
	for i, c := range o.Status.Conditions {
		d := n.Status.Conditions[i]
		if c.Type != d.Type || c.Status != d.Status || c.Reason != d.Reason || c.Message != d.Message {
			return true
		}
	}
	return false
}

// SetupWithManager watches nodes and the watcher's node changes, both keyed by name.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.NotSyncedRetry == 0 {
		r.NotSyncedRetry = 2 * time.Second
	}
	nodeEvents := make(chan event.TypedGenericEvent[*v1.Node], 1024)
	r.Watcher.OnChange(r.noteSlurmChanges)
	r.Watcher.OnChange(func(c slurm.Change) {
		names := c.Nodes
		if c.Resync {
			names = append(slices.Clone(names), r.Watcher.NodeNames()...)
		}
		for _, name := range names {
			nodeEvents <- event.TypedGenericEvent[*v1.Node]{Object: &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}}
		}
	})
	changed := predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*v1.Node)
		n, ok2 := e.ObjectNew.(*v1.Node)
		return !ok1 || !ok2 || relevantChange(o, n)
	}}
	return ctrl.NewControllerManagedBy(mgr).
		Named("node-slurmnode").
		For(&v1.Node{}, builder.WithPredicates(changed)).
		WatchesRawSource(source.Channel(nodeEvents, &handler.TypedEnqueueRequestForObject[*v1.Node]{})).
		Complete(r)
}
