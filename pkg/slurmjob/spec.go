// Package slurmjob is the placeholder-job contract: what a Slurm job made for Kubernetes
// pods looks like (JobSpec), how it is built from a pod and its annotations, and how the
// pods it stands for are recorded on the job. It is pure: no I/O.
package slurmjob

import (
	"fmt"
	"math"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	resourcehelper "k8s.io/component-helpers/resource"
)

// GPUResource is the NVIDIA device plugin's extended resource: by default the one whose
// count becomes the job's gres/gpu.
const GPUResource v1.ResourceName = "nvidia.com/gpu"

// GPUResources are the extended resources a pod requests GPUs by (the device plugin's,
// DRA extended resources of GPU device classes); their counts add up to the job's gres/gpu.
// Nil stands for GPUResource alone.
type GPUResources []v1.ResourceName

// count is the GPUs the requests (or, for extended resources given as limits only, the
// limits) ask for.
func (g GPUResources) count(reqs, limits v1.ResourceList) int64 {
	if g == nil {
		g = GPUResources{GPUResource}
	}
	var n int64
	for _, name := range g {
		if q := quantity(reqs, name); q > 0 {
			n += q
		} else {
			n += quantity(limits, name)
		}
	}
	return n
}

// PodRef identifies one pod a placeholder job stands for.
type PodRef struct {
	Namespace string    `json:"ns"`
	Name      string    `json:"name"`
	UID       types.UID `json:"uid"`
}

// Key is the pod's namespace/name, the key Kubernetes caches and queues use.
func (r PodRef) Key() string { return r.Namespace + "/" + r.Name }

// RefOf returns the PodRef of a pod.
func RefOf(pod *v1.Pod) PodRef {
	return PodRef{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}
}

// JobSpec is everything kubeslurm asks of Slurm for one placeholder job.
// Zero values mean "Slurm's default" (the partition's default time limit, say).
type JobSpec struct {
	Name        string
	Partition   string
	Account     string
	QOS         string
	Reservation string
	// TimeLimitMinutes is nil for the partition default; Unlimited for no limit.
	TimeLimitMinutes *uint32
	// Priority is nil for the priority plugin's own choice.
	Priority *uint32
	// Nice is nil for Slurm's default (0).
	Nice  *int32
	WCKey string
	// Constraints is a Slurm constraint expression on node features; Licenses a license
	// list (name[@server][:count],...). Both validated by ParseAnnotations.
	Constraints string
	Licenses    string
	// UserID and GroupID, when set, make the job another user's (nil: the submitter's).
	UserID, GroupID *uint32
	// Dependencies on other Slurm jobs. The scheduler resolves workload references into
	// job ids before it submits; the rest are sent as they are.
	Dependencies []Dependency

	Nodes           int32
	CPUsPerNode     int32
	MemoryPerNodeMB int64
	GPUsPerNode     int64
	// GRES are generic resources per node set by annotation; a gpu entry there stands
	// for GPUsPerNode (which it must agree with).
	GRES      []GRES
	Exclusive bool
	// ExcludedNodes are Slurm nodes the pod cannot use (Kubernetes filters rejected them).
	ExcludedNodes []string

	// Pods are the pods this job stands for, in rank order: pod i runs on node i of
	// Slurm's allocation.
	Pods []PodRef
	// Group is the key of the pod group this job is for; empty for a single pod.
	Group string
}

// Identity is what the job records of the pods it stands for.
func (s JobSpec) Identity() Identity { return Identity{Group: s.Group, Pods: s.Pods} }

// Unlimited is the TimeLimitMinutes value of "no time limit".
const Unlimited = math.MaxUint32

// ForPod builds the JobSpec for a single pod from its resource requests and its slurmjob
// annotations, read from its root workload (root, may be nil) and then the pod, the pod's
// winning. Any invalid annotation is an error naming the annotation.
// gpus names the resources that count as GPUs.
func ForPod(pod *v1.Pod, root map[string]string, gpus GPUResources) (JobSpec, error) {
	annotations := Merge(root, pod.Annotations)
	opts, err := ParseAnnotations(annotations)
	if err != nil {
		return JobSpec{}, err
	}
	spec := JobSpec{
		Name:  pod.Namespace + "/" + pod.Name,
		Nodes: 1,
		Pods:  []PodRef{RefOf(pod)},
	}
	spec.CPUsPerNode, spec.MemoryPerNodeMB, spec.GPUsPerNode = Requests(pod, gpus)
	if err := opts.apply(&spec, annotations); err != nil {
		return JobSpec{}, err
	}
	return spec, nil
}

// MaxGroupSize caps a group's members: the job's admin_comment records each of them
// (about 100 bytes a pod), and that record must stay a size slurmctld accepts.
const MaxGroupSize = 512

// ForGroup builds the one JobSpec of a pod group: one node per member, members in rank
// order (member i gets node i of the allocation), each node sized for the largest member,
// whole nodes unless the annotations say exclusive=false. Annotations come from the
// group's root workload, then its pods, which must agree with each other.
func ForGroup(key, name string, root map[string]string, members []*v1.Pod, gpus GPUResources) (JobSpec, error) {
	if len(members) == 0 || len(members) > MaxGroupSize {
		return JobSpec{}, fmt.Errorf("a pod group needs 1 to %d members, has %d", MaxGroupSize, len(members))
	}
	podAnnotations, err := agreedAnnotations(members)
	if err != nil {
		return JobSpec{}, err
	}
	annotations := Merge(root, podAnnotations)
	opts, err := ParseAnnotations(annotations)
	if err != nil {
		return JobSpec{}, err
	}
	spec := JobSpec{Name: name, Nodes: int32(len(members)), Group: key, Exclusive: true}
	for _, pod := range members {
		spec.Pods = append(spec.Pods, RefOf(pod))
		cpus, mem, gpuCount := Requests(pod, gpus)
		spec.CPUsPerNode = max(spec.CPUsPerNode, cpus)
		spec.MemoryPerNodeMB = max(spec.MemoryPerNodeMB, mem)
		spec.GPUsPerNode = max(spec.GPUsPerNode, gpuCount)
	}
	if err := opts.apply(&spec, annotations); err != nil {
		return JobSpec{}, err
	}
	return spec, nil
}

// Merge returns the slurmjob annotations (ours and slurm-bridge's) of base overridden by
// those of over, setting by setting: a setting over gives under either prefix replaces
// base's under both.
func Merge(base, over map[string]string) map[string]string {
	out := map[string]string{}
	overrides := map[string]bool{}
	for k, v := range over {
		if IsAnnotation(k) {
			out[k] = v
			if setting, ok := settingOf(k); ok {
				overrides[setting] = true
			}
		}
	}
	for k, v := range base {
		if _, set := out[k]; set || !IsAnnotation(k) {
			continue
		}
		if setting, ok := settingOf(k); ok && overrides[setting] {
			continue
		}
		out[k] = v
	}
	return out
}

// agreedAnnotations returns the slurmjob annotations the members set; two members setting
// one key to different values is an error, as no single job could honour both.
func agreedAnnotations(members []*v1.Pod) (map[string]string, error) {
	out := map[string]string{}
	from := map[string]string{}
	for _, pod := range members {
		for k, v := range Merge(nil, pod.Annotations) {
			if prev, ok := out[k]; ok && prev != v {
				return nil, &AnnotationError{Key: k, Value: v, Err: fmt.Errorf(
					"pods of one group must agree: %q on %s, %q on %s", prev, from[k], v, pod.Name)}
			}
			out[k], from[k] = v, pod.Name
		}
	}
	return out, nil
}

// Requests returns the pod's effective requests in Slurm's units: whole CPUs (rounded up,
// at least 1), memory in MiB (rounded up; 0 when the pod requests none) and GPUs (the
// resources gpuResources names).
func Requests(pod *v1.Pod, gpuResources GPUResources) (cpus int32, memMB int64, gpus int64) {
	reqs := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	cpus = 1
	if q, ok := reqs[v1.ResourceCPU]; ok {
		if c := int32((q.MilliValue() + 999) / 1000); c > 1 {
			cpus = c
		}
	}
	if q, ok := reqs[v1.ResourceMemory]; ok {
		memMB = ceilDiv(q.Value(), 1<<20)
	}
	// Extended resources may be given as limits only.
	gpus = gpuResources.count(reqs, resourcehelper.PodLimits(pod, resourcehelper.PodResourcesOptions{}))
	return cpus, memMB, gpus
}

func quantity(list v1.ResourceList, name v1.ResourceName) int64 {
	if q, ok := list[name]; ok {
		return q.Value()
	}
	return 0
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// TRESPerNode is the job's tres_per_node string ("gres/gpu:2", "gres/gpu:a100:2,gres/shard:1"):
// the annotated GRES, and the GPUs the pods request unless those name gpu themselves.
// Empty without either.
func (s JobSpec) TRESPerNode() string {
	parts := make([]string, 0, len(s.GRES)+1)
	if _, named := gpuCount(s.GRES); !named && s.GPUsPerNode > 0 {
		parts = append(parts, fmt.Sprintf("gres/gpu:%d", s.GPUsPerNode))
	}
	for _, g := range s.GRES {
		parts = append(parts, g.TRES())
	}
	return strings.Join(parts, ",")
}

// SlurmDependency is the job's dependency as Slurm reads it ("afterok:12:13,afterany:14"),
// empty without one.
func (s JobSpec) SlurmDependency() string {
	parts := make([]string, 0, len(s.Dependencies))
	for _, d := range s.Dependencies {
		parts = append(parts, d.String())
	}
	return strings.Join(parts, ",")
}

// WithExcludedNodes returns a copy of the spec excluding the given nodes (sorted, unique).
func (s JobSpec) WithExcludedNodes(nodes []string) JobSpec {
	seen := map[string]bool{}
	out := make([]string, 0, len(nodes))
	for _, n := range nodes {
		if n != "" && !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	sort.Strings(out)
	s.ExcludedNodes = out
	return s
}

// String is a short human description of the request, for events.
func (s JobSpec) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d node(s) x %d cpu", s.Nodes, s.CPUsPerNode)
	if s.MemoryPerNodeMB > 0 {
		fmt.Fprintf(&b, ", %s memory", resource.NewQuantity(s.MemoryPerNodeMB<<20, resource.BinarySI))
	}
	if s.GPUsPerNode > 0 {
		fmt.Fprintf(&b, ", %d gpu", s.GPUsPerNode)
	}
	if s.Partition != "" {
		fmt.Fprintf(&b, ", partition %s", s.Partition)
	}
	if s.Exclusive {
		b.WriteString(", exclusive")
	}
	return b.String()
}
