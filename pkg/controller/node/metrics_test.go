package node

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"

	"github.com/kubeslurm/kubeslurm/pkg/metrics"
)

func TestDrainSyncLag(t *testing.T) {
	f := newFixture(t, cordoned(newNode("n1")))
	f.Watcher.OnChange(f.r.noteSlurmChanges)
	now := t0
	f.r.now = func() time.Time { return now }
	lag := func(direction string) (uint64, float64) {
		return metrics.Samples(metrics.DrainSyncLag.WithLabelValues(direction).(prometheus.Metric))
	}
	toSlurm, toSlurmSum := lag(metrics.ToSlurm)
	toKube, toKubeSum := lag(metrics.ToKubernetes)

	// The cordon is noticed while slurmrestd is down, and reaches Slurm 3 s later.
	f.Poll()
	f.Slurm.FailWith = unreachable
	_, err := f.reconcile("n1")
	require.Error(t, err)
	f.Slurm.FailWith = nil
	now = now.Add(3 * time.Second)
	_, err = f.reconcile("n1")
	require.NoError(t, err)
	n, sum := lag(metrics.ToSlurm)
	assert.Equal(t, toSlurm+1, n)
	assert.InDelta(t, toSlurmSum+3, sum, 1e-9)

	// The poll that shows the drain starts the other way; the taint follows 2 s later.
	now = now.Add(time.Second)
	f.Poll()
	now = now.Add(2 * time.Second)
	_, err = f.reconcile("n1")
	require.NoError(t, err)
	require.NotNil(t, taintOf(f.node("n1")))
	n, sum = lag(metrics.ToKubernetes)
	assert.Equal(t, toKube+1, n)
	assert.InDelta(t, toKubeSum+2, sum, 1e-9)

	// Nothing to carry across: nothing is timed.
	f.sync("n1")
	f.sync("n1")
	n, _ = lag(metrics.ToSlurm)
	assert.Equal(t, toSlurm+1, n)
	n, _ = lag(metrics.ToKubernetes)
	assert.Equal(t, toKube+1, n)
	assert.Equal(t, v1.TaintEffectNoSchedule, taintOf(f.node("n1")).Effect)
}
