package slurm_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubeslurm/kubeslurm/pkg/slurm"
)

func TestGPUIndices(t *testing.T) {
	for _, tc := range []struct {
		detail  string
		want    []int
		wantErr error
	}{
		{detail: "gpu:2(IDX:0-1)", want: []int{0, 1}},
		{detail: "gpu:3(IDX:0,2-3)", want: []int{0, 2, 3}},
		{detail: "gpu:a100:1(IDX:0),gpu:h100:2(IDX:2-3)", want: []int{0, 2, 3}},
		{detail: "shard:1(0/4,0/4),gpu:1(IDX:1)", want: []int{1}},
		{detail: "shard:2(IDX:0)"},
		{detail: ""},
		{detail: "gpu:1(IDX:N/A)", wantErr: slurm.ErrNoGPUIndex},
		{detail: "gpu:2", wantErr: slurm.ErrNoGPUIndex},
	} {
		t.Run(tc.detail, func(t *testing.T) {
			got, err := slurm.GPUIndices(tc.detail)
			if tc.wantErr != nil {
				assert.ErrorIs(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
	_, err := slurm.GPUIndices("gpu:1(IDX:x)")
	assert.ErrorContains(t, err, `bad GPU index range "x"`)
}

func TestJobGPUIndices(t *testing.T) {
	gpuJob := slurm.Job{ID: 7, Nodes: []string{"n1", "n2"}, TRESPerNode: "gres/gpu:2", GRESDetail: []string{"gpu:2(IDX:0-1)", "gpu:2(IDX:2-3)"}}
	got, err := gpuJob.GPUIndices("n2")
	require.NoError(t, err)
	assert.Equal(t, []int{2, 3}, got)
	_, err = gpuJob.GPUIndices("n3")
	assert.ErrorContains(t, err, "holds no node n3")

	countOnly := slurm.Job{ID: 8, Nodes: []string{"n1"}, TRESPerNode: "gres/gpu:2", GRESDetail: []string{"gpu:2"}}
	_, err = countOnly.GPUIndices("n1")
	assert.ErrorIs(t, err, slurm.ErrNoGPUIndex)

	noDetail := slurm.Job{ID: 9, Nodes: []string{"n1"}, TRESPerNode: "gres/gpu=1"}
	_, err = noDetail.GPUIndices("n1")
	assert.ErrorIs(t, err, slurm.ErrNoGPUIndex)

	cpuOnly := slurm.Job{ID: 10, Nodes: []string{"n1"}}
	got, err = cpuOnly.GPUIndices("n1")
	require.NoError(t, err)
	assert.Nil(t, got)
	assert.False(t, cpuOnly.WantsGPUs())
	mixed := slurm.Job{TRESPerNode: "gres/shard:1,gres/gpu:a100:1"}
	assert.True(t, mixed.WantsGPUs())
}
