// Package pod keeps each pod and its Slurm placeholder job in step, both ways:
// a pod that ended or was deleted has its job cancelled; a job that ended in Slurm
// (scancel, time limit, preemption, node failure) ends its pod; the job's state is
// written onto the pod. Reconcile is level-based: it reads both sides every time.
package pod

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/kubeslurm/kubeslurm/pkg/slurm"
	"github.com/kubeslurm/kubeslurm/pkg/slurmjob"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

// Reconciler reconciles one pod name (namespace/name) with the Slurm jobs recorded for it.
type Reconciler struct {
	// Client is the manager's cached client.
	Client client.Client
	// APIReader reads the API server directly: a pod is only taken as gone when the
	// API server itself says so, never because a cache has not caught up.
	APIReader client.Reader
	Slurm     slurm.Client
	Watcher   *slurm.Watcher
	Recorder  events.EventRecorder
	// SchedulerName selects the pods this controller owns.
	SchedulerName string
	// NotSyncedRetry is how soon to retry while Slurm has not been read yet.
	NotSyncedRetry time.Duration
}

// Reconcile implements reconcile.Reconciler.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	logger := log.FromContext(ctx)
	if !r.Watcher.Synced() {
		// Fail closed: without Slurm's state, do nothing either way.
		return ctrl.Result{RequeueAfter: r.NotSyncedRetry}, nil
	}
	jobs := r.Watcher.JobsForPodKey(req.String())

	pod := &v1.Pod{}
	err := r.Client.Get(ctx, req.NamespacedName, pod)
	if apierrors.IsNotFound(err) {
		err = r.APIReader.Get(ctx, req.NamespacedName, pod)
	}
	switch {
	case apierrors.IsNotFound(err):
		return ctrl.Result{}, r.cancelAll(ctx, jobs, "", "its pod no longer exists")
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("reading pod: %w", err)
	}

	// Jobs of an earlier pod under the same name are orphans.
	if err := r.cancelAll(ctx, jobs, pod.UID, "its pod was replaced by a new one of the same name"); err != nil {
		return ctrl.Result{}, err
	}
	job, ok := r.Watcher.JobForPod(pod.UID)
	if !ok {
		return r.reconcileMissingJob(ctx, pod)
	}

	podDone := isTerminal(pod) || (pod.DeletionTimestamp != nil && pod.Spec.NodeName == "")
	switch {
	case podDone && !job.Ended():
		logger.Info("Pod ended; cancelling its Slurm job", "job", job.ID, "phase", pod.Status.Phase)
		if err := r.cancel(ctx, job.ID); err != nil {
			return ctrl.Result{}, err
		}
		r.Recorder.Eventf(pod, nil, v1.EventTypeNormal, wellknown.EventSlurmJobCancelled, "Cancel",
			"Pod %s; cancelled Slurm job %d", podEnd(pod), job.ID)
		return ctrl.Result{}, nil
	case podDone:
		return ctrl.Result{}, nil
	case job.Ended() && linkedTo(pod, job.ID):
		return ctrl.Result{}, r.endPod(ctx, pod, fmt.Sprintf("Slurm job %d ended: %s", job.ID, job.StateString()))
	}
	return ctrl.Result{}, r.syncAnnotations(ctx, pod, &job)
}

// reconcileMissingJob handles a pod Slurm has no record of. Only a bound pod whose
// recorded job Slurm confirms is gone is ended; an unbound one is the scheduler's to
// (re)submit.
func (r *Reconciler) reconcileMissingJob(ctx context.Context, pod *v1.Pod) (ctrl.Result, error) {
	idStr, labelled := pod.Labels[wellknown.JobIDLabel]
	if !labelled || pod.Spec.NodeName == "" || isTerminal(pod) || pod.DeletionTimestamp != nil {
		return ctrl.Result{}, nil
	}
	id, err := strconv.ParseInt(idStr, 10, 32)
	if err != nil {
		return ctrl.Result{}, nil // not a label we wrote
	}
	job, err := r.Slurm.GetJob(ctx, int32(id))
	switch {
	case slurm.IsNotFound(err):
		return ctrl.Result{}, r.endPod(ctx, pod, fmt.Sprintf("Slurm job %d no longer exists", id))
	case err != nil:
		return ctrl.Result{}, err
	}
	if job.Ours() {
		r.Watcher.Observe(job)
	}
	if job.Ended() {
		return ctrl.Result{}, r.endPod(ctx, pod, fmt.Sprintf("Slurm job %d ended: %s", id, job.StateString()))
	}
	return ctrl.Result{}, nil
}

// cancelAll cancels the active jobs not belonging to keepUID.
func (r *Reconciler) cancelAll(ctx context.Context, jobs []slurm.Job, keepUID types.UID, why string) error {
	for _, j := range jobs {
		if j.Ended() || (keepUID != "" && hasPod(&j, keepUID)) {
			continue
		}
		log.FromContext(ctx).Info("Cancelling orphaned Slurm job", "job", j.ID, "reason", why)
		if err := r.cancel(ctx, j.ID); err != nil {
			return err
		}
	}
	return nil
}

func (r *Reconciler) cancel(ctx context.Context, id int32) error {
	if err := slurm.Release(ctx, r.Slurm, r.Watcher, id); err != nil {
		return fmt.Errorf("cancelling Slurm job %d: %w", id, err)
	}
	return nil
}

// endPod deletes a pod whose job is over, saying why in an event first. The delete is
// preconditioned on the UID, so a new pod of the same name is never hit.
func (r *Reconciler) endPod(ctx context.Context, pod *v1.Pod, why string) error {
	log.FromContext(ctx).Info("Slurm job ended; deleting its pod", "reason", why)
	r.Recorder.Eventf(pod, nil, v1.EventTypeWarning, wellknown.EventSlurmJobEnded, "Delete", "%s; deleting the pod", why)
	err := r.Client.Delete(ctx, pod, client.Preconditions{UID: &pod.UID})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// syncAnnotations writes the job's state onto the pod, with an event on each change.
func (r *Reconciler) syncAnnotations(ctx context.Context, pod *v1.Pod, job *slurm.Job) error {
	want := map[string]string{
		wellknown.JobIDLabel:          strconv.Itoa(int(job.ID)),
		wellknown.JobStateAnnotation:  job.State,
		wellknown.JobReasonAnnotation: job.Reason,
		wellknown.JobNodesAnnotation:  strings.Join(job.Nodes, ","),
	}
	changed := false
	for k, v := range want {
		if pod.Annotations[k] != v {
			changed = true
		}
	}
	if !changed && pod.Labels[wellknown.JobIDLabel] == want[wellknown.JobIDLabel] {
		return nil
	}
	before := pod.Annotations[wellknown.JobStateAnnotation]
	patch := client.MergeFrom(pod.DeepCopy())
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	for k, v := range want {
		pod.Annotations[k] = v
	}
	pod.Labels[wellknown.JobIDLabel] = want[wellknown.JobIDLabel]
	if err := r.Client.Patch(ctx, pod, patch); err != nil {
		return fmt.Errorf("writing job state onto pod: %w", err)
	}
	if before != job.State {
		switch job.State {
		case slurm.StateRunning:
			r.Recorder.Eventf(pod, nil, v1.EventTypeNormal, wellknown.EventSlurmJobAllocated, "Allocate",
				"Slurm job %d allocated node(s) %s", job.ID, strings.Join(job.Nodes, ","))
		case slurm.StatePending:
			r.Recorder.Eventf(pod, nil, v1.EventTypeNormal, wellknown.EventSlurmJobPending, "Queue",
				"Slurm job %d is pending: %s", job.ID, job.Reason)
		}
	}
	return nil
}

func isTerminal(pod *v1.Pod) bool {
	return pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed
}

func podEnd(pod *v1.Pod) string {
	if isTerminal(pod) {
		return "ended (" + string(pod.Status.Phase) + ")"
	}
	return "was deleted before it was bound"
}

func hasPod(j *slurm.Job, uid types.UID) bool {
	for _, p := range j.Pods {
		if p.UID == uid {
			return true
		}
	}
	return false
}

// linkedTo reports whether the pod's job-id label names the job (or is absent). The
// scheduler relabels a pod before cancelling a job it replaces, so an ended job the
// label no longer names is never read as the pod's end.
func linkedTo(pod *v1.Pod, id int32) bool {
	v, ok := pod.Labels[wellknown.JobIDLabel]
	return !ok || v == strconv.Itoa(int(id))
}

// SetupWithManager watches our pods and the watcher's job changes, both keyed by pod name.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.NotSyncedRetry == 0 {
		r.NotSyncedRetry = 2 * time.Second
	}
	jobEvents := make(chan event.TypedGenericEvent[*v1.Pod], 1024)
	r.Watcher.OnChange(func(c slurm.Change) {
		for _, jc := range c.Jobs {
			for _, ref := range jc.Job.Pods {
				jobEvents <- event.TypedGenericEvent[*v1.Pod]{Object: podStub(ref)}
			}
		}
	})
	ours := predicate.NewPredicateFuncs(func(o client.Object) bool {
		pod, ok := o.(*v1.Pod)
		if !ok {
			return false
		}
		_, labelled := pod.Labels[wellknown.JobIDLabel]
		return labelled || pod.Spec.SchedulerName == r.SchedulerName
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("pod-slurmjob").
		For(&v1.Pod{}, builder.WithPredicates(ours)).
		WatchesRawSource(source.Channel(jobEvents, &handler.TypedEnqueueRequestForObject[*v1.Pod]{})).
		Complete(r)
}

func podStub(ref slurmjob.PodRef) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ref.Namespace, Name: ref.Name}}
}
