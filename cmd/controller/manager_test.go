package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	slurmv1 "github.com/kubeslurm/kubeslurm/api/v1alpha1"
)

const kubeconfig = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`

func TestNewManager(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(path, []byte(kubeconfig), 0o600))
	off := ctrl.Options{Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"}

	mgr, err := newManager(path, off, slurmv1.AddToScheme)
	require.NoError(t, err)
	assert.True(t, mgr.GetScheme().Recognizes(v1.SchemeGroupVersion.WithKind("Pod")), "client-go's types always")
	assert.True(t, mgr.GetScheme().Recognizes(slurmv1.GroupVersion.WithKind("SlurmCluster")), "and the ones asked for")

	mgr, err = newManager(path, off)
	require.NoError(t, err)
	assert.False(t, mgr.GetScheme().Recognizes(slurmv1.GroupVersion.WithKind("SlurmCluster")), "only the ones asked for")

	_, err = newManager(filepath.Join(t.TempDir(), "missing"), off)
	assert.ErrorContains(t, err, "loading kubeconfig")
}
