// Package jobmapping is the DCGM job mapping agent: on one GPU node it writes the DCGM
// exporter's HPC job mapping files (pkg/dcgmjobmap) for the placeholder jobs of the pods
// bound there, as the Slurm prolog/epilog do for batch jobs (Slurm runs neither for
// placeholder jobs). It reads what the controller writes on each pod: the job id and the
// GPU indices Slurm gave the job on the pod's node.
package jobmapping

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/kubeslurm/kubeslurm/pkg/dcgmjobmap"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

// Reconciler keeps the mapping directory of one node in step with the pods bound to it.
// Every change of any of them recomputes the whole mapping (one request, the node's name).
type Reconciler struct {
	// Client reads pods from the manager's cache, which holds the node's pods only. The
	// manager starts the controller only once that cache has synced: no pod list, no change.
	Client client.Client
	Node   string
	Dir    string
	// Resync rewrites the directory this often even without a change (repairs a file edited
	// or removed by hand).
	Resync time.Duration
}

func (r *Reconciler) Reconcile(ctx context.Context, _ reconcile.Request) (ctrl.Result, error) {
	logger := log.FromContext(ctx)
	var pods v1.PodList
	if err := r.Client.List(ctx, &pods); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing the pods of node %s: %w", r.Node, err)
	}
	want, problems := Desired(pods.Items, r.Node)
	for _, p := range problems {
		logger.Info("Pod left out of the DCGM job mapping", "reason", "InvalidJobMappingAnnotation", "problem", p)
	}
	if err := dcgmjobmap.Sync(r.Dir, want); err != nil {
		return ctrl.Result{}, fmt.Errorf("DCGM job mapping in %s: %w", r.Dir, err)
	}
	logger.V(1).Info("DCGM job mapping synced", "dir", r.Dir, "mapping", want)
	return ctrl.Result{RequeueAfter: r.Resync}, nil
}

// Desired is the mapping of the node's pods: for each pod bound to node that has not
// ended and carries its job id and GPU indices, the job id under each of its GPUs.
// problems names the pods left out for an unreadable id or index list.
func Desired(pods []v1.Pod, node string) (m dcgmjobmap.Mapping, problems []string) {
	m = dcgmjobmap.Mapping{}
	for i := range pods {
		p := &pods[i]
		idx, hasGPUs := p.Annotations[wellknown.GPUIndicesAnnotation]
		if p.Spec.NodeName != node || !hasGPUs ||
			p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed {
			continue
		}
		name := p.Namespace + "/" + p.Name
		id, err := strconv.Atoi(p.Labels[wellknown.JobIDLabel])
		if err != nil || id <= 0 {
			problems = append(problems, fmt.Sprintf("%s: label %s=%q is no Slurm job id", name, wellknown.JobIDLabel, p.Labels[wellknown.JobIDLabel]))
			continue
		}
		gpus, err := parseIndices(idx)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: annotation %s=%q: %v", name, wellknown.GPUIndicesAnnotation, idx, err))
			continue
		}
		for _, g := range gpus {
			m[g] = append(m[g], id)
		}
	}
	return m, problems
}

// parseIndices reads "0,1" as the controller writes it.
func parseIndices(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		i, err := strconv.Atoi(f)
		if err != nil || i < 0 {
			return nil, fmt.Errorf("%q is no GPU index", f)
		}
		out = append(out, i)
	}
	return out, nil
}

func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Resync == 0 {
		r.Resync = time.Minute
	}
	request := reconcile.Request{NamespacedName: types.NamespacedName{Name: r.Node}}
	one := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{request}
	})
	// A first sync even with no pod on the node: lines of pods deleted while the agent was
	// away go then.
	start := make(chan event.TypedGenericEvent[*v1.Pod], 1)
	start <- event.TypedGenericEvent[*v1.Pod]{Object: &v1.Pod{}}
	return ctrl.NewControllerManagedBy(mgr).
		Named("job-mapping").
		Watches(&v1.Pod{}, one).
		WatchesRawSource(source.Channel(start, handler.TypedEnqueueRequestsFromMapFunc(func(context.Context, *v1.Pod) []reconcile.Request {
			return []reconcile.Request{request}
		}))).
		Complete(r)
}
