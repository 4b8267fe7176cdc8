package plugin

// Pod groups: one Slurm job for all the members of a group, all or nothing.
//
//	PreEnqueue holds members until the group has all of them (pkg/workload says who).
//	PreFilter/PostFilter of the first member submits ONE job listing every member in rank
//	           order; the others find it by their UID (the watcher indexes the job's pods).
//	Permit     holds each member on its node until all have theirs, then allows them all.
//	Unreserve  of one member sends the waiting others back: none binds without the rest.

import (
	"context"
	"errors"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	jobsetclientset "sigs.k8s.io/jobset/client-go/clientset/versioned"
	jobsetinformers "sigs.k8s.io/jobset/client-go/informers/externalversions"
	lwsclientset "sigs.k8s.io/lws/client-go/clientset/versioned"
	lwsinformers "sigs.k8s.io/lws/client-go/informers/externalversions"
	spclientset "sigs.k8s.io/scheduler-plugins/pkg/generated/clientset/versioned"
	spinformers "sigs.k8s.io/scheduler-plugins/pkg/generated/informers/externalversions"

	"github.com/kubeslurm/kubeslurm/pkg/slurm"
	"github.com/kubeslurm/kubeslurm/pkg/slurmjob"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
	"github.com/kubeslurm/kubeslurm/pkg/workload"
)

const defaultGroupPermitTimeout = 60 * time.Second

// newResolver wires the group resolver to the listers of the APIs the cluster serves:
// batch Jobs always; scheduler-plugins PodGroups, JobSets and LeaderWorkerSets if their
// CRDs are installed; Kubernetes' own PodGroups if scheduling.k8s.io/v1alpha2 is served.
// Checked once at start. It also returns the informers of those workload objects, for
// watchGroups.
func newResolver(ctx context.Context, h fwk.Handle) (*workload.Resolver, []cache.SharedIndexInformer, error) {
	f := h.SharedInformerFactory()
	r := &workload.Resolver{Pods: f.Core().V1().Pods().Lister(), Jobs: f.Batch().V1().Jobs().Lister()}
	informers := []cache.SharedIndexInformer{f.Batch().V1().Jobs().Informer()}
	// ifServed runs add when the cluster serves the resource; add returns its informer.
	ifServed := func(groupVersion, resource string, add func() (cache.SharedIndexInformer, error)) error {
		served, err := servesResource(h, groupVersion, resource)
		if err != nil || !served {
			return err
		}
		inf, err := add()
		if err != nil {
			return fmt.Errorf("%s client: %w", resource, err)
		}
		informers = append(informers, inf)
		return nil
	}
	err := errors.Join(
		ifServed("scheduling.x-k8s.io/v1alpha1", "podgroups", func() (cache.SharedIndexInformer, error) {
			cs, err := spclientset.NewForConfig(h.KubeConfig())
			if err != nil {
				return nil, err
			}
			spf := spinformers.NewSharedInformerFactory(cs, 0)
			pg := spf.Scheduling().V1alpha1().PodGroups()
			r.PodGroups = pg.Lister()
			inf := pg.Informer()
			spf.Start(ctx.Done())
			return inf, nil
		}),
		ifServed("scheduling.k8s.io/v1alpha2", "podgroups", func() (cache.SharedIndexInformer, error) {
			pg := f.Scheduling().V1alpha2().PodGroups()
			r.SchedulingPodGroups = pg.Lister()
			return pg.Informer(), nil
		}),
		ifServed("jobset.x-k8s.io/v1alpha2", "jobsets", func() (cache.SharedIndexInformer, error) {
			cs, err := jobsetclientset.NewForConfig(h.KubeConfig())
			if err != nil {
				return nil, err
			}
			jf := jobsetinformers.NewSharedInformerFactory(cs, 0)
			js := jf.Jobset().V1alpha2().JobSets()
			r.JobSets = js.Lister()
			inf := js.Informer()
			jf.Start(ctx.Done())
			return inf, nil
		}),
		ifServed("leaderworkerset.x-k8s.io/v1", "leaderworkersets", func() (cache.SharedIndexInformer, error) {
			cs, err := lwsclientset.NewForConfig(h.KubeConfig())
			if err != nil {
				return nil, err
			}
			lf := lwsinformers.NewSharedInformerFactory(cs, 0)
			lws := lf.Leaderworkerset().V1().LeaderWorkerSets()
			r.LeaderWorkerSets = lws.Lister()
			inf := lws.Informer()
			lf.Start(ctx.Done())
			return inf, nil
		}),
	)
	if err != nil {
		return nil, nil, err
	}
	klog.FromContext(ctx).Info("Pod group APIs", "schedulerPluginsPodGroups", r.PodGroups != nil, "kubernetesPodGroups", r.SchedulingPodGroups != nil,
		"jobSets", r.JobSets != nil, "leaderWorkerSets", r.LeaderWorkerSets != nil)
	return r, informers, nil
}

func servesResource(h fwk.Handle, groupVersion, resource string) (bool, error) {
	list, err := h.ClientSet().Discovery().ServerResourcesForGroupVersion(groupVersion)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("discovering %s: %w", groupVersion, err)
	}
	for _, r := range list.APIResources {
		if r.Name == resource {
			return true, nil
		}
	}
	return false, nil
}

// watchGroups re-activates the waiting pods of a workload object that appears or changes
// (a PodGroup created after its pods, a Job given the gang annotation).
func (p *Plugin) watchGroups(informers []cache.SharedIndexInformer) error {
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj interface{}) { p.activateNamespace(obj) },
		UpdateFunc: func(_, obj interface{}) { p.activateNamespace(obj) },
	}
	for _, inf := range informers {
		if _, err := inf.AddEventHandler(handler); err != nil {
			return err
		}
	}
	return nil
}

// activateNamespace re-activates our waiting pods in the object's namespace; PreEnqueue
// and PreFilter then decide from the group as it is now.
func (p *Plugin) activateNamespace(obj interface{}) {
	m, ok := obj.(interface{ GetNamespace() string })
	if !ok {
		return
	}
	pods, err := p.podLister.Pods(m.GetNamespace()).List(labels.Everything())
	if err != nil {
		return
	}
	waiting := map[string]*v1.Pod{}
	for _, pod := range pods {
		if p.waiting(pod) {
			waiting[pod.Namespace+"/"+pod.Name] = pod
		}
	}
	if len(waiting) > 0 {
		p.handle.Activate(klog.Background(), waiting)
	}
}

// waiting reports whether the pod is one of ours and still to be placed.
func (p *Plugin) waiting(pod *v1.Pod) bool {
	return pod.Spec.NodeName == "" && pod.Spec.SchedulerName == p.handle.ProfileName() && pod.DeletionTimestamp == nil
}

// specFor builds the job for a pod on its own, or for its whole group. A group is
// submitted only once all its members exist, by one of those members.
func (p *Plugin) specFor(pod *v1.Pod, group *workload.Group) (spec slurmjob.JobSpec, status *fwk.Status) {
	defer func() { spec, status = p.withDependencies(pod, group, spec, status) }()
	gpus, err := p.gpus.resources()
	if err != nil {
		// Fail closed: without the device classes, a pod's GPUs could go uncounted.
		return spec, fwk.AsStatus(err)
	}
	if group == nil {
		root, err := p.groups.RootAnnotations(pod)
		if err != nil {
			return spec, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, err.Error())
		}
		spec, err := slurmjob.ForPod(pod, root, gpus)
		if err != nil {
			p.event(pod, v1.EventTypeWarning, wellknown.EventInvalidSlurmJobSpec, "Submit", "No Slurm job submitted: %v", err)
			return spec, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "invalid Slurm job spec: "+err.Error())
		}
		return spec, nil
	}
	members, status := p.groupMembers(pod, group)
	if status != nil {
		return slurmjob.JobSpec{}, status
	}
	spec, err = slurmjob.ForGroup(group.Key(), group.JobName(), group.Annotations, members, gpus)
	if err != nil {
		p.groupEvent(pod, group, v1.EventTypeWarning, wellknown.EventInvalidSlurmJobSpec, "Submit", "No Slurm job submitted for %s: %v", group, err)
		return spec, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "invalid Slurm job spec: "+err.Error())
	}
	return spec, nil
}

// groupMembers returns the Size members that make up the group's job, in rank order, or
// why the pod must wait: the group is not whole yet, or the pod is a surplus member.
func (p *Plugin) groupMembers(pod *v1.Pod, group *workload.Group) ([]*v1.Pod, *fwk.Status) {
	members, status := p.wholeGroup(group)
	if status != nil {
		return nil, status
	}
	for _, m := range members {
		if m.UID == pod.UID {
			return members, nil
		}
	}
	return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf(
		"%s needs %d pods and has them without this one", group, group.Size))
}

// wholeGroup returns the group's first Size live members in rank order, or why it must
// wait: fewer than Size exist.
func (p *Plugin) wholeGroup(group *workload.Group) ([]*v1.Pod, *fwk.Status) {
	members, err := p.groups.Members(group)
	if err != nil {
		return nil, fwk.AsStatus(fmt.Errorf("listing members of %s: %w", group, err))
	}
	if len(members) < int(group.Size) {
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf(
			"waiting for the members of %s: %d of %d pods exist", group, len(members), group.Size))
	}
	return members[:group.Size], nil
}

// membersIntact reports whether every pod the job records still exists, as the same pod,
// and has not ended.
func (p *Plugin) membersIntact(job *slurm.Job) bool {
	for _, ref := range job.Pods {
		pod, err := p.podLister.Pods(ref.Namespace).Get(ref.Name)
		if err != nil || pod.UID != ref.UID || !workload.Live(pod) {
			return false
		}
	}
	return true
}

// PreEnqueue keeps a group's pods out of the scheduling queue until the group has all its
// members (or a job already), so an incomplete group costs no scheduling cycles.
func (p *Plugin) PreEnqueue(_ context.Context, pod *v1.Pod) *fwk.Status {
	group, err := p.groups.GroupOf(pod)
	if err != nil {
		if !workload.IsMissing(err) {
			// A spec that can never form a group: say so where the user looks.
			p.event(pod, v1.EventTypeWarning, wellknown.EventInvalidSlurmJobSpec, "Submit", "No Slurm job submitted: pod group: %v", err)
		}
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "pod group: "+err.Error())
	}
	if group == nil {
		return nil
	}
	if _, ok := p.watcher.JobForPod(pod.UID); ok {
		return nil
	}
	if _, ok := p.watcher.JobForGroup(group.Key()); ok {
		return nil // PreFilter decides whether this pod is one of the job's
	}
	_, status := p.wholeGroup(group)
	return status
}

// sameGroup requeues a waiting pod when a pod of its group is added or deleted: the group
// may now be whole, or have lost the member its job was waiting for.
func (p *Plugin) sameGroup(_ klog.Logger, pod *v1.Pod, oldObj, newObj interface{}) (fwk.QueueingHint, error) {
	other, _ := newObj.(*v1.Pod)
	if other == nil {
		other, _ = oldObj.(*v1.Pod)
	}
	if other == nil || other.Namespace != pod.Namespace || other.UID == pod.UID {
		return fwk.QueueSkip, nil
	}
	g, err := p.groups.GroupOf(pod)
	if err != nil || g == nil {
		return fwk.QueueSkip, nil
	}
	og, err := p.groups.GroupOf(other)
	if err != nil || og == nil || og.Key() != g.Key() {
		return fwk.QueueSkip, nil
	}
	return fwk.Queue, nil
}

// Reserve implements fwk.ReservePlugin; all the work is in Permit and Unreserve.
func (p *Plugin) Reserve(context.Context, fwk.CycleState, *v1.Pod, string) *fwk.Status { return nil }

// Unreserve sends back the members waiting in Permit when one member fails after
// PreFilter: none of them may bind without the others.
func (p *Plugin) Unreserve(_ context.Context, state fwk.CycleState, pod *v1.Pod, _ string) {
	if s, ok := getState(state); ok && s.job != nil && len(s.job.Pods) > 1 {
		p.rejectWaiting(s.job, fmt.Sprintf("member %s of Slurm job %d could not be bound", pod.Name, s.job.ID))
	}
}

// Permit holds a group member on its node until every member of the job has its own
// (waiting here, or already bound), then lets them all go: all or nothing.
func (p *Plugin) Permit(_ context.Context, state fwk.CycleState, pod *v1.Pod, _ string) (*fwk.Status, time.Duration) {
	s, ok := getState(state)
	if !ok || s.job == nil || len(s.job.Pods) <= 1 {
		return nil, 0
	}
	behind := 0
	// Members still in the queue (in backoff, say) are brought along.
	queued := map[string]*v1.Pod{}
	for _, ref := range s.job.Pods {
		if ref.UID == pod.UID || p.handle.GetWaitingPod(ref.UID) != nil {
			continue
		}
		member, err := p.podLister.Pods(ref.Namespace).Get(ref.Name)
		switch {
		case err != nil || member.UID != ref.UID:
			behind++
		case member.Spec.NodeName == "":
			behind++
			queued[ref.Key()] = member
		}
	}
	if behind > 0 {
		if len(queued) > 0 {
			p.handle.Activate(klog.Background(), queued)
		}
		return fwk.NewStatus(fwk.Wait, fmt.Sprintf("waiting for %d other members of Slurm job %d", behind, s.job.ID)), p.permitTimeout
	}
	p.handle.IterateOverWaitingPods(func(wp fwk.WaitingPod) {
		if s.job.HasPod(wp.GetPod().UID) {
			wp.Allow(Name)
		}
	})
	return nil, 0
}

// rejectWaiting sends the job's members waiting in Permit back to the queue.
func (p *Plugin) rejectWaiting(job *slurm.Job, why string) {
	p.handle.IterateOverWaitingPods(func(wp fwk.WaitingPod) {
		if job.HasPod(wp.GetPod().UID) {
			wp.Reject(Name, why)
		}
	})
}

// groupEvent records an event on the pod and, for a group, on its workload object too.
func (p *Plugin) groupEvent(pod *v1.Pod, group *workload.Group, eventType, reason, action, note string, args ...interface{}) {
	p.event(pod, eventType, reason, action, note, args...)
	if group != nil && group.Object != nil {
		p.handle.EventRecorder().Eventf(group.Object, nil, eventType, reason, action, note, args...)
	}
}
