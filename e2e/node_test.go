package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

// The node tests each take one node, and leave it (and every Slurm node) as they found it.

// 1. kubectl cordon drains the Slurm node with our reason within 2 s, and the drain comes
// back as taint and condition; uncordon undrains it.
func TestNodeCordonDrainsInSlurm(t *testing.T) {
	node := nodes[0]
	restoreNodeAtEnd(t, node)
	want := wellknown.ReasonPrefix + "node " + node + " cordoned in Kubernetes"

	nodeKubectl(t, "cordon", node)
	eventually(t, 2*time.Second, "sinfo shows "+node+" drained by kubeslurm", func() bool {
		state, reason := sinfoNode(t, node)
		return strings.HasPrefix(state, "drain") && reason == want
	})
	eventually(t, 2*time.Second, "taint and SlurmNodeDrained condition on "+node, func() bool {
		n := getNode(t, node)
		return hasSlurmTaint(n) && slurmConditionTypes(n)[wellknown.SlurmNodeDrainedCondition] == want
	})

	// A custom reason, sanitised: the newline does not reach Slurm.
	_, err := kube.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType,
		fmt.Appendf(nil, `{"metadata":{"annotations":{%q:"e2e: PSU swap\nticket 7"}}}`, wellknown.DrainReasonAnnotation), metav1.PatchOptions{})
	require.NoError(t, err)
	eventually(t, 2*time.Second, "the custom reason in Slurm", func() bool {
		_, reason := sinfoNode(t, node)
		return reason == want+": e2e: PSU swap ticket 7"
	})

	nodeKubectl(t, "uncordon", node)
	eventually(t, 2*time.Second, node+" no longer drained in Slurm", func() bool {
		state, _ := sinfoNode(t, node)
		return !strings.HasPrefix(state, "drain")
	})
	waitSlurmNodeIdle(t, node)
	eventually(t, 2*time.Second, "taint and SlurmNodeDrained gone from "+node, func() bool {
		n := getNode(t, node)
		_, drained := slurmConditionTypes(n)[wellknown.SlurmNodeDrainedCondition]
		return !hasSlurmTaint(n) && !drained
	})
	ev := nodeEvents(t, node)
	assert.Contains(t, ev, wellknown.EventDrainedInSlurm+": Drained Slurm node "+node)
	assert.Contains(t, ev, wellknown.EventUndrainedInSlurm)
	assert.Contains(t, ev, wellknown.EventSlurmTaintAdded)
	assert.Contains(t, ev, wellknown.EventSlurmTaintRemoved)
}

// 2. An admin's drain in Slurm taints the node and shows as its condition; a cordon and an
// uncordon in Kubernetes leave that drain (and its reason) alone; resume lifts the taint.
func TestNodeAdminDrainIsMirroredAndNeverUndone(t *testing.T) {
	node := nodes[1]
	restoreNodeAtEnd(t, node)

	slurmCmd(t, "scontrol", "update", "nodename="+node, "state=drain", "reason=hw")
	eventually(t, 2*time.Second, "taint and SlurmNodeDrained=hw on "+node, func() bool {
		n := getNode(t, node)
		return hasSlurmTaint(n) && slurmConditionTypes(n)[wellknown.SlurmNodeDrainedCondition] == "hw"
	})

	nodeKubectl(t, "cordon", node)
	consistently(t, 3*time.Second, "the admin's drain keeps its reason while cordoned", func() bool {
		state, reason := sinfoNode(t, node)
		return strings.HasPrefix(state, "drain") && reason == "hw"
	})
	nodeKubectl(t, "uncordon", node)
	consistently(t, 3*time.Second, "uncordon leaves the admin's drain", func() bool {
		state, reason := sinfoNode(t, node)
		return strings.HasPrefix(state, "drain") && reason == "hw" && hasSlurmTaint(getNode(t, node))
	})

	slurmCmd(t, "scontrol", "update", "nodename="+node, "state=resume")
	eventually(t, 2*time.Second, "taint and SlurmNodeDrained gone after resume", func() bool {
		n := getNode(t, node)
		_, drained := slurmConditionTypes(n)[wellknown.SlurmNodeDrainedCondition]
		return !hasSlurmTaint(n) && !drained
	})
}

// 3. A drained node whose slurmd stops goes DOWN+DRAIN+NOT_RESPONDING: exactly three
// SlurmNode* conditions, the same on every look, through several kwok heartbeats.
func TestNodeDownDrainedNotRespondingConditions(t *testing.T) {
	nodeDownDrainedNotRespondingConditions(t, localStack())
}

// throughHeartbeats waits until kwok has posted beats more heartbeats of the node (its
// Ready condition's heartbeat time changes), calling check on every look meanwhile.
func throughHeartbeats(t *testing.T, node string, beats int, what string, check func(*v1.Node)) {
	t.Helper()
	seen := map[string]bool{}
	eventually(t, time.Duration(beats)*50*time.Second, fmt.Sprintf("%d kwok heartbeats of %s with %s", beats, node, what), func() bool {
		n := getNode(t, node)
		for _, c := range n.Status.Conditions {
			if c.Type == v1.NodeReady {
				seen[c.LastHeartbeatTime.String()] = true
			}
		}
		check(n)
		return len(seen) > beats
	})
}

// 4. Deleting a Kubernetes node removes its idle dynamic Slurm node. A busy one is only
// drained, keeps its job, and goes once the job ends.
func TestNodeDeletionRemovesIdleDynamicSlurmNode(t *testing.T) {
	node := nodes[len(nodes)-1]
	saved := getNode(t, node)
	t.Cleanup(func() {
		// As up.sh made it: the slurmd registers again, and the Node comes back.
		component(t, "restart", "slurmd-"+node)
		recreateNode(t, saved)
		waitSlurmNodeIdle(t, node)
		eventually(t, 30*time.Second, node+" back in Kubernetes, Ready, with its Slurm state", func() bool {
			n, err := kube.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
			if err != nil || readyOf(n) != v1.ConditionTrue {
				return false
			}
			_, idle := slurmConditionTypes(n)["SlurmNodeIdle"]
			return idle
		})
	})

	out := slurmCmd(t, "sbatch", "--parsable", "-N1", "-w", node, "-J", "e2e-node-delete", "--wrap", "sleep 600")
	jobID := strings.TrimSpace(strings.Split(out, ";")[0])
	t.Cleanup(func() { _, _ = runCmd(filepath.Join(runDir, "bin", "scancel"), jobID) })
	eventually(t, 30*time.Second, "sbatch job running on "+node, func() bool {
		j, ok := jobByID(t, mustAtoi(t, jobID))
		return ok && j.State == "RUNNING"
	})
	deleteNode(t, node)
	marker := wellknown.ReasonPrefix + "node " + node + " deleted from Kubernetes"
	eventually(t, 5*time.Second, "the busy Slurm node drained for the deletion", func() bool {
		_, reason := sinfoNode(t, node)
		return reason == marker
	})
	consistently(t, 3*time.Second, "a busy node is kept, and so is its job", func() bool {
		j, ok := jobByID(t, mustAtoi(t, jobID))
		return slurmNodeFlags(t, node) != nil && ok && j.State == "RUNNING"
	})

	slurmCmd(t, "scancel", jobID)
	eventually(t, 30*time.Second, "the idle dynamic Slurm node removed", func() bool {
		return slurmNodeFlags(t, node) == nil
	})
	assert.Contains(t, nodeEvents(t, node), wellknown.EventRemovedFromSlurm+": Kubernetes node deleted; removed idle dynamic Slurm node "+node)

	// Again, idle from the start: removed at once (within the wait bound).
	component(t, "restart", "slurmd-"+node)
	recreateNode(t, saved)
	eventually(t, 10*time.Second, node+" known again on both sides", func() bool {
		_, ok := slurmConditionTypes(getNode(t, node))["SlurmNodeIdle"]
		return ok
	})
	deleteNode(t, node)
	eventually(t, 3*time.Second, "the idle dynamic Slurm node removed", func() bool {
		return slurmNodeFlags(t, node) == nil
	})
}

// gpuCondition is the condition type the local cluster's controller drains on
// (--drain-on-node-conditions in deploy/local/lib.sh), as a GPU health check would set it.
const gpuCondition v1.NodeConditionType = "GPUUnhealthy"

// 5. A condition listed in --drain-on-node-conditions drains the Slurm node with its reason
// while it is True, through kwok's heartbeats; a cordon meanwhile adds its cause, and its
// uncordon leaves the condition's drain; False, or the condition gone, undrains.
func TestNodeUnhealthyConditionDrainsInSlurm(t *testing.T) {
	nodeUnhealthyConditionDrainsInSlurm(t, localStack())
}

// 6. A controller restart neither drains twice nor loses an undrain
// (controllerRestartKeepsDrainAndJob).
func TestNodeControllerRestartKeepsDrainAndJob(t *testing.T) {
	controllerRestartKeepsDrainAndJob(t, localStack(), namespace(t))
}

// setNodeCondition sets one condition on the node through the status subresource, as a
// node health check does (a strategic merge by type: the other conditions stay).
func setNodeCondition(t *testing.T, node string, c v1.NodeCondition) {
	t.Helper()
	now := metav1.Now()
	c.LastHeartbeatTime, c.LastTransitionTime = now, now
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []v1.NodeCondition{c}}})
	require.NoError(t, err)
	_, err = kube.CoreV1().Nodes().Patch(context.Background(), node, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	require.NoError(t, err)
}

func removeNodeCondition(t *testing.T, node string, typ v1.NodeConditionType) {
	t.Helper()
	patch := fmt.Appendf(nil, `{"status":{"conditions":[{"type":%q,"$patch":"delete"}]}}`, typ)
	_, err := kube.CoreV1().Nodes().Patch(context.Background(), node, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	require.NoError(t, err)
}

func nodeConditionOf(n *v1.Node, typ v1.NodeConditionType) *v1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == typ {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// BenchmarkNodeDrainLatency measures each direction on the real cluster: kubectl cordon
// (and uncordon) until sinfo shows the drain (and its end); scontrol drain (and resume)
// until the taint shows (and goes). Run with `make bench-e2e`.
func BenchmarkNodeDrainLatency(b *testing.B) {
	t := &testing.T{}
	node := nodes[0]
	defer func() {
		_, _ = adminKubectl("uncordon", node)
		_, _ = runCmd(filepath.Join(runDir, "bin", "scontrol"), "update", "nodename="+node, "state=resume")
	}()
	drained := func() bool { s, _ := sinfoNode(t, node); return strings.HasPrefix(s, "drain") }
	var cordon, uncordon, drain, resume []time.Duration
	measure := func(into *[]time.Duration, act func(), until func() bool) {
		start := time.Now()
		act()
		pollUntil(b, 30*time.Second, func() (*v1.Pod, bool) { return nil, until() })
		*into = append(*into, time.Since(start))
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		measure(&cordon, func() { nodeKubectl(t, "cordon", node) }, drained)
		measure(&uncordon, func() { nodeKubectl(t, "uncordon", node) }, func() bool { return !drained() })
		waitSlurmNodeIdle(t, node)
		measure(&drain, func() { slurmCmd(t, "scontrol", "update", "nodename="+node, "state=drain", "reason=bench") },
			func() bool { return hasSlurmTaint(getNode(t, node)) })
		measure(&resume, func() { slurmCmd(t, "scontrol", "update", "nodename="+node, "state=resume") },
			func() bool { return !hasSlurmTaint(getNode(t, node)) })
		waitSlurmNodeIdle(t, node)
	}
	b.StopTimer()
	report(b, "cordon→sinfo-drain", cordon)
	report(b, "uncordon→sinfo-undrained", uncordon)
	report(b, "scontrol-drain→taint", drain)
	report(b, "scontrol-resume→untaint", resume)
	if t.Failed() {
		b.Fatal("a step failed")
	}
}

// restoreNodeAtEnd uncordons the node, drops our annotation, resumes a drain in Slurm
// and waits until the Slurm node is idle and untainted, and every other Slurm node idle.
func restoreNodeAtEnd(t *testing.T, node string) { localStack().restoreNodeAtEnd(t, node) }

func nodeKubectl(t *testing.T, args ...string) {
	t.Helper()
	out, err := adminKubectl(args...)
	require.NoError(t, err, "kubectl %v: %s", args, out)
}

// adminKubectl runs the cluster's kubectl as admin (runCmd: time-limited, output combined).
func adminKubectl(args ...string) (string, error) {
	return runCmd(filepath.Join(repoRoot, "bin", "kubectl"), append([]string{"--kubeconfig", filepath.Join(runDir, "admin.kubeconfig")}, args...)...)
}

func getNode(t *testing.T, name string) *v1.Node {
	t.Helper()
	n, err := kube.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(t, err)
	return n
}

func deleteNode(t *testing.T, name string) {
	t.Helper()
	require.NoError(t, kube.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}))
	eventually(t, 10*time.Second, "node "+name+" gone from Kubernetes", func() bool {
		_, err := kube.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}

// recreateNode creates the node again from a copy taken before it was deleted: the same
// names, labels, annotations, capacity (kwok then makes it Ready), none of our state.
func recreateNode(t *testing.T, saved *v1.Node) {
	t.Helper()
	n := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: saved.Name, Labels: saved.Labels, Annotations: saved.Annotations},
		Status:     v1.NodeStatus{Capacity: saved.Status.Capacity, Allocatable: saved.Status.Allocatable},
	}
	delete(n.Annotations, wellknown.DrainReasonAnnotation)
	_, err := kube.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
}

// sinfoNode is the local Slurm's stack.sinfoNode.
func sinfoNode(t *testing.T, node string) (state, reason string) {
	return localStack().sinfoNode(t, node)
}

var stateRE = regexp.MustCompile(`(?:^| )State=(\S+)`)

// slurmNodeFlags returns the node's state flags, nil when Slurm does not have the node.
func slurmNodeFlags(t *testing.T, node string) []string {
	t.Helper()
	out, err := runCmd(filepath.Join(runDir, "bin", "scontrol"), "-o", "show", "node", node)
	if err != nil {
		require.Contains(t, out, "not found", "scontrol show node %s: %s", node, out)
		return nil
	}
	return stateFlags(t, out)
}

// stateFlags are the State= flags of `scontrol -o show node`'s line.
func stateFlags(t *testing.T, out string) []string {
	t.Helper()
	m := stateRE.FindStringSubmatch(out)
	require.NotNil(t, m, out)
	return strings.Split(m[1], "+")
}

func hasSlurmTaint(n *v1.Node) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t v1.Taint) bool {
		return t.Key == wellknown.SlurmDrainTaint && t.Effect == v1.TaintEffectNoSchedule
	})
}

// slurmConditions returns the node's SlurmNode* conditions by type; a duplicate type
// fails the test.
func slurmConditions(n *v1.Node) map[string]v1.NodeCondition {
	out := map[string]v1.NodeCondition{}
	for _, c := range n.Status.Conditions {
		if t := string(c.Type); strings.HasPrefix(t, wellknown.SlurmNodeConditionPrefix) {
			if _, dup := out[t]; dup {
				panic("duplicate node condition " + t + " on " + n.Name)
			}
			out[t] = c
		}
	}
	return out
}

// slurmConditionTypes returns each SlurmNode* condition's message by type.
func slurmConditionTypes(n *v1.Node) map[string]string {
	out := map[string]string{}
	for t, c := range slurmConditions(n) {
		out[t] = c.Message
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// nodeEvents returns "Reason: note" lines of the events about a node (cluster-scoped
// objects' events are in the default namespace).
func nodeEvents(t *testing.T, node string) string {
	t.Helper()
	list, err := kube.EventsV1().Events(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	var lines []string
	for _, e := range list.Items {
		if e.Regarding.Kind == "Node" && e.Regarding.Name == node {
			lines = append(lines, e.Reason+": "+e.Note)
		}
	}
	return strings.Join(lines, "\n")
}

// consistently checks cond every 250ms for the whole duration.
func consistently(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		require.True(t, cond(), "no longer true: %s", what)
	}
}
