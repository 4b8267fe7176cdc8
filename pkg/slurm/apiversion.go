package slurm

// This file is the one place that names a slurmrestd API version. Moving to another
// data_parser version means changing the imports and types here, nothing else.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	api "github.com/SlinkyProject/slurm-client/api/v0044"
	"github.com/SlinkyProject/slurm-client/pkg/types"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/utils/ptr"

	"github.com/kubeslurm/kubeslurm/pkg/slurmjob"
)

// APIVersion is the slurmrestd data_parser version kubeslurm speaks.
const APIVersion = "v0.0.44"

// fullJobListPath is slurmrestd's listing of every job.
const fullJobListPath = "/slurm/" + APIVersion + "/jobs/"

type (
	apiJob      = types.V0044JobInfo
	apiJobList  = types.V0044JobInfoList
	apiNode     = types.V0044Node
	apiNodeList = types.V0044NodeList
	apiPingList = types.V0044ControllerPingList
	// apiReconfigure: reading it is slurmrestd's GET /slurm/v0.0.44/reconfigure.
	apiReconfigure = types.V0044Reconfigure
)

// submitRequest renders a JobSpec as a placeholder job: an external job with no script,
// so Slurm allocates nodes and slurmd launches nothing; the pods run under Kubernetes.
func submitRequest(spec slurmjob.JobSpec) api.V0044JobSubmitReq {
	desc := &api.V0044JobDescMsg{
		Flags:                   &[]api.V0044JobDescMsgFlags{api.V0044JobDescMsgFlagsEXTERNALJOB},
		Name:                    ptr.To(spec.Name),
		Nodes:                   ptr.To(itoa(spec.Nodes)),
		MinimumNodes:            ptr.To(spec.Nodes),
		MaximumNodes:            ptr.To(spec.Nodes),
		Tasks:                   ptr.To(spec.Nodes),
		CpusPerTask:             ptr.To(spec.CPUsPerNode),
		CurrentWorkingDirectory: ptr.To("/tmp"),
		Environment:             &[]string{"PATH=/bin:/usr/bin"},
		AdminComment:            ptr.To(slurmjob.EncodeIdentity(spec.Identity())),
	}
	if spec.MemoryPerNodeMB > 0 {
		desc.MemoryPerNode = &api.V0044Uint64NoValStruct{Set: ptr.To(true), Number: ptr.To(spec.MemoryPerNodeMB)}
	}
	if t := spec.TRESPerNode(); t != "" {
		desc.TresPerNode = ptr.To(t)
	}
	if len(spec.ExcludedNodes) > 0 {
		desc.ExcludedNodes = ptr.To(api.V0044CsvString(spec.ExcludedNodes))
	}
	if spec.Exclusive {
		desc.Shared = &[]api.V0044JobDescMsgShared{api.V0044JobDescMsgSharedNone}
	}
	setString(&desc.Partition, spec.Partition)
	setString(&desc.Account, spec.Account)
	setString(&desc.Qos, spec.QOS)
	setString(&desc.Reservation, spec.Reservation)
	if spec.TimeLimitMinutes != nil {
		if *spec.TimeLimitMinutes == slurmjob.Unlimited {
			desc.TimeLimit = &api.V0044Uint32NoValStruct{Infinite: ptr.To(true)}
		} else {
			desc.TimeLimit = &api.V0044Uint32NoValStruct{Set: ptr.To(true), Number: ptr.To(int32(*spec.TimeLimitMinutes))}
		}
	}
	if spec.Priority != nil {
		desc.Priority = &api.V0044Uint32NoValStruct{Set: ptr.To(true), Number: ptr.To(int32(*spec.Priority))}
	}
	desc.Nice = spec.Nice
	setString(&desc.Wckey, spec.WCKey)
	setString(&desc.Constraints, spec.Constraints)
	setString(&desc.Licenses, spec.Licenses)
	setString(&desc.Dependency, spec.SlurmDependency())
	// slurmrestd takes ids as strings (a name would do too); ours are numeric.
	if spec.UserID != nil {
		desc.UserId = ptr.To(strconv.FormatUint(uint64(*spec.UserID), 10))
	}
	if spec.GroupID != nil {
		desc.GroupId = ptr.To(strconv.FormatUint(uint64(*spec.GroupID), 10))
	}
	return api.V0044JobSubmitReq{Job: desc}
}

// nudgeRequest is a job update that changes nothing (the job's own nice value).
func nudgeRequest(j *Job) api.V0044JobDescMsg {
	return api.V0044JobDescMsg{Nice: ptr.To(j.Nice)}
}

func setString(field **string, v string) {
	if v != "" {
		*field = ptr.To(v)
	}
}

// jobFromAPI converts slurmrestd's job record.
func jobFromAPI(in *apiJob) Job {
	states := make([]string, 0, 2)
	for _, s := range ptr.Deref(in.JobState, nil) {
		states = append(states, string(s))
	}
	base, flags := splitState(states)
	j := Job{
		ID:        ptr.Deref(in.JobId, 0),
		Name:      ptr.Deref(in.Name, ""),
		State:     base,
		Flags:     flags,
		Reason:    ptr.Deref(in.StateReason, ""),
		Partition: ptr.Deref(in.Partition, ""),
		UserName:  ptr.Deref(in.UserName, ""),
		Nice:      ptr.Deref(in.Nice, 0),
		StartTime: timeOf(in.StartTime),
		EndTime:   timeOf(in.EndTime),

		TRESPerNode: ptr.Deref(in.TresPerNode, ""),
		GRESDetail:  ptr.Deref(in.GresDetail, nil),
	}
	if ex := ptr.Deref(in.ExcludedNodes, ""); ex != "" {
		j.ExcludedNodes = ExpandHostlist(ex)
	}
	if id, ok := slurmjob.DecodeIdentity(ptr.Deref(in.AdminComment, "")); ok {
		j.Pods, j.Group = id.Pods, id.Group
	}
	if res := in.JobResources; res != nil && res.Nodes != nil && res.Nodes.Allocation != nil {
		for _, n := range *res.Nodes.Allocation {
			j.Nodes = append(j.Nodes, n.Name)
		}
	}
	if len(j.Nodes) == 0 && base != StatePending {
		if nodes := ptr.Deref(in.Nodes, ""); nodes != "" {
			j.Nodes = ExpandHostlist(nodes)
		}
	}
	return j
}

func timeOf(v *api.V0044Uint64NoValStruct) time.Time {
	if v == nil || !ptr.Deref(v.Set, false) || ptr.Deref(v.Infinite, false) {
		return time.Time{}
	}
	n := ptr.Deref(v.Number, 0)
	if n <= 0 {
		return time.Time{}
	}
	return time.Unix(n, 0)
}

func nodesFromAPI(in *apiNodeList) []Node {
	out := make([]Node, 0, len(in.Items))
	for i := range in.Items {
		out = append(out, nodeFromAPI(&in.Items[i]))
	}
	return out
}

func nodeFromAPI(in *apiNode) Node {
	node := Node{Name: ptr.Deref(in.Name, ""), Reason: ptr.Deref(in.Reason, ""), Topology: ptr.Deref(in.Topology, ""),
		Features: ptr.Deref(in.Features, nil), ReasonTime: timeOf(in.ReasonChangedAt)}
	for _, s := range ptr.Deref(in.State, nil) {
		node.States = append(node.States, strings.ToUpper(string(s)))
	}
	return node
}

// nodeKey addresses one node in slurm-client calls.
func nodeKey(name string) *apiNode {
	n := &apiNode{}
	n.Name = ptr.To(name)
	return n
}

// drainRequest sets DRAIN: no new job starts on the node, running ones finish.
func drainRequest(reason string) api.V0044UpdateNodeMsg {
	return api.V0044UpdateNodeMsg{
		State:  &[]api.V0044UpdateNodeMsgState{api.V0044UpdateNodeMsgStateDRAIN},
		Reason: ptr.To(reason),
	}
}

// undrainRequest clears DRAIN only. Not RESUME: that would also bring a DOWN node back,
// overruling Slurm's own verdict on a node that stopped responding.
func undrainRequest() api.V0044UpdateNodeMsg {
	return api.V0044UpdateNodeMsg{State: &[]api.V0044UpdateNodeMsgState{api.V0044UpdateNodeMsgStateUNDRAIN}}
}

// topologyRequest sets a node's topology ("<topology>:<block>"), as scontrol's
// `update nodename=X topology=...` does.
func topologyRequest(topology string) api.V0044UpdateNodeMsg {
	return api.V0044UpdateNodeMsg{TopologyStr: ptr.To(topology)}
}

// rawClient makes the reads slurm-client's object client lacks (a state read, and a
// node listing since a time), with its generated API client.
type rawClient interface {
	jobStates(ctx context.Context, ids []int32, into map[int32]JobStatus) error
	nodesSince(ctx context.Context, lastUpdate int64) (*NodeListing, error)
}

type generatedClient struct{ api *api.ClientWithResponses }

func newRawClient(server string, httpClient *http.Client) (rawClient, error) {
	c, err := api.NewClientWithResponses(server, api.WithHTTPClient(httpClient))
	if err != nil {
		return nil, err
	}
	return &generatedClient{api: c}, nil
}

// jobStateAnswer is slurmrestd's answer to GET jobs/state. Its OpenAPI description names
// the full job record, but the answer holds an id and a state list a job (job_id is a
// string, as array jobs have ids like "12_3").
type jobStateAnswer struct {
	Jobs []struct {
		JobID json.RawMessage `json:"job_id"`
		State []string        `json:"state"`
	} `json:"jobs"`
	Errors *api.V0044OpenapiErrors `json:"errors,omitempty"`
}

func (g *generatedClient) jobStates(ctx context.Context, ids []int32, into map[int32]JobStatus) error {
	// One job_id parameter a job: slurmrestd 26.05 answers a comma-separated list (the
	// OpenAPI description's form) with a 500, and leaves unknown ids out of a repeated one.
	query := url.Values{}
	for _, id := range ids {
		query.Add("job_id", strconv.Itoa(int(id)))
	}
	// The raw answer: the generated parser would decode it as the full job record its
	// OpenAPI description names, and fail on the string job_id.
	res, err := g.api.SlurmV0044GetJobsState(ctx, nil, func(_ context.Context, req *http.Request) error {
		req.URL.RawQuery = query.Encode()
		return nil
	})
	if err != nil {
		return err
	}
	defer func() { _ = res.Body.Close() }()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return err
	}
	var answer jobStateAnswer
	if err := json.Unmarshal(body, &answer); err != nil && res.StatusCode == http.StatusOK {
		return fmt.Errorf("decoding job states: %w", err)
	}
	if res.StatusCode != http.StatusOK {
		return answerError(res.StatusCode, answer.Errors)
	}
	for _, j := range answer.Jobs {
		id, err := strconv.ParseInt(strings.Trim(string(j.JobID), `"`), 10, 32)
		if err != nil {
			continue // an array or heterogeneous job's id: never one of ours
		}
		base, flags := splitState(j.State)
		into[int32(id)] = JobStatus{State: base, Flags: flags}
	}
	return nil
}

func (g *generatedClient) nodesSince(ctx context.Context, lastUpdate int64) (*NodeListing, error) {
	params := &api.SlurmV0044GetNodesParams{}
	if lastUpdate > 0 {
		params.UpdateTime = ptr.To(strconv.FormatInt(lastUpdate, 10))
	}
	res, err := g.api.SlurmV0044GetNodesWithResponse(ctx, params)
	if err != nil {
		return nil, err
	}
	if res.StatusCode() == http.StatusNotModified {
		// slurmrestd's answer when no node changed since update_time.
		return &NodeListing{Unchanged: true}, nil
	}
	if res.StatusCode() != http.StatusOK || res.JSON200 == nil {
		var errs *api.V0044OpenapiErrors
		if res.JSONDefault != nil {
			errs = res.JSONDefault.Errors
		}
		return nil, answerError(res.StatusCode(), errs)
	}
	out := &NodeListing{LastUpdate: ptr.Deref(res.JSON200.LastUpdate.Number, 0)}
	for i := range res.JSON200.Nodes {
		out.Nodes = append(out.Nodes, nodeFromAPI(&apiNode{V0044Node: res.JSON200.Nodes[i]}))
	}
	return out, nil
}

// answerError shapes a non-200 answer as slurm-client reports one (its status text, then
// Slurm's error descriptions), so classify reads both clients' failures alike.
func answerError(code int, errs *api.V0044OpenapiErrors) error {
	parts := []error{errors.New(http.StatusText(code))}
	for _, e := range ptr.Deref(errs, nil) {
		if e.Error != nil {
			parts = append(parts, errors.New(*e.Error))
		}
	}
	return utilerrors.NewAggregate(parts)
}
