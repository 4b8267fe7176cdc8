package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRegisterOnce(t *testing.T) {
	r := prometheus.NewPedanticRegistry()
	require.NoError(t, Register(r))
	require.NoError(t, Register(prometheus.NewRegistry()), "later calls are no-ops")
	SetPlaceholderJobs(map[string]int{"PENDING": 1})
	n, err := testutil.GatherAndCount(r, "kubeslurm_placeholder_jobs")
	require.NoError(t, err)
	assert.GreaterOrEqual(t, n, 2, "pending and running are always there")
	problems, err := testutil.GatherAndLint(r)
	require.NoError(t, err)
	assert.Empty(t, problems, "names, units and help as Prometheus recommends")
}

func TestSetPlaceholderJobs(t *testing.T) {
	gauge := func(state string) float64 { return testutil.ToFloat64(PlaceholderJobs.WithLabelValues(state)) }
	SetPlaceholderJobs(map[string]int{"RUNNING": 3, "COMPLETED": 2})
	assert.Equal(t, 3.0, gauge("RUNNING"))
	assert.Equal(t, 2.0, gauge("COMPLETED"))
	assert.Equal(t, 0.0, gauge("PENDING"))
	SetPlaceholderJobs(map[string]int{"PENDING": 1})
	assert.Equal(t, 1.0, gauge("PENDING"))
	assert.Equal(t, 0.0, gauge("RUNNING"), "a state gone drops to 0")
	assert.Equal(t, 0.0, gauge("COMPLETED"))
}
