package dcgmjobmap

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readAll is every file of dir, the dot files too (the state file).
func readAll(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	out := map[string]string{}
	for _, e := range entries {
		if e.Name() == LockFile {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		out[e.Name()] = string(b)
	}
	return out
}

func TestSync(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string // before, the state file included
		want  Mapping
		after map[string]string
	}{{
		name:  "empty directory, nothing wanted",
		after: map[string]string{},
	}, {
		name:  "a pod's job on two GPUs",
		want:  Mapping{0: {12}, 1: {12}},
		after: map[string]string{"0": "12\n", "1": "12\n", StateFile: "0 12\n1 12\n"},
	}, {
		name:  "beside a prolog's line, added after it",
		files: map[string]string{"1": "7\n"},
		want:  Mapping{1: {12}, 2: {12}},
		after: map[string]string{"1": "7\n12\n", "2": "12\n", StateFile: "1 12\n2 12\n"},
	}, {
		name:  "the job ended: its lines go, the prolog's stay, empty files go",
		files: map[string]string{"1": "7\n12\n", "2": "12\n", StateFile: "1 12\n2 12\n"},
		after: map[string]string{"1": "7\n"},
	}, {
		name:  "nothing to do twice",
		files: map[string]string{"0": "12\n", StateFile: "0 12\n"},
		want:  Mapping{0: {12}},
		after: map[string]string{"0": "12\n", StateFile: "0 12\n"},
	}, {
		name:  "an id the agent did not write is neither claimed nor removed",
		files: map[string]string{"0": "12\n"},
		want:  Mapping{0: {12}},
		after: map[string]string{"0": "12\n"},
	}, {
		name:  "an id nobody wrote is never removed, even if not wanted",
		files: map[string]string{"3": "9\n"},
		after: map[string]string{"3": "9\n"},
	}, {
		name:  "a line of the agent's removed by hand is written again",
		files: map[string]string{"0": "7\n", StateFile: "0 12\n"},
		want:  Mapping{0: {12}},
		after: map[string]string{"0": "7\n12\n", StateFile: "0 12\n"},
	}, {
		name:  "one job moves on, another comes: shared GPU",
		files: map[string]string{"0": "12\n", "1": "12\n", StateFile: "0 12\n1 12\n"},
		want:  Mapping{1: {14, 13}},
		after: map[string]string{"1": "13\n14\n", StateFile: "1 13\n1 14\n"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, content := range tc.files {
				require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
			}
			require.NoError(t, Sync(dir, tc.want))
			assert.Equal(t, tc.after, readAll(t, dir))
			require.NoError(t, Sync(dir, tc.want), "again")
			assert.Equal(t, tc.after, readAll(t, dir), "a second sync changes nothing")
		})
	}
}

func TestSyncRefusesABrokenStateFile(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{"0": "7\n12\n", StateFile: "0 twelve\n"}
	for name, content := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
	}
	assert.ErrorContains(t, Sync(dir, nil), `line 1: "0 twelve" is no "<gpu> <job id>"`)
	assert.Equal(t, files, readAll(t, dir), "nothing changed")
}

// The agent and the shipped scripts share the directory: the prolog's and epilog's work
// for a batch job and the agent's for a pod's job leave each other's lines alone.
func TestSyncBesideTheScripts(t *testing.T) {
	if _, err := exec.LookPath("flock"); err != nil {
		t.Skip("no flock(1) here")
	}
	dir := filepath.Join(t.TempDir(), "job-mapping")
	runScript(t, prolog, dir, "SLURM_JOB_ID=11", "SLURM_JOB_GPUS=0,1")
	require.NoError(t, Sync(dir, Mapping{1: {20}, 2: {20}}))
	assert.Equal(t, map[string]string{"0": "11\n", "1": "11\n20\n", "2": "20\n"}, read(t, dir))

	runScript(t, epilog, dir, "SLURM_JOB_ID=11", "SLURM_JOB_GPUS=0,1")
	assert.Equal(t, map[string]string{"1": "20\n", "2": "20\n"}, read(t, dir))
	runScript(t, prolog, dir, "SLURM_JOB_ID=13", "SLURM_JOB_GPUS=2")
	require.NoError(t, Sync(dir, nil))
	assert.Equal(t, map[string]string{"2": "13\n"}, read(t, dir))
}
