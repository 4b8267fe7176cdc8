package plugin

// Dependencies on other workloads' jobs: the dependency annotation may name a workload in
// the pod's namespace (afterany:Job/prep); the job must name Slurm job ids, so the
// reference is resolved here, from the watcher's cache, just before submitting.

import (
	"errors"
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/kubeslurm/kubeslurm/pkg/slurm"
	"github.com/kubeslurm/kubeslurm/pkg/slurmjob"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
	"github.com/kubeslurm/kubeslurm/pkg/workload"
)

// errNoJobYet says a referenced workload has no Slurm job yet: the pod waits for it.
var errNoJobYet = errors.New("no Slurm job yet")

// resolveDependencies returns deps with every workload reference replaced by the id of
// that workload's newest placeholder job in the watcher's cache. A workload without a job
// yet is an error wrapping errNoJobYet ("Job train-a has no Slurm job yet"). afterok and
// afternotok on a placeholder job, named by its id, are refused: Slurm records a
// placeholder job CANCELLED when kubeslurm ends it, never COMPLETED.
func resolveDependencies(deps []slurmjob.Dependency, namespace string, w *slurm.Watcher) ([]slurmjob.Dependency, error) {
	out := make([]slurmjob.Dependency, 0, len(deps))
	for _, d := range deps {
		r := slurmjob.Dependency{Type: d.Type, JobIDs: slices.Clone(d.JobIDs)}
		if d.Type == slurmjob.DependencyAfterOK || d.Type == slurmjob.DependencyAfterNotOK {
			for _, id := range d.JobIDs {
				if j, ok := w.Job(id); ok {
					return nil, fmt.Errorf("%s:%d: Slurm job %d is the placeholder job of pod %s, which Slurm never records as completed; use afterany (or after)",
						d.Type, id, id, j.Pods[0].Key())
				}
			}
		}
		for _, ref := range d.Workloads {
			id, err := jobOfWorkload(ref, namespace, w)
			if err != nil {
				return nil, err
			}
			if !slices.Contains(r.JobIDs, id) {
				r.JobIDs = append(r.JobIDs, id)
			}
		}
		out = append(out, r)
	}
	return out, nil
}

// jobOfWorkload is the id of the newest placeholder job of a pod (Pod/name) or of a pod
// group (its group key).
func jobOfWorkload(ref slurmjob.WorkloadRef, namespace string, w *slurm.Watcher) (int32, error) {
	var newest int32
	if ref.Kind == slurmjob.RefKindPod {
		for _, j := range w.JobsForPodKey(namespace + "/" + ref.Name) {
			newest = max(newest, j.ID)
		}
	} else if j, ok := w.JobForGroup(ref.GroupKey(namespace)); ok {
		newest = j.ID
	}
	if newest == 0 {
		name := ref.Name
		if ref.Replica != "" {
			name += "/" + ref.Replica
		}
		return 0, fmt.Errorf("%s %s has %w", ref.Kind, name, errNoJobYet)
	}
	return newest, nil
}

// withDependencies resolves the dependencies of a spec specFor built (status nil). A
// workload with no job yet makes the pod wait, Unschedulable, without an event: the
// watcher's resync re-activates it. Any other failure is an invalid spec, with the
// InvalidSlurmJobSpec event on the pod and its workload.
func (p *Plugin) withDependencies(pod *v1.Pod, group *workload.Group, spec slurmjob.JobSpec, status *fwk.Status) (slurmjob.JobSpec, *fwk.Status) {
	if status != nil || len(spec.Dependencies) == 0 {
		return spec, status
	}
	deps, err := resolveDependencies(spec.Dependencies, pod.Namespace, p.watcher)
	switch {
	case errors.Is(err, errNoJobYet):
		return spec, fwk.NewStatus(fwk.Unschedulable, "waiting for a Slurm job to depend on: "+err.Error())
	case err != nil:
		err = &slurmjob.AnnotationError{Key: slurmjob.Annotation(slurmjob.AnnotationDependency), Err: err}
		p.groupEvent(pod, group, v1.EventTypeWarning, wellknown.EventInvalidSlurmJobSpec, "Submit", "No Slurm job submitted: %v", err)
		return spec, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "invalid Slurm job spec: "+err.Error())
	}
	spec.Dependencies = deps
	return spec, nil
}
