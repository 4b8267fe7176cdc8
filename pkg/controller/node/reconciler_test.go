package node

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/kubeslurm/kubeslurm/pkg/controller/controllertest"
	"github.com/kubeslurm/kubeslurm/pkg/slurm"
	"github.com/kubeslurm/kubeslurm/pkg/slurm/slurmtest"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

const (
	idle = slurm.NodeIdle
	dyn  = slurm.NodeDynamic
)

var (
	unreachable = &url.Error{Op: "Get", URL: "http://slurmrestd", Err: &net.OpError{Op: "dial", Err: errors.New("connection refused")}}
	t0          = time.Date(2026, 1, 2, 3, 4, 5, 0, time.Local)
)

type fixture struct {
	*controllertest.Fixture
	r *Reconciler
}

// newFixture has Slurm nodes n1 and n2, idle and dynamic, and the given Kubernetes nodes.
func newFixture(t *testing.T, objs ...client.Object) *fixture {
	sl := slurmtest.New()
	for _, n := range []string{"n1", "n2"} {
		require.NoError(t, sl.SetNode(n, "", idle, dyn))
	}
	f := &fixture{Fixture: controllertest.New(t, sl, fake.NewClientBuilder().WithObjects(objs...).WithStatusSubresource(&v1.Node{}))}
	f.r = f.newReconciler()
	return f
}

// newReconciler is a fresh controller process over the same cluster (a restart).
func (f *fixture) newReconciler() *Reconciler {
	return &Reconciler{Client: f.Kube, APIReader: f.Kube, Slurm: f.Slurm, Watcher: f.Watcher, Recorder: f.Recorder,
		DrainOnConditions: []string{"KernelDeadlock", "GPUUnhealthy"}, TaintEffect: v1.TaintEffectNoSchedule,
		NotSyncedRetry: time.Second, now: func() time.Time { return t0 }}
}

// sync polls Slurm and reconciles the node, as the watcher's change would.
func (f *fixture) sync(name string) {
	f.Poll()
	_, err := f.reconcile(name)
	require.NoError(f.T, err)
}

func (f *fixture) reconcile(name string) (ctrl.Result, error) {
	return f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Name: name}})
}

func (f *fixture) node(name string) *v1.Node {
	n := &v1.Node{}
	require.NoError(f.T, f.Kube.Get(context.Background(), types.NamespacedName{Name: name}, n))
	return n
}

func (f *fixture) update(name string, mutate func(*v1.Node)) {
	n := f.node(name)
	mutate(n)
	require.NoError(f.T, f.Kube.Update(context.Background(), n))
}

func (f *fixture) updateStatus(name string, mutate func(*v1.Node)) {
	n := f.node(name)
	mutate(n)
	require.NoError(f.T, f.Kube.Status().Update(context.Background(), n))
}

func (f *fixture) slurmNode(name string) *slurm.Node {
	n, err := f.Slurm.GetNode(context.Background(), name)
	require.NoError(f.T, err)
	return n
}

func newNode(name string) *v1.Node {
	return &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: v1.NodeStatus{Conditions: []v1.NodeCondition{
			{Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KubeletReady"},
		}},
	}
}

func cordoned(n *v1.Node) *v1.Node { n.Spec.Unschedulable = true; return n }

func ourConditions(n *v1.Node) map[v1.NodeConditionType]v1.NodeCondition {
	out := map[v1.NodeConditionType]v1.NodeCondition{}
	for _, c := range n.Status.Conditions {
		if isOurs(c.Type) {
			_, dup := out[c.Type]
			if dup {
				out["duplicate "+c.Type] = c
			}
			out[c.Type] = c
		}
	}
	return out
}

func taintOf(n *v1.Node) *v1.Taint {
	for i := range n.Spec.Taints {
		if n.Spec.Taints[i].Key == wellknown.SlurmDrainTaint {
			return &n.Spec.Taints[i]
		}
	}
	return nil
}

const cordonReason = "kubeslurm: node n1 cordoned in Kubernetes"

func TestDecideDrain(t *testing.T) {
	tests := []struct {
		name   string
		want   string
		states []string
		reason string
		action drainAction
	}{
		{"nothing wanted, not drained", "", []string{idle}, "", keepDrain},
		{"wanted, not drained", cordonReason, []string{idle}, "", setDrain},
		{"wanted, drained by us already", cordonReason, []string{idle, "DRAIN"}, cordonReason, keepDrain},
		{"wanted, ours with Slurm's suffix once down", cordonReason, []string{"DOWN", "DRAIN", "NOT_RESPONDING"}, cordonReason + " : Not responding", keepDrain},
		{"wanted, ours for another cause", cordonReason, []string{idle, "DRAIN"}, "kubeslurm: node n1 condition X is True", setDrain},
		{"wanted, an admin's drain is kept as it is", cordonReason, []string{idle, "DRAIN"}, "hw", keepDrain},
		{"wanted, down but not drained", cordonReason, []string{"DOWN"}, "Not responding", setDrain},
		{"not wanted, ours", "", []string{idle, "DRAIN"}, cordonReason, clearDrain},
		{"not wanted, ours on a busy node", "", []string{"MIXED", "DRAIN"}, cordonReason, clearDrain},
		{"not wanted, an admin's drain is never undone", "", []string{idle, "DRAIN"}, "hw", keepDrain},
		{"not wanted, an admin's reason that merely mentions us", "", []string{idle, "DRAIN"}, "see kubeslurm: later", keepDrain},
		{"not wanted, a SlurmCluster worker's drain for its scale-in is not ours to undo", "", []string{idle, "DRAIN"}, "kubeslurm: worker pod slurm-cpu-n1 deleted", keepDrain},
		{"wanted, a worker's drain is kept as it is", cordonReason, []string{idle, "DRAIN"}, "kubeslurm: worker pod slurm-cpu-n1 deleted", keepDrain},
		{"not wanted, another node's reason", "", []string{idle, "DRAIN"}, "kubeslurm: node n10 cordoned in Kubernetes", keepDrain},
		{"not wanted, our old reason on a down node that is not drained", "", []string{"DOWN"}, cordonReason + " : Not responding", keepDrain},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.action, decideDrain(tt.want, &slurm.Node{Name: "n1", States: tt.states, Reason: tt.reason}))
		})
	}
}

func TestDrainReason(t *testing.T) {
	conds := []string{"KernelDeadlock", "GPUUnhealthy"}
	cond := func(t, s, reason, msg string) v1.NodeCondition {
		return v1.NodeCondition{Type: v1.NodeConditionType(t), Status: v1.ConditionStatus(s), Reason: reason, Message: msg}
	}
	tests := []struct {
		name        string
		cordoned    bool
		annotation  string
		conditions  []v1.NodeCondition
		want        string
		wantMaxSize bool
	}{
		{name: "healthy and schedulable", want: ""},
		{name: "cordoned", cordoned: true, want: cordonReason},
		{name: "cordoned with a custom reason", cordoned: true, annotation: "disk swap\nticket 42", want: cordonReason + ": disk swap ticket 42"},
		{name: "custom reason alone does not drain", annotation: "disk swap", want: ""},
		{name: "custom reason of only spaces", cordoned: true, annotation: " \t ", want: cordonReason},
		{name: "listed condition True", conditions: []v1.NodeCondition{cond("GPUUnhealthy", "True", "XidError", "GPU 0 fell off the bus")},
			want: "kubeslurm: node n1 condition GPUUnhealthy is True (XidError: GPU 0 fell off the bus)"},
		{name: "listed condition True without words", conditions: []v1.NodeCondition{cond("KernelDeadlock", "True", "", "")},
			want: "kubeslurm: node n1 condition KernelDeadlock is True"},
		{name: "listed condition False", conditions: []v1.NodeCondition{cond("GPUUnhealthy", "False", "GPUsHealthy", "")}, want: ""},
		{name: "listed condition Unknown", conditions: []v1.NodeCondition{cond("GPUUnhealthy", "Unknown", "", "")}, want: ""},
		{name: "unlisted condition True", conditions: []v1.NodeCondition{cond("FrequentDockerRestart", "True", "x", "y")}, want: ""},
		{name: "cordoned and unhealthy", cordoned: true, conditions: []v1.NodeCondition{cond("KernelDeadlock", "True", "Deadlock", "task hung")},
			want: cordonReason + "; condition KernelDeadlock is True (Deadlock: task hung)"},
		{name: "non-ASCII and control characters", cordoned: true, annotation: "caf\u00e9\x00\x1b[31m\u2028x", want: cordonReason + ": caf [31m x"},
		{name: "capped, our prefix kept", cordoned: true, annotation: strings.Repeat("a", 1000), wantMaxSize: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newNode("n1")
			n.Spec.Unschedulable = tt.cordoned
			if tt.annotation != "" {
				n.Annotations = map[string]string{wellknown.DrainReasonAnnotation: tt.annotation}
			}
			n.Status.Conditions = append(n.Status.Conditions, tt.conditions...)
			got := drainReason(n, conds)
			if tt.wantMaxSize {
				assert.Len(t, got, slurm.MaxReasonLength)
				assert.True(t, strings.HasPrefix(got, cordonReason+": aaa"), got)
				return
			}
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestSlurmConditions(t *testing.T) {
	tests := []struct {
		states []string
		want   map[string]string // condition type -> reason
	}{
		{[]string{"IDLE", "DYNAMIC_NORM"}, map[string]string{"SlurmNodeIdle": "Idle"}},
		{[]string{"IDLE", "DRAIN", "DYNAMIC_NORM"}, map[string]string{"SlurmNodeIdle": "Idle", "SlurmNodeDrained": "Drain"}},
		{[]string{"MIXED", "DRAIN"}, map[string]string{"SlurmNodeMixed": "Mixed", "SlurmNodeDraining": "Drain"}},
		{[]string{"ALLOCATED", "DRAIN"}, map[string]string{"SlurmNodeAllocated": "Allocated", "SlurmNodeDraining": "Drain"}},
		{[]string{"IDLE", "DRAIN", "COMPLETING"}, map[string]string{"SlurmNodeIdle": "Idle", "SlurmNodeDraining": "Drain", "SlurmNodeCompleting": "Completing"}},
		{[]string{"DOWN", "DRAIN", "NOT_RESPONDING", "DYNAMIC_NORM"}, map[string]string{"SlurmNodeDown": "Down", "SlurmNodeDrained": "Drain", "SlurmNodeNotResponding": "NotResponding"}},
		{[]string{"IDLE", "MAINTENANCE", "REBOOT_REQUESTED", "CLOUD"}, map[string]string{"SlurmNodeIdle": "Idle", "SlurmNodeMaintenance": "Maintenance", "SlurmNodeRebootRequested": "RebootRequested"}},
		{[]string{"DOWN", "FAIL"}, map[string]string{"SlurmNodeDown": "Down", "SlurmNodeFail": "Fail"}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.states, "+"), func(t *testing.T) {
			got := slurmConditions(&slurm.Node{Name: "n1", States: tt.states, Reason: "hw"})
			require.Len(t, got, len(tt.want))
			for typ, reason := range tt.want {
				c, ok := got[v1.NodeConditionType(typ)]
				require.True(t, ok, typ)
				assert.Equal(t, v1.ConditionTrue, c.Status)
				assert.Equal(t, reason, c.Reason)
				assert.Equal(t, "hw", c.Message, "the message is Slurm's reason")
			}
		})
	}
}

func TestCordonDrainsAndUncordonUndrains(t *testing.T) {
	f := newFixture(t, cordoned(newNode("n1")))
	f.sync("n1")
	assert.Equal(t, []string{"drain n1: " + cordonReason}, f.Slurm.NodeOps())
	assert.Contains(t, f.Events(), wellknown.EventDrainedInSlurm)

	// The next poll shows the drain: conditions and taint follow, and nothing drains twice.
	f.sync("n1")
	f.sync("n1")
	assert.Empty(t, f.Slurm.NodeOps(), "no second drain")
	n := f.node("n1")
	conds := ourConditions(n)
	assert.Len(t, conds, 2)
	assert.Equal(t, cordonReason, conds[wellknown.SlurmNodeDrainedCondition].Message)
	require.NotNil(t, taintOf(n))
	assert.Equal(t, v1.TaintEffectNoSchedule, taintOf(n).Effect)

	f.update("n1", func(n *v1.Node) { n.Spec.Unschedulable = false })
	f.sync("n1")
	assert.Equal(t, []string{"undrain n1"}, f.Slurm.NodeOps())
	assert.Contains(t, f.Events(), wellknown.EventUndrainedInSlurm)
	f.sync("n1")
	f.sync("n1")
	assert.Empty(t, f.Slurm.NodeOps())
	n = f.node("n1")
	assert.Nil(t, taintOf(n))
	assert.Equal(t, map[v1.NodeConditionType]v1.NodeCondition{"SlurmNodeIdle": {
		Type: "SlurmNodeIdle", Status: v1.ConditionTrue, Reason: "Idle",
		LastHeartbeatTime: metav1.NewTime(t0), LastTransitionTime: metav1.NewTime(t0),
	}}, ourConditions(n))
	assert.Equal(t, v1.NodeReady, n.Status.Conditions[0].Type, "the kubelet's conditions stay")
}

func TestCustomDrainReason(t *testing.T) {
	n := cordoned(newNode("n1"))
	n.Annotations = map[string]string{wellknown.DrainReasonAnnotation: "PSU swap,\nticket 7"}
	f := newFixture(t, n)
	f.sync("n1")
	assert.Equal(t, cordonReason+": PSU swap, ticket 7", f.slurmNode("n1").Reason)

	// A new custom reason rewrites our drain's reason, once.
	f.update("n1", func(n *v1.Node) { n.Annotations[wellknown.DrainReasonAnnotation] = "PSU swap done" })
	f.sync("n1")
	f.sync("n1")
	assert.Equal(t, []string{"drain n1: " + cordonReason + ": PSU swap, ticket 7", "drain n1: " + cordonReason + ": PSU swap done"}, f.Slurm.NodeOps())
}

func TestAdminDrainIsNeverUndone(t *testing.T) {
	f := newFixture(t, newNode("n1"))
	require.NoError(t, f.Slurm.SetNode("n1", "hw", idle, "DRAIN", dyn))
	f.sync("n1")
	n := f.node("n1")
	require.NotNil(t, taintOf(n), "Slurm's drain shows in Kubernetes")
	assert.Equal(t, "hw", ourConditions(n)[wellknown.SlurmNodeDrainedCondition].Message)
	assert.Contains(t, f.Events(), wellknown.EventSlurmTaintAdded)

	// Cordon and uncordon: the admin's drain and its reason stay.
	f.update("n1", func(n *v1.Node) { n.Spec.Unschedulable = true })
	f.sync("n1")
	f.update("n1", func(n *v1.Node) { n.Spec.Unschedulable = false })
	f.sync("n1")
	assert.Empty(t, f.Slurm.NodeOps())
	sn := f.slurmNode("n1")
	assert.True(t, sn.Has(slurm.NodeDrain))
	assert.Equal(t, "hw", sn.Reason)

	// The admin resumes it: the taint goes.
	require.NoError(t, f.Slurm.SetNode("n1", "", idle, dyn))
	f.sync("n1")
	assert.Nil(t, taintOf(f.node("n1")))
	assert.Contains(t, f.Events(), wellknown.EventSlurmTaintRemoved)
}

// The cache says the drain is ours, but an admin re-drained the node since the last poll:
// the fresh read before acting wins.
func TestStaleCacheNeverUndoesAnAdminDrain(t *testing.T) {
	f := newFixture(t, cordoned(newNode("n1")))
	f.sync("n1")
	f.Poll()
	f.Slurm.NodeOps()
	require.NoError(t, f.Slurm.SetNode("n1", "hw", idle, "DRAIN", dyn)) // not polled yet
	f.update("n1", func(n *v1.Node) { n.Spec.Unschedulable = false })

	_, err := f.reconcile("n1")
	require.NoError(t, err)
	assert.Empty(t, f.Slurm.NodeOps())
	assert.Equal(t, "hw", f.slurmNode("n1").Reason)
}

func TestConditionDrainsUntilHealthyAndNothingElseOfOursWantsIt(t *testing.T) {
	n := cordoned(newNode("n1"))
	n.Status.Conditions = append(n.Status.Conditions, v1.NodeCondition{Type: "GPUUnhealthy", Status: v1.ConditionTrue, Reason: "XidError", Message: "GPU 0 fell off the bus"})
	f := newFixture(t, n)
	both := cordonReason + "; condition GPUUnhealthy is True (XidError: GPU 0 fell off the bus)"
	f.sync("n1")
	assert.Equal(t, both, f.slurmNode("n1").Reason)

	// Healthy again, still cordoned: the drain stays, for the cordon only.
	f.updateStatus("n1", func(n *v1.Node) { nodeCondition(n, "GPUUnhealthy").Status = v1.ConditionFalse })
	f.sync("n1")
	sn := f.slurmNode("n1")
	assert.True(t, sn.Has(slurm.NodeDrain))
	assert.Equal(t, cordonReason, sn.Reason)

	f.update("n1", func(n *v1.Node) { n.Spec.Unschedulable = false })
	f.sync("n1")
	assert.False(t, f.slurmNode("n1").Has(slurm.NodeDrain))
	assert.Equal(t, []string{"drain n1: " + both, "drain n1: " + cordonReason, "undrain n1"}, f.Slurm.NodeOps())
}

func TestDownDrainedNotRespondingHasExactlyThreeConditions(t *testing.T) {
	f := newFixture(t, cordoned(newNode("n1")))
	f.sync("n1")
	f.sync("n1")
	assert.Len(t, ourConditions(f.node("n1")), 2)

	// Our drain, then slurmd stops: slurmctld appends to the reason, which stays ours.
	reason := cordonReason + " : Not responding"
	require.NoError(t, f.Slurm.SetNode("n1", reason, "DOWN", "DRAIN", "NOT_RESPONDING", dyn))
	f.Slurm.NodeOps()
	f.sync("n1")
	n := f.node("n1")
	conds := ourConditions(n)
	assert.Len(t, conds, 3, "%v", conds)
	for _, typ := range []v1.NodeConditionType{"SlurmNodeDown", wellknown.SlurmNodeDrainedCondition, "SlurmNodeNotResponding"} {
		assert.Equal(t, reason, conds[typ].Message, typ)
	}
	require.NotNil(t, taintOf(n))

	// Reconciling again changes nothing at all.
	rv := n.ResourceVersion
	f.sync("n1")
	f.sync("n1")
	assert.Equal(t, rv, f.node("n1").ResourceVersion)
	assert.Len(t, ourConditions(f.node("n1")), 3)
	assert.Empty(t, f.Slurm.NodeOps(), "the drain is left as Slurm has it")
}

func TestConditionsAreDeduplicatedAndKeepTheirTransitionTime(t *testing.T) {
	n := newNode("n1")
	earlier := metav1.NewTime(t0.Add(-time.Hour))
	n.Status.Conditions = append(n.Status.Conditions,
		v1.NodeCondition{Type: "SlurmNodeIdle", Status: v1.ConditionTrue, Reason: "Idle", LastTransitionTime: earlier},
		v1.NodeCondition{Type: "SlurmNodeIdle", Status: v1.ConditionTrue, Reason: "Idle", LastTransitionTime: earlier},
		v1.NodeCondition{Type: "SlurmNodeAllocated", Status: v1.ConditionTrue, Reason: "Allocated"},
	)
	conds, changed := mergeConditions(n.Status.Conditions, slurmConditions(&slurm.Node{States: []string{idle, dyn}}), metav1.NewTime(t0))
	assert.True(t, changed)
	require.Len(t, conds, 2)
	assert.Equal(t, v1.NodeReady, conds[0].Type)
	assert.Equal(t, v1.NodeConditionType("SlurmNodeIdle"), conds[1].Type)
	assert.Equal(t, earlier, conds[1].LastTransitionTime, "an unchanged status keeps its transition time")

	_, changed = mergeConditions(conds, slurmConditions(&slurm.Node{States: []string{idle, dyn}}), metav1.NewTime(t0.Add(time.Hour)))
	assert.False(t, changed)
}

func TestTaint(t *testing.T) {
	other := v1.Taint{Key: "example.com/gpu", Effect: v1.TaintEffectNoSchedule}
	tests := []struct {
		name       string
		effect     v1.TaintEffect
		states     []string
		have       *v1.Taint
		wantEffect v1.TaintEffect // "" = no taint of ours
		event      string
	}{
		{"drained", v1.TaintEffectNoSchedule, []string{idle, "DRAIN"}, nil, v1.TaintEffectNoSchedule, wellknown.EventSlurmTaintAdded},
		{"down", v1.TaintEffectNoSchedule, []string{"DOWN", "NOT_RESPONDING"}, nil, v1.TaintEffectNoSchedule, wellknown.EventSlurmTaintAdded},
		{"draining", v1.TaintEffectPreferNoSchedule, []string{"MIXED", "DRAIN"}, nil, v1.TaintEffectPreferNoSchedule, wellknown.EventSlurmTaintAdded},
		{"resumed", v1.TaintEffectNoSchedule, []string{idle}, &v1.Taint{Key: wellknown.SlurmDrainTaint, Effect: v1.TaintEffectNoSchedule}, "", wellknown.EventSlurmTaintRemoved},
		{"allocated, no taint", v1.TaintEffectNoSchedule, []string{"ALLOCATED"}, nil, "", ""},
		{"already tainted", v1.TaintEffectNoSchedule, []string{idle, "DRAIN"}, &v1.Taint{Key: wellknown.SlurmDrainTaint, Effect: v1.TaintEffectNoSchedule}, v1.TaintEffectNoSchedule, ""},
		{"effect changed", v1.TaintEffectNoExecute, []string{idle, "DRAIN"}, &v1.Taint{Key: wellknown.SlurmDrainTaint, Effect: v1.TaintEffectNoSchedule}, v1.TaintEffectNoExecute, wellknown.EventSlurmTaintAdded},
		{"state unknown: taint kept", v1.TaintEffectNoSchedule, []string{"UNKNOWN"}, &v1.Taint{Key: wellknown.SlurmDrainTaint, Effect: v1.TaintEffectNoSchedule}, v1.TaintEffectNoSchedule, ""},
		{"no state flags: taint kept", v1.TaintEffectNoSchedule, []string{dyn}, &v1.Taint{Key: wellknown.SlurmDrainTaint, Effect: v1.TaintEffectNoSchedule}, v1.TaintEffectNoSchedule, ""},
		{"state unknown: no taint added", v1.TaintEffectNoSchedule, []string{"UNKNOWN"}, nil, "", ""},
		{"taints off", "", []string{idle, "DRAIN"}, nil, "", ""},
		{"taints off lifts ours", "", []string{idle, "DRAIN"}, &v1.Taint{Key: wellknown.SlurmDrainTaint, Effect: v1.TaintEffectNoSchedule}, "", wellknown.EventSlurmTaintRemoved},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newNode("n1")
			n.Spec.Taints = []v1.Taint{other}
			if tt.have != nil {
				n.Spec.Taints = append(n.Spec.Taints, *tt.have)
			}
			f := newFixture(t, n)
			f.r.TaintEffect = tt.effect
			require.NoError(t, f.Slurm.SetNode("n1", "hw", append(tt.states, dyn)...))
			f.sync("n1")

			got := f.node("n1")
			assert.Equal(t, other, got.Spec.Taints[0], "others' taints stay")
			if tt.wantEffect == "" {
				assert.Nil(t, taintOf(got))
				assert.Len(t, got.Spec.Taints, 1)
			} else {
				require.NotNil(t, taintOf(got))
				assert.Equal(t, tt.wantEffect, taintOf(got).Effect)
				assert.Equal(t, tt.wantEffect == v1.TaintEffectNoExecute, taintOf(got).TimeAdded != nil)
				assert.Len(t, got.Spec.Taints, 2)
			}
			ev := f.Events()
			if tt.event == "" {
				assert.NotContains(t, ev, "Taint")
			} else {
				assert.Contains(t, ev, tt.event)
				assert.Contains(t, ev, `"hw"`, "with Slurm's words")
			}
		})
	}
}

func TestFailClosed(t *testing.T) {
	t.Run("watcher not synced: nothing at all", func(t *testing.T) {
		f := newFixture(t, cordoned(newNode("n1")))
		res, err := f.reconcile("n1")
		require.NoError(t, err)
		assert.Equal(t, time.Second, res.RequeueAfter)
		assert.Empty(t, f.Slurm.NodeOps())
		assert.Empty(t, ourConditions(f.node("n1")))
	})
	t.Run("slurmrestd unreachable: no drain, an error to retry", func(t *testing.T) {
		f := newFixture(t, cordoned(newNode("n1")))
		f.Poll()
		f.Slurm.FailWith = unreachable
		_, err := f.reconcile("n1")
		assert.True(t, slurm.IsUnavailable(err), "%v", err)
		f.Slurm.FailWith = nil
		assert.Empty(t, f.Slurm.NodeOps())
		assert.Contains(t, ourConditions(f.node("n1")), v1.NodeConditionType("SlurmNodeIdle"),
			"the last state seen still reaches the node")
	})
	t.Run("slurmrestd 5xx: no undrain", func(t *testing.T) {
		f := newFixture(t, cordoned(newNode("n1")))
		f.sync("n1")
		f.sync("n1")
		f.Slurm.NodeOps()
		f.update("n1", func(n *v1.Node) { n.Spec.Unschedulable = false })
		f.Slurm.FailWith = errors.New("Service Unavailable")
		_, err := f.reconcile("n1")
		assert.True(t, slurm.IsUnavailable(err), "%v", err)
		assert.Error(t, f.Watcher.Poll(context.Background()), "a failed poll changes nothing")
		_, err = f.reconcile("n1")
		assert.Error(t, err)
		f.Slurm.FailWith = nil
		assert.Empty(t, f.Slurm.NodeOps())
		assert.NotNil(t, taintOf(f.node("n1")), "the taint stays while Slurm cannot be read")
		assert.Contains(t, ourConditions(f.node("n1")), v1.NodeConditionType(wellknown.SlurmNodeDrainedCondition))
	})
	t.Run("a node Slurm does not know: conditions and taint stay", func(t *testing.T) {
		n := newNode("n9")
		n.Spec.Taints = []v1.Taint{{Key: wellknown.SlurmDrainTaint, Effect: v1.TaintEffectNoSchedule}}
		n.Status.Conditions = append(n.Status.Conditions, v1.NodeCondition{Type: wellknown.SlurmNodeDrainedCondition, Status: v1.ConditionTrue})
		f := newFixture(t, cordoned(n))
		f.sync("n9")
		got := f.node("n9")
		assert.Equal(t, n.Spec.Taints, got.Spec.Taints)
		assert.Len(t, ourConditions(got), 1)
		assert.Empty(t, f.Slurm.NodeOps())
	})
	t.Run("Slurm refuses: an event with its words, no hot loop", func(t *testing.T) {
		f := newFixture(t, cordoned(newNode("n1")))
		f.Poll()
		require.NoError(t, f.Slurm.SetNode("n1", "", idle, dyn)) // still there for the fresh read
		f.r.Slurm = refusingDrain{f.Slurm}
		_, err := f.reconcile("n1")
		require.NoError(t, err)
		ev := f.Events()
		assert.Contains(t, ev, wellknown.EventSlurmNodeUpdateFailed)
		assert.Contains(t, ev, "Invalid node state specified")
	})
}

// refusingDrain is a Slurm that refuses every drain, as slurmctld refuses a bad request.
type refusingDrain struct{ *slurmtest.Fake }

func (refusingDrain) DrainNode(context.Context, string, string) error {
	return &slurm.Error{Kind: slurm.KindRejected, Op: "drain node n1", Messages: []string{"Invalid node state specified"}}
}

func TestRestartRebuildsFromBothSides(t *testing.T) {
	f := newFixture(t, cordoned(newNode("n1")), newNode("n2"))
	f.sync("n1")
	f.sync("n2")
	f.Slurm.NodeOps()

	// A new process: the drain it finds is its own and current, so nothing is redone.
	f.r = f.newReconciler()
	f.sync("n1")
	f.sync("n2")
	assert.Empty(t, f.Slurm.NodeOps(), "no double drain after a restart")

	// Uncordoned while the controller was down: the next process undrains.
	f.update("n1", func(n *v1.Node) { n.Spec.Unschedulable = false })
	f.r = f.newReconciler()
	f.sync("n1")
	assert.Equal(t, []string{"undrain n1"}, f.Slurm.NodeOps(), "no lost undrain")
}

func TestDeletedNode(t *testing.T) {
	deleteNode := func(f *fixture, name string) {
		require.NoError(f.T, f.Kube.Delete(context.Background(), &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}))
	}
	t.Run("idle dynamic node is removed", func(t *testing.T) {
		f := newFixture(t, newNode("n1"))
		f.sync("n1")
		deleteNode(f, "n1")
		f.sync("n1")
		assert.Equal(t, []string{"delete n1"}, f.Slurm.NodeOps())
		assert.Contains(t, f.Events(), wellknown.EventRemovedFromSlurm)
		f.sync("n1")
		assert.Empty(t, f.Slurm.NodeOps())
	})
	t.Run("drained or down, but idle, is removed", func(t *testing.T) {
		f := newFixture(t, newNode("n1"))
		require.NoError(t, f.Slurm.SetNode("n1", "hw", "DOWN", "DRAIN", "NOT_RESPONDING", dyn))
		f.sync("n1")
		deleteNode(f, "n1")
		f.sync("n1")
		assert.Equal(t, []string{"delete n1"}, f.Slurm.NodeOps())
	})
	t.Run("a node of slurm.conf is never removed", func(t *testing.T) {
		f := newFixture(t, newNode("n1"))
		require.NoError(t, f.Slurm.SetNode("n1", "", idle))
		f.sync("n1")
		deleteNode(f, "n1")
		f.sync("n1")
		assert.Empty(t, f.Slurm.NodeOps())
	})
	t.Run("a Slurm node Kubernetes never had is never removed", func(t *testing.T) {
		f := newFixture(t)
		f.sync("n1")
		assert.Empty(t, f.Slurm.NodeOps())
	})
	t.Run("state unknown to Slurm is not idle", func(t *testing.T) {
		f := newFixture(t, newNode("n1"))
		require.NoError(t, f.Slurm.SetNode("n1", "", "UNKNOWN", dyn))
		f.sync("n1")
		deleteNode(f, "n1")
		f.sync("n1")
		assert.Empty(t, f.Slurm.NodeOps(), "neither deleted nor drained")
	})
	t.Run("busy: drained, never cancelled, removed once idle, even after a restart", func(t *testing.T) {
		f := newFixture(t, newNode("n1"))
		require.NoError(t, f.Slurm.SetNode("n1", "", "ALLOCATED", dyn))
		f.sync("n1")
		deleteNode(f, "n1")
		f.sync("n1")
		marker := "kubeslurm: node n1 deleted from Kubernetes"
		assert.Equal(t, []string{"drain n1: " + marker}, f.Slurm.NodeOps())
		f.sync("n1")
		assert.Empty(t, f.Slurm.NodeOps(), "waits while jobs run")

		f.r = f.newReconciler() // forgets what it saw; the marker in Slurm remains
		require.NoError(t, f.Slurm.SetNode("n1", marker, idle, "DRAIN", dyn))
		f.sync("n1")
		assert.Equal(t, []string{"delete n1"}, f.Slurm.NodeOps())
	})
	t.Run("busy and drained by an admin: the reason stays", func(t *testing.T) {
		f := newFixture(t, newNode("n1"))
		require.NoError(t, f.Slurm.SetNode("n1", "hw", "MIXED", "DRAIN", dyn))
		f.sync("n1")
		deleteNode(f, "n1")
		f.sync("n1")
		assert.Empty(t, f.Slurm.NodeOps())
		assert.Equal(t, "hw", f.slurmNode("n1").Reason)
	})
	t.Run("busy again since the last poll: not removed", func(t *testing.T) {
		f := newFixture(t, newNode("n1"))
		f.sync("n1")
		deleteNode(f, "n1")
		f.Poll()
		require.NoError(t, f.Slurm.SetNode("n1", "", "ALLOCATED", dyn))
		_, err := f.reconcile("n1")
		require.NoError(t, err)
		assert.Empty(t, f.Slurm.NodeOps())
	})
	t.Run("the cache misses it but the API server has it: not deleted", func(t *testing.T) {
		f := newFixture(t, newNode("n1"))
		f.sync("n1")
		f.r.Client = fake.NewClientBuilder().Build() // a cache that has not caught up
		f.sync("n1")
		assert.Empty(t, f.Slurm.NodeOps())
	})
	t.Run("slurmrestd unreachable: nothing deleted", func(t *testing.T) {
		f := newFixture(t, newNode("n1"))
		f.sync("n1")
		deleteNode(f, "n1")
		f.Poll()
		f.Slurm.FailWith = unreachable
		_, err := f.reconcile("n1")
		assert.Error(t, err)
		f.Slurm.FailWith = nil
		assert.Empty(t, f.Slurm.NodeOps())
		_, err = f.Slurm.GetNode(context.Background(), "n1")
		assert.NoError(t, err, "still in Slurm")
	})
}

func TestRelevantChange(t *testing.T) {
	base := newNode("n1")
	base.Status.Conditions[0].LastHeartbeatTime = metav1.NewTime(t0)
	tests := []struct {
		name   string
		mutate func(*v1.Node)
		want   bool
	}{
		{"heartbeat only", func(n *v1.Node) { n.Status.Conditions[0].LastHeartbeatTime = metav1.NewTime(t0.Add(time.Minute)) }, false},
		{"labels only", func(n *v1.Node) { n.Labels = map[string]string{"a": "b"} }, false},
		{"cordoned", func(n *v1.Node) { n.Spec.Unschedulable = true }, true},
		{"drain reason", func(n *v1.Node) { n.Annotations = map[string]string{wellknown.DrainReasonAnnotation: "x"} }, true},
		{"taints", func(n *v1.Node) { n.Spec.Taints = []v1.Taint{{Key: "k", Effect: v1.TaintEffectNoSchedule}} }, true},
		{"condition status", func(n *v1.Node) { n.Status.Conditions[0].Status = v1.ConditionFalse }, true},
		{"condition added", func(n *v1.Node) {
			n.Status.Conditions = append(n.Status.Conditions, v1.NodeCondition{Type: "GPUUnhealthy", Status: v1.ConditionTrue})
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := base.DeepCopy()
			tt.mutate(n)
			assert.Equal(t, tt.want, relevantChange(base, n))
		})
	}
}

func TestFlags(t *testing.T) {
	for in, want := range map[string]v1.TaintEffect{
		"NoSchedule": v1.TaintEffectNoSchedule, "PreferNoSchedule": v1.TaintEffectPreferNoSchedule,
		"NoExecute": v1.TaintEffectNoExecute, "none": "",
	} {
		got, err := ParseTaintEffect(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	_, err := ParseTaintEffect("noschedule")
	assert.Error(t, err)

	assert.NoError(t, ValidateDrainConditions([]string{"KernelDeadlock", "GPUUnhealthy"}))
	assert.NoError(t, ValidateDrainConditions(nil))
	for _, bad := range [][]string{{""}, {"SlurmNodeDown"}, {"Ready"}} {
		assert.Error(t, ValidateDrainConditions(bad), "%v", bad)
	}
}
