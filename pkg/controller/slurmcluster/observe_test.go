package slurmcluster

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	slurmv1 "github.com/kubeslurm/kubeslurm/api/v1alpha1"
	"github.com/kubeslurm/kubeslurm/pkg/slurm"
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
