// Package workload finds the pod group a pod belongs to — a scheduler-plugins PodGroup, a
// Kubernetes PodGroup (scheduling.k8s.io, GenericWorkload), a JobSet, a LeaderWorkerSet
// group, or a batch Job that opted in — and the group's members in rank order. Such a group becomes
// one multi-node Slurm job. It reads the API server through listers only.
package workload

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	batchlisters "k8s.io/client-go/listers/batch/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	schedulinglisters "k8s.io/client-go/listers/scheduling/v1alpha2"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	jobsetlisters "sigs.k8s.io/jobset/client-go/listers/jobset/v1alpha2"
	lwsv1 "sigs.k8s.io/lws/api/leaderworkerset/v1"
	lwslisters "sigs.k8s.io/lws/client-go/listers/leaderworkerset/v1"
	spv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
	splisters "sigs.k8s.io/scheduler-plugins/pkg/generated/listers/scheduling/v1alpha1"

	"github.com/kubeslurm/kubeslurm/pkg/slurmjob"
)

// The kinds of group, as they appear in group keys and messages.
const (
	KindPodGroup           = "PodGroup"                   // scheduling.x-k8s.io (scheduler-plugins)
	KindSchedulingPodGroup = "PodGroup.scheduling.k8s.io" // Kubernetes' own (GenericWorkload)
	KindJob                = "Job"
	KindJobSet             = "JobSet"
	KindLeaderWorkerSet    = "LeaderWorkerSet"
)

// Labels and annotations other projects put on their pods, read here.
const (
	PodGroupLabel       = spv1alpha1.PodGroupLabel
	LWSNameLabel        = lwsv1.SetNameLabelKey
	LWSGroupIndexLabel  = lwsv1.GroupIndexLabelKey
	LWSWorkerIndexLabel = lwsv1.WorkerIndexLabelKey
	LWSSizeAnnotation   = lwsv1.SizeAnnotationKey
	JobSetNameLabel     = jobsetv1alpha2.JobSetNameKey
	JobSetIndexLabel    = jobsetv1alpha2.JobGlobalIndexKey
	// JobSetRestartLabel numbers the JobSet's attempt a pod belongs to (the JobSet
	// controller's constant lives in a package we do not import).
	JobSetRestartLabel = "jobset.sigs.k8s.io/restart-attempt"
)

// Group is a set of pods that start together, as one Slurm job, or not at all.
type Group struct {
	Kind      string
	Namespace string
	Name      string
	// Replica tells apart the groups of one workload (a LeaderWorkerSet's group index).
	Replica string
	// Size is how many pods make up the job: PodGroup minMember, Job parallelism, ...
	Size int32
	// Annotations are the root workload's; each pod's own override them.
	Annotations map[string]string
	// Object is the workload object, for events; nil when there is none to point at.
	Object runtime.Object

	selector labels.Selector
	// member further filters the pods the selector matched (nil: all of them).
	member func(*v1.Pod) bool
	// index is a pod's rank in the workload when the workload numbers its pods.
	index func(*v1.Pod) (int, bool)
}

// Key identifies the group on its Slurm job: kind/namespace/name[/replica].
func (g *Group) Key() string {
	k := g.Kind + "/" + g.Namespace + "/" + g.Name
	if g.Replica != "" {
		k += "/" + g.Replica
	}
	return k
}

// JobName is the Slurm job name of the group's job unless annotations set one.
func (g *Group) JobName() string {
	n := g.Namespace + "/" + g.Name
	if g.Replica != "" {
		n += "-" + g.Replica
	}
	return n
}

// Key is a parsed group key (see Group.Key).
type Key struct{ Kind, Namespace, Name, Replica string }

// ParseKey splits a group key; an unknown form yields an empty Kind.
func ParseKey(key string) Key {
	parts := strings.SplitN(key, "/", 4)
	if len(parts) < 3 {
		return Key{}
	}
	k := Key{Kind: parts[0], Namespace: parts[1], Name: parts[2]}
	if len(parts) == 4 {
		k.Replica = parts[3]
	}
	return k
}

func (g *Group) String() string { return g.Kind + " " + g.JobName() }

// Resolver finds groups through listers. A nil lister means that API is not served
// (its CRD is not installed, or the feature gate is off): pods naming it get an error.
type Resolver struct {
	Pods                corelisters.PodLister
	Jobs                batchlisters.JobLister
	PodGroups           splisters.PodGroupLister
	SchedulingPodGroups schedulinglisters.PodGroupLister
	JobSets             jobsetlisters.JobSetLister
	LeaderWorkerSets    lwslisters.LeaderWorkerSetLister
}

// GroupOf returns the pod's group, or nil for a pod placed on its own. An error means the
// pod names a group that cannot be formed now (its object is missing, its size is
// invalid): the pod waits, and the error says why.
func (r *Resolver) GroupOf(pod *v1.Pod) (*Group, error) {
	if sg := pod.Spec.SchedulingGroup; sg != nil && sg.PodGroupName != nil {
		return r.schedulingPodGroup(pod, *sg.PodGroupName)
	}
	if name, ok := pod.Labels[PodGroupLabel]; ok {
		return r.podGroup(pod, name)
	}
	if name, ok := pod.Labels[JobSetNameLabel]; ok {
		return r.jobSetGroup(pod, name)
	}
	if name, ok := pod.Labels[LWSNameLabel]; ok {
		return r.lwsGroup(pod, name)
	}
	if uid, ok := pod.Labels[batchv1.ControllerUidLabel]; ok {
		return r.jobGroup(pod, uid)
	}
	return nil, nil
}

func (r *Resolver) podGroup(pod *v1.Pod, name string) (*Group, error) {
	if r.PodGroups == nil {
		return nil, fmt.Errorf("pod is labelled %s=%s but the PodGroup API (scheduling.x-k8s.io) is not installed", PodGroupLabel, name)
	}
	pg, err := r.PodGroups.PodGroups(pod.Namespace).Get(name)
	if err != nil {
		return nil, notFound(err, KindPodGroup, pod.Namespace, name)
	}
	if pg.Spec.MinMember < 1 {
		return nil, fmt.Errorf("PodGroup %s/%s has minMember %d; want at least 1", pod.Namespace, name, pg.Spec.MinMember)
	}
	// Listers drop the type; event recorders need it to name a custom resource.
	obj := pg.DeepCopy()
	obj.APIVersion, obj.Kind = spv1alpha1.SchemeGroupVersion.String(), KindPodGroup
	return &Group{
		Kind: KindPodGroup, Namespace: pod.Namespace, Name: name, Size: pg.Spec.MinMember,
		Annotations: pg.Annotations, Object: obj,
		selector: labels.SelectorFromSet(labels.Set{PodGroupLabel: name}),
	}, nil
}

func (r *Resolver) schedulingPodGroup(pod *v1.Pod, name string) (*Group, error) {
	if r.SchedulingPodGroups == nil {
		return nil, fmt.Errorf("pod names PodGroup %s but the scheduling.k8s.io/v1alpha2 API is not served", name)
	}
	pg, err := r.SchedulingPodGroups.PodGroups(pod.Namespace).Get(name)
	if err != nil {
		return nil, notFound(err, KindSchedulingPodGroup, pod.Namespace, name)
	}
	gang := pg.Spec.SchedulingPolicy.Gang
	if gang == nil {
		return nil, nil // the basic policy places each pod on its own
	}
	if gang.MinCount < 1 {
		return nil, fmt.Errorf("PodGroup %s/%s has gang minCount %d; want at least 1", pod.Namespace, name, gang.MinCount)
	}
	return &Group{
		Kind: KindSchedulingPodGroup, Namespace: pod.Namespace, Name: name, Size: gang.MinCount,
		Annotations: pg.Annotations, Object: pg,
		selector: labels.Everything(),
		member: func(p *v1.Pod) bool {
			sg := p.Spec.SchedulingGroup
			return sg != nil && sg.PodGroupName != nil && *sg.PodGroupName == name
		},
	}, nil
}

// lwsGroup is one group of a LeaderWorkerSet: its leader (worker index 0) and workers,
// told by the labels and size annotation the LWS controller puts on every pod. The
// LeaderWorkerSet object gives the annotations and receives the events.
func (r *Resolver) lwsGroup(pod *v1.Pod, name string) (*Group, error) {
	replica, ok := pod.Labels[LWSGroupIndexLabel]
	if !ok {
		return nil, fmt.Errorf("LeaderWorkerSet pod has no %s label", LWSGroupIndexLabel)
	}
	size, err := strconv.ParseInt(pod.Annotations[LWSSizeAnnotation], 10, 32)
	if err != nil || size < 1 {
		return nil, fmt.Errorf("LeaderWorkerSet pod annotation %s=%q is not a group size", LWSSizeAnnotation, pod.Annotations[LWSSizeAnnotation])
	}
	g := &Group{
		Kind: KindLeaderWorkerSet, Namespace: pod.Namespace, Name: name, Replica: replica, Size: int32(size),
		selector: labels.SelectorFromSet(labels.Set{LWSNameLabel: name, LWSGroupIndexLabel: replica}),
		index:    func(p *v1.Pod) (int, bool) { return atoi(p.Labels[LWSWorkerIndexLabel]) },
	}
	if r.LeaderWorkerSets == nil {
		return g, nil // the pods carry all a group needs; only annotations and events are lost
	}
	lws, err := r.LeaderWorkerSets.LeaderWorkerSets(pod.Namespace).Get(name)
	if err != nil {
		return nil, notFound(err, KindLeaderWorkerSet, pod.Namespace, name)
	}
	if lws.Spec.StartupPolicy == lwsv1.LeaderReadyStartupPolicy {
		return nil, fmt.Errorf("LeaderWorkerSet %s/%s has startupPolicy %s: its workers are created only once the leader runs, but a Slurm job starts the whole group at once; use %s",
			pod.Namespace, name, lwsv1.LeaderReadyStartupPolicy, lwsv1.LeaderCreatedStartupPolicy)
	}
	obj := lws.DeepCopy()
	obj.APIVersion, obj.Kind = lwsv1.GroupVersion.String(), KindLeaderWorkerSet
	g.Annotations, g.Object = lws.Annotations, obj
	return g, nil
}

// jobSetGroup is a whole JobSet: every pod of every replicated job of its current attempt,
// ranked by the job's global index, then the pod's completion index.
func (r *Resolver) jobSetGroup(pod *v1.Pod, name string) (*Group, error) {
	if r.JobSets == nil {
		return nil, fmt.Errorf("pod is labelled %s=%s but the JobSet API (jobset.x-k8s.io/v1alpha2) is not installed", JobSetNameLabel, name)
	}
	js, err := r.JobSets.JobSets(pod.Namespace).Get(name)
	if err != nil {
		return nil, notFound(err, KindJobSet, pod.Namespace, name)
	}
	size, offsets, err := jobSetLayout(js)
	if err != nil {
		return nil, err
	}
	obj := js.DeepCopy()
	obj.APIVersion, obj.Kind = jobsetv1alpha2.SchemeGroupVersion.String(), KindJobSet
	return &Group{
		Kind: KindJobSet, Namespace: pod.Namespace, Name: name, Size: size,
		Annotations: js.Annotations, Object: obj,
		selector: labels.SelectorFromSet(labels.Set{
			JobSetNameLabel:    name,
			JobSetRestartLabel: strconv.Itoa(int(js.Status.Restarts)),
		}),
		index: func(p *v1.Pod) (int, bool) {
			job, ok := atoi(p.Labels[JobSetIndexLabel])
			if !ok || job >= len(offsets) {
				return 0, false
			}
			i, ok := atoi(p.Annotations[batchv1.JobCompletionIndexAnnotation])
			return offsets[job] + i, ok
		},
	}, nil
}

// jobSetLayout returns how many pods a JobSet runs at once and, per job global index, the
// rank of that job's first pod. Every pod must run at once: a replicated job whose
// completions differ from its parallelism, or that starts only after another (startup
// order, dependsOn), cannot be one Slurm job.
func jobSetLayout(js *jobsetv1alpha2.JobSet) (int32, []int, error) {
	if sp := js.Spec.StartupPolicy; sp != nil && sp.StartupPolicyOrder == jobsetv1alpha2.InOrder {
		return 0, nil, fmt.Errorf("JobSet %s/%s has startupPolicyOrder InOrder: its jobs start one after another, but a Slurm job starts them all at once", js.Namespace, js.Name)
	}
	var size int32
	var offsets []int
	for _, rj := range js.Spec.ReplicatedJobs {
		if len(rj.DependsOn) > 0 {
			return 0, nil, fmt.Errorf("JobSet %s/%s: replicated job %s depends on %s, but a Slurm job starts all of them at once", js.Namespace, js.Name, rj.Name, rj.DependsOn[0].Name)
		}
		p, c := int32(1), rj.Template.Spec.Completions
		if rj.Template.Spec.Parallelism != nil {
			p = *rj.Template.Spec.Parallelism
		}
		if p < 1 || (c != nil && *c != p) {
			return 0, nil, fmt.Errorf("JobSet %s/%s: replicated job %s has parallelism %d and completions %s; they must be equal so that all its pods run at once",
				js.Namespace, js.Name, rj.Name, p, show(c))
		}
		for i := int32(0); i < rj.Replicas; i++ {
			offsets = append(offsets, int(size))
			size += p
		}
	}
	if size < 1 {
		return 0, nil, fmt.Errorf("JobSet %s/%s runs no pods", js.Namespace, js.Name)
	}
	return size, offsets, nil
}

// jobGroup is a batch Job that opted in with the gang annotation; other Jobs' pods are
// placed one by one.
func (r *Resolver) jobGroup(pod *v1.Pod, uid string) (*Group, error) {
	if ref := metav1.GetControllerOfNoCopy(pod); ref == nil || string(ref.UID) != uid {
		return nil, nil
	}
	job, err := r.controllingJob(pod)
	if job == nil || err != nil {
		return nil, err
	}
	opts, err := slurmjob.ParseAnnotations(slurmjob.Merge(nil, job.Annotations))
	if err != nil || !opts.Gang {
		return nil, err
	}
	p, c := job.Spec.Parallelism, job.Spec.Completions
	if p == nil || c == nil || *p != *c || *p < 1 {
		return nil, fmt.Errorf("Job %s/%s asks for one Slurm job (%s) but its parallelism (%s) and completions (%s) differ: all its pods must run at once",
			job.Namespace, job.Name, slurmjob.Annotation(slurmjob.AnnotationGang), show(p), show(c))
	}
	g := &Group{
		Kind: KindJob, Namespace: job.Namespace, Name: job.Name, Size: *p,
		Annotations: job.Annotations, Object: job,
		selector: labels.SelectorFromSet(labels.Set{batchv1.ControllerUidLabel: uid}),
	}
	if job.Spec.CompletionMode != nil && *job.Spec.CompletionMode == batchv1.IndexedCompletion {
		g.index = func(p *v1.Pod) (int, bool) { return atoi(p.Annotations[batchv1.JobCompletionIndexAnnotation]) }
	}
	return g, nil
}

// RootAnnotations returns the annotations of the workload of a pod placed on its own: its
// controlling Job's (a Job without the gang annotation), nil for a pod with none. A Job the
// lister does not have (yet) is an error, so the pod waits rather than lose its settings.
func (r *Resolver) RootAnnotations(pod *v1.Pod) (map[string]string, error) {
	job, err := r.controllingJob(pod)
	if job == nil || err != nil {
		return nil, err
	}
	return job.Annotations, nil
}

// controllingJob returns the batch Job controlling the pod, nil for a pod with none.
func (r *Resolver) controllingJob(pod *v1.Pod) (*batchv1.Job, error) {
	ref := metav1.GetControllerOfNoCopy(pod)
	if ref == nil || ref.Kind != KindJob || r.Jobs == nil {
		return nil, nil
	}
	job, err := r.Jobs.Jobs(pod.Namespace).Get(ref.Name)
	if err != nil {
		return nil, notFound(err, KindJob, pod.Namespace, ref.Name)
	}
	return job, nil
}

// Members returns the group's live pods (not ended, not being deleted) in rank order: by
// the workload's own index where it numbers its pods (an indexed Job's completion index,
// an LWS worker index), else by creation time, then name.
func (r *Resolver) Members(g *Group) ([]*v1.Pod, error) {
	pods, err := r.Pods.Pods(g.Namespace).List(g.selector)
	if err != nil {
		return nil, err
	}
	out := make([]*v1.Pod, 0, len(pods))
	for _, p := range pods {
		if Live(p) && (g.member == nil || g.member(p)) {
			out = append(out, p)
		}
	}
	SortByRank(out, g.index)
	return out, nil
}

// SortByRank orders pods by index (when index knows it), then creation time, then name.
func SortByRank(pods []*v1.Pod, index func(*v1.Pod) (int, bool)) {
	rank := func(p *v1.Pod) int {
		if index != nil {
			if i, ok := index(p); ok {
				return i
			}
		}
		return int(^uint(0) >> 1)
	}
	sort.SliceStable(pods, func(i, j int) bool {
		a, b := pods[i], pods[j]
		if ra, rb := rank(a), rank(b); ra != rb {
			return ra < rb
		}
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		return a.Name < b.Name
	})
}

// Live reports whether a pod still counts as a member: not ended, not being deleted.
func Live(p *v1.Pod) bool {
	return p.DeletionTimestamp == nil && p.Status.Phase != v1.PodSucceeded && p.Status.Phase != v1.PodFailed
}

func notFound(err error, kind, ns, name string) error {
	if apierrors.IsNotFound(err) {
		return missing{fmt.Errorf("%s %s/%s not found", kind, ns, name)}
	}
	return missing{fmt.Errorf("reading %s %s/%s: %w", kind, ns, name, err)}
}

// missing marks an error about a workload object that cannot be read (yet): its pods wait
// for it. Every other GroupOf error is a mistake in the workload's spec.
type missing struct{ error }

func (m missing) Unwrap() error { return m.error }

// IsMissing reports whether GroupOf failed only because the workload object is not readable.
func IsMissing(err error) bool {
	var m missing
	return errors.As(err, &m)
}

func atoi(s string) (int, bool) {
	i, err := strconv.Atoi(s)
	return i, err == nil && i >= 0
}

func show(p *int32) string {
	if p == nil {
		return "unset"
	}
	return strconv.Itoa(int(*p))
}
