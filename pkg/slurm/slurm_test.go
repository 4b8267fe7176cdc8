package slurm_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubeslurm/kubeslurm/pkg/slurm"
	"github.com/kubeslurm/kubeslurm/pkg/slurm/slurmtest"
	"github.com/kubeslurm/kubeslurm/pkg/slurmjob"
)

func TestExpandHostlist(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"node-1", []string{"node-1"}},
		{"node-[1-3]", []string{"node-1", "node-2", "node-3"}},
		{"node-[1,3-4],gpu-a", []string{"node-1", "node-3", "node-4", "gpu-a"}},
		{"n[08-10]", []string{"n08", "n09", "n10"}},
		{"rack1-[1-2]-x", []string{"rack1-1-x", "rack1-2-x"}},
		{"", nil},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, slurm.ExpandHostlist(tt.in), tt.in)
	}
}

func TestErrorKinds(t *testing.T) {
	f := slurmtest.New("n1")
	ctx := context.Background()

	_, err := f.GetJob(ctx, 424242)
	assert.True(t, slurm.IsNotFound(err), "missing job: %v", err)

	f.RejectSubmit = "Invalid partition name specified"
	_, err = f.Submit(ctx, slurmjob.JobSpec{Nodes: 1, CPUsPerNode: 1, Pods: []slurmjob.PodRef{{Name: "p", UID: "u"}}})
	require.Error(t, err)
	assert.True(t, slurm.IsRejected(err))
	assert.Contains(t, err.Error(), "Invalid partition name specified")

	f.RejectSubmit = ""
	f.FailWith = &url.Error{Op: "Get", URL: "http://slurmrestd", Err: &net.OpError{Op: "dial", Err: errors.New("connection refused")}}
	_, err = f.ListJobs(ctx)
	assert.True(t, slurm.IsUnavailable(err), "transport error: %v", err)
	assert.False(t, slurm.IsNotFound(err))
	// Cancelling while Slurm is unreachable is an error, never a silent success.
	assert.Error(t, f.Cancel(ctx, 1))
}

func TestSubmitRendersPlaceholderJob(t *testing.T) {
	f := slurmtest.New("n1", "n2")
	limit, prio := uint32(90), uint32(7)
	spec := slurmjob.JobSpec{
		Name: "ns/p", Partition: "gpu", Account: "acct", QOS: "high", TimeLimitMinutes: &limit, Priority: &prio,
		Nodes: 1, CPUsPerNode: 2, MemoryPerNodeMB: 512, GPUsPerNode: 1, Exclusive: true,
		ExcludedNodes: []string{"n2"}, Pods: []slurmjob.PodRef{{Namespace: "ns", Name: "p", UID: "u1"}},
	}
	job, err := f.Submit(context.Background(), spec)
	require.NoError(t, err)
	assert.Equal(t, int32(1), job.ID)
	assert.Equal(t, slurm.StatePending, job.State)
	assert.Equal(t, spec.Pods, job.Pods)

	d := f.LastSubmit
	require.NotNil(t, d)
	assert.Equal(t, "EXTERNAL_JOB", string((*d.Flags)[0]))
	assert.Nil(t, d.Script, "a placeholder job has no script")
	assert.Equal(t, "1", *d.Nodes)
	assert.Equal(t, int32(2), *d.CpusPerTask)
	assert.Equal(t, int64(512), *d.MemoryPerNode.Number)
	assert.Equal(t, "gres/gpu:1", *d.TresPerNode)
	assert.Equal(t, []string{"n2"}, *d.ExcludedNodes)
	assert.Nil(t, d.RequiredNodes, "feasible nodes are never sent as required nodes")
	assert.Equal(t, "none", string((*d.Shared)[0]))
	assert.Equal(t, int32(90), *d.TimeLimit.Number)
	assert.Equal(t, int32(7), *d.Priority.Number)
	assert.Equal(t, "gpu", *d.Partition)
	assert.Equal(t, "high", *d.Qos)
}

func TestSubmitRendersAnnotatedFields(t *testing.T) {
	f := slurmtest.New("n1")
	nice, uid, gid := int32(-20), uint32(1000), uint32(2000)
	spec := slurmjob.JobSpec{
		Name: "ns/p", Nodes: 1, CPUsPerNode: 4, GPUsPerNode: 2, WCKey: "proj-x", Nice: &nice,
		Constraints: "intel&(a100|h100)", Licenses: "matlab:2,ansys",
		GRES:   []slurmjob.GRES{{Name: "gpu", Type: "a100", Count: 2}, {Name: "shard", Count: 1}},
		UserID: &uid, GroupID: &gid,
		Dependencies: []slurmjob.Dependency{{Type: "afterok", JobIDs: []int32{12, 13}}, {Type: "afterany", JobIDs: []int32{14}}},
		Pods:         []slurmjob.PodRef{{Namespace: "ns", Name: "p", UID: "u1"}},
	}
	_, err := f.Submit(context.Background(), spec)
	require.NoError(t, err)
	d := f.LastSubmit
	require.NotNil(t, d)
	assert.Equal(t, int32(-20), *d.Nice)
	assert.Equal(t, "proj-x", *d.Wckey)
	assert.Equal(t, "intel&(a100|h100)", *d.Constraints)
	assert.Equal(t, "matlab:2,ansys", *d.Licenses)
	assert.Equal(t, "gres/gpu:a100:2,gres/shard:1", *d.TresPerNode, "an annotated gpu GRES stands for the requested GPUs")
	assert.Equal(t, "1000", *d.UserId)
	assert.Equal(t, "2000", *d.GroupId)
	assert.Equal(t, "afterok:12:13,afterany:14", *d.Dependency)
	assert.Equal(t, int32(4), *d.CpusPerTask)
	assert.Equal(t, int32(1), *d.MinimumNodes)
	assert.Equal(t, int32(1), *d.MaximumNodes)

	// Unset, none of them is sent: Slurm's defaults apply.
	_, err = f.Submit(context.Background(), slurmjob.JobSpec{Name: "ns/q", Nodes: 1, CPUsPerNode: 1, Pods: []slurmjob.PodRef{{Namespace: "ns", Name: "q", UID: "u2"}}})
	require.NoError(t, err)
	d = f.LastSubmit
	assert.Nil(t, d.Nice)
	assert.Nil(t, d.Wckey)
	assert.Nil(t, d.Constraints)
	assert.Nil(t, d.Licenses)
	assert.Nil(t, d.TresPerNode)
	assert.Nil(t, d.UserId)
	assert.Nil(t, d.GroupId)
	assert.Nil(t, d.Dependency)
}

func TestWatcher(t *testing.T) {
	ctx := context.Background()
	f := slurmtest.New("n1", "n2")
	require.NoError(t, f.AddForeignJobs(3))
	w := slurm.NewWatcher(f, time.Hour, time.Hour)
	var changes []slurm.Change
	w.OnChange(func(c slurm.Change) { changes = append(changes, c) })

	assert.False(t, w.Synced())
	require.NoError(t, w.Poll(ctx))
	assert.True(t, w.Synced())
	require.Len(t, changes, 1)
	assert.True(t, changes[0].Resync)
	assert.Empty(t, changes[0].Jobs, "foreign jobs are not ours")
	assert.ElementsMatch(t, []string{"n1", "n2"}, w.NodeNames())

	ref := slurmjob.PodRef{Namespace: "ns", Name: "p", UID: "u1"}
	job, err := f.Submit(ctx, slurmjob.JobSpec{Nodes: 1, CPUsPerNode: 1, Pods: []slurmjob.PodRef{ref}})
	require.NoError(t, err)
	w.Observe(job) // as the submitter does

	changes = nil
	require.NoError(t, w.Poll(ctx))
	require.Len(t, changes, 1)
	require.Len(t, changes[0].Jobs, 1)
	got, ok := w.JobForPod("u1")
	require.True(t, ok)
	assert.Equal(t, job.ID, got.ID)
	assert.Len(t, w.JobsForPodKey("ns/p"), 1)

	// No change, no notification.
	changes = nil
	require.NoError(t, w.Poll(ctx))
	assert.Empty(t, changes)

	require.NoError(t, f.Allocate(job.ID, "n2"))
	require.NoError(t, w.Poll(ctx))
	require.Len(t, changes, 1)
	got, _ = w.JobForPod("u1")
	assert.True(t, got.Allocated())
	node, ok := got.NodeForPod(ref)
	assert.True(t, ok)
	assert.Equal(t, "n2", node)

	// A failed poll keeps everything as last seen: nothing reads as gone.
	f.FailWith = errors.New("connection refused")
	changes = nil
	assert.Error(t, w.Poll(ctx))
	assert.Empty(t, changes)
	assert.True(t, w.Synced())
	got, ok = w.JobForPod("u1")
	assert.True(t, ok)
	assert.True(t, got.Allocated())
	assert.Error(t, w.LastError())
}

func TestJobStates(t *testing.T) {
	tests := []struct {
		job              slurm.Job
		ended, allocated bool
		stateString      string
	}{
		{slurm.Job{State: "PENDING", Reason: "Priority"}, false, false, "PENDING (Priority)"},
		{slurm.Job{State: "RUNNING", Nodes: []string{"n1"}, Reason: "None"}, false, true, "RUNNING"},
		{slurm.Job{State: "RUNNING", Flags: []string{"COMPLETING"}, Nodes: []string{"n1"}}, false, false, "RUNNING+COMPLETING"},
		{slurm.Job{State: "CANCELLED"}, true, false, "CANCELLED"},
		{slurm.Job{State: "TIMEOUT"}, true, false, "TIMEOUT"},
		{slurm.Job{State: "PREEMPTED"}, true, false, "PREEMPTED"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.ended, tt.job.Ended(), tt.stateString)
		assert.Equal(t, tt.allocated, tt.job.Allocated(), tt.stateString)
		assert.Equal(t, tt.stateString, tt.job.StateString())
	}
}

func TestTokenSource(t *testing.T) {
	key := t.TempDir() + "/jwt.key"
	secret := []byte("0123456789abcdef0123456789abcdef")
	require.NoError(t, os.WriteFile(key, secret, 0o600))
	ts := slurm.NewTokenSource(key, "slurm", time.Hour)
	a, err := ts.Token()
	require.NoError(t, err)
	b, err := ts.Token()
	require.NoError(t, err)
	assert.Equal(t, a, b, "a token is reused until half its lifetime")
	claims := jwt.MapClaims{}
	_, err = jwt.ParseWithClaims(a, claims, func(*jwt.Token) (any, error) { return secret, nil },
		jwt.WithValidMethods([]string{"HS256"}))
	require.NoError(t, err, "signed with the key, as slurmctld checks it")
	assert.Equal(t, "slurm", claims["sun"])

	// One token from the key itself carries the same claims, the same way signed.
	one, err := slurm.MintHS256(secret, "slurm", time.Hour)
	require.NoError(t, err)
	oneClaims := jwt.MapClaims{}
	_, err = jwt.ParseWithClaims(one, oneClaims, func(*jwt.Token) (any, error) { return secret, nil },
		jwt.WithValidMethods([]string{"HS256"}))
	require.NoError(t, err)
	assert.Equal(t, claims["sun"], oneClaims["sun"])
	assert.Equal(t, oneClaims["exp"].(float64)-oneClaims["iat"].(float64), claims["exp"].(float64)-claims["iat"].(float64))
	assert.Len(t, oneClaims, len(claims))
	_, err = slurm.MintHS256(nil, "slurm", time.Hour)
	assert.ErrorContains(t, err, "empty")

	_, err = slurm.NewTokenSource(t.TempDir()+"/missing", "slurm", time.Hour).Token()
	assert.Error(t, err)
}

// A key file replaced as a mounted Secret's update replaces it (a new file renamed over the
// old) signs the next token at once; the token stays while the file is briefly missing.
func TestTokenSourceKeyReplaced(t *testing.T) {
	dir := t.TempDir()
	key := dir + "/jwt.key"
	require.NoError(t, os.WriteFile(key, []byte("0123456789abcdef0123456789abcdef"), 0o600))
	ts := slurm.NewTokenSource(key, "slurm", time.Hour)
	old, err := ts.Token()
	require.NoError(t, err)

	require.NoError(t, os.Rename(key, dir+"/away"))
	during, err := ts.Token()
	require.NoError(t, err)
	assert.Equal(t, old, during, "no key file for a moment: the token is kept")

	newKey := []byte("fedcba9876543210fedcba9876543210")
	require.NoError(t, os.WriteFile(dir+"/new", newKey, 0o600))
	require.NoError(t, os.Rename(dir+"/new", key))
	after, err := ts.Token()
	require.NoError(t, err)
	assert.NotEqual(t, old, after)
	_, err = jwt.Parse(after, func(*jwt.Token) (any, error) { return newKey, nil }, jwt.WithValidMethods([]string{"HS256"}))
	assert.NoError(t, err, "signed with the new key")
	again, err := ts.Token()
	require.NoError(t, err)
	assert.Equal(t, after, again, "then reused again")
}

// An RSA key signs RS256 with its key id, as slurmctld's JWKS verification wants; no key
// file is read.
func TestTokenSourceRS256(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	ts := slurm.NewTokenSource("", "slurm", time.Hour)
	ts.RSAKey, ts.KeyID = key, "kid-1"
	a, err := ts.Token()
	require.NoError(t, err)
	claims := jwt.MapClaims{}
	tok, err := jwt.ParseWithClaims(a, claims, func(*jwt.Token) (any, error) { return &key.PublicKey, nil },
		jwt.WithValidMethods([]string{"RS256"}))
	require.NoError(t, err)
	assert.Equal(t, "kid-1", tok.Header["kid"])
	assert.Equal(t, "slurm", claims["sun"])
}

func TestNodeStates(t *testing.T) {
	tests := []struct {
		states          []string
		busy, removable bool
		flags           []string
	}{
		{[]string{"IDLE", "DYNAMIC_NORM"}, false, true, []string{"IDLE"}},
		{[]string{"IDLE"}, false, false, []string{"IDLE"}},
		{[]string{"MIXED", "DYNAMIC_NORM"}, true, false, []string{"MIXED"}},
		{[]string{"ALLOCATED", "DRAIN", "DYNAMIC_NORM"}, true, false, []string{"ALLOCATED", "DRAIN"}},
		{[]string{"IDLE", "COMPLETING", "DYNAMIC_NORM"}, true, false, []string{"IDLE", "COMPLETING"}},
		{[]string{"DOWN", "DRAIN", "NOT_RESPONDING", "DYNAMIC_NORM"}, false, true, []string{"DOWN", "DRAIN", "NOT_RESPONDING"}},
		{[]string{"UNKNOWN", "DYNAMIC_NORM"}, false, false, []string{"UNKNOWN"}},
		{[]string{"DYNAMIC_NORM"}, false, false, []string{}},
		{nil, false, false, []string{}},
		{[]string{"IDLE", "CLOUD", "EXTERNAL", "DYNAMIC_FUTURE"}, false, false, []string{"IDLE"}},
	}
	for _, tt := range tests {
		n := slurm.Node{Name: "n1", States: tt.states}
		assert.Equal(t, tt.busy, n.Busy(), "busy %v", tt.states)
		assert.Equal(t, tt.removable, n.Removable(), "removable %v", tt.states)
		assert.Equal(t, tt.flags, n.StateFlags(), "flags %v", tt.states)
	}
}

func TestCamelCase(t *testing.T) {
	for in, want := range map[string]string{
		"IDLE": "Idle", "NOT_RESPONDING": "NotResponding", "REBOOT_REQUESTED": "RebootRequested",
		"DRAIN": "Drain", "POWER_DOWN": "PowerDown", "_X__Y_": "XY", "": "",
	} {
		assert.Equal(t, want, slurm.CamelCase(in), in)
	}
}

func TestSanitizeReason(t *testing.T) {
	tests := []struct{ in, want string }{
		{"kubeslurm: node n1 cordoned", "kubeslurm: node n1 cordoned"},
		{"two\nlines\r\nhere", "two lines here"},
		{"  tabs\tand   runs  ", "tabs and runs"},
		{"caf\u00e9 \u2028 \x00\x7f end", "caf end"},
		{strings.Repeat("x", 300), strings.Repeat("x", slurm.MaxReasonLength)},
		{strings.Repeat("a", slurm.MaxReasonLength-1) + " b", strings.Repeat("a", slurm.MaxReasonLength-1)},
	}
	for _, tt := range tests {
		got := slurm.SanitizeReason(tt.in)
		assert.Equal(t, tt.want, got, "%q", tt.in)
		assert.Equal(t, got, slurm.SanitizeReason(got), "idempotent")
	}
}

func TestNodeCalls(t *testing.T) {
	ctx := context.Background()
	f := slurmtest.New()
	require.NoError(t, f.SetNode("n1", "", "IDLE", "DYNAMIC_NORM"))
	require.NoError(t, f.SetNode("n2", "", "MIXED", "DYNAMIC_NORM"))
	require.NoError(t, f.SetNode("static", "", "IDLE"))

	require.NoError(t, f.DrainNode(ctx, "n1", "kubeslurm: two\nlines"))
	n, err := f.GetNode(ctx, "n1")
	require.NoError(t, err)
	assert.True(t, n.Has(slurm.NodeDrain))
	assert.Equal(t, "kubeslurm: two lines", n.Reason, "sanitised on the way to Slurm")
	assert.Equal(t, "IDLE+DYNAMIC_NORM+DRAIN", n.StateString())

	require.NoError(t, f.UndrainNode(ctx, "n1"))
	n, err = f.GetNode(ctx, "n1")
	require.NoError(t, err)
	assert.False(t, n.Has(slurm.NodeDrain))

	// Slurm's "Invalid node name specified" (422) is NotFound for node calls.
	_, err = f.GetNode(ctx, "nope")
	assert.True(t, slurm.IsNotFound(err), "%v", err)
	assert.True(t, slurm.IsNotFound(f.DrainNode(ctx, "nope", "kubeslurm: x")))
	assert.True(t, slurm.IsNotFound(f.UndrainNode(ctx, "nope")))
	assert.NoError(t, f.DeleteNode(ctx, "nope"), "already gone is what the caller wanted")

	err = f.DeleteNode(ctx, "n2")
	assert.True(t, slurm.IsRejected(err), "%v", err)
	assert.Contains(t, err.Error(), "Requested nodes are busy")
	assert.True(t, slurm.IsRejected(f.DeleteNode(ctx, "static")))
	require.NoError(t, f.DeleteNode(ctx, "n1"))
	_, err = f.GetNode(ctx, "n1")
	assert.True(t, slurm.IsNotFound(err))
	assert.Equal(t, []string{"drain n1: kubeslurm: two lines", "undrain n1", "delete n1"}, f.NodeOps())

	for name, failure := range map[string]error{
		"unreachable":            &url.Error{Op: "Post", URL: "http://slurmrestd", Err: &net.OpError{Op: "dial", Err: errors.New("connection refused")}},
		"503":                    errors.New("Service Unavailable"),
		"500 without words":      errors.New("Internal Server Error"),
		"undecodable answer":     errors.New("unexpected end of JSON input"),
		"context deadline":       context.DeadlineExceeded,
		"401 (bad token)":        errors.New("Unauthorized"),
		"502 (proxy in between)": errors.New("Bad Gateway"),
	} {
		f.FailWith = failure
		_, err := f.GetNode(ctx, "n2")
		assert.True(t, slurm.IsUnavailable(err), "%s: get %v", name, err)
		assert.True(t, slurm.IsUnavailable(f.DrainNode(ctx, "n2", "kubeslurm: x")), name)
		assert.True(t, slurm.IsUnavailable(f.UndrainNode(ctx, "n2")), name)
		assert.True(t, slurm.IsUnavailable(f.DeleteNode(ctx, "n2")), "%s: a failed delete is never success", name)
	}
	f.FailWith = nil
	assert.Empty(t, f.NodeOps())
}

func TestWatcherReportsChangedNodes(t *testing.T) {
	ctx := context.Background()
	f := slurmtest.New()
	require.NoError(t, f.SetNode("n1", "", "IDLE", "DYNAMIC_NORM"))
	require.NoError(t, f.SetNode("n2", "", "IDLE", "DYNAMIC_NORM"))
	w := slurm.NewWatcher(f, time.Hour, time.Hour)
	var changes []slurm.Change
	w.OnChange(func(c slurm.Change) { changes = append(changes, c) })

	require.NoError(t, w.Poll(ctx))
	require.Len(t, changes, 1)
	assert.Equal(t, []string{"n1", "n2"}, changes[0].Nodes, "all new on the first poll")

	changes = nil
	require.NoError(t, f.DrainNode(ctx, "n2", "kubeslurm: x"))
	require.NoError(t, w.Poll(ctx))
	require.Len(t, changes, 1)
	assert.Equal(t, []string{"n2"}, changes[0].Nodes)
	assert.True(t, changes[0].NodesChanged)
	n, ok := w.Node("n2")
	require.True(t, ok)
	assert.Equal(t, "kubeslurm: x", n.Reason)

	changes = nil
	require.NoError(t, f.DeleteNode(ctx, "n1"))
	require.NoError(t, w.Poll(ctx))
	require.Len(t, changes, 1)
	assert.Equal(t, []string{"n1"}, changes[0].Nodes, "a node that left")
	_, ok = w.Node("n1")
	assert.False(t, ok)

	changes = nil
	require.NoError(t, w.Poll(ctx))
	assert.Empty(t, changes, "no change, no notification")

	// A failed poll keeps the nodes as last seen: none reads as gone.
	f.FailWith = errors.New("Service Unavailable")
	assert.Error(t, w.Poll(ctx))
	assert.Empty(t, changes)
	_, ok = w.Node("n2")
	assert.True(t, ok)
}

// A job of ours that this process neither submitted nor fetched (another replica's) is
// found by the next full listing, not by reads of changes, which cost only our own jobs.
func TestWatcherFindsOtherJobsByFullListing(t *testing.T) {
	ctx := context.Background()
	f := slurmtest.New("n1")
	w := slurm.NewWatcher(f, time.Hour, time.Hour)
	require.NoError(t, w.Poll(ctx))
	job, err := f.Submit(ctx, slurmjob.JobSpec{Nodes: 1, CPUsPerNode: 1, Pods: []slurmjob.PodRef{{Namespace: "ns", Name: "p", UID: "u1"}}})
	require.NoError(t, err)

	require.NoError(t, w.Poll(ctx))
	_, ok := w.Job(job.ID)
	assert.False(t, ok, "a read of changes reads only the jobs already known")

	f.Requests()
	w.RequestFullListing()
	require.NoError(t, w.Poll(ctx))
	assert.Zero(t, f.Requests()["list"], "an asked-for listing comes MinListingGap after the one before")

	w.MinListingGap = 0
	before := time.Now()
	require.NoError(t, w.Poll(ctx))
	_, ok = w.Job(job.ID)
	assert.True(t, ok, "found by the listing")
	assert.True(t, w.ListedSince(before))
	assert.Equal(t, 1, f.Requests()["list"], "one listing of the jobs")
}

// A job missing from a state read counts as gone only once a read of that job says so.
func TestWatcherConfirmsGoneByDirectRead(t *testing.T) {
	ctx := context.Background()
	f := slurmtest.New("n1")
	w := slurm.NewWatcher(f, time.Hour, time.Hour)
	var gone []int32
	w.OnChange(func(c slurm.Change) {
		for _, j := range c.Jobs {
			if j.Gone {
				gone = append(gone, j.Job.ID)
			}
		}
	})
	require.NoError(t, w.Poll(ctx))
	job, err := f.Submit(ctx, slurmjob.JobSpec{Nodes: 1, CPUsPerNode: 1, Pods: []slurmjob.PodRef{{Namespace: "ns", Name: "p", UID: "u1"}}})
	require.NoError(t, err)
	w.Observe(job)
	require.NoError(t, w.Poll(ctx))

	// A partial state read (the job left out): the direct read finds it, nothing is gone.
	f.HideFromStateReads(job.ID)
	f.Requests()
	require.NoError(t, w.Poll(ctx))
	assert.Empty(t, gone)
	_, ok := w.Job(job.ID)
	assert.True(t, ok)
	assert.Equal(t, 1, f.Requests()["get"], "the missing job read directly")

	// The direct read fails: the poll fails and changes nothing.
	f.FailGets = true
	assert.Error(t, w.Poll(ctx))
	assert.Empty(t, gone)
	f.FailGets = false

	// Slurm forgot the job (purged after MinJobAge): the direct read says so, it is gone.
	require.NoError(t, f.Purge(job.ID))
	require.NoError(t, w.Poll(ctx))
	assert.Equal(t, []int32{job.ID}, gone)
	_, ok = w.Job(job.ID)
	assert.False(t, ok)
}

// Between full listings, an unchanged queue of 10,000 sbatch jobs costs one state read of
// our own jobs and one node read that finds no change, per poll; no listing, no job read.
func TestUnchangedQueueCostsNoListing(t *testing.T) {
	ctx := context.Background()
	f := slurmtest.New("n1", "n2")
	require.NoError(t, f.AddForeignJobs(10000))
	w := slurm.NewWatcher(f, time.Hour, time.Hour)
	w.PendingRefresh = time.Hour
	require.NoError(t, w.Poll(ctx))
	for i := 0; i < 3; i++ {
		job, err := f.Submit(ctx, slurmjob.JobSpec{Nodes: 1, CPUsPerNode: 1, Pods: []slurmjob.PodRef{{Namespace: "ns", Name: "p" + strconv.Itoa(i), UID: types.UID("u" + strconv.Itoa(i))}}})
		require.NoError(t, err)
		w.Observe(job)
	}
	require.NoError(t, w.Poll(ctx))
	f.Requests()

	const polls = 10
	for i := 0; i < polls; i++ {
		require.NoError(t, w.Poll(ctx))
	}
	assert.Equal(t, map[string]int{"state": polls, "nodes_since": polls}, f.Requests())

	// A change is read in full for that job alone.
	require.NoError(t, f.Allocate(1+10000, "n1"))
	require.NoError(t, w.Poll(ctx))
	assert.Equal(t, map[string]int{"state": 1, "get": 1, "nodes_since": 1}, f.Requests())
}

// Pending jobs' records are read again now and then, for the reason Slurm gives them (a
// state read has none), a bounded number a poll.
func TestWatcherRefreshesPendingReason(t *testing.T) {
	ctx := context.Background()
	f := slurmtest.New("n1")
	w := slurm.NewWatcher(f, time.Hour, time.Hour)
	w.PendingRefresh = 0
	require.NoError(t, w.Poll(ctx))
	var ids []int32
	for i := 0; i < 30; i++ {
		job, err := f.Submit(ctx, slurmjob.JobSpec{Nodes: 1, CPUsPerNode: 1, Pods: []slurmjob.PodRef{{Namespace: "ns", Name: "p" + strconv.Itoa(i), UID: types.UID("u" + strconv.Itoa(i))}}})
		require.NoError(t, err)
		w.Observe(job)
		ids = append(ids, job.ID)
	}
	for _, id := range ids {
		require.NoError(t, f.SetState(id, "PENDING", "Resources"))
	}
	f.Requests()
	require.NoError(t, w.Poll(ctx))
	assert.Equal(t, 20, f.Requests()["get"], "at most 20 pending jobs a poll")
	require.NoError(t, w.Poll(ctx))
	for _, id := range ids {
		j, ok := w.Job(id)
		require.True(t, ok)
		assert.Equal(t, "Resources", j.Reason, "job %d", id)
	}
}

// The two reads the watcher polls with, against answers shaped as slurmrestd 26.05's
// (seen on the local cluster): a state read names each job in a job_id parameter of its
// own (a comma-separated list is answered with a 500) and leaves unknown jobs out; a node
// read with update_time is answered 304 when no node changed.
func TestStateAndNodeReadsAgainstSlurmrestd(t *testing.T) {
	var lastQuery url.Values
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/slurm/v0.0.44/jobs/state/":
			lastQuery = r.URL.Query()
			if strings.Contains(r.URL.RawQuery, "%2C") || strings.Contains(r.URL.RawQuery, ",") {
				w.WriteHeader(http.StatusInternalServerError)
				_, _ = w.Write([]byte("Unspecified error"))
				return
			}
			var jobs []string
			for _, id := range r.URL.Query()["job_id"] {
				switch id {
				case "1":
					jobs = append(jobs, `{"job_id":"1","state":["RUNNING","COMPLETING"]}`)
				case "2":
					jobs = append(jobs, `{"job_id":"2","state":["PENDING"]}`)
				}
			}
			_, _ = w.Write([]byte(`{"jobs":[` + strings.Join(jobs, ",") + `],"errors":[],"warnings":[]}`))
		case "/slurm/v0.0.44/nodes/":
			if r.URL.Query().Get("update_time") == "1700000000" {
				w.WriteHeader(http.StatusNotModified)
				return
			}
			_, _ = w.Write([]byte(`{"nodes":[{"name":"n1","state":["IDLE"]}],"last_update":{"set":true,"infinite":false,"number":1700000000},"errors":[],"warnings":[]}`))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	key := t.TempDir() + "/jwt.key"
	require.NoError(t, os.WriteFile(key, []byte("0123456789abcdef0123456789abcdef"), 0o600))
	c, err := slurm.NewClient(slurm.Config{URL: srv.URL, User: "slurm", JWTKeyFile: key})
	require.NoError(t, err)
	ctx := context.Background()

	states, err := c.JobStates(ctx, []int32{1, 2, 3})
	require.NoError(t, err)
	assert.Equal(t, []string{"1", "2", "3"}, lastQuery["job_id"])
	assert.Equal(t, map[int32]slurm.JobStatus{
		1: {State: "RUNNING", Flags: []string{"COMPLETING"}},
		2: {State: "PENDING"},
	}, states, "job 3, unknown to Slurm, is absent")

	l, err := c.ListNodesSince(ctx, 0)
	require.NoError(t, err)
	assert.False(t, l.Unchanged)
	assert.Equal(t, int64(1700000000), l.LastUpdate)
	require.Len(t, l.Nodes, 1)
	assert.Equal(t, "n1", l.Nodes[0].Name)

	l, err = c.ListNodesSince(ctx, l.LastUpdate)
	require.NoError(t, err)
	assert.True(t, l.Unchanged)
}

// A listing of every job gets ListTimeout, any other request Timeout: at 10,000 queued
// jobs the listing takes longer than an ordinary request may, and a scheduler whose first
// listing always timed out would never read Slurm.
func TestListingHasItsOwnTimeout(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(300 * time.Millisecond)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"jobs":[],"errors":[],"warnings":[]}`))
	}))
	defer srv.Close()
	key := t.TempDir() + "/jwt.key"
	require.NoError(t, os.WriteFile(key, []byte("0123456789abcdef0123456789abcdef"), 0o600))
	c, err := slurm.NewClient(slurm.Config{URL: srv.URL, User: "slurm", JWTKeyFile: key,
		Timeout: 100 * time.Millisecond, ListTimeout: 5 * time.Second})
	require.NoError(t, err)

	_, err = c.ListJobs(context.Background())
	assert.NoError(t, err, "the listing may take longer than Timeout")
	_, err = c.GetJob(context.Background(), 1)
	assert.True(t, slurm.IsUnavailable(err), "any other request is bounded by Timeout: %v", err)
}
