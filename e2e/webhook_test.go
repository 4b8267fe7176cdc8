package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubeslurm/kubeslurm/pkg/slurmjob"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

// Issue 3, test 7: each invalid annotation is rejected at admission (kubectl apply time)
// with a message naming the key, on pods that name our scheduler and on those a managed
// namespace hands to it; valid ones are admitted and placed by Slurm.

// waitWebhook waits until the controller has put its CA into both webhook configurations
// (it does so on start, within seconds).
func waitWebhook(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	eventually(t, 30*time.Second, "the controller's CA in the webhook configurations", func() bool {
		v, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, wellknown.WebhookConfigurationName, metav1.GetOptions{})
		if err != nil || len(v.Webhooks) == 0 || len(v.Webhooks[0].ClientConfig.CABundle) == 0 {
			return false
		}
		m, err := kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, wellknown.WebhookConfigurationName, metav1.GetOptions{})
		return err == nil && len(m.Webhooks) > 0 && len(m.Webhooks[0].ClientConfig.CABundle) > 0
	})
	// A controller restarted just before (another test's clean-up) serves its certificate a
	// moment after it reads as ready, and the webhook fails open meanwhile: wait until a
	// dry-run of a bad pod is refused.
	eventually(t, 30*time.Second, "the webhook refusing a bad annotation", func() bool {
		bad := newPod("default", "webhook-probe", withAnnotation("time-limit", "abc"))
		_, err := kube.CoreV1().Pods("default").Create(ctx, bad, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), "denied the request")
	})
}

func labelNamespace(t *testing.T, ns, key, value string) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, key, value)
	_, err := kube.CoreV1().Namespaces().Patch(context.Background(), ns, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	require.NoError(t, err)
}

func withScheduler(name string) podOpt {
	return func(p *v1.Pod) { p.Spec.SchedulerName = name }
}

// requireDenied checks that err is the webhook's refusal naming the annotation key, with
// the reason, and that nothing named name was created.
func requireDenied(t *testing.T, err error, key, why string) {
	t.Helper()
	require.Error(t, err, "admitted")
	assert.True(t, apierrors.IsForbidden(err), "%v", err)
	assert.Contains(t, err.Error(), "denied the request")
	assert.Contains(t, err.Error(), "annotation "+key+": ")
	assert.Contains(t, err.Error(), why)
}

// invalidAnnotations are the cases the issue names, each with a word of its reason.
var invalidAnnotations = []struct {
	name, key, value, why string
}{
	{"typo", "time-limt", "30", "unknown key"},
	{"bad-time-limit", "time-limit", "abc", "is not a time limit"},
	{"partition-newline", "partition", "gpu\nPartitionName=evil", "is not a valid partition name"},
	{"partition-shell", "partition", "k8s;reboot", "is not a valid partition name"},
	{"account-shell", "account", "$(id)", "is not a valid account name"},
	{"bad-priority", "priority", "urgent", "is not a priority"},
	{"priority-too-big", "priority", "4294967296", "is not a priority"},
	{"bad-exclusive", "exclusive", "maybe", "is not true or false"},
}

func TestWebhookRejectsInvalidAnnotations(t *testing.T) {
	waitWebhook(t)
	ns := namespace(t)
	ctx := context.Background()
	for _, c := range invalidAnnotations {
		t.Run(c.name, func(t *testing.T) {
			_, err := kube.CoreV1().Pods(ns).Create(ctx, newPod(ns, c.name, withAnnotation(c.key, c.value)), metav1.CreateOptions{})
			requireDenied(t, err, slurmjob.Annotation(c.key), c.why)
			_, err = kube.CoreV1().Pods(ns).Get(ctx, c.name, metav1.GetOptions{})
			assert.True(t, apierrors.IsNotFound(err), "no pod %s: %v", c.name, err)
		})
	}

	// A valid pod is admitted and placed by Slurm.
	createPod(t, ns, "valid", withAnnotation("time-limit", "1:00:00"), withAnnotation("priority", "100"),
		withAnnotation("exclusive", "false"), withAnnotation("job-name", ns+"/valid"))
	p := waitBound(t, ns, "valid", 60*time.Second)
	assert.Equal(t, "1:00:00", p.Annotations[slurmjob.Annotation("time-limit")])

	// An update that sets a bad annotation is refused; one that leaves them alone is not.
	bad := fmt.Sprintf(`{"metadata":{"annotations":{%q:"soon"}}}`, slurmjob.Annotation("time-limit"))
	_, err := kube.CoreV1().Pods(ns).Patch(ctx, "valid", types.MergePatchType, []byte(bad), metav1.PatchOptions{})
	requireDenied(t, err, slurmjob.Annotation("time-limit"), "is not a time limit")
	_, err = kube.CoreV1().Pods(ns).Patch(ctx, "valid", types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"a"}}}`), metav1.PatchOptions{})
	require.NoError(t, err)

	// A pod for another scheduler keeps whatever annotations it has: they are not ours.
	_, err = kube.CoreV1().Pods(ns).Create(ctx, newPod(ns, "not-ours", withScheduler(v1.DefaultSchedulerName),
		withAnnotation("time-limit", "abc")), metav1.CreateOptions{})
	require.NoError(t, err)
}

func TestWebhookValidatesJobs(t *testing.T) {
	waitWebhook(t)
	ns := namespace(t)
	ctx := context.Background()
	job := func(name string, scheduler string, own, template map[string]string) *batchv1.Job {
		return &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: own},
			Spec: batchv1.JobSpec{
				Suspend: ptrTo(true), // validated at admission; no pods needed
				Template: v1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Annotations: template},
					Spec: func() v1.PodSpec {
						s := newPod(ns, name, withScheduler(scheduler)).Spec
						s.RestartPolicy = v1.RestartPolicyNever
						return s
					}(),
				},
			},
		}
	}
	tl := slurmjob.Annotation("time-limit")
	_, err := kube.BatchV1().Jobs(ns).Create(ctx, job("template-bad", wellknown.SchedulerName, nil, map[string]string{tl: "abc"}), metav1.CreateOptions{})
	requireDenied(t, err, tl, "is not a time limit")
	assert.Contains(t, err.Error(), "spec.template: ")
	_, err = kube.BatchV1().Jobs(ns).Create(ctx, job("own-bad", v1.DefaultSchedulerName, map[string]string{slurmjob.Annotation("qos"): "a b"}, nil), metav1.CreateOptions{})
	requireDenied(t, err, slurmjob.Annotation("qos"), "is not a valid QOS name")
	_, err = kube.BatchV1().Jobs(ns).Create(ctx, job("valid", wellknown.SchedulerName, map[string]string{slurmjob.Annotation("account"): "physics"}, map[string]string{tl: "2-0"}), metav1.CreateOptions{})
	require.NoError(t, err)
	_ = kube.BatchV1().Jobs(ns).Delete(ctx, "valid", metav1.DeleteOptions{PropagationPolicy: ptrTo(metav1.DeletePropagationBackground)})
}

func TestWebhookManagedNamespace(t *testing.T) {
	waitWebhook(t)
	ctx := context.Background()
	managed := namespace(t)
	labelNamespace(t, managed, wellknown.ManagedNamespaceLabel, wellknown.ManagedNamespaceValue)

	// In a managed namespace a pod asking for no scheduler is Slurm's, and placed by it.
	created, err := kube.CoreV1().Pods(managed).Create(ctx, newPod(managed, "handed-over", withScheduler("")), metav1.CreateOptions{})
	require.NoError(t, err)
	assert.Equal(t, wellknown.SchedulerName, created.Spec.SchedulerName)
	p := waitBound(t, managed, "handed-over", 60*time.Second)
	id := jobIDOf(t, p)
	job, ok := jobByID(t, id)
	require.True(t, ok, "squeue shows job %d", id)
	assert.Equal(t, p.Spec.NodeName, job.Nodes)

	// ...and so is one asking for default-scheduler by name; then it is validated as ours.
	_, err = kube.CoreV1().Pods(managed).Create(ctx, newPod(managed, "handed-over-bad",
		withScheduler(v1.DefaultSchedulerName), withAnnotation("exclusive", "maybe")), metav1.CreateOptions{})
	requireDenied(t, err, slurmjob.Annotation("exclusive"), "is not true or false")

	// A pod naming another scheduler keeps it.
	created, err = kube.CoreV1().Pods(managed).Create(ctx, newPod(managed, "own-scheduler", withScheduler("volcano")), metav1.CreateOptions{})
	require.NoError(t, err)
	assert.Equal(t, "volcano", created.Spec.SchedulerName)
}

// In a namespace without the label, a default-scheduler pod is left as it is.
func TestWebhookLeavesUnlabelledNamespaces(t *testing.T) {
	waitWebhook(t)
	plain := namespace(t)
	created, err := kube.CoreV1().Pods(plain).Create(context.Background(), newPod(plain, "untouched", withScheduler("")), metav1.CreateOptions{})
	require.NoError(t, err)
	assert.Equal(t, v1.DefaultSchedulerName, created.Spec.SchedulerName)
	time.Sleep(3 * time.Second) // what our scheduler would need to submit a job for it
	assert.Empty(t, jobsNamed(t, plain+"/"), "no Slurm job for a pod of the default scheduler")
	assert.Empty(t, getPod(t, plain, "untouched").Spec.NodeName)
}
