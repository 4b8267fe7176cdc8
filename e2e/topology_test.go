package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubeslurm/kubeslurm/pkg/slurm"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

// withTopology restarts the local controller with --topology-file (deploy/local/lib.sh does
// so while $RUN/controller-topology exists): the topology is named "kubeslurm", read from
// nvidia.com/gpu.clique, base block size 4. Called first, so that its clean-up (the
// controller back without topology) runs last. Slurm keeps the last topology.yaml the
// controller wrote (every node in the default block) until the cluster is taken down.
func withTopology(t *testing.T) {
	t.Helper()
	flag := filepath.Join(runDir, "controller-topology")
	require.NoError(t, os.WriteFile(flag, nil, 0o644))
	component(t, "restart", "controller")
	t.Cleanup(func() {
		require.NoError(t, os.Remove(flag))
		component(t, "restart", "controller")
	})
}

const (
	cliqueLabel  = "nvidia.com/gpu.clique"
	topologyName = "kubeslurm"
	cliqueA      = "e2e-clique-a"
	cliqueB      = "e2e-clique-b"
	topologyWait = 60 * time.Second
	defaultBlock = "unlabelled"
)

// slurmBlocks is Slurm's own view of the block topology: block name → its nodes.
func slurmBlocks(t *testing.T) map[string][]string {
	t.Helper()
	out := slurmCmd(t, "scontrol", "show", "topology")
	blocks := map[string][]string{}
	for _, line := range strings.Split(out, "\n") {
		var name string
		var members []string
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "BlockName="); ok {
				name = v
			}
			if v, ok := strings.CutPrefix(f, "Nodes="); ok {
				members = slurm.ExpandHostlist(v)
			}
		}
		if name != "" {
			slices.Sort(members)
			blocks[name] = members
		}
	}
	return blocks
}

// labelNode sets the clique label; the test's end removes it.
func labelNode(t *testing.T, node, clique string) {
	t.Helper()
	nodeKubectl(t, "label", "--overwrite", "node", node, cliqueLabel+"="+clique)
	t.Cleanup(func() { nodeKubectl(t, "label", "node", node, cliqueLabel+"-") })
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// 1. Nodes labelled into two cliques of 4 become two Slurm blocks; a 4-pod group lands
// inside one block; relabelling a node moves it; a node's own topology setting in Slurm is
// brought back to its label.
func TestTopologyBlocksFromCliqueLabels(t *testing.T) {
	withTopology(t)
	ns := namespace(t)
	base := sorted(nodes)
	require.GreaterOrEqual(t, len(base), 4, "the local cluster has at least 4 nodes")
	a := base[:4]
	var b []string
	for i := 1; i <= 4; i++ {
		name := fmt.Sprintf("node-%d", len(nodes)+i)
		addNode(t, name)
		b = append(b, name)
	}
	for _, n := range a {
		labelNode(t, n, cliqueA)
	}
	for _, n := range b {
		labelNode(t, n, cliqueB)
	}
	eventually(t, topologyWait, "Slurm has the two blocks of 4", func() bool {
		got := slurmBlocks(t)
		return slices.Equal(got[cliqueA], sorted(a)) && slices.Equal(got[cliqueB], sorted(b))
	})
	t.Logf("scontrol show topology:\n%s", slurmCmd(t, "scontrol", "show", "topology"))

	// One node of clique A is busy: a 4-node group fits only in clique B. Under the flat
	// topology Slurm would take the three free nodes of A and one of B (lowest first).
	blocker := sbatchJob(t, "-w", a[1], "--exclusive", "-o", "/dev/null", "--wrap", "sleep 600")
	waitJobState(t, blocker, "RUNNING")
	pods := createPodGroup(t, ns, "nvl", 4, nil)
	bound := waitAllBound(t, pods, 90*time.Second)
	id := requireOneJobOnTheirNodes(t, localStack(), bound)
	var on []string
	for _, p := range bound {
		on = append(on, p.Spec.NodeName)
	}
	assert.Equal(t, sorted(b), sorted(on), "the group's job %d is inside clique B", id)
	eventually(t, 30*time.Second, "every member annotated with its block", func() bool {
		for _, p := range pods {
			if getPod(t, p.Namespace, p.Name).Annotations[wellknown.TopologyBlockAnnotation] != cliqueB {
				return false
			}
		}
		return true
	})

	// Relabelling moves the node, in Slurm, without a restart of anything.
	moved := b[3]
	nodeKubectl(t, "label", "--overwrite", "node", moved, cliqueLabel+"="+cliqueA)
	eventually(t, topologyWait, moved+" moved to clique A in Slurm", func() bool {
		got := slurmBlocks(t)
		return slices.Contains(got[cliqueA], moved) && !slices.Contains(got[cliqueB], moved)
	})
	assert.Contains(t, nodeEvents(t, moved), wellknown.EventTopologyBlockChanged+": moved from Slurm block "+cliqueB+" to "+cliqueA)

	// A node's own topology setting (what slurmd -Z --conf Topology=... registers) overrides
	// the file: the controller brings it back to the labelled block, live.
	odd := a[2]
	slurmCmd(t, "scontrol", "update", "nodename="+odd, "topology="+topologyName+":"+cliqueB)
	eventually(t, topologyWait, odd+"'s own topology set back to clique A", func() bool {
		return strings.Contains(slurmCmd(t, "scontrol", "show", "node", odd), "Topology="+topologyName+":"+cliqueA)
	})
	eventually(t, topologyWait, odd+" in clique A in Slurm", func() bool {
		got := slurmBlocks(t)
		return slices.Contains(got[cliqueA], odd) && !slices.Contains(got[cliqueB], odd)
	})

	// Clique A empties while odd's own setting still names it: slurmctld exits on a
	// reconfigure whose file lacks that block, so the block stays until the setting has
	// moved, then goes; slurmctld stays up throughout (every scontrol below needs it).
	for _, n := range append(slices.Clone(a), moved) {
		nodeKubectl(t, "label", "--overwrite", "node", n, cliqueLabel+"="+cliqueB)
	}
	eventually(t, topologyWait, "clique A gone, all 8 nodes in clique B", func() bool {
		got := slurmBlocks(t)
		_, hasA := got[cliqueA]
		return !hasA && len(got[cliqueB]) == 8
	})
	assert.Contains(t, slurmCmd(t, "scontrol", "show", "node", odd), "Topology="+topologyName+":"+cliqueB)
	assert.Contains(t, slurmCmd(t, "scontrol", "ping"), "is UP")
}

// 2. A node with no clique label is in the default block, so it can run jobs.
func TestTopologyUnlabelledNodesShareTheDefaultBlock(t *testing.T) {
	withTopology(t)
	eventually(t, topologyWait, "every node in the default block", func() bool {
		return slices.Equal(slurmBlocks(t)[defaultBlock], sorted(nodes))
	})
}
