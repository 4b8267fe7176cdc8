package jobmapping

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kubeslurm/kubeslurm/pkg/dcgmjobmap"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

func pod(name, node, job, gpus string, phase v1.PodPhase) v1.Pod {
	p := v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: map[string]string{}, Annotations: map[string]string{}},
		Spec:       v1.PodSpec{NodeName: node},
		Status:     v1.PodStatus{Phase: phase},
	}
	if job != "" {
		p.Labels[wellknown.JobIDLabel] = job
	}
	if gpus != "" {
		p.Annotations[wellknown.GPUIndicesAnnotation] = gpus
	}
	return p
}

func TestDesired(t *testing.T) {
	for _, tc := range []struct {
		name     string
		pods     []v1.Pod
		want     dcgmjobmap.Mapping
		problems []string
	}{{
		name: "no pods",
		want: dcgmjobmap.Mapping{},
	}, {
		name: "running and pending-bound pods on the node",
		pods: []v1.Pod{pod("a", "node-1", "12", "0,1", v1.PodRunning), pod("b", "node-1", "13", "2", v1.PodPending)},
		want: dcgmjobmap.Mapping{0: {12}, 1: {12}, 2: {13}},
	}, {
		name: "left out: other node, ended, no GPUs, not yet a job",
		pods: []v1.Pod{
			pod("other", "node-2", "12", "0", v1.PodRunning),
			pod("done", "node-1", "13", "1", v1.PodSucceeded),
			pod("failed", "node-1", "14", "2", v1.PodFailed),
			pod("cpu", "node-1", "15", "", v1.PodRunning),
		},
		want: dcgmjobmap.Mapping{},
	}, {
		name: "unreadable id or indices: that pod is left out, with why",
		pods: []v1.Pod{
			pod("noid", "node-1", "", "0", v1.PodRunning),
			pod("badidx", "node-1", "16", "0,x", v1.PodRunning),
			pod("ok", "node-1", "17", "3", v1.PodRunning),
		},
		want: dcgmjobmap.Mapping{3: {17}},
		problems: []string{
			`ns/noid: label kubeslurm.io/job-id="" is no Slurm job id`,
			`ns/badidx: annotation kubeslurm.io/gpu-indices="0,x": "x" is no GPU index`,
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, problems := Desired(tc.pods, "node-1")
			assert.Equal(t, tc.want, got)
			assert.Equal(t, tc.problems, problems)
		})
	}
}

func TestReconcileWritesAndRemovesTheNodesLines(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "1"), []byte("7\n"), 0o644)) // a prolog's
	a := pod("a", "node-1", "12", "0,1", v1.PodRunning)
	c := fake.NewClientBuilder().WithObjects(&a).Build()
	r := &Reconciler{Client: c, Node: "node-1", Dir: dir}
	ctx := context.Background()
	_, err := r.Reconcile(ctx, reconcile.Request{})
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"0": "12\n", "1": "7\n12\n"}, numbered(t, dir))

	require.NoError(t, c.Delete(ctx, &a))
	_, err = r.Reconcile(ctx, reconcile.Request{})
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"1": "7\n"}, numbered(t, dir))
}

func numbered(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, name := range []string{"0", "1", "2", "3"} {
		if b, err := os.ReadFile(filepath.Join(dir, name)); err == nil {
			out[name] = string(b)
		}
	}
	return out
}
