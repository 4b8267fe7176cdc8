package slurmcluster

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	slurmv1 "github.com/kubeslurm/kubeslurm/api/v1alpha1"
	"github.com/kubeslurm/kubeslurm/pkg/slurmconf"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

func gpuNode(name string, labels map[string]string) *v1.Node {
	l := map[string]string{"pool": "gpu"}
	for k, v := range labels {
		l[k] = v
	}
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}
}

// With spec.topology the ConfigMap has a topology.yaml: DaemonSet-mode workers in the block
// their node's clique label names, the others (no label, an unusable name, Replicas-mode
// workers) in the default block, with a warning on the node whose label was refused. A
// relabelled node moves its worker in a new configuration, and so does the node's block
// annotation, which wins over the label; without spec.topology there is no file.
func TestTopologyFromWorkerNodes(t *testing.T) {
	c := newCluster()
	c.Spec.NodeSets = []slurmv1.NodeSetSpec{{Name: "gpu", NodeSelector: map[string]string{"pool": "gpu"}},
		{Name: "r", Mode: slurmv1.NodeSetReplicas, Replicas: ptr[int32](1)}}
	c.Spec.Partitions = nil
	c.Spec.Topology = &slurmv1.TopologySpec{BlockSizes: []int32{2}}
	clique := func(v string) map[string]string { return map[string]string{"nvidia.com/gpu.clique": v} }
	f := newFixture(t, c, gpuNode("g1", clique("nvl-a")), gpuNode("g2", clique("nvl-a")), gpuNode("g3", nil),
		gpuNode("g4", clique("bad:name")), &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "cpu1", Labels: map[string]string{"pool": "cpu"}}})
	f.events()
	f.reconcile()
	assert.Equal(t, `# Written by kubeslurm-controller from Kubernetes node labels; edits are overwritten.
- topology: kubeslurm
  cluster_default: true
  block:
    block_sizes: [2]
    blocks:
      - block: nvl-a
        nodes: g1,g2
      - block: unlabelled
        nodes: g3,g4,slurm-r-0
`, f.configMap().Data[slurmconf.TopologyFile])
	assert.Contains(t, f.events(), `Warning InvalidTopologyBlock SlurmCluster hpc/slurm: label nvidia.com/gpu.clique="bad:name" is not a valid Slurm block name; the worker is in block unlabelled`)

	hash := f.configMap().Annotations["slurm.kubeslurm.io/config-hash"]
	n := &v1.Node{}
	require.NoError(t, f.kube.Get(context.Background(), client.ObjectKey{Name: "g3"}, n))
	n.Labels["nvidia.com/gpu.clique"] = "nvl-b"
	require.NoError(t, f.kube.Update(context.Background(), n))
	f.reconcile()
	assert.Contains(t, f.configMap().Data[slurmconf.TopologyFile], "      - block: nvl-b\n        nodes: g3\n")
	assert.NotEqual(t, hash, f.configMap().Annotations["slurm.kubeslurm.io/config-hash"], "a new configuration")

	// The node's block annotation wins over its label; an unusable one is told, like a label.
	annotate := func(node, block string) {
		require.NoError(t, f.kube.Get(context.Background(), client.ObjectKey{Name: node}, n))
		n.Annotations = map[string]string{wellknown.TopologyBlockAnnotation: block}
		require.NoError(t, f.kube.Update(context.Background(), n))
	}
	annotate("g1", "pinned")
	annotate("g2", "")
	f.events()
	f.reconcile()
	topo := f.configMap().Data[slurmconf.TopologyFile]
	assert.Contains(t, topo, "      - block: pinned\n        nodes: g1\n")
	assert.Contains(t, topo, "      - block: unlabelled\n        nodes: g2,g4,slurm-r-0\n")
	assert.NotContains(t, topo, "nvl-a", "no node left in it")
	assert.Contains(t, f.events(), `Warning InvalidTopologyBlock SlurmCluster hpc/slurm: annotation kubeslurm.io/topology-block="" is not a valid Slurm block name; the worker is in block unlabelled`)

	f.update(func(c *slurmv1.SlurmCluster) { c.Spec.Topology = nil })
	f.reconcile()
	assert.NotContains(t, f.configMap().Data, slurmconf.TopologyFile)
}

// Block sizes Slurm would refuse, or none, are refused with the spec.
func TestTopologyBlockSizesValidated(t *testing.T) {
	for sizes, want := range map[string]string{
		"4,12": "topology: block sizes [4 12]: each must be the previous one times a power of two",
		"":     "topology: blockSizes: at least one is needed",
	} {
		c := newCluster()
		c.Spec.Topology = &slurmv1.TopologySpec{}
		for _, s := range strings.Split(sizes, ",") {
			if n, err := strconv.Atoi(s); err == nil {
				c.Spec.Topology.BlockSizes = append(c.Spec.Topology.BlockSizes, int32(n))
			}
		}
		f := newFixture(t, c)
		f.reconcile()
		cond := condition(f.cluster(), slurmv1.ConditionConfigValid)
		assert.Equal(t, metav1.ConditionFalse, cond.Status, sizes)
		assert.Contains(t, cond.Message, want)
	}
}

// Node updates reconcile the clusters when the block annotation is set, changed or
// removed, not when another annotation changes.
func TestBlockAnnotationChanged(t *testing.T) {
	node := func(annotations map[string]string) *v1.Node {
		return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "g1", Annotations: annotations}}
	}
	block := func(b string) map[string]string { return map[string]string{wellknown.TopologyBlockAnnotation: b} }
	other := map[string]string{"node.alpha.kubernetes.io/ttl": "0"}
	for name, tc := range map[string]struct {
		old, new map[string]string
		want     bool
	}{
		"set":              {nil, block("a"), true},
		"changed":          {block("a"), block("b"), true},
		"removed":          {block("a"), other, true},
		"set empty":        {nil, block(""), true},
		"unchanged":        {block("a"), block("a"), false},
		"other annotation": {nil, other, false},
	} {
		got := blockAnnotationChanged.Update(event.UpdateEvent{ObjectOld: node(tc.old), ObjectNew: node(tc.new)})
		assert.Equal(t, tc.want, got, name)
	}
}
