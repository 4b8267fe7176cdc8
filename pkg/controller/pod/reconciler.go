// Package pod keeps each pod and its Slurm placeholder job in step, both ways:
// a pod that ended or was deleted has its job cancelled; a job that ended in Slurm
// (scancel, time limit, preemption, node failure) ends its pod; the job's state is
// written onto the pod. Reconcile is level-based: it reads both sides every time.
package pod

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
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
	"github.com/kubeslurm/kubeslurm/pkg/topology"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
	"github.com/kubeslurm/kubeslurm/pkg/workload"
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
	// NotReadyGrace is how long a pod's node may stay NotReady before the pod's job is
	// cancelled and the pod force-removed (a pod with no kubelet never ends by itself);
	// 0 disables it.
	NotReadyGrace time.Duration
	// EvictionGuard creates a PodDisruptionBudget per running placeholder job, so a drain
	// waits for Slurm to finish the job instead of evicting the pod.
	EvictionGuard bool
	// Topology, when set, has each pod annotated with the Slurm block of its node
	// (wellknown.TopologyBlockAnnotation), as the topology controller places it.
	Topology *topology.Config
	// now is the clock (tests replace it).
	now func() time.Time
	// workloads is told of a group member's changes (its phase counts in PodGroup status).
	workloads *WorkloadStatus
	// deleted holds deleted pods' job links (rememberDeletedLink), by namespace/name.
	deletedMu sync.Mutex
	deleted   map[string]deletedLink
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
		if len(jobs) == 0 {
			// Deleted before the watcher learnt of its job: the link its last state had.
			if jobs, err = r.deletedPodsJob(ctx, req.String()); err != nil {
				return ctrl.Result{}, err
			}
		}
		return ctrl.Result{}, r.cancelAll(ctx, jobs, "", "its pod no longer exists")
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("reading pod: %w", err)
	}

	// Jobs of an earlier pod under the same name are orphans (or lost that member).
	if err := r.cancelAll(ctx, jobs, pod.UID, "its pod was replaced by a new one of the same name"); err != nil {
		return ctrl.Result{}, err
	}
	job, ok := r.Watcher.JobForPod(pod.UID)
	if !ok {
		if !r.owns(pod) {
			// Another scheduler's pod: its job id label names a job of another Slurm.
			return ctrl.Result{}, nil
		}
		found, err := r.reconcileMissingJob(ctx, pod)
		if found == nil || err != nil {
			return ctrl.Result{}, err
		}
		job = *found
	}

	podDone := isTerminal(pod) || (pod.DeletionTimestamp != nil && pod.Spec.NodeName == "")
	switch {
	case podDone && !job.Ended():
		keep, others, err := r.groupKeepsJob(ctx, &job, pod.UID, pod.Status.Phase)
		if err != nil || keep {
			return ctrl.Result{}, err
		}
		logger.Info("Pod ended; cancelling its Slurm job", "job", job.ID, "phase", pod.Status.Phase)
		r.tellOtherMembers(&job, others, fmt.Sprintf("pod %s of the group %s", pod.Name, podEnd(pod)))
		if err := r.cancel(ctx, job.ID); err != nil {
			return ctrl.Result{}, err
		}
		r.Recorder.Eventf(pod, nil, v1.EventTypeNormal, wellknown.EventSlurmJobReleased, "Cancel",
			"Pod %s; cancelled Slurm job %d to release its nodes", podEnd(pod), job.ID)
		return ctrl.Result{}, nil
	case podDone:
		return ctrl.Result{}, nil
	case job.Ended() && linkedTo(pod, job.ID):
		reason, note := endEvent(&job)
		return ctrl.Result{}, r.endPod(ctx, pod, &job, reason, note)
	case lostItsNode(pod, &job) && linkedTo(pod, job.ID):
		// Our cache may lag the scheduler's (it bound the pod on a newer read), so only
		// Slurm's own answer now may say the job lost the node. Requeued by Slurm (preemption
		// with PreemptMode=REQUEUE, a node failure, scontrol requeue): a bound pod cannot
		// move, so it ends; its workload makes a new one, and the requeued job, whose pod is
		// then gone, is cancelled as an orphan.
		fresh, err := r.Slurm.GetJob(ctx, job.ID)
		if err != nil {
			return ctrl.Result{}, err
		}
		r.Watcher.Observe(fresh)
		if lostItsNode(pod, fresh) {
			return ctrl.Result{}, r.endPod(ctx, pod, fresh, wellknown.EventSlurmJobRequeued,
				fmt.Sprintf("Slurm job %d was requeued (%s) and no longer holds node %s", fresh.ID, fresh.StateString(), pod.Spec.NodeName))
		}
		job = *fresh
	}
	if err := r.syncJobState(ctx, pod, &job); err != nil {
		return ctrl.Result{}, err
	}
	if job.Group != "" && r.workloads != nil {
		r.workloads.notify(job.Group)
	}
	if r.EvictionGuard && job.Allocated() && pod.Spec.NodeName != "" {
		if err := r.guardEviction(ctx, pod, &job); err != nil {
			return ctrl.Result{}, err
		}
	}
	return r.checkNodeReady(ctx, pod, &job)
}

// reconcileMissingJob handles a pod whose job the watcher has no record of. The watcher
// reads only jobs it knows between its full listings, and the scheduler (another process)
// submitted this one: the job its label names is read once, and taken into the watcher
// if it is ours and stands for this pod. Only a bound pod whose recorded job Slurm
// confirms is gone is ended; an unbound one is the scheduler's to (re)submit.
func (r *Reconciler) reconcileMissingJob(ctx context.Context, pod *v1.Pod) (*slurm.Job, error) {
	idStr, labelled := pod.Labels[wellknown.JobIDLabel]
	if !labelled || isTerminal(pod) || pod.DeletionTimestamp != nil {
		return nil, nil
	}
	id, err := strconv.ParseInt(idStr, 10, 32)
	if err != nil {
		return nil, nil // not a label we wrote
	}
	job, err := r.Slurm.GetJob(ctx, int32(id))
	switch {
	case slurm.IsNotFound(err) && pod.Spec.NodeName != "":
		return nil, r.endPod(ctx, pod, nil, wellknown.EventSlurmJobEnded, fmt.Sprintf("Slurm job %d no longer exists", id))
	case slurm.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, err
	}
	if job.Ours() {
		// From now on the watcher's reads of changes include it.
		r.Watcher.Observe(job)
		if job.HasPod(pod.UID) {
			return job, nil
		}
	}
	if job.Ended() && pod.Spec.NodeName != "" {
		reason, note := endEvent(job)
		return nil, r.endPod(ctx, pod, job, reason, note)
	}
	return nil, nil
}

// deletedLink is a deleted pod's job-id label, kept until its reconcile has read that job.
type deletedLink struct {
	uid types.UID
	id  int32
}

// rememberDeletedLink keeps the job-id label of a deleted pod of ours whose job the
// watcher does not know: between its full listings the watcher reads only the jobs it
// knows, and the pod's reconcile will find neither the pod nor, without this, its job.
func (r *Reconciler) rememberDeletedLink(pod *v1.Pod) {
	id, err := strconv.ParseInt(pod.Labels[wellknown.JobIDLabel], 10, 32)
	if err != nil || !r.owns(pod) {
		return
	}
	if _, known := r.Watcher.Job(int32(id)); known {
		return
	}
	r.deletedMu.Lock()
	defer r.deletedMu.Unlock()
	if r.deleted == nil {
		r.deleted = map[string]deletedLink{}
	}
	r.deleted[pod.Namespace+"/"+pod.Name] = deletedLink{uid: pod.UID, id: int32(id)}
}

// deletedPodsJob reads the job a deleted pod's label named, if it was remembered and the
// job stands for that pod.
func (r *Reconciler) deletedPodsJob(ctx context.Context, key string) ([]slurm.Job, error) {
	r.deletedMu.Lock()
	link, ok := r.deleted[key]
	r.deletedMu.Unlock()
	if !ok {
		return nil, nil
	}
	job, err := r.Slurm.GetJob(ctx, link.id)
	switch {
	case slurm.IsNotFound(err):
	case err != nil:
		return nil, err
	case job.Ours() && job.HasPod(link.uid):
		r.Watcher.Observe(job)
		r.forgetDeletedLink(key)
		return []slurm.Job{*job}, nil
	}
	r.forgetDeletedLink(key)
	return nil, nil
}

func (r *Reconciler) forgetDeletedLink(key string) {
	r.deletedMu.Lock()
	defer r.deletedMu.Unlock()
	delete(r.deleted, key)
}

// cancelAll cancels the active jobs not belonging to keepUID, whose pod of this name is
// gone; a group job whose other members go on is left to groupKeepsJob's rule.
func (r *Reconciler) cancelAll(ctx context.Context, jobs []slurm.Job, keepUID types.UID, why string) error {
	for _, j := range jobs {
		if j.Ended() || (keepUID != "" && j.HasPod(keepUID)) {
			continue
		}
		keep, others, err := r.groupKeepsJob(ctx, &j, "", "")
		if err != nil {
			return err
		}
		if keep {
			continue
		}
		log.FromContext(ctx).Info("Cancelling orphaned Slurm job", "job", j.ID, "reason", why)
		r.tellOtherMembers(&j, others, "a member of the group left ("+why+")")
		if err := r.cancel(ctx, j.ID); err != nil {
			return err
		}
	}
	return nil
}

// groupKeepsJob reports whether a pod group's job stays although one member left (phase
// is "" for a member that is gone or was deleted before it was bound), and the job's
// other live members.
func (r *Reconciler) groupKeepsJob(ctx context.Context, job *slurm.Job, leaving types.UID, phase v1.PodPhase) (bool, []*v1.Pod, error) {
	if len(job.Pods) <= 1 {
		return false, nil, nil
	}
	others, err := r.liveMembers(ctx, job, leaving)
	if err != nil {
		return false, nil, err
	}
	return keepGroupJob(job, phase, len(others)), others, nil
}

// keepGroupJob is the group policy: before the job starts, losing a member leaves it to
// the scheduler, which resubmits for the members there are once the group is whole
// again; a member that succeeded leaves the job to the others until the last one ends;
// a member that failed, or was deleted, after the start ends the whole group.
func keepGroupJob(job *slurm.Job, phase v1.PodPhase, othersLive int) bool {
	if len(job.Pods) <= 1 || othersLive == 0 {
		return false
	}
	return job.State == slurm.StatePending || phase == v1.PodSucceeded
}

// liveMembers returns the job's other pods that exist, as the same pod, and have not ended.
func (r *Reconciler) liveMembers(ctx context.Context, job *slurm.Job, except types.UID) ([]*v1.Pod, error) {
	var out []*v1.Pod
	for _, ref := range job.Pods {
		if ref.UID == except {
			continue
		}
		p := &v1.Pod{}
		err := r.Client.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, p)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if p.UID == ref.UID && workload.Live(p) {
			out = append(out, p)
		}
	}
	return out, nil
}

// tellOtherMembers records on each other live member of a group job why the job is about
// to be cancelled, so `kubectl describe` of any member tells the story.
func (r *Reconciler) tellOtherMembers(job *slurm.Job, others []*v1.Pod, why string) {
	for _, p := range others {
		r.Recorder.Eventf(p, nil, v1.EventTypeWarning, wellknown.EventSlurmJobGroupMemberEnded, "Cancel",
			"%s; cancelling the group's Slurm job %d", why, job.ID)
	}
}

func (r *Reconciler) cancel(ctx context.Context, id int32) error {
	if err := slurm.Release(ctx, r.Slurm, r.Watcher, id); err != nil {
		return fmt.Errorf("cancelling Slurm job %d: %w", id, err)
	}
	return nil
}

// endPod deletes a pod whose job is over, saying why first: an event, the SlurmJob
// condition and a DisruptionTarget condition (which a Job's podFailurePolicy can match).
// The delete is preconditioned on the UID, so a new pod of the same name is never hit.
func (r *Reconciler) endPod(ctx context.Context, pod *v1.Pod, job *slurm.Job, reason, note string) error {
	return r.removePod(ctx, pod, job, reason, note, nil)
}

func (r *Reconciler) removePod(ctx context.Context, pod *v1.Pod, job *slurm.Job, reason, note string, grace *int64) error {
	log.FromContext(ctx).Info("Ending pod", "reason", reason, "why", note)
	r.Recorder.Eventf(pod, nil, v1.EventTypeWarning, reason, "Delete", "%s; deleting the pod", note)
	conds := []v1.PodCondition{{
		Type: v1.DisruptionTarget, Status: v1.ConditionTrue, Reason: wellknown.DisruptionTargetReason, Message: note,
	}}
	if job != nil {
		conds = append(conds, jobCondition(job))
	}
	if err := r.patchConditions(ctx, pod, conds...); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	err := r.Client.Delete(ctx, pod, client.Preconditions{UID: &pod.UID}, &client.DeleteOptions{GracePeriodSeconds: grace})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// syncJobState writes the job's state onto the pod (annotations, the SlurmJob condition),
// with an event on each transition.
func (r *Reconciler) syncJobState(ctx context.Context, pod *v1.Pod, job *slurm.Job) error {
	want := jobAnnotations(job, pod.UID)
	if block := r.blockOf(ctx, pod, job); block != "" {
		want[wellknown.TopologyBlockAnnotation] = block
	}
	before := map[string]string{}
	changed := pod.Labels[wellknown.JobIDLabel] != want[wellknown.JobIDLabel]
	for k, v := range want {
		before[k] = pod.Annotations[k]
		if pod.Annotations[k] != v {
			changed = true
		}
	}
	if changed {
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
		if reason, note := transitionEvent(before, job); reason != "" {
			r.Recorder.Eventf(pod, nil, v1.EventTypeNormal, reason, "Update", note)
		}
	}
	cond, gpuErr := podJobCondition(job, pod.UID)
	if cur := podCondition(pod, cond.Type); cur != nil && cur.Status == cond.Status && cur.Reason == cond.Reason && cur.Message == cond.Message {
		return nil
	}
	if gpuErr != nil {
		// Once per change of the condition, not on every reconcile.
		r.Recorder.Eventf(pod, nil, v1.EventTypeWarning, wellknown.EventSlurmGPUIndicesMissing, "Update", "%v", gpuErr)
	}
	return r.patchConditions(ctx, pod, cond)
}

// blockOf is the Slurm block of the pod's node ("" when topology is off or the node is
// not known yet).
func (r *Reconciler) blockOf(ctx context.Context, pod *v1.Pod, job *slurm.Job) string {
	if r.Topology == nil {
		return ""
	}
	name := pod.Spec.NodeName
	if n, ok := job.NodeForPod(slurmjob.RefOf(pod)); ok && job.Allocated() {
		name = n
	}
	if name == "" {
		return ""
	}
	var node v1.Node
	if err := r.Client.Get(ctx, client.ObjectKey{Name: name}, &node); err != nil {
		return ""
	}
	// An unusable name puts the node in the default block; the topology controller says why.
	block, _ := r.Topology.BlockOf(node.Labels, node.Annotations)
	return block
}

func podCondition(pod *v1.Pod, t v1.PodConditionType) *v1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == t {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

// patchConditions sets conditions through the status subresource with a strategic merge
// patch: conditions merge by type, so those of the scheduler and the kubelet are kept.
func (r *Reconciler) patchConditions(ctx context.Context, pod *v1.Pod, conds ...v1.PodCondition) error {
	now := metav1.NewTime(r.clock())
	for i := range conds {
		if cur := podCondition(pod, conds[i].Type); cur != nil && cur.Status == conds[i].Status {
			conds[i].LastTransitionTime = cur.LastTransitionTime
		} else {
			conds[i].LastTransitionTime = now
		}
	}
	data, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": conds}})
	if err != nil {
		return err
	}
	return r.Client.Status().Patch(ctx, pod, client.RawPatch(types.StrategicMergePatchType, data))
}

func (r *Reconciler) clock() time.Time {
	if r.now != nil {
		return r.now()
	}
	return time.Now()
}

// checkNodeReady cancels the job of a pod whose node has been NotReady past the grace
// period and force-removes the pod: with no kubelet it would never end, and would hold
// its Slurm job and GPUs forever. Until then it comes back when the grace runs out.
func (r *Reconciler) checkNodeReady(ctx context.Context, pod *v1.Pod, job *slurm.Job) (ctrl.Result, error) {
	if r.NotReadyGrace <= 0 || pod.Spec.NodeName == "" || job.Ended() {
		return ctrl.Result{}, nil
	}
	node := &v1.Node{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: pod.Spec.NodeName}, node); err != nil {
		// A deleted node's pods are the pod garbage collector's; their deletion cancels the job.
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	down := nodeNotReadyFor(node, r.clock())
	if down == 0 {
		return ctrl.Result{}, nil
	}
	if down < r.NotReadyGrace {
		return ctrl.Result{RequeueAfter: r.NotReadyGrace - down}, nil
	}
	if err := r.cancel(ctx, job.ID); err != nil {
		return ctrl.Result{}, err
	}
	note := fmt.Sprintf("node %s NotReady for %s (grace %s); cancelled Slurm job %d", node.Name, down.Round(time.Second), r.NotReadyGrace, job.ID)
	return ctrl.Result{}, r.removePod(ctx, pod, nil, wellknown.EventNodeNotReady, note, ptr.To[int64](0))
}

// lostItsNode reports whether a bound pod's job no longer holds the pod's node: pending
// again, or running elsewhere.
func lostItsNode(pod *v1.Pod, job *slurm.Job) bool {
	if pod.Spec.NodeName == "" || job.Ended() {
		return false
	}
	if job.State == slurm.StatePending {
		return true
	}
	node, ok := job.NodeForPod(slurmjob.RefOf(pod))
	return job.Allocated() && ok && node != pod.Spec.NodeName
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
		return ok && r.owns(pod)
	})
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &v1.Pod{}, podNodeField, podNodeName); err != nil {
		return err
	}
	r.workloads = &WorkloadStatus{Client: r.Client, Watcher: r.Watcher, Recorder: r.Recorder}
	if err := r.workloads.setup(mgr); err != nil {
		return err
	}
	remember := predicate.Funcs{DeleteFunc: func(e event.DeleteEvent) bool {
		if pod, ok := e.Object.(*v1.Pod); ok {
			r.rememberDeletedLink(pod)
		}
		return true
	}}
	return ctrl.NewControllerManagedBy(mgr).
		Named("pod-slurmjob").
		For(&v1.Pod{}, builder.WithPredicates(ours, remember)).
		WatchesRawSource(source.Channel(jobEvents, &handler.TypedEnqueueRequestForObject[*v1.Pod]{})).
		Watches(&v1.Node{}, handler.EnqueueRequestsFromMapFunc(r.podsOnNode), builder.WithPredicates(readyChanged)).
		Complete(r)
}

const podNodeField = "spec.nodeName"

// podNodeName indexes pods by the node they are bound to.
func podNodeName(o client.Object) []string {
	if n := o.(*v1.Pod).Spec.NodeName; n != "" {
		return []string{n}
	}
	return nil
}

// podsOnNode maps a node to our pods bound to it.
func (r *Reconciler) podsOnNode(ctx context.Context, o client.Object) []ctrl.Request {
	pods := &v1.PodList{}
	if err := r.Client.List(ctx, pods, client.MatchingFields{podNodeField: o.GetName()}, client.HasLabels{wellknown.JobIDLabel}); err != nil {
		log.FromContext(ctx).Error(err, "Listing pods on node", "node", o.GetName())
		return nil
	}
	out := make([]ctrl.Request, 0, len(pods.Items))
	for i := range pods.Items {
		if r.owns(&pods.Items[i]) {
			out = append(out, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(&pods.Items[i])})
		}
	}
	return out
}

// owns reports whether pod is this controller's: its scheduler's, by schedulerName alone.
// A job id label is not enough: another kubeslurm scheduler, placing pods through another
// Slurm cluster, labels its pods with that cluster's job ids, which mean nothing here.
func (r *Reconciler) owns(pod *v1.Pod) bool {
	return pod.Spec.SchedulerName == r.SchedulerName
}

// readyChanged passes node updates that change the Ready condition's status.
var readyChanged = predicate.Funcs{
	CreateFunc:  func(event.CreateEvent) bool { return false },
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		return readyStatus(e.ObjectOld) != readyStatus(e.ObjectNew)
	},
}

func readyStatus(o client.Object) v1.ConditionStatus {
	if n, ok := o.(*v1.Node); ok {
		for _, c := range n.Status.Conditions {
			if c.Type == v1.NodeReady {
				return c.Status
			}
		}
	}
	return ""
}

func podStub(ref slurmjob.PodRef) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ref.Namespace, Name: ref.Name}}
}
