package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"time"

	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/kubeslurm/kubeslurm/pkg/slurmconf"
	"github.com/kubeslurm/kubeslurm/pkg/slurmjob"
)

var (
	podKind = schema.GroupKind{Kind: "Pod"}
	jobKind = schema.GroupKind{Group: batchv1.GroupName, Kind: "Job"}
	// podGroupKinds carry annotations their pods' group job reads (pkg/workload).
	podGroupKinds = []schema.GroupKind{
		{Group: "scheduling.x-k8s.io", Kind: "PodGroup"},
		{Group: "scheduling.k8s.io", Kind: "PodGroup"},
		{Group: "jobset.x-k8s.io", Kind: "JobSet"},
		{Group: "leaderworkerset.x-k8s.io", Kind: "LeaderWorkerSet"},
	}
)

// Validator rejects slurmjob annotations that the scheduler would refuse, at admission,
// with slurmjob.ParseAnnotations' message (which names the key): on pods that name our
// scheduler, and on batch Jobs whose pod template names it or that carry such annotations
// (the Job's own and its template's). An update is checked only when it changes those
// annotations, so a pod admitted before the webhook existed can still be written to.
// The webhook configuration narrows what is sent here with the same rules (matchConditions);
// these checks are the authority.
type Validator struct {
	SchedulerName string
}

// Handle implements admission.Handler.
func (v Validator) Handle(_ context.Context, req admission.Request) admission.Response {
	gk := schema.GroupKind{Group: req.Kind.Group, Kind: req.Kind.Kind}
	switch {
	case gk == podKind:
		return v.pod(req)
	case gk == jobKind:
		return v.job(req)
	case slices.Contains(podGroupKinds, gk):
		return v.annotated(req)
	}
	return admission.Allowed("not a pod, a job or a pod group")
}

// annotated checks the slurmjob annotations of an object that is read only for them (a
// PodGroup, JobSet or LeaderWorkerSet: its pods' job takes them first).
func (v Validator) annotated(req admission.Request) admission.Response {
	var obj, old metav1.PartialObjectMetadata
	if err := decode(req, &obj, &old); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if !hasSlurmJob(obj.Annotations) || (req.Operation == admissionv1.Update && sameSlurmJob(old.Annotations, obj.Annotations)) {
		return admission.Allowed("slurmjob annotations absent or unchanged")
	}
	return check("", obj.Annotations)
}

func (v Validator) pod(req admission.Request) admission.Response {
	var pod, old corev1.Pod
	if err := decode(req, &pod, &old); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if pod.Spec.SchedulerName != v.SchedulerName {
		return admission.Allowed("not scheduled by " + v.SchedulerName)
	}
	if req.Operation == admissionv1.Update && sameSlurmJob(old.Annotations, pod.Annotations) {
		return admission.Allowed("slurmjob annotations unchanged")
	}
	return check("", pod.Annotations)
}

func (v Validator) job(req admission.Request) admission.Response {
	var job, old batchv1.Job
	if err := decode(req, &job, &old); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	tmpl := job.Spec.Template
	if tmpl.Spec.SchedulerName != v.SchedulerName && !hasSlurmJob(job.Annotations) && !hasSlurmJob(tmpl.Annotations) {
		return admission.Allowed("neither scheduled by " + v.SchedulerName + " nor annotated for Slurm")
	}
	if req.Operation == admissionv1.Update && sameSlurmJob(old.Annotations, job.Annotations) &&
		sameSlurmJob(old.Spec.Template.Annotations, tmpl.Annotations) {
		return admission.Allowed("slurmjob annotations unchanged")
	}
	if r := check("", job.Annotations); !r.Allowed {
		return r
	}
	return check("spec.template: ", tmpl.Annotations)
}

// check denies with ParseAnnotations' error ("annotation <key>: <why>"), after where.
func check(where string, annotations map[string]string) admission.Response {
	if _, err := slurmjob.ParseAnnotations(annotations); err != nil {
		return admission.Denied(where + err.Error())
	}
	return admission.Allowed("")
}

// decode reads the request's object, and on an update the old one too.
func decode(req admission.Request, obj, old any) error {
	if err := json.Unmarshal(req.Object.Raw, obj); err != nil {
		return fmt.Errorf("decoding %s: %w", req.Kind.Kind, err)
	}
	if req.Operation == admissionv1.Update {
		if err := json.Unmarshal(req.OldObject.Raw, old); err != nil {
			return fmt.Errorf("decoding the old %s: %w", req.Kind.Kind, err)
		}
	}
	return nil
}

func hasSlurmJob(annotations map[string]string) bool {
	return len(slurmjob.Merge(nil, annotations)) > 0
}

func sameSlurmJob(a, b map[string]string) bool {
	return maps.Equal(slurmjob.Merge(nil, a), slurmjob.Merge(nil, b))
}

// SchedulerDefaulter hands new pods to kubeslurm: a pod created asking for the default
// scheduler (no schedulerName, or default-scheduler) gets SchedulerName. The webhook
// configuration sends it only the pods of namespaces labelled
// wellknown.ManagedNamespaceLabel=wellknown.ManagedNamespaceValue. Pods of DaemonSets
// (one per node, node infrastructure), pods created already bound to a node, pods naming
// another scheduler, and anything in kube-system are left as they are.
type SchedulerDefaulter struct {
	SchedulerName string
}

// Handle implements admission.Handler.
func (d SchedulerDefaulter) Handle(_ context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create || (schema.GroupKind{Group: req.Kind.Group, Kind: req.Kind.Kind}) != podKind {
		return admission.Allowed("only pods being created are handed to " + d.SchedulerName)
	}
	if req.Namespace == metav1.NamespaceSystem {
		return admission.Allowed("kube-system is never managed")
	}
	var pod corev1.Pod
	if err := decode(req, &pod, nil); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	switch {
	case pod.Spec.SchedulerName != "" && pod.Spec.SchedulerName != corev1.DefaultSchedulerName:
		return admission.Allowed("the pod names its scheduler")
	case pod.Spec.NodeName != "":
		return admission.Allowed("the pod is bound already")
	case ownedBy(pod.OwnerReferences, "DaemonSet"):
		return admission.Allowed("DaemonSet pods stay with the default scheduler")
	}
	return admission.Patched("namespace "+req.Namespace+" is scheduled by "+d.SchedulerName,
		jsonpatch.NewOperation("add", "/spec/schedulerName", d.SchedulerName))
}

func ownedBy(refs []metav1.OwnerReference, kind string) bool {
	for _, r := range refs {
		if r.Kind == kind && r.Controller != nil && *r.Controller {
			return true
		}
	}
	return false
}

// KeySetValidator refuses a Secret whose slurm.jwks (auth/slurm's key set, which every
// daemon of a SlurmCluster reads from its key Secret) Slurm would refuse: each daemon that
// read it would exit, and a worker's container with its jobs. An update is checked only
// when it changes the key set.
type KeySetValidator struct{}

// Handle implements admission.Handler.
func (KeySetValidator) Handle(_ context.Context, req admission.Request) admission.Response {
	var secret, old corev1.Secret
	if err := decode(req, &secret, &old); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	set, ok := secret.Data[slurmconf.KeySetFile]
	if !ok || (req.Operation == admissionv1.Update && bytes.Equal(set, old.Data[slurmconf.KeySetFile])) {
		return admission.Allowed("slurm.jwks absent or unchanged")
	}
	if err := slurmconf.CheckKeySet(set, time.Now()); err != nil {
		return admission.Denied(fmt.Sprintf("%s is a key set Slurm refuses (every daemon that read it would exit): %v",
			slurmconf.KeySetFile, err))
	}
	return admission.Allowed("")
}
