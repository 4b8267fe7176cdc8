package slurm_test

import (
	"context"
	"errors"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubeslurm/kubeslurm/pkg/metrics"
	"github.com/kubeslurm/kubeslurm/pkg/slurm"
	"github.com/kubeslurm/kubeslurm/pkg/slurm/slurmtest"
	"github.com/kubeslurm/kubeslurm/pkg/slurmjob"
)

// requests reads one series of kubeslurm_slurmrestd_requests_total.
func requests(op, code string) float64 {
	return testutil.ToFloat64(metrics.SlurmRequests.WithLabelValues(op, code))
}

func requestErrors(op, reason string) float64 {
	return testutil.ToFloat64(metrics.SlurmRequestErrors.WithLabelValues(op, reason))
}

func TestClientCountsRequests(t *testing.T) {
	f := slurmtest.New("n1")
	ctx := context.Background()
	spec := slurmjob.JobSpec{Nodes: 1, CPUsPerNode: 1, Pods: []slurmjob.PodRef{{Name: "p", UID: "u"}}}

	okSubmits, submits := requests("submit", "ok"), metrics.SampleCount(metrics.SubmitDuration)
	_, err := f.Submit(ctx, spec)
	require.NoError(t, err)
	assert.Equal(t, okSubmits+1, requests("submit", "ok"))
	assert.Equal(t, submits+1, metrics.SampleCount(metrics.SubmitDuration))

	// Slurm refusing the job: its HTTP status, and the reason "rejected".
	rejected, rejectedErrs := requests("submit", "500"), requestErrors("submit", "rejected")
	f.RejectSubmit = "Invalid partition name specified"
	_, err = f.Submit(ctx, spec)
	require.Error(t, err)
	assert.Equal(t, rejected+1, requests("submit", "500"))
	assert.Equal(t, rejectedErrs+1, requestErrors("submit", "rejected"))
	f.RejectSubmit = ""

	missing := requestErrors("get_job", "not_found")
	_, err = f.GetJob(ctx, 424242)
	require.True(t, slurm.IsNotFound(err))
	assert.Equal(t, missing+1, requestErrors("get_job", "not_found"))

	// No answer at all: code "none", reason "unavailable".
	none, unavailable := requests("list_jobs", "none"), requestErrors("list_jobs", "unavailable")
	f.FailWith = &url.Error{Op: "Get", URL: "http://slurmrestd", Err: &net.OpError{Op: "dial", Err: errors.New("connection refused")}}
	_, err = f.ListJobs(ctx)
	require.Error(t, err)
	assert.Equal(t, none+1, requests("list_jobs", "none"))
	assert.Equal(t, unavailable+1, requestErrors("list_jobs", "unavailable"))
}

func TestWatcherPublishesPlaceholderJobs(t *testing.T) {
	f := slurmtest.New("n1", "n2")
	ctx := context.Background()
	w := slurm.NewWatcher(f, time.Hour, time.Hour)
	submit := func(uid string) *slurm.Job {
		j, err := f.Submit(ctx, slurmjob.JobSpec{Nodes: 1, CPUsPerNode: 1, Pods: []slurmjob.PodRef{{Namespace: "ns", Name: uid, UID: types.UID("uid-" + uid)}}})
		require.NoError(t, err)
		return j
	}
	gauge := func(state string) float64 { return testutil.ToFloat64(metrics.PlaceholderJobs.WithLabelValues(state)) }

	a, _ := submit("a"), submit("b")
	require.NoError(t, w.Poll(ctx))
	assert.Equal(t, 2.0, gauge(slurm.StatePending))
	assert.Equal(t, 0.0, gauge(slurm.StateRunning))

	require.NoError(t, f.Allocate(a.ID, "n1"))
	require.NoError(t, w.Poll(ctx))
	assert.Equal(t, 1.0, gauge(slurm.StatePending))
	assert.Equal(t, 1.0, gauge(slurm.StateRunning))

	require.NoError(t, f.Cancel(ctx, a.ID))
	require.NoError(t, w.Poll(ctx))
	assert.Equal(t, 0.0, gauge(slurm.StateRunning), "a state gone stays as 0")
	assert.Equal(t, 1.0, gauge(slurm.StateCancelled))
}
