package slurmcluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	slurmv1 "github.com/kubeslurm/kubeslurm/api/v1alpha1"
	"github.com/kubeslurm/kubeslurm/pkg/slurm"
	"github.com/kubeslurm/kubeslurm/pkg/slurm/slurmtest"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

func TestStaleNodes(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	c := newCluster() // NodeSets "cpu" (DaemonSet) and "r" (Replicas)
	c.Spec.NodeSets = append(c.Spec.NodeSets, slurmv1.NodeSetSpec{Name: "never", PruneDownAfterSeconds: ptr[int64](0)},
		slurmv1.NodeSetSpec{Name: "quick", PruneDownAfterSeconds: ptr[int64](30)})
	lost := []string{"DOWN", "NOT_RESPONDING", "DYNAMIC_NORM"}
	node := func(name string, features []string, age time.Duration, states ...string) slurm.Node {
		n := slurm.Node{Name: name, States: states, Features: features, Reason: "Not responding"}
		if age > 0 {
			n.ReasonTime = now.Add(-age)
		}
		return n
	}
	for _, tc := range []struct {
		name  string
		node  slurm.Node
		live  bool
		stale bool
	}{
		{"a DaemonSet worker's lost record, past the default grace", node("gone-node", []string{"cpu"}, 11*time.Minute, lost...), false, true},
		{"within the default grace (600 s)", node("gone-node", []string{"cpu"}, 9*time.Minute, lost...), false, false},
		{"a Replicas worker's ordinal name", node("slurm-r-7", []string{"r", "fast"}, time.Hour, lost...), false, true},
		{"the set's feature but not a name of the set", node("slurm-r-x", []string{"r"}, time.Hour, lost...), false, false},
		{"an ordinal with a leading zero is no worker's", node("slurm-r-07", []string{"r"}, time.Hour, lost...), false, false},
		{"another cluster's name", node("other-r-1", []string{"r"}, time.Hour, lost...), false, false},
		{"no feature of a NodeSet (added by hand)", node("spare", []string{"fast"}, time.Hour, lost...), false, false},
		{"not dynamic: a node of slurm.conf", node("static", []string{"cpu"}, time.Hour, "DOWN", "NOT_RESPONDING"), false, false},
		{"DOWN but responding: an admin's down", node("gone-node", []string{"cpu"}, time.Hour, "DOWN", "DYNAMIC_NORM"), false, false},
		{"not responding but not DOWN yet", node("gone-node", []string{"cpu"}, time.Hour, "IDLE", "NOT_RESPONDING", "DYNAMIC_NORM"), false, false},
		{"drained by its wrapper before it was lost", node("gone-node", []string{"cpu"}, time.Hour, "DOWN", "DRAIN", "NOT_RESPONDING", "DYNAMIC_NORM"), false, true},
		{"a job still on it", node("gone-node", []string{"cpu"}, time.Hour, "DOWN", "COMPLETING", "NOT_RESPONDING", "DYNAMIC_NORM"), false, false},
		{"a worker pod stands for it", node("gone-node", []string{"cpu"}, time.Hour, lost...), true, false},
		{"no timestamp from Slurm", node("gone-node", []string{"cpu"}, 0, lost...), false, false},
		{"its set never prunes", node("gone-node", []string{"never"}, 24*time.Hour, lost...), false, false},
		{"its set's short grace", node("gone-node", []string{"quick"}, time.Minute, lost...), false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			live := map[string]bool{}
			if tc.live {
				live[tc.node.Name] = true
			}
			got := staleNodes(c, []slurm.Node{tc.node}, live, now)
			if tc.stale {
				require.Len(t, got, 1)
				assert.Equal(t, tc.node.Name, got[0].node.Name)
			} else {
				assert.Empty(t, got)
			}
		})
	}
}

// withSlurm gives the cluster a ready slurmrestd pod whose client is sl, and the controller
// an identity: the observe pass then reads and writes the fake Slurm.
func (f *fixture) withSlurm(sl *slurmtest.Fake) {
	ctx := context.Background()
	id, err := LoadIdentity(ctx, f.kube, f.kube, "kubeslurm-system", "signing")
	require.NoError(f.t, err)
	f.r.Identity = id
	f.update(func(c *slurmv1.SlurmCluster) { c.Spec.RestAPI = &slurmv1.RestAPISpec{Port: 6920} })
	c := f.cluster()
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "hpc", Name: "slurm-restapi-x", Labels: componentLabels(c, componentSlurmrestd)}}
	require.NoError(f.t, f.kube.Create(ctx, pod))
	pod.Status = v1.PodStatus{PodIP: "10.0.0.9", Conditions: []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue}}}
	require.NoError(f.t, f.kube.Status().Update(ctx, pod))
	f.r.slurm.clients = map[string]slurm.Client{"http://10.0.0.9:6920": sl}
}

// The observe pass deletes the record of a lost worker (no pod, DOWN and not responding
// past the grace) with an event, and leaves every other node alone.
func TestLostWorkersNodePruned(t *testing.T) {
	f := newWorkersFixture(t, 2)
	sl := slurmtest.New()
	f.withSlurm(sl)
	old := time.Now().Add(-time.Hour)
	lost := []string{"DOWN", "NOT_RESPONDING", "DYNAMIC_NORM"}
	for name, n := range map[string]slurmtest.Node{
		"slurm-r-0": {States: []string{"IDLE", "DYNAMIC_NORM"}, Features: []string{"r"}},
		"slurm-r-1": {States: lost, Features: []string{"r"}, Reason: "Not responding", ReasonTime: old},   // its pod is there
		"slurm-r-5": {States: lost, Features: []string{"r"}, Reason: "Not responding", ReasonTime: old},   // lost
		"spare":     {States: lost, Features: []string{"gpu"}, Reason: "Not responding", ReasonTime: old}, // not a worker
		"slurm-r-6": {States: []string{"DOWN", "ALLOCATED", "NOT_RESPONDING", "DYNAMIC_NORM"}, Features: []string{"r"},
			Reason: "Not responding", ReasonTime: old}, // a job on it
	} {
		require.NoError(t, sl.PutNode(name, n))
	}
	f.events()
	f.reconcile()
	assert.Equal(t, []string{"delete slurm-r-5"}, sl.NodeOps())
	ev := strings.Join(f.events(), "\n")
	assert.Contains(t, ev, "Normal "+wellknown.EventSlurmNodePruned+" Deleted Slurm node slurm-r-5 of NodeSet r: DOWN+NOT_RESPONDING+DYNAMIC_NORM since")
	assert.Equal(t, 1, strings.Count(ev, wellknown.EventSlurmNodePruned), ev)
	assert.Equal(t, slurmv1.NodeStateSummary{Idle: 1, Down: 3}, f.cluster().Status.Nodes, "the pruned node is not counted")

	// Level-based: nothing more on another pass.
	f.reconcile()
	assert.Empty(t, sl.NodeOps())
	assert.Empty(t, f.events())
}

// Fail closed: when Slurm's nodes or the worker pods cannot be read, nothing is pruned.
func TestPruneFailsClosed(t *testing.T) {
	f := newWorkersFixture(t, 1)
	sl := slurmtest.New()
	f.withSlurm(sl)
	require.NoError(t, sl.PutNode("slurm-r-5", slurmtest.Node{States: []string{"DOWN", "NOT_RESPONDING", "DYNAMIC_NORM"},
		Features: []string{"r"}, Reason: "Not responding", ReasonTime: time.Now().Add(-time.Hour)}))
	ctx := context.Background()
	want, err := f.r.desiredWorkerList(ctx, f.cluster())
	require.NoError(t, err)
	f.events()

	sl.FailWith = errors.New("slurmrestd down")
	status := f.cluster().Status.DeepCopy()
	assert.True(t, f.r.observeSlurm(ctx, f.cluster(), status, want))
	sl.FailWith = nil
	assert.Empty(t, sl.NodeOps(), "Slurm unreadable")

	kube := f.r.Client
	f.r.Client = interceptor.NewClient(kube.(client.WithWatch), interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			o := &client.ListOptions{}
			o.ApplyOptions(opts)
			if _, ok := list.(*v1.PodList); ok && o.LabelSelector != nil && strings.Contains(o.LabelSelector.String(), "=slurmd") {
				return errors.New("API server unavailable")
			}
			return c.List(ctx, list, opts...)
		},
	})
	assert.True(t, f.r.observeSlurm(ctx, f.cluster(), status, want))
	assert.Empty(t, sl.NodeOps(), "worker pods unreadable")
	assert.Empty(t, f.events())

	// Readable again: pruned.
	f.r.Client = kube
	assert.True(t, f.r.observeSlurm(ctx, f.cluster(), status, want))
	assert.Equal(t, []string{"delete slurm-r-5"}, sl.NodeOps())
	assert.Len(t, f.events(), 1)
}

func TestPrunedNote(t *testing.T) {
	line := func(i int) string {
		return fmt.Sprintf("Slurm node slurm-r-%d of NodeSet r: DOWN since 2026-01-01T00:00:00Z (reason %q), no worker pod, no job", i, "Not responding")
	}
	lines := func(n int) []string {
		var out []string
		for i := range n {
			out = append(out, line(i))
		}
		return out
	}
	assert.Equal(t, "Deleted "+line(0), prunedNote(lines(1)))
	assert.Equal(t, "Deleted 2 Slurm nodes; "+line(0)+"; "+line(1), prunedNote(lines(2)))

	many := prunedNote(lines(100))
	assert.LessOrEqual(t, len(many), 1024, "the API refuses longer notes")
	shown := strings.Count(many, "Slurm node slurm-r-")
	assert.Greater(t, shown, 1)
	assert.True(t, strings.HasPrefix(many, "Deleted 100 Slurm nodes; "+line(0)), many)
	assert.True(t, strings.HasSuffix(many, fmt.Sprintf("; and %d more (the controller's log names each)", 100-shown)), many)
}
