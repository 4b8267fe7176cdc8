package slurmcluster

import (
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	slurmv1 "github.com/kubeslurm/kubeslurm/api/v1alpha1"
	"github.com/kubeslurm/kubeslurm/pkg/slurmconf"
	"github.com/kubeslurm/kubeslurm/pkg/topology"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

// renderTopology is the cluster's topology.yaml (spec.topology) for the workers it wants:
// each DaemonSet-mode worker in the block its Kubernetes node's annotation (which wins) or
// labels name, Replicas-mode
// workers (no node of their own) in the default block. Membership is by the file, so a
// worker joining, leaving or relabelled (or re-annotated) changes the configuration (slurmctld reads it in
// place, jobs kept). Nodes whose label is no usable block name are returned with why; they are
// in the default block.
func renderTopology(c *slurmv1.SlurmCluster, want []worker) ([]byte, []topology.NodeError, error) {
	var nodes []topology.Node
	var others []string
	for _, w := range want {
		if w.kubeNode == "" {
			others = append(others, w.slurm)
			continue
		}
		nodes = append(nodes, topology.Node{Name: w.slurm, Labels: w.nodeLabels, Annotations: w.nodeAnnotations})
	}
	t, bad := topology.Build(slurmconf.TopologyConfig(c), nodes, others, nil)
	b, err := t.Render()
	return b, bad, err
}

// tellInvalidBlocks records, on each node, why its label did not place it.
func (r *Reconciler) tellInvalidBlocks(c *slurmv1.SlurmCluster, bad []topology.NodeError) {
	for _, e := range bad {
		node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: e.Node}}
		r.Recorder.Eventf(node, c, v1.EventTypeWarning, wellknown.EventInvalidTopologyBlock, "PlaceInBlock",
			"SlurmCluster %s/%s: %v; the worker is in block %s", c.Namespace, c.Name, e.Err, slurmconf.TopologyConfig(c).DefaultBlock)
	}
}
