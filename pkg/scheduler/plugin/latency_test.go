package plugin

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/kubeslurm/kubeslurm/pkg/metrics"
)

func TestLatencyMetrics(t *testing.T) {
	pod := newPod("p", nil)
	f := newFixture(t, pod)
	f.poll()
	waits, binds := metrics.SampleCount(metrics.AllocationWait), metrics.SampleCount(metrics.BindLatency)
	postBind := func() { f.plugin.PostBind(context.Background(), framework.NewCycleState(), pod, "n3") }

	_, _ = f.cycle(pod, nil) // submits job 1
	f.poll()
	postBind() // a binding without an allocation seen is not timed
	assert.Equal(t, waits, metrics.SampleCount(metrics.AllocationWait), "still pending")
	assert.Equal(t, binds, metrics.SampleCount(metrics.BindLatency))

	require.NoError(t, f.slurm.Allocate(1, "n3"))
	f.poll()
	assert.Equal(t, waits+1, metrics.SampleCount(metrics.AllocationWait))
	f.poll() // a later poll (no change) does not time it again
	assert.Equal(t, waits+1, metrics.SampleCount(metrics.AllocationWait))

	postBind()
	assert.Equal(t, binds+1, metrics.SampleCount(metrics.BindLatency))

	// Once the job ended it is forgotten: nothing more is timed for it.
	require.NoError(t, f.slurm.Cancel(context.Background(), 1))
	f.poll()
	postBind()
	assert.Equal(t, binds+1, metrics.SampleCount(metrics.BindLatency))
}
