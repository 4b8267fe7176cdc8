package slurmcluster

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	slurmv1 "github.com/kubeslurm/kubeslurm/api/v1alpha1"
	"github.com/kubeslurm/kubeslurm/pkg/slurm"
)

// observePoll: how often a cluster's Slurm node states are read into its status.
const observePoll = 30 * time.Second

// slurmClients keeps one slurmrestd client per URL, and forgets those no cluster has
// used for a while (a slurmrestd pod's address changes with each new pod).
type slurmClients struct {
	mu      sync.Mutex
	clients map[string]slurm.Client
	used    map[string]time.Time
}

// clientIdle: a client unused this long (ten observe passes of its cluster) is dropped.
const clientIdle = 10 * observePoll

// get returns url's client, made by newClient when missing, and drops the idle ones.
func (s *slurmClients) get(url string, now time.Time, newClient func() (slurm.Client, error)) (slurm.Client, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for u, t := range s.used {
		if now.Sub(t) > clientIdle {
			delete(s.clients, u)
			delete(s.used, u)
		}
	}
	if s.used == nil {
		s.used = map[string]time.Time{}
	}
	if sc, ok := s.clients[url]; ok {
		s.used[url] = now
		return sc, nil
	}
	sc, err := newClient()
	if err != nil {
		return nil, err
	}
	if s.clients == nil {
		s.clients = map[string]slurm.Client{}
	}
	s.clients[url], s.used[url] = sc, now
	return sc, nil
}

// clientFor is the client of the cluster's slurmrestd, signed with the controller's key.
// It talks to a ready slurmrestd pod by its address (the Service's name needs cluster DNS,
// which a controller outside the cluster's network may not have).
func (r *Reconciler) clientFor(ctx context.Context, c *slurmv1.SlurmCluster) (slurm.Client, error) {
	pods := &v1.PodList{}
	if err := r.Client.List(ctx, pods, client.InNamespace(c.Namespace), client.MatchingLabels(componentLabels(c, componentSlurmrestd))); err != nil {
		return nil, err
	}
	addr := ""
	for i := range pods.Items {
		if p := &pods.Items[i]; p.DeletionTimestamp == nil && isReady(p) && p.Status.PodIP != "" {
			addr = p.Status.PodIP
			break
		}
	}
	if addr == "" {
		return nil, nil
	}
	url := fmt.Sprintf("http://%s:%d", addr, restAPIPort(c))
	return r.slurm.get(url, time.Now(), func() (slurm.Client, error) {
		return slurm.NewClient(slurm.Config{URL: url, User: "slurm", RSAKey: r.Identity.Key, RSAKeyID: r.Identity.KeyID,
			TokenLifetime: 10 * time.Minute, Timeout: 5 * time.Second})
	})
}

// observeSlurm reads the cluster's Slurm node states into status.nodes and nodeSummary,
// through its slurmrestd, prunes the records lost workers left (prune.go; want: the workers
// the NodeSets ask for), and says whether to look again later. Without the controller's
// identity or a slurmrestd nothing is read; a failed read keeps the last summary (it is
// logged): an unreadable Slurm is not an empty one.
func (r *Reconciler) observeSlurm(ctx context.Context, c *slurmv1.SlurmCluster, status *slurmv1.SlurmClusterStatus, want []worker) bool {
	if r.Identity == nil || c.Spec.RestAPI == nil {
		return false
	}
	sc, err := r.clientFor(ctx, c)
	if err == nil && sc == nil {
		return true // slurmrestd not ready yet
	}
	var nodes []slurm.Node
	if err == nil {
		nodes, err = sc.ListNodes(ctx)
	}
	if err != nil {
		log.FromContext(ctx).Info("cannot read the cluster's Slurm nodes; status.nodes kept", "err", err.Error())
		return true
	}
	// One list of the worker pods for pruning and busy labels; without it, neither (fail
	// closed: unknown pods are not absent ones).
	pods, err := r.listWorkerPods(ctx, c)
	if err != nil {
		log.FromContext(ctx).Info("cannot list worker pods; no pruning, busy labels kept", "err", err.Error())
	} else if nodes, err = r.pruneStaleNodes(ctx, c, sc, nodes, want, pods); err != nil {
		log.FromContext(ctx).Info("cannot prune lost workers' Slurm nodes", "err", err.Error())
	}
	status.Nodes = summarize(nodes)
	status.NodeSummary = summaryLine(status.Nodes)
	if pods != nil {
		if err := r.markBusyWorkers(ctx, nodes, pods); err != nil {
			log.FromContext(ctx).Info("cannot mark busy workers", "err", err.Error())
		}
	}
	return true
}

// markBusyWorkers labels each worker pod busy=true while its Slurm node runs jobs (and
// removes the label when it does not): the cluster's PodDisruptionBudget (nodeset.go) lets
// no busy worker be evicted. A worker whose node Slurm does not list is left as it is.
func (r *Reconciler) markBusyWorkers(ctx context.Context, nodes []slurm.Node, pods *v1.PodList) error {
	busy := map[string]bool{}
	for _, n := range nodes {
		busy[n.Name] = n.Busy()
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		b, known := busy[p.Annotations[slurmNodeAnnotation]]
		if !known || p.DeletionTimestamp != nil || (p.Labels[BusyLabel] == "true") == b {
			continue
		}
		patch := client.MergeFrom(p.DeepCopy())
		if b {
			p.Labels[BusyLabel] = "true"
		} else {
			delete(p.Labels, BusyLabel)
		}
		if err := r.Client.Patch(ctx, p, patch); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("labelling worker pod %s: %w", p.Name, err)
		}
	}
	return nil
}

// listWorkerPods lists the cluster's worker pods, in any phase, terminating ones too.
func (r *Reconciler) listWorkerPods(ctx context.Context, c *slurmv1.SlurmCluster) (*v1.PodList, error) {
	pods := &v1.PodList{}
	if err := r.Client.List(ctx, pods, client.InNamespace(c.Namespace), client.MatchingLabels(componentLabels(c, componentSlurmd))); err != nil {
		return nil, fmt.Errorf("listing worker pods: %w", err)
	}
	return pods, nil
}

// summarize counts nodes by their main state; a drained or down node counts there only.
func summarize(nodes []slurm.Node) slurmv1.NodeStateSummary {
	var s slurmv1.NodeStateSummary
	for i := range nodes {
		has := nodes[i].Has
		switch {
		case has(slurm.NodeDown):
			s.Down++
		case has(slurm.NodeDrain):
			s.Drained++
		case has(slurm.NodeMixed):
			s.Mixed++
		case has(slurm.NodeAllocated):
			s.Allocated++
		case has(slurm.NodeIdle):
			s.Idle++
		}
	}
	return s
}

// summaryLine is the summary for kubectl get, e.g. "idle=3 alloc=1"; "none" with no node.
func summaryLine(s slurmv1.NodeStateSummary) string {
	var parts []string
	for _, p := range []struct {
		name string
		n    int32
	}{{"idle", s.Idle}, {"mixed", s.Mixed}, {"alloc", s.Allocated}, {"drain", s.Drained}, {"down", s.Down}} {
		if p.n > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", p.name, p.n))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}
