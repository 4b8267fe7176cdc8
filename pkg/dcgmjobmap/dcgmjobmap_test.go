package dcgmjobmap

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

func TestScripts(t *testing.T) {
	s, err := Scripts("")
	require.NoError(t, err)
	assert.Equal(t, prolog, s[PrologKey], "the default directory leaves the scripts as shipped")
	assert.Equal(t, epilog, s[EpilogKey])

	s, err = Scripts("/run/dcgm/jobs")
	require.NoError(t, err)
	for _, key := range []string{PrologKey, EpilogKey} {
		assert.Contains(t, s[key], "DIR=${DCGM_JOB_MAPPING_DIR:-/run/dcgm/jobs}\n")
		assert.NotContains(t, s[key], DefaultDir)
	}
	for _, bad := range []string{"relative/dir", "/a b", "/x;rm -rf /", "/a/../b", "/$HOME"} {
		_, err := Scripts(bad)
		assert.ErrorContains(t, err, "want an absolute path", bad)
	}
}

// runScript runs a script as Slurm would, with the job's environment.
func runScript(t *testing.T, script, dir string, env ...string) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "script.sh")
	require.NoError(t, os.WriteFile(f, []byte(script), 0o755))
	cmd := exec.Command(f)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "DCGM_JOB_MAPPING_DIR=" + dir}, env...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
}

func read(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	out := map[string]string{}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		out[e.Name()] = string(b)
	}
	return out
}

func TestPrologAndEpilogKeepOneFilePerGPU(t *testing.T) {
	if _, err := exec.LookPath("flock"); err != nil {
		t.Skip("no flock(1) here")
	}
	dir := filepath.Join(t.TempDir(), "job-mapping")
	runScript(t, prolog, dir, "SLURM_JOB_ID=11", "SLURM_JOB_GPUS=0,2")
	runScript(t, prolog, dir, "SLURM_JOB_ID=12", "CUDA_VISIBLE_DEVICES=2,3")
	runScript(t, prolog, dir, "SLURM_JOB_ID=13")                       // no GPUs: nothing to write
	runScript(t, prolog, dir, "SLURM_JOB_ID=11", "SLURM_JOB_GPUS=0,2") // a prolog run twice
	assert.Equal(t, map[string]string{"0": "11\n", "2": "12\n11\n", "3": "12\n"}, read(t, dir))

	runScript(t, epilog, dir, "SLURM_JOB_ID=11", "SLURM_JOB_GPUS=0,2")
	assert.Equal(t, map[string]string{"2": "12\n", "3": "12\n"}, read(t, dir))
	runScript(t, epilog, dir, "SLURM_JOB_ID=12", "SLURM_JOB_GPUS=2,3")
	assert.Empty(t, read(t, dir))
	runScript(t, epilog, dir, "SLURM_JOB_ID=12", "SLURM_JOB_GPUS=2,3") // again: nothing left to do
}

func TestEnsureWritesTheConfigMap(t *testing.T) {
	c := fake.NewClientBuilder().Build()
	ctx := context.Background()
	require.NoError(t, Ensure(ctx, c, "kubeslurm-system", "dcgm", "/run/jobs"))
	cm := &v1.ConfigMap{}
	require.NoError(t, c.Get(ctx, types.NamespacedName{Namespace: "kubeslurm-system", Name: "dcgm"}, cm))
	assert.Contains(t, cm.Data[PrologKey], "/run/jobs")

	require.NoError(t, Ensure(ctx, c, "kubeslurm-system", "dcgm", ""), "an update")
	require.NoError(t, c.Get(ctx, types.NamespacedName{Namespace: "kubeslurm-system", Name: "dcgm"}, cm))
	assert.Equal(t, prolog, cm.Data[PrologKey])
	assert.Error(t, Ensure(ctx, c, "kubeslurm-system", "dcgm", "no/abs"))
}
