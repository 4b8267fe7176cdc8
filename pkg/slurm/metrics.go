package slurm

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kubeslurm/kubeslurm/pkg/metrics"
	"github.com/kubeslurm/kubeslurm/pkg/slurmjob"
)

// Operation names of the slurmrestd metrics (label "operation").
const (
	opSubmit    = "submit"
	opCancel    = "cancel"
	opNudge     = "nudge"
	opGetJob    = "get_job"
	opListJobs  = "list_jobs"
	opListNodes = "list_nodes"
	// opJobStates is a state read of named jobs; opNodesSince a node listing asked only
	// for a change (whether or not there was one).
	opJobStates  = "job_states"
	opNodesSince = "list_nodes_since"
	opPing       = "ping"
	opGetNode    = "get_node"
	opDrainNode  = "drain_node"
	opUndrain    = "undrain_node"
	opDeleteNode = "delete_node"
	opTopology   = "set_node_topology"
	opReconfig   = "reconfigure"
)

var operations = []string{
	opSubmit, opCancel, opNudge, opGetJob, opListJobs, opJobStates, opListNodes, opNodesSince, opPing, opGetNode, opDrainNode, opUndrain, opDeleteNode,
	opTopology, opReconfig,
}

// instrumented counts every call of the Client it wraps: the one place slurmrestd calls
// are measured, whoever makes them.
type instrumented struct{ next Client }

var initSeries sync.Once

func instrument(c Client) Client {
	// Every operation's series exist from the start at 0, so a rate or an alert on errors
	// works before the first one happens.
	initSeries.Do(func() {
		for _, op := range operations {
			metrics.SlurmRequests.WithLabelValues(op, "ok")
			for _, k := range []Kind{KindUnavailable, KindNotFound, KindRejected} {
				metrics.SlurmRequestErrors.WithLabelValues(op, reason(k))
			}
		}
	})
	return &instrumented{next: c}
}

// reason is a Kind as a label value.
func reason(k Kind) string { return strings.ReplaceAll(k.String(), " ", "_") }

// observe records one call's outcome and passes its error on.
func observe(op string, err error) error {
	if err == nil {
		metrics.SlurmRequests.WithLabelValues(op, "ok").Inc()
		return nil
	}
	code := "none"
	var e *Error
	if errors.As(err, &e) && e.Code != 0 {
		code = strconv.Itoa(e.Code)
	}
	metrics.SlurmRequests.WithLabelValues(op, code).Inc()
	metrics.SlurmRequestErrors.WithLabelValues(op, reason(kindOf(err))).Inc()
	return err
}

func (c *instrumented) Submit(ctx context.Context, spec slurmjob.JobSpec) (*Job, error) {
	start := time.Now()
	j, err := c.next.Submit(ctx, spec)
	metrics.SubmitDuration.Observe(time.Since(start).Seconds())
	return j, observe(opSubmit, err)
}

func (c *instrumented) Cancel(ctx context.Context, id int32) error {
	return observe(opCancel, c.next.Cancel(ctx, id))
}

func (c *instrumented) Nudge(ctx context.Context, pending *Job) error {
	return observe(opNudge, c.next.Nudge(ctx, pending))
}

func (c *instrumented) GetJob(ctx context.Context, id int32) (*Job, error) {
	j, err := c.next.GetJob(ctx, id)
	return j, observe(opGetJob, err)
}

func (c *instrumented) ListJobs(ctx context.Context) ([]Job, error) {
	l, err := c.next.ListJobs(ctx)
	return l, observe(opListJobs, err)
}

func (c *instrumented) JobStates(ctx context.Context, ids []int32) (map[int32]JobStatus, error) {
	m, err := c.next.JobStates(ctx, ids)
	return m, observe(opJobStates, err)
}

func (c *instrumented) ListNodesSince(ctx context.Context, lastUpdate int64) (*NodeListing, error) {
	l, err := c.next.ListNodesSince(ctx, lastUpdate)
	return l, observe(opNodesSince, err)
}

func (c *instrumented) ListNodes(ctx context.Context) ([]Node, error) {
	l, err := c.next.ListNodes(ctx)
	return l, observe(opListNodes, err)
}

func (c *instrumented) Ping(ctx context.Context) error { return observe(opPing, c.next.Ping(ctx)) }

func (c *instrumented) GetNode(ctx context.Context, name string) (*Node, error) {
	n, err := c.next.GetNode(ctx, name)
	return n, observe(opGetNode, err)
}

func (c *instrumented) DrainNode(ctx context.Context, name, reason string) error {
	return observe(opDrainNode, c.next.DrainNode(ctx, name, reason))
}

func (c *instrumented) UndrainNode(ctx context.Context, name string) error {
	return observe(opUndrain, c.next.UndrainNode(ctx, name))
}

func (c *instrumented) DeleteNode(ctx context.Context, name string) error {
	return observe(opDeleteNode, c.next.DeleteNode(ctx, name))
}

func (c *instrumented) SetNodeTopology(ctx context.Context, name, topology string) error {
	return observe(opTopology, c.next.SetNodeTopology(ctx, name, topology))
}

func (c *instrumented) Reconfigure(ctx context.Context) error {
	return observe(opReconfig, c.next.Reconfigure(ctx))
}

// stateCounts counts placeholder jobs by base state, for metrics.PlaceholderJobs.
func stateCounts(jobs map[int32]*Job) map[string]int {
	out := map[string]int{}
	for _, j := range jobs {
		state := j.State
		if state == "" {
			state = "UNKNOWN"
		}
		out[state]++
	}
	return out
}
