package slurmcluster

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slurmv1 "github.com/kubeslurm/kubeslurm/api/v1alpha1"
	"github.com/kubeslurm/kubeslurm/pkg/slurmconf"
)

// BenchmarkReconcileSteadyState is one reconcile of a SlurmCluster whose DaemonSet-mode
// NodeSet covers n GPU nodes, 18 to an NVLink block (spec.topology), every worker pod up
// and nothing to change: what each node label or allocatable change, and each resync,
// costs the controller. Pods and nodes are listed from a snapshot, copied as the
// informer cache's reads copy them (the fake client's own lists convert every object
// through JSON, which would be most of the figure).
func BenchmarkReconcileSteadyState(b *testing.B) {
	for _, n := range []int{100, 1000, 5000} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			f := steadyGPUCluster(b, n)
			r := &Reconciler{Client: snapshotLists(b, f.kube), Recorder: f.recorder}
			req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "hpc", Name: "slurm"}}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := r.Reconcile(context.Background(), req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// listSnapshot serves lists of pods and nodes from the objects it was made with, copying
// those that match as controller-runtime's cache does; other reads go to Client.
type listSnapshot struct {
	client.Client
	pods  []v1.Pod
	nodes []v1.Node
}

func snapshotLists(b *testing.B, c client.Client) *listSnapshot {
	pods, nodes := &v1.PodList{}, &v1.NodeList{}
	require.NoError(b, c.List(context.Background(), pods))
	require.NoError(b, c.List(context.Background(), nodes))
	return &listSnapshot{Client: c, pods: pods.Items, nodes: nodes.Items}
}

func (s *listSnapshot) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	o := (&client.ListOptions{}).ApplyOptions(opts)
	if o.FieldSelector != nil && !o.FieldSelector.Empty() {
		return s.Client.List(ctx, list, opts...)
	}
	match := func(obj metav1.Object) bool {
		return (o.Namespace == "" || obj.GetNamespace() == o.Namespace) &&
			(o.LabelSelector == nil || o.LabelSelector.Matches(labels.Set(obj.GetLabels())))
	}
	switch l := list.(type) {
	case *v1.PodList:
		for i := range s.pods {
			if match(&s.pods[i]) {
				l.Items = append(l.Items, *s.pods[i].DeepCopy())
			}
		}
	case *v1.NodeList:
		for i := range s.nodes {
			if match(&s.nodes[i]) {
				l.Items = append(l.Items, *s.nodes[i].DeepCopy())
			}
		}
	default:
		return s.Client.List(ctx, list, opts...)
	}
	return nil
}

// steadyGPUCluster is a fixture of n GPU nodes in blocks of 18 whose workers all run.
func steadyGPUCluster(b *testing.B, n int) *fixture {
	c := newCluster()
	c.Spec.NodeSets = []slurmv1.NodeSetSpec{{Name: "gpu", NodeSelector: map[string]string{"pool": "gpu"}}}
	c.Spec.Partitions = []slurmv1.PartitionSpec{{Name: "gpu", Default: true, NodeSets: []string{"gpu"}}}
	c.Spec.Topology = &slurmv1.TopologySpec{BlockSizes: []int32{18}}
	objs := []client.Object{c}
	for i := range n {
		objs = append(objs, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("gpu-%05d", i),
			Labels: map[string]string{"pool": "gpu", "nvidia.com/gpu.clique": fmt.Sprintf("nvl-%03d", i/18)}}})
	}
	f := newFixture(b, objs...)
	f.reconcile()
	f.controllerUp()
	f.reconcile()
	workers := f.workers()
	require.Len(b, workers, n)
	for _, p := range workers {
		f.setReady(p, true)
	}
	f.reconcile()
	require.Equal(b, int32(n), f.cluster().Status.ReadyWorkers)
	require.Contains(b, f.configMap().Data[slurmconf.TopologyFile], fmt.Sprintf("block: nvl-%03d", (n-1)/18))
	return f
}
