// Package metrics defines kubeslurm's Prometheus series, shared by both binaries. The
// scheduler registers them in component-base's legacy registry (served by kube-scheduler's
// /metrics), the controller in controller-runtime's registry (its metrics server). The
// series are plain client_golang collectors so that one definition serves both registries.
package metrics

import (
	"errors"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Namespace prefixes every series.
const Namespace = "kubeslurm"

// Directions of DrainSyncLag.
const (
	// ToSlurm: a cordon (or unhealthy condition) and its end reach the Slurm node.
	ToSlurm = "to_slurm"
	// ToKubernetes: a Slurm drain or down and its end reach the node's taint.
	ToKubernetes = "to_kubernetes"
)

// latencyBuckets span a poll interval or two (seconds) up to the minutes a busy Slurm
// queue can take.
var latencyBuckets = []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600}

var (
	// PlaceholderJobs counts the placeholder jobs the Slurm watcher sees, by Slurm state.
	PlaceholderJobs = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "placeholder_jobs",
		Help: "Placeholder jobs (Slurm jobs standing for pods) in the Slurm watcher's last poll, by Slurm job state.",
	}, []string{"state"})

	// SubmitDuration is the duration of the slurmrestd submit call of a placeholder job.
	SubmitDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: Namespace, Name: "job_submit_duration_seconds",
		Help:    "Duration of slurmrestd's submit of a placeholder job, failed submits included.",
		Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15},
	})

	// AllocationWait is the time from a placeholder job's submit to the first poll that
	// shows it allocated.
	AllocationWait = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: Namespace, Name: "allocation_wait_seconds",
		Help:    "Time from a placeholder job's submit to the scheduler's first sight of its allocation in Slurm.",
		Buckets: latencyBuckets,
	})

	// BindLatency is the time from the first sight of an allocation to the binding of
	// each pod of the job.
	BindLatency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: Namespace, Name: "bind_latency_seconds",
		Help:    "Time from the scheduler's first sight of a placeholder job's allocation to the binding of each of its pods.",
		Buckets: latencyBuckets,
	})

	// SlurmRequests counts slurmrestd calls by operation and outcome code.
	SlurmRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "slurmrestd_requests_total",
		Help: "slurmrestd calls by operation and code: ok, the HTTP status of a failed call, or none when slurmrestd gave no answer.",
	}, []string{"operation", "code"})

	// SlurmRequestErrors counts failed slurmrestd calls by operation and kind of failure.
	SlurmRequestErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "slurmrestd_request_errors_total",
		Help: "Failed slurmrestd calls by operation and reason: unavailable, not_found or rejected.",
	}, []string{"operation", "reason"})

	// SlurmResponseBytes counts the bytes of slurmrestd's answers, whatever the call: what
	// reading Slurm costs the process.
	SlurmResponseBytes = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: Namespace, Name: "slurmrestd_response_bytes_total",
		Help: "Bytes of slurmrestd's answers (their bodies), all calls together.",
	})

	// DrainSyncLag is how long a drain took to cross from one side to the other.
	DrainSyncLag = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: Namespace, Name: "drain_sync_lag_seconds",
		Help: "Time from the controller noticing a drain change on one side to applying it on the other: " +
			"to_slurm (cordon or condition to Slurm drain or undrain), to_kubernetes (Slurm drain or down to node taint or its removal).",
		Buckets: latencyBuckets,
	}, []string{"direction"})
)

// All is every collector of the package, in the order of docs/metrics.md.
func All() []prometheus.Collector {
	return []prometheus.Collector{
		PlaceholderJobs, SubmitDuration, AllocationWait, BindLatency, SlurmRequests, SlurmRequestErrors, SlurmResponseBytes, DrainSyncLag,
	}
}

var (
	registerOnce sync.Once
	registerErr  error
)

// Register registers every collector once per process (a binary has one registry for
// them); later calls return the first call's result.
func Register(r prometheus.Registerer) error {
	registerOnce.Do(func() {
		for _, c := range All() {
			if err := r.Register(c); err != nil {
				var already prometheus.AlreadyRegisteredError
				if !errors.As(err, &already) {
					registerErr = errors.Join(registerErr, err)
				}
			}
		}
	})
	return registerErr
}

// SetPlaceholderJobs publishes the count of placeholder jobs per state. A state seen
// before and absent now drops to 0, so a series never vanishes between scrapes.
func SetPlaceholderJobs(counts map[string]int) {
	placeholderMu.Lock()
	defer placeholderMu.Unlock()
	for state := range placeholderStates {
		if _, ok := counts[state]; !ok {
			PlaceholderJobs.WithLabelValues(state).Set(0)
		}
	}
	for state, n := range counts {
		placeholderStates[state] = true
		PlaceholderJobs.WithLabelValues(state).Set(float64(n))
	}
}

var (
	placeholderMu sync.Mutex
	// placeholderStates are the states ever published; pending and running always are.
	placeholderStates = map[string]bool{"PENDING": true, "RUNNING": true}
)

// SampleCount is the number of observations of a histogram (for tests: client_golang's
// testutil reads counters and gauges only).
func SampleCount(h prometheus.Metric) uint64 {
	n, _ := Samples(h)
	return n
}

// Samples is the number and the sum of the observations of a histogram.
func Samples(h prometheus.Metric) (uint64, float64) {
	m := &dto.Metric{}
	if err := h.Write(m); err != nil || m.Histogram == nil {
		return 0, 0
	}
	return m.Histogram.GetSampleCount(), m.Histogram.GetSampleSum()
}
