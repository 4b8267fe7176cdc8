package slurmcluster

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	slurmv1 "github.com/kubeslurm/kubeslurm/api/v1alpha1"
	"github.com/kubeslurm/kubeslurm/pkg/slurm"
	"github.com/kubeslurm/kubeslurm/pkg/slurm/slurmtest"
)

func TestSummarize(t *testing.T) {
	for _, tc := range []struct {
		name  string
		nodes []slurm.Node
		want  slurmv1.NodeStateSummary
		line  string
	}{
		{"none", nil, slurmv1.NodeStateSummary{}, "none"},
		{"each state once, flags counted by the main one", []slurm.Node{
			{States: []string{"IDLE", "DYNAMIC_NORM"}},
			{States: []string{"MIXED"}},
			{States: []string{"ALLOCATED"}},
			{States: []string{"IDLE", "DRAIN"}},
			{States: []string{"ALLOCATED", "DRAIN"}},
			{States: []string{"DOWN", "DRAIN", "NOT_RESPONDING"}},
		}, slurmv1.NodeStateSummary{Idle: 1, Mixed: 1, Allocated: 1, Drained: 2, Down: 1}, "idle=1 mixed=1 alloc=1 drain=2 down=1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := summarize(tc.nodes)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, tc.line, summaryLine(got))
		})
	}
}

// The signing key is made once and read back, the same key each time; its JWKS names it.
func TestLoadIdentity(t *testing.T) {
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	kube := fake.NewClientBuilder().WithScheme(scheme).Build()
	ctx := context.Background()
	a, err := LoadIdentity(ctx, kube, kube, "kubeslurm-system", "signing")
	require.NoError(t, err)
	s := &v1.Secret{}
	require.NoError(t, kube.Get(ctx, client.ObjectKey{Namespace: "kubeslurm-system", Name: "signing"}, s))
	b, err := LoadIdentity(ctx, kube, kube, "kubeslurm-system", "signing")
	require.NoError(t, err)
	assert.True(t, a.Key.Equal(b.Key), "the stored key is used again")
	assert.Equal(t, a.KeyID, b.KeyID)
	var jwks struct {
		Keys []map[string]string `json:"keys"`
	}
	require.NoError(t, json.Unmarshal(a.JWKS(), &jwks))
	require.Len(t, jwks.Keys, 1)
	assert.Equal(t, a.KeyID, jwks.Keys[0]["kid"])
	assert.Equal(t, "RS256", jwks.Keys[0]["alg"])

	s.Data[signingKeyName] = []byte("not a key")
	require.NoError(t, kube.Update(ctx, s))
	_, err = LoadIdentity(ctx, kube, kube, "kubeslurm-system", "signing")
	assert.ErrorContains(t, err, "no PEM block", "a broken key is an error, not replaced")
}

// Workers are labelled busy while their Slurm node runs jobs; the cluster's
// PodDisruptionBudget selects the busy ones and allows none of them to go.
func TestBusyWorkersProtected(t *testing.T) {
	f := newWorkersFixture(t, 2)
	pdb := &policyv1.PodDisruptionBudget{}
	require.NoError(t, f.kube.Get(context.Background(), client.ObjectKey{Namespace: "hpc", Name: "slurm-busy-workers"}, pdb))
	assert.Equal(t, int32(0), pdb.Spec.MinAvailable.IntVal, "no busy worker yet")
	assert.Nil(t, pdb.Spec.MaxUnavailable)
	assert.Equal(t, "true", pdb.Spec.Selector.MatchLabels[BusyLabel])
	assert.Equal(t, "slurmd", pdb.Spec.Selector.MatchLabels["app.kubernetes.io/component"])

	cl := f.cluster()
	nodes := []slurm.Node{{Name: "slurm-r-0", States: []string{"MIXED"}}, {Name: "slurm-r-1", States: []string{"IDLE"}}}
	require.NoError(t, f.r.markBusyWorkers(context.Background(), nodes, f.workerPods(cl)))
	pods := f.workers()
	assert.Equal(t, "true", pods["slurm-r-0"].Labels[BusyLabel])
	assert.NotContains(t, pods["slurm-r-1"].Labels, BusyLabel)
	require.NoError(t, f.r.ensureBusyWorkersPDB(context.Background(), cl))
	require.NoError(t, f.kube.Get(context.Background(), client.ObjectKey{Namespace: "hpc", Name: "slurm-busy-workers"}, pdb))
	assert.Equal(t, int32(1), pdb.Spec.MinAvailable.IntVal, "the one busy worker must stay")

	// Its jobs done, the worker may go again; a node Slurm does not list changes nothing.
	nodes = []slurm.Node{{Name: "slurm-r-0", States: []string{"IDLE"}}}
	require.NoError(t, f.r.markBusyWorkers(context.Background(), nodes, f.workerPods(cl)))
	assert.NotContains(t, f.workers()["slurm-r-0"].Labels, BusyLabel)
}

// The slurmrestd clients: one per address, reused, and dropped once idle (a new slurmrestd
// pod has a new address; the old one's client would stay forever).
func TestSlurmClientsDropIdle(t *testing.T) {
	var s slurmClients
	made := 0
	newClient := func() (slurm.Client, error) { made++; return slurmtest.New(), nil }
	t0 := time.Now()
	a, err := s.get("http://10.0.0.1:6820", t0, newClient)
	require.NoError(t, err)
	again, err := s.get("http://10.0.0.1:6820", t0.Add(time.Minute), newClient)
	require.NoError(t, err)
	assert.Same(t, a, again)
	_, err = s.get("http://10.0.0.2:6820", t0.Add(time.Minute), newClient)
	require.NoError(t, err)
	assert.Equal(t, 2, made)
	// Past clientIdle without use, 10.0.0.1's client is gone; 10.0.0.2 was used since.
	_, err = s.get("http://10.0.0.2:6820", t0.Add(2*time.Minute+clientIdle), newClient)
	require.NoError(t, err)
	assert.NotContains(t, s.clients, "http://10.0.0.1:6820")
	assert.Contains(t, s.clients, "http://10.0.0.2:6820")
	// A failed client is not kept.
	_, err = s.get("http://10.0.0.3:6820", t0, func() (slurm.Client, error) { return nil, errors.New("bad URL") })
	require.Error(t, err)
	assert.NotContains(t, s.clients, "http://10.0.0.3:6820")
}

func (f *fixture) workerPods(c *slurmv1.SlurmCluster) *v1.PodList {
	pods, err := f.r.listWorkerPods(context.Background(), c)
	require.NoError(f.t, err)
	return pods
}
