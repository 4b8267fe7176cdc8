// Package slurm is kubeslurm's only user of slurm-client: typed calls to slurmrestd
// (submit, cancel, get and list jobs, list nodes), errors classified once, JWT tokens,
// and one shared Watcher that caches our placeholder jobs and Slurm's nodes and tells
// subscribers what changed. The slurmrestd API version is pinned in apiversion.go.
package slurm

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kubeslurm/kubeslurm/pkg/slurmjob"
)

// Base job states (Slurm's job_state minus its flags).
const (
	StatePending     = "PENDING"
	StateRunning     = "RUNNING"
	StateSuspended   = "SUSPENDED"
	StateCompleted   = "COMPLETED"
	StateCancelled   = "CANCELLED"
	StateFailed      = "FAILED"
	StateTimeout     = "TIMEOUT"
	StateNodeFail    = "NODE_FAIL"
	StatePreempted   = "PREEMPTED"
	StateBootFail    = "BOOT_FAIL"
	StateDeadline    = "DEADLINE"
	StateOutOfMemory = "OUT_OF_MEMORY"
)

var baseStates = []string{
	StatePending, StateRunning, StateSuspended, StateCompleted, StateCancelled, StateFailed,
	StateTimeout, StateNodeFail, StatePreempted, StateBootFail, StateDeadline, StateOutOfMemory,
}

// Job is what kubeslurm knows of one Slurm job, independent of the API version.
type Job struct {
	ID    int32
	Name  string
	State string
	// Flags are the job_state entries beyond the base state (COMPLETING, REQUEUED, ...).
	Flags  []string
	Reason string
	// Nodes are the allocated nodes in Slurm's rank order (empty while pending).
	Nodes []string
	// ExcludedNodes are the nodes the job was submitted to avoid.
	ExcludedNodes []string
	Partition     string
	UserName      string
	// Nice is the job's nice value; Nudge writes it back unchanged.
	Nice int32
	// Pods are the pods a placeholder job stands for; empty for any other job.
	Pods []slurmjob.PodRef
	// Group is the key of the pod group a placeholder job stands for; empty for one pod.
	Group     string
	StartTime time.Time
	EndTime   time.Time
	// TRESPerNode is what the job asked for per node ("gres/gpu:2").
	TRESPerNode string
	// GRESDetail is, per node of Nodes (same order), the GRES Slurm allocated there
	// ("gpu:2(IDX:0-1)"); see GPUIndices.
	GRESDetail []string
}

// Ours reports whether the job is a kubeslurm placeholder job.
func (j *Job) Ours() bool { return len(j.Pods) > 0 }

// Ended reports whether the job has reached a terminal state.
func (j *Job) Ended() bool {
	switch j.State {
	case StatePending, StateRunning, StateSuspended, "":
		return false
	}
	return true
}

// Allocated reports whether Slurm has given the job its nodes and it holds them now.
func (j *Job) Allocated() bool {
	return j.State == StateRunning && len(j.Nodes) > 0 && !j.HasFlag("COMPLETING")
}

// HasFlag reports whether the job_state list carries the flag.
func (j *Job) HasFlag(flag string) bool { return slices.Contains(j.Flags, flag) }

// StateString is the state as squeue shows it ("RUNNING", "PENDING (Priority)").
func (j *Job) StateString() string {
	s := j.State
	if len(j.Flags) > 0 {
		s += "+" + strings.Join(j.Flags, "+")
	}
	if j.Reason != "" && j.Reason != "None" {
		s += " (" + j.Reason + ")"
	}
	return s
}

// Rank returns the pod's rank in the job (its index among the pods the job records).
func (j *Job) Rank(uid types.UID) (int, bool) {
	for i, p := range j.Pods {
		if p.UID == uid {
			return i, true
		}
	}
	return 0, false
}

// HasPod reports whether the job stands for the pod.
func (j *Job) HasPod(uid types.UID) bool {
	_, ok := j.Rank(uid)
	return ok
}

// NodeForPod returns the node allocated to the pod: member i of the job gets rank i.
func (j *Job) NodeForPod(ref slurmjob.PodRef) (string, bool) {
	if i, ok := j.Rank(ref.UID); ok && i < len(j.Nodes) {
		return j.Nodes[i], true
	}
	return "", false
}

func (j *Job) String() string { return fmt.Sprintf("job %d %s", j.ID, j.StateString()) }

// equal reports whether two observations of a job differ in anything we act on.
func (j *Job) equal(o *Job) bool {
	return j.State == o.State && j.Reason == o.Reason && slices.Equal(j.Flags, o.Flags) &&
		slices.Equal(j.Nodes, o.Nodes) && j.StartTime.Equal(o.StartTime) && j.EndTime.Equal(o.EndTime)
}

// splitState separates Slurm's job_state list into the base state and its flags.
func splitState(states []string) (base string, flags []string) {
	for _, s := range states {
		if base == "" && slices.Contains(baseStates, s) {
			base = s
			continue
		}
		flags = append(flags, s)
	}
	return base, flags
}

// Node is one Slurm node: its name, state flags (IDLE, ALLOCATED, DRAIN, ...) and reason.
type Node struct {
	Name   string
	States []string
	Reason string
	// Topology is the node's own topology setting ("<topology>:<block>", from slurmd's
	// --conf Topology= or an update); empty when it follows topology.yaml.
	Topology string
	// Features are the node's features (a worker's: its NodeSet's name first).
	Features []string
	// ReasonTime is when the reason was last set (Slurm's reason_changed_at): for a node
	// Slurm marked DOWN for not responding, when it did so, unless it had a reason before.
	ReasonTime time.Time
}

// Node state flags kubeslurm acts on (slurmrestd's node "state" list).
const (
	NodeIdle          = "IDLE"
	NodeAllocated     = "ALLOCATED"
	NodeMixed         = "MIXED"
	NodeCompleting    = "COMPLETING"
	NodeDown          = "DOWN"
	NodeDrain         = "DRAIN"
	NodeNotResponding = "NOT_RESPONDING"
	NodeUnknown       = "UNKNOWN"
	// NodeDynamic marks a node a slurmd registered itself (slurmd -Z); only such nodes
	// may be deleted: a node of slurm.conf would come back on the next reconfigure.
	NodeDynamic = "DYNAMIC_NORM"
)

// nodeKindFlags say what kind of node it is, not what state it is in.
var nodeKindFlags = []string{NodeDynamic, "DYNAMIC_FUTURE", "CLOUD", "EXTERNAL"}

// MaxReasonLength caps the reasons kubeslurm writes into Slurm.
const MaxReasonLength = 256

// Has reports whether the node's state list carries the flag.
func (n *Node) Has(flag string) bool { return slices.Contains(n.States, flag) }

// Busy reports whether jobs hold (or are leaving) the node.
func (n *Node) Busy() bool {
	return n.Has(NodeAllocated) || n.Has(NodeMixed) || n.Has(NodeCompleting)
}

// Removable reports whether the node may be deleted: dynamic, and Slurm knows it holds
// no job. A node whose state Slurm itself does not know (UNKNOWN, no state flag) is not
// idle.
func (n *Node) Removable() bool {
	return n.Has(NodeDynamic) && !n.Busy() && !n.Has(NodeUnknown) && len(n.StateFlags()) > 0
}

// HasFeature reports whether the node has the feature.
func (n *Node) HasFeature(f string) bool { return slices.Contains(n.Features, f) }

// StateFlags are the node's state flags without those naming its kind (DYNAMIC_NORM, ...).
func (n *Node) StateFlags() []string {
	out := make([]string, 0, len(n.States))
	for _, s := range n.States {
		if !slices.Contains(nodeKindFlags, s) {
			out = append(out, s)
		}
	}
	return out
}

// StateString is the state as scontrol shows it ("IDLE+DRAIN+DYNAMIC_NORM").
func (n *Node) StateString() string { return strings.Join(n.States, "+") }

func (n *Node) equal(o *Node) bool {
	return n.Reason == o.Reason && slices.Equal(n.States, o.States) && n.Topology == o.Topology
}

// CamelCase turns a Slurm state name ("NOT_RESPONDING") into the CamelCase Kubernetes
// uses for condition types and reasons ("NotResponding").
func CamelCase(s string) string {
	var b strings.Builder
	for _, w := range strings.Split(strings.ToLower(s), "_") {
		if w != "" {
			b.WriteString(strings.ToUpper(w[:1]) + w[1:])
		}
	}
	return b.String()
}

// SanitizeReason makes a text safe as a Slurm node reason: printable ASCII only (newlines,
// tabs and anything else become spaces, runs of spaces one), trimmed, and at most
// MaxReasonLength long, so no reason can forge a second line in scontrol's output.
func SanitizeReason(s string) string {
	var b strings.Builder
	space := false
	for _, r := range s {
		if r <= ' ' || r > '~' {
			space = true
			continue
		}
		if space && b.Len() > 0 {
			b.WriteByte(' ')
		}
		space = false
		b.WriteRune(r)
	}
	out := b.String()
	if len(out) > MaxReasonLength {
		out = strings.TrimRight(out[:MaxReasonLength], " ")
	}
	return out
}

// JobStatus is a job's state as slurmrestd's state read gives it: no reason, nodes or
// identity, so it is a few bytes per job however large the job's full record is.
type JobStatus struct {
	State string
	Flags []string
}

// statusOf is the part of a job that a state read can show.
func statusOf(j *Job) JobStatus { return JobStatus{State: j.State, Flags: j.Flags} }

func (s JobStatus) equal(o JobStatus) bool {
	return s.State == o.State && slices.Equal(s.Flags, o.Flags)
}

// NodeListing is one read of Slurm's nodes that asked only for a change since an earlier
// read (slurmrestd's update_time).
type NodeListing struct {
	// Unchanged is set when Slurm had no node change since the time asked for; Nodes is
	// then empty and means nothing.
	Unchanged bool
	Nodes     []Node
	// LastUpdate is Slurm's time of its last node change (its last_update), to ask with
	// next; 0 when Slurm did not say.
	LastUpdate int64
}
