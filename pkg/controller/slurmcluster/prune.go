package slurmcluster

import (
	"context"
	"fmt"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	slurmv1 "github.com/kubeslurm/kubeslurm/api/v1alpha1"
	"github.com/kubeslurm/kubeslurm/pkg/slurm"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

// DefaultPruneDownAfterSeconds is NodeSetSpec.PruneDownAfterSeconds when unset.
const DefaultPruneDownAfterSeconds = 600

// staleNode is a Slurm node record left by a worker lost without its wrapper.
type staleNode struct {
	node slurm.Node
	set  string
}

// staleNodes picks the Slurm nodes whose records a lost worker left: a worker's wrapper
// deletes its node as the pod goes, but not when it never ran (pod force-deleted with its
// node gone, slurmd killed), and the dynamic node then stays DOWN forever. A node is stale
// when all of these hold:
//
//   - it is a worker of one of the cluster's NodeSets: a dynamic node (DYNAMIC_NORM: a
//     node of slurm.conf would come back on the next restart, and is never ours) with the
//     set's name among its features (slurmd -Z registers it so; slurm.conf's NodeSet selects
//     by it), and in Replicas mode named <cluster>-<set>-<ordinal>. A DaemonSet worker is
//     named after its Kubernetes node, which may be gone, so any name is.
//   - Slurm itself says slurmd is gone: DOWN and NOT_RESPONDING both. DOWN alone may be an
//     admin's `scontrol update state=down` of a node that still answers.
//   - no job holds it (no ALLOCATED, MIXED or COMPLETING; Removable).
//   - no worker pod stands for it, in any phase or terminating, and no NodeSet asks for a
//     worker of its name (live): a worker about to start takes its record back.
//   - it has been so for its set's grace: counted from Slurm's reason_changed_at, which
//     Slurm sets when it marks the node down for not responding (or earlier, when the
//     node had a reason already, e.g. the wrapper's drain). No timestamp, no pruning.
func staleNodes(c *slurmv1.SlurmCluster, nodes []slurm.Node, live map[string]bool, now time.Time) []staleNode {
	var out []staleNode
	for _, n := range nodes {
		set := workerSetOf(c, &n)
		if set == nil || live[n.Name] || !n.Has(slurm.NodeDown) || !n.Has(slurm.NodeNotResponding) || !n.Removable() {
			continue
		}
		grace := pruneGrace(set)
		if grace <= 0 || n.ReasonTime.IsZero() || now.Sub(n.ReasonTime) < grace {
			continue
		}
		out = append(out, staleNode{node: n, set: set.Name})
	}
	return out
}

// workerSetOf is the NodeSet a dynamic node would be a worker of, or nil.
func workerSetOf(c *slurmv1.SlurmCluster, n *slurm.Node) *slurmv1.NodeSetSpec {
	if !n.Has(slurm.NodeDynamic) {
		return nil
	}
	for i := range c.Spec.NodeSets {
		set := &c.Spec.NodeSets[i]
		if !n.HasFeature(set.Name) {
			continue
		}
		if set.Mode == slurmv1.NodeSetReplicas && !isOrdinalName(n.Name, c.Name+"-"+set.Name+"-") {
			continue
		}
		return set
	}
	return nil
}

// isOrdinalName: name is prefix followed by a decimal ordinal.
func isOrdinalName(name, prefix string) bool {
	o, ok := strings.CutPrefix(name, prefix)
	return ok && o != "" && strings.Trim(o, "0123456789") == "" && (o == "0" || o[0] != '0')
}

func pruneGrace(set *slurmv1.NodeSetSpec) time.Duration {
	s := int64(DefaultPruneDownAfterSeconds)
	if set.PruneDownAfterSeconds != nil {
		s = *set.PruneDownAfterSeconds
	}
	return time.Duration(s) * time.Second
}

// pruneStaleNodes deletes the stale node records (staleNodes) through the cluster's
// slurmrestd and returns the nodes left; pods are the cluster's worker pods (without their
// list nothing is pruned). slurmctld itself refuses to delete a node that has jobs.
func (r *Reconciler) pruneStaleNodes(ctx context.Context, c *slurmv1.SlurmCluster, sc slurm.Client, nodes []slurm.Node, want []worker, pods *v1.PodList) ([]slurm.Node, error) {
	live := map[string]bool{}
	for _, w := range want {
		live[w.slurm] = true
	}
	for i := range pods.Items {
		live[pods.Items[i].Annotations[slurmNodeAnnotation]] = true
	}
	pruned := map[string]bool{}
	var errs, notes []string
	for _, s := range staleNodes(c, nodes, live, time.Now()) {
		n := s.node
		if err := sc.DeleteNode(ctx, n.Name); err != nil {
			errs = append(errs, err.Error())
			continue
		}
		pruned[n.Name] = true
		since := n.ReasonTime.UTC().Format(time.RFC3339)
		log.FromContext(ctx).Info("pruned a lost worker's Slurm node", "node", n.Name, "nodeSet", s.set,
			"state", n.StateString(), "reason", n.Reason, "since", since)
		notes = append(notes, fmt.Sprintf("Slurm node %s of NodeSet %s: %s since %s (reason %q), no worker pod, no job",
			n.Name, s.set, n.StateString(), since, n.Reason))
	}
	// One event for the pass: events of one pass on the cluster share a series, which
	// shows only its first note.
	if len(notes) > 0 {
		r.Recorder.Eventf(c, nil, v1.EventTypeNormal, wellknown.EventSlurmNodePruned, "PruneNode", "%s", prunedNote(notes))
	}
	left := make([]slurm.Node, 0, len(nodes))
	for _, n := range nodes {
		if !pruned[n.Name] {
			left = append(left, n)
		}
	}
	if len(errs) > 0 {
		return left, fmt.Errorf("pruning Slurm nodes: %s", strings.Join(errs, "; "))
	}
	return left, nil
}

// maxPrunedNote keeps an event's note under the API's 1 kB limit; the log has every node.
const maxPrunedNote = 900

// prunedNote is the event note for the nodes pruned in one pass (one line each in notes).
func prunedNote(notes []string) string {
	if len(notes) == 1 {
		return "Deleted " + notes[0]
	}
	out := fmt.Sprintf("Deleted %d Slurm nodes", len(notes))
	for i, n := range notes {
		if len(out)+len(n)+2 > maxPrunedNote {
			return out + fmt.Sprintf("; and %d more (the controller's log names each)", len(notes)-i)
		}
		out += "; " + n
	}
	return out
}
