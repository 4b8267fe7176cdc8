// Package topology keeps Slurm's block topology (topology/block) in step with Kubernetes
// node labels: it renders topology.yaml from every node (pkg/topology), writes it where
// slurmctld reads it only when its content changes, and then has slurmctld re-read it
// (slurmrestd's reconfigure). A Slurm node carrying its own topology setting (slurmd -Z
// --conf Topology=..., which overrides the file) is updated live to its labelled block.
// Reconcile is level-based over the whole cluster: one key, every node read each time;
// before a reconfigure the nodes' own settings are read from slurmctld, not the watcher.
package topology

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/kubeslurm/kubeslurm/pkg/slurm"
	"github.com/kubeslurm/kubeslurm/pkg/topology"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

// Slurm is what the reconciler asks of Slurm (a subset of slurm.Client).
type Slurm interface {
	ListNodes(ctx context.Context) ([]slurm.Node, error)
	SetNodeTopology(ctx context.Context, name, topology string) error
	Reconfigure(ctx context.Context) error
}

// SlurmNodes is the watcher's view of Slurm's nodes.
type SlurmNodes interface {
	Synced() bool
	NodeNames() []string
	Node(name string) (slurm.Node, bool)
}

// Reconciler writes topology.yaml and keeps Slurm's nodes in their blocks.
type Reconciler struct {
	Client   client.Client
	Slurm    Slurm
	Nodes    SlurmNodes
	Recorder events.EventRecorder
	Config   topology.Config
	// File is topology.yaml in slurmctld's configuration directory.
	File string
	// NotSyncedRetry is how soon to retry while Slurm has not been read yet.
	NotSyncedRetry time.Duration
	// MinReconfigureInterval spaces reconfigures (each re-executes slurmctld): nodes that
	// join one after another are taken in one re-read.
	MinReconfigureInterval time.Duration

	mu sync.Mutex
	// applied is the content slurmctld last re-read on our request; nil until the first
	// reconfigure of this process, so a restarted controller makes Slurm read the file once.
	applied         []byte
	lastReconfigure time.Time
	// blocks are the nodes' blocks as last applied, to tell each moved node.
	blocks map[string]string
	// invalid holds the last invalid-name error told per node, to tell it once.
	invalid map[string]string
}

// request is the one key: the topology is a function of every node at once.
var request = reconcile.Request{NamespacedName: types.NamespacedName{Name: "topology"}}

func (r *Reconciler) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	logger := log.FromContext(ctx)
	// Fail closed: Slurm-only nodes must be in a block too (a node outside every block can
	// run no job), so nothing is written before Slurm's nodes are known.
	if !r.Nodes.Synced() {
		return ctrl.Result{RequeueAfter: r.NotSyncedRetry}, nil
	}
	var list v1.NodeList
	if err := r.Client.List(ctx, &list); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing nodes: %w", err)
	}
	nodes := make([]topology.Node, 0, len(list.Items))
	byName := map[string]*v1.Node{}
	for i := range list.Items {
		n := &list.Items[i]
		byName[n.Name] = n
		nodes = append(nodes, topology.Node{Name: n.Name, Labels: n.Labels, Annotations: n.Annotations})
	}
	// Blocks that nodes' own settings name stay in the file until those settings are moved
	// (below): slurmctld 26.05 exits (fatal) on a reconfigure that drops such a block.
	settings := r.cachedSettings()
	topo, content, err := r.build(byName, nodes, settings)
	if err != nil {
		return ctrl.Result{}, err
	}
	// The watcher can lag a setting just changed (by this reconciler or an admin): a block
	// dropped on its word can still be named in slurmctld, and a setting moved on its word
	// may have moved already. So every change is decided on slurmctld's own reading.
	// Unreadable means nothing is changed.
	fromSlurm := false
	readSlurm := func() error {
		fresh, err := r.Slurm.ListNodes(ctx)
		if err != nil {
			return fmt.Errorf("reading Slurm's nodes before a topology change: %w", err)
		}
		settings, fromSlurm = settingsOf(fresh), true
		return nil
	}
	r.mu.Lock()
	applied, last := r.applied, r.lastReconfigure
	r.mu.Unlock()
	if !bytes.Equal(content, applied) {
		if wait := r.MinReconfigureInterval - time.Since(last); wait > 0 {
			return ctrl.Result{RequeueAfter: wait}, nil
		}
		if err := readSlurm(); err != nil {
			return ctrl.Result{}, err
		}
		if topo, content, err = r.build(byName, nodes, settings); err != nil {
			return ctrl.Result{}, err
		}
	}
	if !bytes.Equal(content, applied) {
		if err := writeIfChanged(r.File, content); err != nil {
			return ctrl.Result{}, err
		}
		if err := r.Slurm.Reconfigure(ctx); err != nil {
			return ctrl.Result{}, fmt.Errorf("wrote %s but Slurm did not re-read it: %w", r.File, err)
		}
		logger.Info("Slurm topology updated", "file", r.File, "blocks", len(topo.Blocks))
		r.mu.Lock()
		r.applied, r.lastReconfigure = content, time.Now()
		r.mu.Unlock()
		r.tellMoved(byName, topo)
	}

	// A node's own setting overrides the file: bring it to its block (live, no reconfigure;
	// the block exists now that Slurm has read the file). The block it leaves goes from
	// the file on a later pass, once slurmctld shows the new setting.
	moves := r.settingMoves(topo, settings)
	if len(moves) > 0 && !fromSlurm {
		if err := readSlurm(); err != nil {
			return ctrl.Result{}, err
		}
		moves = r.settingMoves(topo, settings)
	}
	var failed []error
	for _, name := range slices.Sorted(maps.Keys(moves)) {
		own, want := settings[name], moves[name]
		if err := r.Slurm.SetNodeTopology(ctx, name, want); err != nil {
			failed = append(failed, err)
			continue
		}
		logger.Info("Slurm node topology set", "node", name, "from", own, "to", want)
		if k := byName[name]; k != nil {
			r.Recorder.Eventf(k, nil, v1.EventTypeNormal, wellknown.EventTopologyBlockChanged, "Topology",
				"Slurm node's own topology %s replaced by %s", own, want)
		}
	}
	return ctrl.Result{}, errors.Join(failed...)
}

// settingMoves is, for each node whose own setting names another block than topo gives
// it, the setting it should have.
func (r *Reconciler) settingMoves(topo topology.Topology, settings map[string]string) map[string]string {
	out := map[string]string{}
	for name, own := range settings {
		if own == "" {
			continue
		}
		block, _ := topo.BlockOfNode(name)
		if want := r.Config.NodeTopology(block); own != want {
			out[name] = want
		}
	}
	return out
}

// cachedSettings is each Slurm node's own topology setting ("" when it follows the
// file), as the watcher last saw it.
func (r *Reconciler) cachedSettings() map[string]string {
	out := map[string]string{}
	for _, name := range r.Nodes.NodeNames() {
		if n, ok := r.Nodes.Node(name); ok {
			out[name] = n.Topology
		}
	}
	return out
}

// settingsOf is cachedSettings for nodes read from slurmctld.
func settingsOf(nodes []slurm.Node) map[string]string {
	out := make(map[string]string, len(nodes))
	for _, n := range nodes {
		out[n.Name] = n.Topology
	}
	return out
}

// build renders the topology of the Kubernetes nodes and the Slurm nodes in settings,
// keeping every block a node's own setting names.
func (r *Reconciler) build(byName map[string]*v1.Node, nodes []topology.Node, settings map[string]string) (topology.Topology, []byte, error) {
	var keep []string
	for _, own := range settings {
		if b, ok := r.Config.BlockOfSetting(own); ok {
			keep = append(keep, b)
		}
	}
	topo, errs := topology.Build(r.Config, nodes, slices.Collect(maps.Keys(settings)), keep)
	r.tellInvalid(byName, errs)
	content, err := topo.Render()
	return topo, content, err
}

// tellMoved records an event on each Kubernetes node whose block changed.
func (r *Reconciler) tellMoved(byName map[string]*v1.Node, topo topology.Topology) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := map[string]string{}
	for _, b := range topo.Blocks {
		for _, n := range b.Nodes {
			now[n] = b.Name
			if prev := r.blocks[n]; prev != b.Name && byName[n] != nil {
				note := "in Slurm block " + b.Name
				if prev != "" {
					note = "moved from Slurm block " + prev + " to " + b.Name
				}
				r.Recorder.Eventf(byName[n], nil, v1.EventTypeNormal, wellknown.EventTopologyBlockChanged, "Topology", note)
			}
		}
	}
	r.blocks = now
}

// tellInvalid records a warning, once per distinct error, on each node whose block name
// could not be used.
func (r *Reconciler) tellInvalid(byName map[string]*v1.Node, errs []topology.NodeError) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := map[string]string{}
	for _, e := range errs {
		msg := e.Err.Error()
		now[e.Node] = msg
		if r.invalid[e.Node] != msg && byName[e.Node] != nil {
			r.Recorder.Eventf(byName[e.Node], nil, v1.EventTypeWarning, wellknown.EventInvalidTopologyBlock, "Topology",
				"%s; the node is in block %s", msg, r.Config.DefaultBlock)
		}
	}
	r.invalid = now
}

// writeIfChanged replaces the file atomically (slurmctld never reads half a file), and
// only when its content differs.
func writeIfChanged(path string, content []byte) error {
	if cur, err := os.ReadFile(path); err == nil && bytes.Equal(cur, content) {
		return nil
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".topology-*.yaml")
	if err != nil {
		return fmt.Errorf("writing topology file: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(content); err != nil {
		tmp.Close()
		return fmt.Errorf("writing topology file: %w", err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("writing topology file: %w", err)
	}
	return nil
}

// SetupWithManager watches nodes (created, deleted, labels or annotations changed) and
// Slurm's nodes (a node that registers or goes, or changes its own topology).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, watcher *slurm.Watcher) error {
	if r.NotSyncedRetry == 0 {
		r.NotSyncedRetry = 2 * time.Second
	}
	if r.MinReconfigureInterval == 0 {
		r.MinReconfigureInterval = 2 * time.Second
	}
	slurmEvents := make(chan event.TypedGenericEvent[*v1.Node], 1)
	watcher.OnChange(func(c slurm.Change) {
		if len(c.Nodes) == 0 && !c.Resync {
			return
		}
		select { // one pending event is enough: the reconcile reads everything
		case slurmEvents <- event.TypedGenericEvent[*v1.Node]{Object: &v1.Node{}}:
		default:
		}
	})
	one := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{request}
	})
	oneTyped := handler.TypedEnqueueRequestsFromMapFunc(func(context.Context, *v1.Node) []reconcile.Request {
		return []reconcile.Request{request}
	})
	placement := predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		return !maps.Equal(e.ObjectOld.GetLabels(), e.ObjectNew.GetLabels()) ||
			!maps.Equal(e.ObjectOld.GetAnnotations(), e.ObjectNew.GetAnnotations())
	}}
	return ctrl.NewControllerManagedBy(mgr).
		Named("topology").
		Watches(&v1.Node{}, one, builder.WithPredicates(placement)).
		WatchesRawSource(source.Channel(slurmEvents, oneTyped)).
		Complete(r)
}
