package topology

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/kubeslurm/kubeslurm/pkg/controller/controllertest"
	"github.com/kubeslurm/kubeslurm/pkg/slurm"
	"github.com/kubeslurm/kubeslurm/pkg/topology"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

const clique = "nvidia.com/gpu.clique"

// fakeSlurm is slurmctld's nodes, the watcher's view of them, and the calls made.
type fakeSlurm struct {
	mu     sync.Mutex
	synced bool
	nodes  map[string]slurm.Node
	// watched, when set, is a watcher lagging behind nodes.
	watched      map[string]slurm.Node
	listErr      error
	reconfigures int
	reconfigErr  error
	sets         []string
}

func (f *fakeSlurm) view() map[string]slurm.Node {
	if f.watched != nil {
		return f.watched
	}
	return f.nodes
}
func (f *fakeSlurm) Synced() bool { return f.synced }
func (f *fakeSlurm) NodeNames() []string {
	var out []string
	for n := range f.view() {
		out = append(out, n)
	}
	return out
}
func (f *fakeSlurm) Node(name string) (slurm.Node, bool) { n, ok := f.view()[name]; return n, ok }
func (f *fakeSlurm) ListNodes(context.Context) ([]slurm.Node, error) {
	if f.listErr != nil {
		return nil, f.listErr
	}
	var out []slurm.Node
	for _, n := range f.nodes {
		out = append(out, n)
	}
	return out, nil
}
func (f *fakeSlurm) Reconfigure(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.reconfigErr != nil {
		return f.reconfigErr
	}
	f.reconfigures++
	return nil
}
func (f *fakeSlurm) SetNodeTopology(_ context.Context, name, topo string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sets = append(f.sets, name+"="+topo)
	n := f.nodes[name]
	n.Topology = topo
	f.nodes[name] = n
	return nil
}

func node(name, block string) *v1.Node {
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if block != "" {
		n.Labels = map[string]string{clique: block}
	}
	return n
}

type fixture struct {
	controllertest.API
	slurm *fakeSlurm
	r     *Reconciler
	file  string
}

func newFixture(t *testing.T, slurmNodes []string, objs ...client.Object) *fixture {
	f := &fixture{API: controllertest.NewAPI(fake.NewClientBuilder().WithObjects(objs...)), slurm: &fakeSlurm{synced: true, nodes: map[string]slurm.Node{}}}
	for _, n := range slurmNodes {
		f.slurm.nodes[n] = slurm.Node{Name: n}
	}
	f.file = filepath.Join(t.TempDir(), "topology.yaml")
	f.r = &Reconciler{Client: f.Kube, Slurm: f.slurm, Nodes: f.slurm, Recorder: f.Recorder, File: f.file,
		Config: topology.Config{Name: "kubeslurm", LabelKeys: []string{clique}, Annotation: wellknown.TopologyBlockAnnotation, DefaultBlock: "unlabelled", BlockSizes: []int{4}}}
	return f
}

// relabel puts Kubernetes node name in clique block.
func (f *fixture) relabel(t *testing.T, name, block string) {
	var n v1.Node
	require.NoError(t, f.Kube.Get(context.Background(), client.ObjectKey{Name: name}, &n))
	n.Labels[clique] = block
	require.NoError(t, f.Kube.Update(context.Background(), &n))
}

func (f *fixture) reconcile(t *testing.T) (ctrl.Result, error) {
	return f.r.Reconcile(context.Background(), request)
}

func TestWritesFileAndReconfiguresOnlyOnChange(t *testing.T) {
	f := newFixture(t, []string{"n1", "n2", "login"}, node("n1", "a"), node("n2", "b"))
	_, err := f.reconcile(t)
	require.NoError(t, err)
	content, err := os.ReadFile(f.file)
	require.NoError(t, err)
	assert.Contains(t, string(content), "- block: a\n        nodes: n1\n")
	assert.Contains(t, string(content), "- block: b\n        nodes: n2\n")
	assert.Contains(t, string(content), "- block: unlabelled\n        nodes: login\n", "a Slurm-only node is in the default block")
	assert.Equal(t, 1, f.slurm.reconfigures)
	assert.Contains(t, f.Events(), "TopologyBlockChanged in Slurm block a")

	// Nothing changed: no write, no reconfigure.
	_, err = f.reconcile(t)
	require.NoError(t, err)
	assert.Equal(t, 1, f.slurm.reconfigures)

	// Relabel n2: one reconfigure, and the node is told it moved.
	f.r.MinReconfigureInterval = 0
	f.relabel(t, "n2", "a")
	_, err = f.reconcile(t)
	require.NoError(t, err)
	assert.Equal(t, 2, f.slurm.reconfigures)
	content, _ = os.ReadFile(f.file)
	assert.Contains(t, string(content), "- block: a\n        nodes: n1,n2\n")
	assert.Contains(t, f.Events(), "moved from Slurm block b to a")
}

func TestReconfigureFailureIsRetried(t *testing.T) {
	f := newFixture(t, []string{"n1"}, node("n1", "a"))
	f.slurm.reconfigErr = errors.New("slurmrestd unavailable")
	_, err := f.reconcile(t)
	require.ErrorContains(t, err, "did not re-read it")
	// The file is written but Slurm did not read it: the next reconcile asks again.
	f.slurm.reconfigErr = nil
	_, err = f.reconcile(t)
	require.NoError(t, err)
	assert.Equal(t, 1, f.slurm.reconfigures)
}

func TestRateLimitsReconfigures(t *testing.T) {
	f := newFixture(t, []string{"n1"}, node("n1", "a"))
	f.r.MinReconfigureInterval = 1 << 40
	_, err := f.reconcile(t)
	require.NoError(t, err)
	f.slurm.nodes["n2"] = slurm.Node{Name: "n2"}
	res, err := f.reconcile(t)
	require.NoError(t, err)
	assert.Positive(t, res.RequeueAfter, "a second change waits for the interval")
	assert.Equal(t, 1, f.slurm.reconfigures)
}

func TestNotSyncedWritesNothing(t *testing.T) {
	f := newFixture(t, nil, node("n1", "a"))
	f.slurm.synced = false
	f.r.NotSyncedRetry = 1
	res, err := f.reconcile(t)
	require.NoError(t, err)
	assert.Positive(t, res.RequeueAfter)
	_, err = os.Stat(f.file)
	assert.True(t, os.IsNotExist(err), "no file before Slurm's nodes are known")
	assert.Zero(t, f.slurm.reconfigures)
}

func TestNodeOwnTopologyBroughtToItsBlock(t *testing.T) {
	f := newFixture(t, []string{"n1", "n2"}, node("n1", "a"), node("n2", "b"))
	f.slurm.nodes["n1"] = slurm.Node{Name: "n1", Topology: "kubeslurm:b"}
	f.slurm.nodes["n2"] = slurm.Node{Name: "n2", Topology: "kubeslurm:b"}
	_, err := f.reconcile(t)
	require.NoError(t, err)
	assert.Equal(t, []string{"n1=kubeslurm:a"}, f.slurm.sets, "only the node whose own setting differs")
	assert.Contains(t, f.Events(), "Slurm node's own topology kubeslurm:b replaced by kubeslurm:a")
}

func TestInvalidBlockNameToldOnce(t *testing.T) {
	bad := node("n1", "")
	bad.Annotations = map[string]string{wellknown.TopologyBlockAnnotation: "a:b"}
	f := newFixture(t, []string{"n1"}, bad)
	_, err := f.reconcile(t)
	require.NoError(t, err)
	ev := f.Events()
	assert.Contains(t, ev, "Warning InvalidTopologyBlock")
	assert.Contains(t, ev, "the node is in block unlabelled")
	f.r.MinReconfigureInterval = 0
	_, err = f.reconcile(t)
	require.NoError(t, err)
	assert.NotContains(t, f.Events(), "InvalidTopologyBlock")
}

func TestBlockNamedByANodeSettingKeptUntilTheSettingMoves(t *testing.T) {
	f := newFixture(t, []string{"n1"}, node("n1", "a"))
	f.r.MinReconfigureInterval = 0
	f.slurm.nodes["n1"] = slurm.Node{Name: "n1", Topology: "kubeslurm:old"}
	_, err := f.reconcile(t)
	require.NoError(t, err)
	content, _ := os.ReadFile(f.file)
	assert.Contains(t, string(content), "- block: old\n", "slurmctld would exit on a reconfigure dropping it")
	assert.Equal(t, []string{"n1=kubeslurm:a"}, f.slurm.sets)

	// The watcher now shows the new setting: the old block goes.
	_, err = f.reconcile(t)
	require.NoError(t, err)
	content, _ = os.ReadFile(f.file)
	assert.NotContains(t, string(content), "old")
	assert.Equal(t, 2, f.slurm.reconfigures)
}

// The watcher still shows an earlier setting of n1 (block b) after the setting was moved
// back to block a in slurmctld. Relabelled to b, n1's old block a must stay in the file
// until slurmctld itself shows n1's setting moved: on the watcher's word alone block a
// would be dropped, and slurmctld would exit on the reconfigure.
func TestLaggingWatcherDoesNotDropABlockSlurmStillNames(t *testing.T) {
	f := newFixture(t, []string{"n1", "n2"}, node("n1", "a"), node("n2", "b"))
	f.r.MinReconfigureInterval = 0
	f.slurm.nodes["n1"] = slurm.Node{Name: "n1", Topology: "kubeslurm:a"}
	_, err := f.reconcile(t)
	require.NoError(t, err)
	require.Empty(t, f.slurm.sets)

	f.slurm.watched = map[string]slurm.Node{"n1": {Name: "n1", Topology: "kubeslurm:b"}, "n2": {Name: "n2"}}
	f.relabel(t, "n1", "b")
	_, err = f.reconcile(t)
	require.NoError(t, err)
	content, _ := os.ReadFile(f.file)
	assert.Contains(t, string(content), "- block: a\n", "slurmctld still has n1's own setting in block a")
	assert.Equal(t, []string{"n1=kubeslurm:b"}, f.slurm.sets, "the setting is moved by slurmctld's value, not the watcher's")

	f.slurm.watched = nil
	_, err = f.reconcile(t)
	require.NoError(t, err)
	content, _ = os.ReadFile(f.file)
	assert.NotContains(t, string(content), "block: a\n")
}

func TestUnreadableSlurmWritesNoTopologyChange(t *testing.T) {
	f := newFixture(t, []string{"n1"}, node("n1", "a"))
	f.slurm.listErr = errors.New("slurmrestd unavailable")
	_, err := f.reconcile(t)
	require.ErrorContains(t, err, "reading Slurm's nodes")
	_, statErr := os.Stat(f.file)
	assert.True(t, os.IsNotExist(statErr), "nothing written on the watcher's word alone")
	assert.Zero(t, f.slurm.reconfigures)
}

// Once a setting has moved in slurmctld, a watcher still showing the old one does not move
// it again (nor tell the node twice).
func TestLaggingWatcherDoesNotMoveASettingTwice(t *testing.T) {
	f := newFixture(t, []string{"n1"}, node("n1", "a"))
	f.slurm.nodes["n1"] = slurm.Node{Name: "n1", Topology: "kubeslurm:b"}
	_, err := f.reconcile(t)
	require.NoError(t, err)
	require.Equal(t, []string{"n1=kubeslurm:a"}, f.slurm.sets)
	f.Events()

	f.slurm.watched = map[string]slurm.Node{"n1": {Name: "n1", Topology: "kubeslurm:b"}}
	_, err = f.reconcile(t)
	require.NoError(t, err)
	assert.Equal(t, []string{"n1=kubeslurm:a"}, f.slurm.sets, "slurmctld already has it")
	assert.NotContains(t, f.Events(), "replaced by")
}
