// Package plugin is kubeslurm's scheduler framework plugin: a pod becomes a Slurm
// placeholder job, Slurm decides where it runs, and the pod is bound to that node.
//
//	PreEnqueue holds a pod of a group until the group has all its members.
//	PreFilter  reads the pod's job from the shared Slurm watcher (no request to Slurm):
//	           allocated → only that node; pending → wait with Slurm's reason; none → go on.
//	Filter     admits only the allocated node; with no job yet it marks every node that
//	           passed the other filters as "waiting for Slurm".
//	PostFilter submits the job once — one job for a whole pod group — excluding the nodes
//	           Kubernetes ruled out.
//	Permit     holds each member of a group until every member has its node, then lets
//	           them all bind: all or nothing.
//	PreBind    checks the allocation still stands.
//
// Pods waiting on Slurm are re-activated only when the watcher sees their job change. The
// watcher starts on the first scheduling cycle, which only the elected replica runs: a
// standby replica never reads Slurm.
package plugin

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	"github.com/kubeslurm/kubeslurm/pkg/slurm"
	"github.com/kubeslurm/kubeslurm/pkg/slurmjob"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
	"github.com/kubeslurm/kubeslurm/pkg/workload"
)

// Name is the plugin's registered name.
const Name = wellknown.PluginName

const stateKey fwk.StateKey = Name

// Plugin places pods through Slurm.
type Plugin struct {
	// ctx is the scheduler's lifetime, which the watcher runs for once started.
	ctx       context.Context
	handle    fwk.Handle
	slurm     slurm.Client
	watcher   *slurm.Watcher
	podLister corelisters.PodLister
	groups    *workload.Resolver
	// permitTimeout bounds how long a group member waits in Permit for the others.
	permitTimeout time.Duration
	// needsNodes holds jobs Slurm refused until its nodes change.
	needsNodes *needsNodes
	latency    *latency
	// gpus tells which extended resources count as GPUs.
	gpus gpuResourceSource
	// unknownSubmits holds the pods whose last submit has an unknown outcome.
	unknownSubmits *unknownSubmits
}

var (
	_ fwk.PreEnqueuePlugin  = &Plugin{}
	_ fwk.PreFilterPlugin   = &Plugin{}
	_ fwk.FilterPlugin      = &Plugin{}
	_ fwk.PostFilterPlugin  = &Plugin{}
	_ fwk.ReservePlugin     = &Plugin{}
	_ fwk.PermitPlugin      = &Plugin{}
	_ fwk.PreBindPlugin     = &Plugin{}
	_ fwk.PostBindPlugin    = &Plugin{}
	_ fwk.EnqueueExtensions = &Plugin{}
)

// New is the framework factory: it connects to slurmrestd and starts the shared watcher.
func New(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	args := &Args{}
	if obj != nil {
		if err := frameworkruntime.DecodeInto(obj, args); err != nil {
			return nil, fmt.Errorf("decoding %s args: %w", Name, err)
		}
	}
	args.setDefaults()
	if err := args.validate(); err != nil {
		return nil, err
	}
	client, err := slurm.NewClient(slurm.Config{
		URL: args.SlurmrestdURL, User: args.SlurmUser, JWTKeyFile: args.JWTKeyFile,
		Timeout: args.RequestTimeout.Duration, ListTimeout: args.ListTimeout.Duration,
	})
	if err != nil {
		return nil, err
	}
	w := slurm.NewWatcher(client, args.PollInterval.Duration, args.ResyncPeriod.Duration)
	w.FullListPeriod = args.FullListPeriod.Duration
	groups, informers, err := newResolver(ctx, h)
	if err != nil {
		return nil, err
	}
	p := NewWithClient(h, client, w, groups)
	p.permitTimeout = args.GroupPermitTimeout.Duration
	p.gpus = gpuResourceSource{names: args.GPUResourceNames, classes: args.GPUDeviceClasses}
	if len(args.GPUDeviceClasses) > 0 {
		p.gpus.lister = h.SharedInformerFactory().Resource().V1().DeviceClasses().Lister()
	}
	if err := p.watchGroups(informers); err != nil {
		return nil, err
	}
	p.ctx = ctx
	return p, nil
}

// NewWithClient builds the plugin on a given Slurm client, watcher and group resolver
// (tests, benchmarks); the caller runs the watcher, unless it sets the plugin's context
// (WithContext), whose first scheduling cycle then starts it.
func NewWithClient(h fwk.Handle, c slurm.Client, w *slurm.Watcher, groups *workload.Resolver) *Plugin {
	p := &Plugin{
		handle: h, slurm: c, watcher: w, groups: groups, permitTimeout: defaultGroupPermitTimeout, needsNodes: newNeedsNodes(), latency: newLatency(),
		podLister: h.SharedInformerFactory().Core().V1().Pods().Lister(),
		gpus:      gpuResourceSource{names: defaultGPUResourceNames}, unknownSubmits: newUnknownSubmits(),
	}
	w.OnChange(p.activate)
	return p
}

// WithContext sets the context the watcher runs for once the first scheduling cycle
// starts it.
func (p *Plugin) WithContext(ctx context.Context) *Plugin {
	p.ctx = ctx
	return p
}

// Name implements fwk.Plugin.
func (p *Plugin) Name() string { return Name }

// cycleState is what PreFilter learnt, for the later extension points of the same cycle.
type cycleState struct {
	// group is the pod's group, nil for a pod placed on its own.
	group *workload.Group
	// spec is the job to submit when there is none (or when replacing job).
	spec slurmjob.JobSpec
	// job is the pod's current placeholder job (for a group member, the group's), nil
	// when none was submitted yet.
	job *slurm.Job
	// replace is set when job lost a member before it started: PostFilter submits a job
	// for the group's current members and cancels job.
	replace bool
	// node is the node Slurm allocated to this pod, empty until then.
	node string
}

func (s *cycleState) Clone() fwk.StateData { return s }

func getState(state fwk.CycleState) (*cycleState, bool) {
	d, err := state.Read(stateKey)
	if err != nil {
		return nil, false
	}
	s, ok := d.(*cycleState)
	return s, ok
}

// PreFilter decides from the cached job alone: its cost does not grow with Slurm's queue.
func (p *Plugin) PreFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, _ []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	if p.ctx != nil {
		p.watcher.Start(p.ctx)
	}
	if !p.watcher.Synced() {
		// Fail closed: without a first read of Slurm we cannot know whether a job exists.
		msg := "waiting for the first read of Slurm's jobs"
		if err := p.watcher.LastError(); err != nil {
			msg += ": " + err.Error()
		}
		return nil, fwk.NewStatus(fwk.Unschedulable, msg)
	}
	group, err := p.groups.GroupOf(pod)
	if err != nil {
		p.event(pod, v1.EventTypeWarning, wellknown.EventInvalidSlurmJobSpec, "Submit", "No Slurm job submitted: %v", err)
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "pod group: "+err.Error())
	}
	s := &cycleState{group: group}
	state.Write(stateKey, s)

	job, ok := p.currentJob(pod)
	var replacing *slurm.Job
	switch {
	case ok && group != nil && job.State == slurm.StatePending && !p.membersIntact(&job):
		// A member left before the job started: once the group is whole again, a job for
		// the members there are now replaces it.
		replacing, ok = &job, false
	case !ok && group != nil:
		if gj, found := p.watcher.JobForGroup(group.Key()); found && !gj.Ended() {
			if p.membersIntact(&gj) {
				return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf(
					"Slurm job %d already stands for the %d pods of %s; this pod is not one of them", gj.ID, len(gj.Pods), group))
			}
			replacing = &gj
		}
	}
	if !ok {
		if why, refused := p.needsNodes.waiting(jobKey(pod, group), pod); refused {
			return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, why)
		}
		// No job yet: Filter marks the feasible nodes, PostFilter submits.
		spec, status := p.specFor(pod, group)
		if status != nil {
			return nil, status
		}
		s.spec, s.job, s.replace = spec, replacing, replacing != nil
		return nil, nil
	}
	s.job = &job
	switch {
	case job.Ended():
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable,
			fmt.Sprintf("Slurm job %d ended (%s) before the pod was bound", job.ID, job.StateString()))
	case job.Allocated():
		node, ok := job.NodeForPod(slurmjob.RefOf(pod))
		if !ok {
			return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable,
				fmt.Sprintf("Slurm job %d has no node for this pod (nodes %v)", job.ID, job.Nodes))
		}
		s.node = node
		return &fwk.PreFilterResult{NodeNames: sets.New(node)}, nil
	default:
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable,
			fmt.Sprintf("Slurm job %d is %s", job.ID, job.StateString()))
	}
}

// currentJob is the pod's newest placeholder job in the watcher's cache, by pod UID (the
// identity Slurm records), so it is found even if the pod's job-id label was never written.
func (p *Plugin) currentJob(pod *v1.Pod) (slurm.Job, bool) {
	return p.watcher.JobForPod(pod.UID)
}

// PreFilterExtensions implements fwk.PreFilterPlugin; the plugin does not track other pods.
func (p *Plugin) PreFilterExtensions() fwk.PreFilterExtensions { return nil }

// Filter admits only the node Slurm allocated. It runs after every other filter, so a node
// that reaches it with no job yet is one Kubernetes could use: PostFilter reads that.
func (p *Plugin) Filter(_ context.Context, state fwk.CycleState, _ *v1.Pod, nodeInfo fwk.NodeInfo) *fwk.Status {
	s, ok := getState(state)
	if !ok {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "no kubeslurm state for this cycle")
	}
	name := nodeInfo.Node().Name
	switch {
	case s.node == name:
		return nil
	case s.node != "":
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "Slurm allocated node "+s.node)
	case p.slurmNode(name):
		return fwk.NewStatus(fwk.Unschedulable, waitingForSlurm)
	default:
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "node is not a Slurm node")
	}
}

const waitingForSlurm = "waiting for Slurm to allocate a node"

func (p *Plugin) slurmNode(name string) bool {
	_, ok := p.watcher.Node(name)
	return ok
}

// PostFilter submits the placeholder job when the pod (or its group) has none, and
// replaces a job whose allocation Kubernetes cannot use for good (a taint or affinity rules
// the node out) or that lost a group member before it started.
func (p *Plugin) PostFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, statuses fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status) {
	s, ok := getState(state)
	if !ok {
		return nil, fwk.NewStatus(fwk.Unschedulable)
	}
	switch {
	case s.job == nil && !s.replace:
		_, status := p.submit(ctx, pod, s.group, s.spec, p.excludedNodes(statuses))
		return nil, status
	case s.replace:
		// Filter ran on every node for this pod, as for a first submission.
		return nil, p.replace(ctx, pod, s, p.excludedNodes(statuses),
			fmt.Sprintf("Slurm job %d lost a member of %s before it started; resubmitting for the current members", s.job.ID, s.group))
	case s.node != "":
		st := statuses.Get(s.node)
		if st == nil || st.Code() != fwk.UnschedulableAndUnresolvable || st.Plugin() == Name {
			// Transient (resources still held by a terminating pod, say): wait for the
			// cluster events that the rejecting plugin registered.
			return nil, fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("Slurm allocated node %s; waiting for Kubernetes to admit the pod there", s.node))
		}
		spec, status := p.specFor(pod, s.group)
		if status != nil {
			return nil, status
		}
		s.spec = spec
		// The other nodes were never filtered this cycle (PreFilter named only s.node), so
		// the replacement excludes what the old job excluded, plus this node.
		return nil, p.replace(ctx, pod, s, append(slices.Clone(s.job.ExcludedNodes), s.node), fmt.Sprintf(
			"Slurm job %d was allocated node %s, which Kubernetes rules out (%s); resubmitting without it", s.job.ID, s.node, st.Message()))
	default:
		return nil, fwk.NewStatus(fwk.Unschedulable)
	}
}

// replace submits s.spec as the successor of s.job and then cancels s.job. Submitting
// first means the pods' job-id names the new job before the old one ends, so the
// controller never reads the old job's end as theirs.
func (p *Plugin) replace(ctx context.Context, pod *v1.Pod, s *cycleState, excluded []string, why string) *fwk.Status {
	p.event(pod, v1.EventTypeWarning, wellknown.EventSlurmAllocationUnusable, "Resubmit", "%s", why)
	job, status := p.submit(ctx, pod, s.group, s.spec, excluded)
	if job == nil {
		return status
	}
	p.rejectWaiting(s.job, "its Slurm job was replaced")
	if err := slurm.Release(ctx, p.slurm, p.watcher, s.job.ID); err != nil {
		klog.FromContext(ctx).Error(err, "Cancelling replaced Slurm job", "job", s.job.ID, "pod", klog.KObj(pod))
	}
	return status
}

// excludedNodes are the Slurm nodes the pod must not get: those another filter rejected.
// Only nodes that reached our Filter (status from this plugin) stay eligible;
// Kubernetes nodes that Slurm does not know are never named (Slurm refuses unknown names).
func (p *Plugin) excludedNodes(statuses fwk.NodeToStatusReader) []string {
	var out []string
	for _, name := range p.watcher.NodeNames() {
		if st := statuses.Get(name); st == nil || st.Plugin() != Name || st.Message() != waitingForSlurm {
			out = append(out, name)
		}
	}
	return out
}

// submit submits the job, records the link on its pods, and says what happened. The
// status is a rejection (the pod waits for Slurm) unless Slurm is unreachable: then it is
// an Error, so the pod is retried with backoff. The job is nil when none was submitted.
func (p *Plugin) submit(ctx context.Context, pod *v1.Pod, group *workload.Group, spec slurmjob.JobSpec, excluded []string) (*slurm.Job, *fwk.Status) {
	logger := klog.FromContext(ctx)
	if len(excluded) > 0 && len(excluded) >= len(p.watcher.NodeNames()) {
		return nil, fwk.NewStatus(fwk.Unschedulable, "no Slurm node passes the Kubernetes filters; not submitting a job that could never start")
	}
	key := jobKey(pod, group)
	if since, ok := p.unknownSubmits.since(key); ok {
		if !p.watcher.ListedSince(since) {
			// Slurm may have taken the last submit without answering: only a listing of
			// its jobs tells, and it finds the job by its pods' UIDs.
			p.watcher.RequestFullListing()
			return nil, fwk.NewStatus(fwk.Unschedulable, "the last submit's outcome is unknown; waiting for a full read of Slurm's jobs before submitting again")
		}
		p.unknownSubmits.forget(key)
	}
	spec = spec.WithExcludedNodes(excluded)
	job, err := p.slurm.Submit(ctx, spec)
	if err != nil {
		if slurm.NeedsOtherNodes(err) {
			why := fmt.Sprintf("Slurm cannot run the job on any of its current nodes (%v); submitting again when Slurm's nodes change", err)
			p.groupEvent(pod, group, v1.EventTypeWarning, wellknown.EventSlurmJobSubmitFailed, "Submit", "%s", why)
			p.needsNodes.refused(jobKey(pod, group), why, pod)
			return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, why)
		}
		if slurm.IsRejected(err) {
			p.groupEvent(pod, group, v1.EventTypeWarning, wellknown.EventSlurmJobSubmitFailed, "Submit", "Slurm refused the job: %v", err)
			return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, err.Error())
		}
		// Unavailable: the request may have reached slurmctld (a timeout after it was
		// sent), so no second job is submitted before a full listing shows there is none.
		p.unknownSubmits.record(key, time.Now())
		p.watcher.RequestFullListing()
		return nil, fwk.AsStatus(fmt.Errorf("submitting Slurm job: %w", err))
	}
	p.latency.submit(job.ID, time.Now())
	p.watcher.Observe(job)
	p.watcher.Trigger()
	logger.V(2).Info("Submitted placeholder job", "pod", klog.KObj(pod), "job", job.ID, "group", spec.Group, "excluded", spec.ExcludedNodes)
	p.groupEvent(pod, group, v1.EventTypeNormal, wellknown.EventSlurmJobSubmitted, "Submit", "Submitted Slurm job %d: %s", job.ID, spec)
	for _, ref := range spec.Pods {
		if err := p.linkPod(ctx, ref, job.ID); err != nil {
			// The job records the pods' UIDs, so the link is found again without the label.
			logger.Error(err, "Labelling pod with its Slurm job", "pod", ref.Key(), "job", job.ID)
		}
	}
	return job, fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("Slurm job %d submitted; %s", job.ID, waitingForSlurm))
}

// linkPod writes the job id onto the pod, as a label and an annotation. The patch is
// preconditioned on the UID, so a new pod of the same name is never labelled.
func (p *Plugin) linkPod(ctx context.Context, ref slurmjob.PodRef, id int32) error {
	v := strconv.Itoa(int(id))
	patch := fmt.Sprintf(`{"metadata":{"uid":%q,"labels":{%q:%q},"annotations":{%q:%q}}}`,
		ref.UID, wellknown.JobIDLabel, v, wellknown.JobIDLabel, v)
	_, err := p.handle.ClientSet().CoreV1().Pods(ref.Namespace).Patch(ctx, ref.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: "kubeslurm-scheduler"})
	return err
}

// PreBindPreFlight implements fwk.PreBindPlugin: PreBind has work only for our pods.
func (p *Plugin) PreBindPreFlight(_ context.Context, state fwk.CycleState, _ *v1.Pod, _ string) (*fwk.PreBindPreFlightResult, *fwk.Status) {
	if _, ok := getState(state); !ok {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	return &fwk.PreBindPreFlightResult{}, nil
}

// PreBind refuses to bind if, since the cycle began, the job lost the node.
func (p *Plugin) PreBind(_ context.Context, _ fwk.CycleState, pod *v1.Pod, nodeName string) *fwk.Status {
	job, ok := p.currentJob(pod)
	if !ok || !job.Allocated() {
		return fwk.NewStatus(fwk.Unschedulable, "the Slurm job no longer holds an allocation")
	}
	if node, ok := job.NodeForPod(slurmjob.RefOf(pod)); !ok || node != nodeName {
		return fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("Slurm job %d is no longer on node %s", job.ID, nodeName))
	}
	return nil
}

// PostBind times the pod's binding from its job's allocation (pkg/metrics).
func (p *Plugin) PostBind(_ context.Context, _ fwk.CycleState, pod *v1.Pod, _ string) {
	if job, ok := p.currentJob(pod); ok {
		p.latency.bound(job.ID, time.Now())
	}
}

// EventsToRegister: a pod waiting on Slurm is moved by the watcher (Activate), not by
// cluster events; a change of the pod's own slurmjob annotations requeues it, and so does
// a new pod of its group (the group may now be whole). Workload objects appearing or
// changing are watched by the plugin itself (watchGroups), as some are custom resources.
func (p *Plugin) EventsToRegister(context.Context) ([]fwk.ClusterEventWithHint, error) {
	return []fwk.ClusterEventWithHint{
		{Event: fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.Update}, QueueingHintFn: slurmAnnotationsChanged},
		{Event: fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.Add | fwk.Delete}, QueueingHintFn: p.sameGroup},
	}, nil
}

func slurmAnnotationsChanged(_ klog.Logger, pod *v1.Pod, oldObj, newObj interface{}) (fwk.QueueingHint, error) {
	oldPod, ok1 := oldObj.(*v1.Pod)
	newPod, ok2 := newObj.(*v1.Pod)
	if !ok1 || !ok2 || newPod.UID != pod.UID {
		return fwk.QueueSkip, nil
	}
	// Ours and slurm-bridge's keys alike (Merge(nil, ...) keeps exactly those).
	if !maps.Equal(slurmjob.Merge(nil, oldPod.Annotations), slurmjob.Merge(nil, newPod.Annotations)) {
		return fwk.Queue, nil
	}
	return fwk.QueueSkip, nil
}

// activate moves the waiting pods whose job changed back to the active queue; on a
// resync, every pod of ours still waiting.
func (p *Plugin) activate(change slurm.Change) {
	now := time.Now()
	for _, c := range change.Jobs {
		p.latency.jobChanged(c, now)
	}
	pods := map[string]*v1.Pod{}
	add := func(pod *v1.Pod) {
		if p.waiting(pod) {
			pods[pod.Namespace+"/"+pod.Name] = pod
		}
	}
	if change.Resync {
		all, err := p.podLister.List(labels.Everything())
		if err == nil {
			for _, pod := range all {
				add(pod)
			}
		}
	}
	if len(change.Nodes) > 0 {
		for k, pod := range p.needsNodes.nodesChanged() {
			pods[k] = pod
		}
	}
	for _, c := range change.Jobs {
		for _, ref := range c.Job.Pods {
			if pod, err := p.podLister.Pods(ref.Namespace).Get(ref.Name); err == nil && pod.UID == ref.UID {
				add(pod)
			}
		}
	}
	if len(pods) > 0 {
		p.handle.Activate(klog.Background(), pods)
	}
}

// jobKey names the job a pod waits for: its group's key, or the pod's own UID.
func jobKey(pod *v1.Pod, group *workload.Group) string {
	if group != nil {
		return group.Key()
	}
	return string(pod.UID)
}

func (p *Plugin) event(pod *v1.Pod, eventType, reason, action, note string, args ...interface{}) {
	p.handle.EventRecorder().Eventf(pod, nil, eventType, reason, action, note, args...)
}
