package pod

// The job state of a pod group, written onto the group's workload object (PodGroup, Job,
// JobSet):
// the same annotations its pods carry, events on transitions, and a scheduler-plugins
// PodGroup's status, which kubeslurm keeps in place of the coscheduling controller.

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	v1 "k8s.io/api/core/v1"
	schedulingv1alpha2 "k8s.io/api/scheduling/v1alpha2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	spv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	"github.com/kubeslurm/kubeslurm/pkg/slurm"
	"github.com/kubeslurm/kubeslurm/pkg/workload"
)

// workloadKinds are the group kinds whose object kubeslurm writes to. A LeaderWorkerSet
// group is one of several of its object's groups, so it is not written to.
var workloadKinds = map[string]schema.GroupVersionKind{
	workload.KindPodGroup:           spv1alpha1.SchemeGroupVersion.WithKind("PodGroup"),
	workload.KindSchedulingPodGroup: schedulingv1alpha2.SchemeGroupVersion.WithKind("PodGroup"),
	workload.KindJob:                batchv1.SchemeGroupVersion.WithKind("Job"),
	workload.KindJobSet:             jobsetv1alpha2.SchemeGroupVersion.WithKind(workload.KindJobSet),
}

// WorkloadStatus reconciles one pod group (by its key, in the request's Name) with its job.
// Objects are read unstructured, straight from the API server: no informer is started for
// kinds the cluster may not serve.
type WorkloadStatus struct {
	Client   client.Client
	Watcher  *slurm.Watcher
	Recorder events.EventRecorder
	// changes queues group keys: from the watcher's job changes, and from member pods'.
	changes chan event.TypedGenericEvent[string]
}

// notify queues a group for reconciling (a member pod changed); it never blocks: a full
// queue already holds work, and the periodic resync covers what a drop would miss.
func (w *WorkloadStatus) notify(key string) {
	select {
	case w.changes <- event.TypedGenericEvent[string]{Object: key}:
	default:
	}
}

// Reconcile implements reconcile.Reconciler.
func (w *WorkloadStatus) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if !w.Watcher.Synced() {
		return ctrl.Result{RequeueAfter: 2 * time.Second}, nil
	}
	key := workload.ParseKey(req.Name)
	gvk, ok := workloadKinds[key.Kind]
	if !ok || key.Replica != "" {
		return ctrl.Result{}, nil
	}
	job, ok := w.Watcher.JobForGroup(req.Name)
	if !ok {
		return ctrl.Result{}, nil // fail closed: a job we cannot see changes nothing
	}
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(gvk)
	if err := w.Client.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: key.Name}, obj); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if err := w.syncAnnotations(ctx, obj, &job); err != nil {
		return ctrl.Result{}, err
	}
	switch key.Kind {
	case workload.KindPodGroup:
		return ctrl.Result{}, w.syncPodGroupStatus(ctx, obj, &job)
	case workload.KindSchedulingPodGroup:
		return ctrl.Result{}, w.syncScheduledCondition(ctx, obj, &job)
	}
	return ctrl.Result{}, nil
}

// syncScheduledCondition sets a Kubernetes PodGroup's PodGroupScheduled condition: True
// once Slurm has allocated the group's nodes, else False with Slurm's state and reason.
func (w *WorkloadStatus) syncScheduledCondition(ctx context.Context, obj *unstructured.Unstructured, job *slurm.Job) error {
	want := metav1.Condition{
		Type: schedulingv1alpha2.PodGroupScheduled, Status: metav1.ConditionFalse,
		Reason: schedulingv1alpha2.PodGroupReasonUnschedulable, ObservedGeneration: obj.GetGeneration(),
		Message: fmt.Sprintf("Slurm job %d is %s", job.ID, job.StateString()),
	}
	if job.Allocated() || job.Ended() {
		want.Status, want.Reason = metav1.ConditionTrue, "AllocatedBySlurm"
	}
	raw, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	var conds []metav1.Condition
	if b, err := json.Marshal(raw); err != nil || json.Unmarshal(b, &conds) != nil {
		return fmt.Errorf("reading conditions of PodGroup %s/%s", obj.GetNamespace(), obj.GetName())
	}
	if !meta.SetStatusCondition(&conds, want) {
		return nil
	}
	data, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": conds}})
	if err != nil {
		return err
	}
	return w.Client.Status().Patch(ctx, obj, client.RawPatch(types.MergePatchType, data))
}

// syncAnnotations writes the job's annotations onto the object, with an event when the
// job's state or pending reason changed.
func (w *WorkloadStatus) syncAnnotations(ctx context.Context, obj *unstructured.Unstructured, job *slurm.Job) error {
	want := jobAnnotations(job, "")
	before := obj.GetAnnotations()
	patch := map[string]string{}
	for k, v := range want {
		if before[k] != v {
			patch[k] = v
		}
	}
	if len(patch) == 0 {
		return nil
	}
	data, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": patch}})
	if err != nil {
		return err
	}
	if err := w.Client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, data)); err != nil {
		return fmt.Errorf("writing job state onto %s %s/%s: %w", obj.GetKind(), obj.GetNamespace(), obj.GetName(), err)
	}
	if reason, note := transitionEvent(before, job); reason != "" {
		w.Recorder.Eventf(obj, nil, v1.EventTypeNormal, reason, "Update", note)
	}
	return nil
}

// syncPodGroupStatus sets a scheduler-plugins PodGroup's phase and member counts from its
// job and pods: Pending while Slurm has not allocated, Scheduling once it has, Running
// once every member runs; Finished when all succeeded, Failed when the job ended otherwise.
func (w *WorkloadStatus) syncPodGroupStatus(ctx context.Context, obj *unstructured.Unstructured, job *slurm.Job) error {
	var running, succeeded, failed int64
	for _, ref := range job.Pods {
		p := &v1.Pod{}
		err := w.Client.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, p)
		if apierrors.IsNotFound(err) || (err == nil && p.UID != ref.UID) {
			continue
		}
		if err != nil {
			return err
		}
		switch p.Status.Phase {
		case v1.PodRunning:
			running++
		case v1.PodSucceeded:
			succeeded++
		case v1.PodFailed:
			failed++
		}
	}
	status := map[string]any{
		"phase":     string(podGroupPhase(job, len(job.Pods), running, succeeded)),
		"running":   running,
		"succeeded": succeeded,
		"failed":    failed,
	}
	if !job.StartTime.IsZero() {
		status["scheduleStartTime"] = job.StartTime.UTC().Format(time.RFC3339)
	}
	cur, _, _ := unstructured.NestedMap(obj.Object, "status")
	if statusEqual(cur, status) {
		return nil
	}
	data, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return err
	}
	return w.Client.Status().Patch(ctx, obj, client.RawPatch(types.MergePatchType, data))
}

// podGroupPhase is the PodGroup phase for a job with members pods.
func podGroupPhase(job *slurm.Job, members int, running, succeeded int64) spv1alpha1.PodGroupPhase {
	switch {
	case job.Ended() && succeeded == int64(members):
		return spv1alpha1.PodGroupFinished
	case job.Ended():
		return spv1alpha1.PodGroupFailed
	case !job.Allocated():
		return spv1alpha1.PodGroupPending
	case running == int64(members):
		return spv1alpha1.PodGroupRunning
	default:
		return spv1alpha1.PodGroupScheduling
	}
}

func statusEqual(cur, want map[string]any) bool {
	for k, v := range want {
		if fmt.Sprint(cur[k]) != fmt.Sprint(v) {
			return false
		}
	}
	return true
}

// setup registers the reconciler, fed by the watcher's changes of group jobs.
func (w *WorkloadStatus) setup(mgr ctrl.Manager) error {
	w.changes = make(chan event.TypedGenericEvent[string], 1024)
	w.Watcher.OnChange(func(c slurm.Change) {
		for _, jc := range c.Jobs {
			if g := jc.Job.Group; g != "" && !jc.Gone {
				w.notify(g)
			}
		}
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("workload-slurmjob").
		WatchesRawSource(source.TypedChannel(w.changes, handler.TypedFuncs[string, ctrl.Request]{
			GenericFunc: func(_ context.Context, e event.TypedGenericEvent[string], q workqueue.TypedRateLimitingInterface[ctrl.Request]) {
				q.Add(ctrl.Request{NamespacedName: types.NamespacedName{Name: e.Object}})
			},
		})).
		Complete(w)
}
