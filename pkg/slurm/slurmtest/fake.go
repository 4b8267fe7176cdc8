// Package slurmtest gives unit tests a slurm.Client over slurm-client's own fake, with the
// behaviour of slurmctld that kubeslurm relies on: submitted jobs get ids and start
// PENDING, cancelled jobs turn CANCELLED, nodes drain, undrain and (dynamic, idle ones)
// delete as slurmctld does them, and every request is counted.
package slurmtest

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	api "github.com/SlinkyProject/slurm-client/api/v0044"
	slurmclient "github.com/SlinkyProject/slurm-client/pkg/client"
	"github.com/SlinkyProject/slurm-client/pkg/client/fake"
	"github.com/SlinkyProject/slurm-client/pkg/client/interceptor"
	"github.com/SlinkyProject/slurm-client/pkg/object"
	"github.com/SlinkyProject/slurm-client/pkg/types"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/utils/ptr"

	"github.com/kubeslurm/kubeslurm/pkg/slurm"
)

// Fake is a slurm.Client for tests; its methods shape the state the watcher then reads.
type Fake struct {
	slurm.Client

	mu       sync.Mutex
	inner    slurmclient.Client
	nextID   int32
	requests map[string]int
	// FailWith, when set, makes every request fail with this error (slurmrestd down).
	FailWith error
	// LoseSubmitAnswers, when set, makes submits take the job and then fail as a request
	// timed out on the client's side would.
	LoseSubmitAnswers bool
	// FailGets, when set, makes reads of one job fail as an unreachable slurmrestd.
	FailGets bool
	// hidden are jobs that state reads leave out (a partial answer).
	hidden []int32
	// RejectSubmit, when set, makes submits fail as Slurm refusing the job.
	RejectSubmit string
	// LastSubmit is the last submit request received.
	LastSubmit *api.V0044JobDescMsg
	nodeOps    []string
	// nodesSeen and nodesUpdate model slurmctld's last_update of its nodes: a listing
	// that differs from the one before moves it on.
	nodesSeen   string
	nodesUpdate int64
}

// New returns a Fake with the given Slurm node names, all idle.
func New(nodes ...string) *Fake {
	f := &Fake{nextID: 1, requests: map[string]int{}}
	var objs []object.Object
	for _, n := range nodes {
		node := &types.V0044Node{}
		node.Name = ptr.To(n)
		node.State = &[]api.V0044NodeState{api.V0044NodeStateIDLE}
		objs = append(objs, node)
	}
	f.inner = fake.NewClientBuilder().WithObjects(objs...).Build()
	f.Client = slurm.Wrap(interceptor.NewClient(f.inner, interceptor.Funcs{
		Get:    f.get,
		List:   f.list,
		Create: f.create,
		Delete: f.delete,
		Update: f.update,
	}))
	return f
}

func (f *Fake) count(op string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests[op]++
	return f.FailWith
}

// JobStates answers a state read as slurmrestd's jobs/state does: the jobs named that it
// has, with their state alone. Counted as "state".
func (f *Fake) JobStates(ctx context.Context, ids []int32) (map[int32]slurm.JobStatus, error) {
	if err := f.count("state"); err != nil {
		return nil, err
	}
	list := &types.V0044JobInfoList{}
	if err := f.inner.List(ctx, list); err != nil {
		return nil, err
	}
	out := map[int32]slurm.JobStatus{}
	for _, j := range list.Items {
		id := ptr.Deref(j.JobId, 0)
		if !slices.Contains(ids, id) || slices.Contains(f.hidden, id) {
			continue
		}
		var states []string
		for _, st := range ptr.Deref(j.JobState, nil) {
			states = append(states, string(st))
		}
		out[id] = slurm.JobStatus{State: states[0], Flags: states[1:]}
	}
	return out, nil
}

// HideFromStateReads makes state reads leave the job out, as a partial answer would.
func (f *Fake) HideFromStateReads(id int32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hidden = append(f.hidden, id)
}

// Purge forgets a job, as slurmctld does MinJobAge after it ended.
func (f *Fake) Purge(id int32) error {
	j := &types.V0044JobInfo{}
	j.JobId = ptr.To(id)
	return f.inner.Delete(context.Background(), j)
}

// ListNodesSince answers as slurmrestd's nodes listing with update_time does: nothing
// when no node changed since lastUpdate. Counted as "nodes_since".
func (f *Fake) ListNodesSince(ctx context.Context, lastUpdate int64) (*slurm.NodeListing, error) {
	if err := f.count("nodes_since"); err != nil {
		return nil, err
	}
	nodes, err := f.Client.ListNodes(ctx)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests["list"]-- // this request's own read: counted as nodes_since only
	if err != nil {
		return nil, err
	}
	seen, err := json.Marshal(nodes)
	if err != nil {
		return nil, err
	}
	if string(seen) != f.nodesSeen {
		f.nodesSeen = string(seen)
		f.nodesUpdate++
	}
	if lastUpdate > 0 && lastUpdate >= f.nodesUpdate {
		return &slurm.NodeListing{Unchanged: true, LastUpdate: f.nodesUpdate}, nil
	}
	return &slurm.NodeListing{Nodes: nodes, LastUpdate: f.nodesUpdate}, nil
}

// Requests returns how many requests of each kind ("get", "list", "create", "delete")
// were made, and resets the counts.
func (f *Fake) Requests() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.requests
	f.requests = map[string]int{}
	maps.DeleteFunc(out, func(_ string, n int) bool { return n == 0 })
	return out
}

func (f *Fake) get(ctx context.Context, key object.ObjectKey, obj object.Object, opts ...slurmclient.GetOption) error {
	if err := f.count("get"); err != nil {
		return err
	}
	if _, ok := obj.(*types.V0044JobInfo); ok && f.FailGets {
		return errors.New(http.StatusText(http.StatusServiceUnavailable))
	}
	if _, ok := obj.(*types.V0044Reconfigure); ok {
		f.logNodeOp("reconfigure")
		return nil
	}
	return f.inner.Get(ctx, key, obj, opts...)
}

func (f *Fake) list(ctx context.Context, list object.ObjectList, opts ...slurmclient.ListOption) error {
	if err := f.count("list"); err != nil {
		return err
	}
	return f.inner.List(ctx, list, opts...)
}

func (f *Fake) create(ctx context.Context, obj object.Object, req any, _ ...slurmclient.CreateOption) error {
	if err := f.count("create"); err != nil {
		return err
	}
	r, ok := req.(api.V0044JobSubmitReq)
	out, ok2 := obj.(*types.V0044JobInfo)
	if !ok || !ok2 || r.Job == nil {
		return errors.New(http.StatusText(http.StatusBadRequest))
	}
	if f.RejectSubmit != "" {
		return aggregate(http.StatusInternalServerError, f.RejectSubmit)
	}
	f.mu.Lock()
	f.LastSubmit = r.Job
	id := f.nextID
	f.nextID++
	f.mu.Unlock()
	*out = types.V0044JobInfo{}
	out.JobId = ptr.To(id)
	out.Name = r.Job.Name
	out.AdminComment = r.Job.AdminComment
	out.TresPerNode = r.Job.TresPerNode
	out.Partition = ptr.To(ptr.Deref(r.Job.Partition, "k8s"))
	out.JobState = &[]api.V0044JobInfoJobState{api.V0044JobInfoJobStatePENDING}
	out.StateReason = ptr.To("None")
	if r.Job.ExcludedNodes != nil {
		out.ExcludedNodes = ptr.To(strings.Join(*r.Job.ExcludedNodes, ","))
	}
	if err := f.inner.Create(ctx, out, req); err != nil {
		return err
	}
	if f.LoseSubmitAnswers {
		return context.DeadlineExceeded
	}
	return nil
}

// update is a node update, or a job nudge (which changes nothing, so is only counted).
func (f *Fake) update(ctx context.Context, obj object.Object, req any, _ ...slurmclient.UpdateOption) error {
	if err := f.count("update"); err != nil {
		return err
	}
	if _, ok := obj.(*types.V0044Node); !ok {
		return nil
	}
	msg, ok := req.(api.V0044UpdateNodeMsg)
	if !ok {
		return errors.New("expected req to be V0044UpdateNodeMsg")
	}
	name := string(obj.GetKey())
	return f.mutateNode(ctx, name, func(n *Node) {
		for _, st := range ptr.Deref(msg.State, nil) {
			switch st {
			case api.V0044UpdateNodeMsgStateDRAIN:
				n.States = with(n.States, slurm.NodeDrain)
				n.Reason = ptr.Deref(msg.Reason, "")
				f.logNodeOp("drain " + name + ": " + n.Reason)
			case api.V0044UpdateNodeMsgStateUNDRAIN:
				n.States = without(n.States, slurm.NodeDrain)
				if !slices.Contains(n.States, slurm.NodeDown) {
					n.Reason = ""
				}
				f.logNodeOp("undrain " + name)
			case api.V0044UpdateNodeMsgStateRESUME:
				n.States = without(without(n.States, slurm.NodeDrain), slurm.NodeDown)
				if !slices.ContainsFunc(n.States, isBaseNodeState) {
					n.States = append([]string{slurm.NodeIdle}, n.States...)
				}
				n.Reason = ""
				f.logNodeOp("resume " + name)
			}
		}
	})
}

// delete cancels a job (it stays on record as CANCELLED, as in slurmctld) or deletes a
// node, which slurmctld allows only for an idle dynamic node.
func (f *Fake) delete(ctx context.Context, obj object.Object, _ ...slurmclient.DeleteOption) error {
	if err := f.count("delete"); err != nil {
		return err
	}
	if node, ok := obj.(*types.V0044Node); ok {
		name := string(node.GetKey())
		n, err := f.node(ctx, name)
		if err != nil {
			return err
		}
		switch {
		case !slices.Contains(n.States, slurm.NodeDynamic):
			return aggregate(http.StatusUnprocessableEntity, "Node is not dynamic")
		case slices.ContainsFunc(n.States, func(s string) bool {
			return s == slurm.NodeAllocated || s == slurm.NodeMixed || s == slurm.NodeCompleting
		}):
			return aggregate(http.StatusUnprocessableEntity, "Requested nodes are busy")
		}
		f.logNodeOp("delete " + name)
		return f.inner.Delete(ctx, node)
	}
	id, err := strconv.Atoi(string(obj.GetKey()))
	if err != nil {
		return err
	}
	return f.updateJob(ctx, int32(id), func(j *types.V0044JobInfo) {
		j.JobState = &[]api.V0044JobInfoJobState{api.V0044JobInfoJobStateCANCELLED}
	})
}

// Node is a node's state as the fake keeps it.
type Node struct {
	States []string
	Reason string
	// ReasonTime is when the reason was set (slurmrestd's reason_changed_at).
	ReasonTime time.Time
	Features   []string
}

// SetNode creates or replaces a node with the given state flags and reason, as Slurm
// would report them ("IDLE", "DRAIN", "DYNAMIC_NORM", ...).
func (f *Fake) SetNode(name, reason string, states ...string) error {
	return f.PutNode(name, Node{States: states, Reason: reason})
}

// PutNode creates or replaces a node as given.
func (f *Fake) PutNode(name string, node Node) error {
	n := &types.V0044Node{}
	n.Name = ptr.To(name)
	setNode(n, node)
	ctx := context.Background()
	if err := f.inner.Get(ctx, object.ObjectKey(name), &types.V0044Node{}); err != nil {
		return f.inner.Create(ctx, n, nil)
	}
	return f.inner.Update(ctx, n, nil)
}

// NodeOps returns the node changes made since the last call ("drain n1: <reason>",
// "undrain n1", "resume n1", "delete n1", "reconfigure"), and forgets them.
func (f *Fake) NodeOps() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.nodeOps
	f.nodeOps = nil
	return out
}

func (f *Fake) logNodeOp(op string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nodeOps = append(f.nodeOps, op)
}

// node reads a node; a missing one fails as slurmrestd answers for it.
func (f *Fake) node(ctx context.Context, name string) (Node, error) {
	n := &types.V0044Node{}
	if err := f.inner.Get(ctx, object.ObjectKey(name), n); err != nil {
		return Node{}, aggregate(http.StatusUnprocessableEntity, "Invalid node name specified")
	}
	out := Node{Reason: ptr.Deref(n.Reason, ""), Features: ptr.Deref(n.Features, nil)}
	if t := n.ReasonChangedAt; t != nil && ptr.Deref(t.Set, false) {
		out.ReasonTime = time.Unix(ptr.Deref(t.Number, 0), 0)
	}
	for _, s := range ptr.Deref(n.State, nil) {
		out.States = append(out.States, string(s))
	}
	return out, nil
}

func (f *Fake) mutateNode(ctx context.Context, name string, mutate func(*Node)) error {
	n, err := f.node(ctx, name)
	if err != nil {
		return err
	}
	mutate(&n)
	obj := &types.V0044Node{}
	obj.Name = ptr.To(name)
	setNode(obj, n)
	return f.inner.Update(ctx, obj, nil)
}

func setNode(obj *types.V0044Node, n Node) {
	states := make([]api.V0044NodeState, 0, len(n.States))
	for _, s := range n.States {
		states = append(states, api.V0044NodeState(s))
	}
	obj.State = &states
	obj.Reason = ptr.To(n.Reason)
	if n.Features != nil {
		obj.Features = ptr.To(n.Features)
	}
	if !n.ReasonTime.IsZero() {
		obj.ReasonChangedAt = &api.V0044Uint64NoValStruct{Set: ptr.To(true), Number: ptr.To(n.ReasonTime.Unix())}
	}
}

func isBaseNodeState(s string) bool {
	switch s {
	case slurm.NodeIdle, slurm.NodeAllocated, slurm.NodeMixed, slurm.NodeDown, "ERROR", "FUTURE", slurm.NodeUnknown:
		return true
	}
	return false
}

func with(states []string, flag string) []string {
	if slices.Contains(states, flag) {
		return states
	}
	return append(slices.Clone(states), flag)
}

func without(states []string, flag string) []string {
	return slices.DeleteFunc(slices.Clone(states), func(s string) bool { return s == flag })
}

func (f *Fake) updateJob(ctx context.Context, id int32, mutate func(*types.V0044JobInfo)) error {
	j := &types.V0044JobInfo{}
	if err := f.inner.Get(ctx, object.ObjectKey(strconv.Itoa(int(id))), j); err != nil {
		return err
	}
	mutate(j)
	return f.inner.Update(ctx, j, nil)
}

// Allocate starts a pending job on the given nodes, in rank order.
func (f *Fake) Allocate(id int32, nodes ...string) error {
	return f.updateJob(context.Background(), id, func(j *types.V0044JobInfo) {
		j.JobState = &[]api.V0044JobInfoJobState{api.V0044JobInfoJobStateRUNNING}
		j.StateReason = ptr.To("None")
		alloc := api.V0044JobResNodes{}
		for i, n := range nodes {
			alloc = append(alloc, api.V0044JobResNode{Index: int32(i), Name: n})
		}
		j.JobResources = &api.V0044JobRes{}
		j.JobResources.Nodes = &struct {
			Allocation *api.V0044JobResNodes             `json:"allocation,omitempty"`
			Count      *int32                            `json:"count,omitempty"`
			List       *string                           `json:"list,omitempty"`
			SelectType *[]api.V0044JobResNodesSelectType `json:"select_type,omitempty"`
			Whole      *bool                             `json:"whole,omitempty"`
		}{Allocation: &alloc}
	})
}

// SetGRESDetail sets a job's gres_detail, one entry per allocated node ("gpu:2(IDX:0-1)").
func (f *Fake) SetGRESDetail(id int32, detail ...string) error {
	return f.updateJob(context.Background(), id, func(j *types.V0044JobInfo) {
		j.GresDetail = &detail
	})
}

// SetState sets a job's state and reason, as Slurm reports them.
func (f *Fake) SetState(id int32, state, reason string) error {
	return f.updateJob(context.Background(), id, func(j *types.V0044JobInfo) {
		j.JobState = &[]api.V0044JobInfoJobState{api.V0044JobInfoJobState(state)}
		j.StateReason = ptr.To(reason)
	})
}

// AddForeignJobs adds n jobs that are not ours (sbatch jobs of other users), to grow the queue.
func (f *Fake) AddForeignJobs(n int) error {
	for i := 0; i < n; i++ {
		f.mu.Lock()
		id := f.nextID
		f.nextID++
		f.mu.Unlock()
		j := &types.V0044JobInfo{}
		j.JobId = ptr.To(id)
		j.Name = ptr.To("sbatch-" + strconv.Itoa(int(id)))
		j.JobState = &[]api.V0044JobInfoJobState{api.V0044JobInfoJobStatePENDING}
		j.StateReason = ptr.To("Priority")
		if err := f.inner.Create(context.Background(), j, nil); err != nil {
			return err
		}
	}
	return nil
}

// aggregate builds an error shaped as slurm-client reports a non-200 answer.
func aggregate(code int, msgs ...string) error {
	errs := []error{errors.New(http.StatusText(code))}
	for _, m := range msgs {
		errs = append(errs, errors.New(m))
	}
	return utilerrors.NewAggregate(errs)
}
