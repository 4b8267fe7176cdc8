// Package plugin is kubeslurm's scheduler framework plugin: a pod becomes a Slurm
// placeholder job, Slurm decides where it runs, and the pod is bound to that node.
//
//	PreFilter  reads the pod's job from the shared Slurm watcher (no request to Slurm):
//	           allocated → only that node; pending → wait with Slurm's reason; none → go on.
//	Filter     admits only the allocated node; with no job yet it marks every node that
//	           passed the other filters as "waiting for Slurm".
//	PostFilter submits the job once, excluding the nodes Kubernetes ruled out.
//	PreBind    checks the allocation still stands.
//
// Pods waiting on Slurm are re-activated only when the watcher sees their job change.
package plugin

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

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
)

// Name is the plugin's registered name.
const Name = wellknown.PluginName

const stateKey fwk.StateKey = Name

// Plugin places pods through Slurm.
type Plugin struct {
	handle    fwk.Handle
	slurm     slurm.Client
	watcher   *slurm.Watcher
	podLister corelisters.PodLister
}

var (
	_ fwk.PreFilterPlugin   = &Plugin{}
	_ fwk.FilterPlugin      = &Plugin{}
	_ fwk.PostFilterPlugin  = &Plugin{}
	_ fwk.PreBindPlugin     = &Plugin{}
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
		Timeout: args.RequestTimeout.Duration,
	})
	if err != nil {
		return nil, err
	}
	w := slurm.NewWatcher(client, args.PollInterval.Duration, args.ResyncPeriod.Duration)
	p := NewWithClient(h, client, w)
	go w.Run(ctx)
	return p, nil
}

// NewWithClient builds the plugin on a given Slurm client and watcher (tests, benchmarks);
// the caller runs the watcher.
func NewWithClient(h fwk.Handle, c slurm.Client, w *slurm.Watcher) *Plugin {
	p := &Plugin{handle: h, slurm: c, watcher: w, podLister: h.SharedInformerFactory().Core().V1().Pods().Lister()}
	w.OnChange(p.activate)
	return p
}

// Name implements fwk.Plugin.
func (p *Plugin) Name() string { return Name }

// cycleState is what PreFilter learnt, for Filter and PostFilter of the same cycle.
type cycleState struct {
	spec slurmjob.JobSpec
	// job is the pod's current placeholder job, nil when none was submitted yet.
	job *slurm.Job
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
	if !p.watcher.Synced() {
		// Fail closed: without a first read of Slurm we cannot know whether a job exists.
		msg := "waiting for the first read of Slurm's jobs"
		if err := p.watcher.LastError(); err != nil {
			msg += ": " + err.Error()
		}
		return nil, fwk.NewStatus(fwk.Unschedulable, msg)
	}
	spec, err := slurmjob.ForPod(pod)
	if err != nil {
		p.event(pod, v1.EventTypeWarning, wellknown.EventInvalidSlurmJobSpec, "Submit", "No Slurm job submitted: %v", err)
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "invalid Slurm job spec: "+err.Error())
	}
	s := &cycleState{spec: spec}
	state.Write(stateKey, s)

	job, ok := p.currentJob(pod)
	if !ok {
		return nil, nil // no job yet: Filter marks the feasible nodes, PostFilter submits
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

// PostFilter submits the placeholder job when the pod has none, or replaces a job whose
// allocation Kubernetes cannot use for good (a taint or affinity rules the node out).
func (p *Plugin) PostFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, statuses fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status) {
	s, ok := getState(state)
	if !ok {
		return nil, fwk.NewStatus(fwk.Unschedulable)
	}
	switch {
	case s.job == nil:
		_, status := p.submit(ctx, pod, s.spec, p.excludedNodes(statuses))
		return nil, status
	case s.node != "":
		st := statuses.Get(s.node)
		if st == nil || st.Code() != fwk.UnschedulableAndUnresolvable || st.Plugin() == Name {
			// Transient (resources still held by a terminating pod, say): wait for the
			// cluster events that the rejecting plugin registered.
			return nil, fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("Slurm allocated node %s; waiting for Kubernetes to admit the pod there", s.node))
		}
		p.event(pod, v1.EventTypeWarning, wellknown.EventSlurmAllocationUnusable, "Resubmit",
			"Slurm job %d was allocated node %s, which Kubernetes rules out (%s); resubmitting without it",
			s.job.ID, s.node, st.Message())
		// Submit the replacement first: the pod's job-id then names it before the old job
		// ends, so the controller never reads the old job's end as the pod's.
		// The other nodes were never filtered this cycle (PreFilter named only s.node), so
		// the replacement excludes what the old job excluded, plus this node.
		job, status := p.submit(ctx, pod, s.spec, append(slices.Clone(s.job.ExcludedNodes), s.node))
		if job == nil {
			return nil, status
		}
		if err := slurm.Release(ctx, p.slurm, p.watcher, s.job.ID); err != nil {
			klog.FromContext(ctx).Error(err, "Cancelling replaced Slurm job", "job", s.job.ID, "pod", klog.KObj(pod))
		}
		return nil, status
	default:
		return nil, fwk.NewStatus(fwk.Unschedulable)
	}
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

// submit submits the pod's job, records the link on the pod, and says what happened. The
// status is a rejection (the pod waits for Slurm) unless Slurm is unreachable: then it is
// an Error, so the pod is retried with backoff. The job is nil when none was submitted.
func (p *Plugin) submit(ctx context.Context, pod *v1.Pod, spec slurmjob.JobSpec, excluded []string) (*slurm.Job, *fwk.Status) {
	logger := klog.FromContext(ctx)
	if len(excluded) > 0 && len(excluded) >= len(p.watcher.NodeNames()) {
		return nil, fwk.NewStatus(fwk.Unschedulable, "no Slurm node passes the Kubernetes filters; not submitting a job that could never start")
	}
	spec = spec.WithExcludedNodes(excluded)
	job, err := p.slurm.Submit(ctx, spec)
	if err != nil {
		if slurm.IsRejected(err) {
			p.event(pod, v1.EventTypeWarning, wellknown.EventSlurmJobSubmitFailed, "Submit", "Slurm refused the job: %v", err)
			return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, err.Error())
		}
		return nil, fwk.AsStatus(fmt.Errorf("submitting Slurm job: %w", err))
	}
	p.watcher.Observe(job)
	p.watcher.Trigger()
	logger.V(2).Info("Submitted placeholder job", "pod", klog.KObj(pod), "job", job.ID, "excluded", spec.ExcludedNodes)
	p.event(pod, v1.EventTypeNormal, wellknown.EventSlurmJobSubmitted, "Submit", "Submitted Slurm job %d: %s", job.ID, spec)
	if err := p.linkPod(ctx, pod, job.ID); err != nil {
		// The job records the pod's UID, so the link is found again without the label.
		logger.Error(err, "Labelling pod with its Slurm job", "pod", klog.KObj(pod), "job", job.ID)
	}
	return job, fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("Slurm job %d submitted; %s", job.ID, waitingForSlurm))
}

// linkPod writes the job id onto the pod, as a label and an annotation.
func (p *Plugin) linkPod(ctx context.Context, pod *v1.Pod, id int32) error {
	v := strconv.Itoa(int(id))
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q},"annotations":{%q:%q}}}`,
		wellknown.JobIDLabel, v, wellknown.JobIDLabel, v)
	_, err := p.handle.ClientSet().CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: "kubeslurm-scheduler"})
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

// EventsToRegister: a pod waiting on Slurm is moved by the watcher (Activate), not by
// cluster events; only a change of the pod's own slurmjob annotations requeues it.
func (p *Plugin) EventsToRegister(context.Context) ([]fwk.ClusterEventWithHint, error) {
	return []fwk.ClusterEventWithHint{
		{Event: fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.Update}, QueueingHintFn: slurmAnnotationsChanged},
	}, nil
}

func slurmAnnotationsChanged(_ klog.Logger, pod *v1.Pod, oldObj, newObj interface{}) (fwk.QueueingHint, error) {
	oldPod, ok1 := oldObj.(*v1.Pod)
	newPod, ok2 := newObj.(*v1.Pod)
	if !ok1 || !ok2 || newPod.UID != pod.UID {
		return fwk.QueueSkip, nil
	}
	if !equalPrefixed(oldPod.Annotations, newPod.Annotations, wellknown.SlurmJobAnnotationPrefix) {
		return fwk.Queue, nil
	}
	return fwk.QueueSkip, nil
}

func equalPrefixed(a, b map[string]string, prefix string) bool {
	count := 0
	for k, v := range a {
		if strings.HasPrefix(k, prefix) {
			count++
			if w, ok := b[k]; !ok || w != v {
				return false
			}
		}
	}
	for k := range b {
		if strings.HasPrefix(k, prefix) {
			count--
		}
	}
	return count == 0
}

// activate moves the waiting pods whose job changed back to the active queue; on a
// resync, every pod of ours still waiting.
func (p *Plugin) activate(change slurm.Change) {
	pods := map[string]*v1.Pod{}
	add := func(pod *v1.Pod) {
		if pod.Spec.NodeName == "" && pod.Spec.SchedulerName == p.handle.ProfileName() && pod.DeletionTimestamp == nil {
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

func (p *Plugin) event(pod *v1.Pod, eventType, reason, action, note string, args ...interface{}) {
	p.handle.EventRecorder().Eventf(pod, nil, eventType, reason, action, note, args...)
}
