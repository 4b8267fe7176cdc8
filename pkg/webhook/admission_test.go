package webhook

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/kubeslurm/kubeslurm/pkg/slurmjob"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

const ours = wellknown.SchedulerName

func ann(kv ...string) map[string]string {
	m := map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		m[slurmjob.Annotation(kv[i])] = kv[i+1]
	}
	return m
}

func pod(scheduler string, annotations map[string]string) *corev1.Pod {
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "p", Annotations: annotations},
		Spec:       corev1.PodSpec{SchedulerName: scheduler, Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
	}
}

func job(scheduler string, own, template map[string]string) *batchv1.Job {
	return &batchv1.Job{
		TypeMeta:   metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "j", Annotations: own},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Annotations: template},
			Spec:       pod(scheduler, nil).Spec,
		}},
	}
}

func podGroup(annotations map[string]string) *metav1.PartialObjectMetadata {
	return groupObject("scheduling.x-k8s.io/v1alpha1", "PodGroup", annotations)
}

// groupObject is a workload object read only for its annotations (PodGroup, JobSet, LWS).
func groupObject(apiVersion, kind string, annotations map[string]string) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: apiVersion, Kind: kind},
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "g", Annotations: annotations},
	}
}

// request builds the AdmissionRequest the API server would send for obj (old on updates).
func request(t *testing.T, op admissionv1.Operation, ns string, obj, old runtime.Object) admission.Request {
	t.Helper()
	gvk := obj.GetObjectKind().GroupVersionKind()
	raw := func(o runtime.Object) runtime.RawExtension {
		if o == nil {
			return runtime.RawExtension{}
		}
		b, err := json.Marshal(o)
		require.NoError(t, err)
		return runtime.RawExtension{Raw: b}
	}
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID: "1", Operation: op, Namespace: ns,
		Kind:   metav1.GroupVersionKind{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind},
		Object: raw(obj), OldObject: raw(old),
	}}
}

func TestValidator(t *testing.T) {
	key := slurmjob.Annotation
	cases := []struct {
		name     string
		op       admissionv1.Operation
		obj, old runtime.Object
		// deniedFor is the annotation key the denial must name; empty: allowed.
		deniedFor string
		// why is a word of the Slurm-facing reason the denial must carry.
		why string
	}{
		{name: "valid pod", op: admissionv1.Create,
			obj: pod(ours, ann("partition", "k8s", "time-limit", "1:30:00", "priority", "10", "exclusive", "true"))},
		{name: "pod without annotations", op: admissionv1.Create, obj: pod(ours, nil)},
		{name: "unknown key (typo)", op: admissionv1.Create, obj: pod(ours, ann("time-limt", "30")),
			deniedFor: key("time-limt"), why: "unknown key"},
		{name: "bad time limit", op: admissionv1.Create, obj: pod(ours, ann("time-limit", "abc")),
			deniedFor: key("time-limit"), why: "not a time limit"},
		{name: "partition with a newline", op: admissionv1.Create, obj: pod(ours, ann("partition", "gpu\nPartitionName=evil")),
			deniedFor: key("partition"), why: "partition name"},
		{name: "account with a shell metacharacter", op: admissionv1.Create, obj: pod(ours, ann("account", "x;rm -rf /")),
			deniedFor: key("account"), why: "account name"},
		{name: "bad priority", op: admissionv1.Create, obj: pod(ours, ann("priority", "urgent")),
			deniedFor: key("priority"), why: "priority"},
		{name: "priority beyond int32", op: admissionv1.Create, obj: pod(ours, ann("priority", "2147483648")),
			deniedFor: key("priority"), why: "priority"},
		{name: "bad exclusive", op: admissionv1.Create, obj: pod(ours, ann("exclusive", "maybe")),
			deniedFor: key("exclusive"), why: "true or false"},
		{name: "another scheduler's pod is not ours to judge", op: admissionv1.Create,
			obj: pod(corev1.DefaultSchedulerName, ann("time-limit", "abc"))},
		{name: "update leaving a bad annotation as it was", op: admissionv1.Update,
			obj: pod(ours, map[string]string{key("time-limit"): "abc", wellknown.JobStateAnnotation: "PENDING"}),
			old: pod(ours, ann("time-limit", "abc"))},
		{name: "update setting a bad annotation", op: admissionv1.Update,
			obj: pod(ours, ann("time-limit", "30", "qos", "a b")), old: pod(ours, ann("time-limit", "30")),
			deniedFor: key("qos"), why: "QOS name"},
		{name: "valid job", op: admissionv1.Create, obj: job(ours, ann("account", "physics"), ann("time-limit", "2-0"))},
		{name: "job's own bad annotation", op: admissionv1.Create, obj: job(ours, ann("time-limit", "forever"), nil),
			deniedFor: key("time-limit"), why: "not a time limit"},
		{name: "job template's bad annotation", op: admissionv1.Create, obj: job(ours, nil, ann("exclusive", "yes please")),
			deniedFor: "spec.template: annotation " + key("exclusive"), why: "true or false"},
		{name: "job for the default scheduler with our annotations", op: admissionv1.Create,
			obj: job(corev1.DefaultSchedulerName, ann("partition", "$(reboot)"), nil), deniedFor: key("partition")},
		{name: "job for the default scheduler without our annotations", op: admissionv1.Create,
			obj: job(corev1.DefaultSchedulerName, map[string]string{"team": "a"}, nil)},
		{name: "job update leaving annotations as they were", op: admissionv1.Update,
			obj: job(ours, nil, ann("priority", "x")), old: job(ours, nil, ann("priority", "x"))},
		{name: "job update changing its own annotations", op: admissionv1.Update,
			obj: job(ours, ann("reservation", "maint window"), nil), old: job(ours, nil, nil), deniedFor: key("reservation")},
		{name: "slurm-bridge alias on a Job for the default scheduler", op: admissionv1.Create,
			obj:       job(corev1.DefaultSchedulerName, map[string]string{slurmjob.AliasAnnotationPrefix + "timelimit": "soon"}, nil),
			deniedFor: slurmjob.AliasAnnotationPrefix + "timelimit"},
		{name: "pod update changing only an alias", op: admissionv1.Update,
			obj: pod(ours, map[string]string{slurmjob.AliasAnnotationPrefix + "partition": "a;b"}), old: pod(ours, nil),
			deniedFor: slurmjob.AliasAnnotationPrefix + "partition"},
		{name: "PodGroup with a bad annotation", op: admissionv1.Create,
			obj: podGroup(ann("qos", "high\nQOS=evil")), deniedFor: key("qos"), why: "QOS name"},
		{name: "PodGroup with valid annotations", op: admissionv1.Create, obj: podGroup(ann("time-limit", "30"))},
		{name: "PodGroup without our annotations", op: admissionv1.Create, obj: podGroup(map[string]string{"team": "a"})},
		{name: "JobSet with a bad annotation", op: admissionv1.Create,
			obj: groupObject("jobset.x-k8s.io/v1alpha2", "JobSet", ann("time-limit", "soon")), deniedFor: key("time-limit")},
		{name: "LeaderWorkerSet with a bad annotation", op: admissionv1.Create,
			obj: groupObject("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", ann("exclusive", "maybe")), deniedFor: key("exclusive")},
		{name: "JobSet with valid annotations", op: admissionv1.Create,
			obj: groupObject("jobset.x-k8s.io/v1alpha2", "JobSet", ann("time-limit", "30"))},
		{name: "other kinds pass", op: admissionv1.Create,
			obj: &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}}},
	}
	v := Validator{SchedulerName: ours}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp := v.Handle(context.Background(), request(t, c.op, "team", c.obj, c.old))
			if c.deniedFor == "" {
				assert.True(t, resp.Allowed, "denied: %v", resp.Result)
				return
			}
			require.False(t, resp.Allowed)
			assert.Equal(t, int32(403), resp.Result.Code)
			assert.Contains(t, resp.Result.Message, c.deniedFor+": ")
			assert.Contains(t, resp.Result.Message, c.why)
		})
	}
}

func TestValidatorRejectsUndecodable(t *testing.T) {
	req := request(t, admissionv1.Create, "team", pod(ours, nil), nil)
	req.Object.Raw = []byte(`{"spec": 7}`)
	resp := Validator{SchedulerName: ours}.Handle(context.Background(), req)
	assert.False(t, resp.Allowed)
	assert.Equal(t, int32(400), resp.Result.Code)
}

func TestSchedulerDefaulter(t *testing.T) {
	daemon := pod("", nil)
	daemon.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "agent", Controller: ptr(true)}}
	replica := pod("", nil)
	replica.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-1", Controller: ptr(true)}}
	bound := pod("", nil)
	bound.Spec.NodeName = "node-1"
	cases := []struct {
		name string
		op   admissionv1.Operation
		ns   string
		obj  runtime.Object
		want bool // the pod is handed to our scheduler
	}{
		{"no schedulerName", admissionv1.Create, "team", pod("", nil), true},
		{"default-scheduler", admissionv1.Create, "team", pod(corev1.DefaultSchedulerName, nil), true},
		{"a ReplicaSet's pod", admissionv1.Create, "team", replica, true},
		{"ours already", admissionv1.Create, "team", pod(ours, nil), false},
		{"another scheduler", admissionv1.Create, "team", pod("volcano", nil), false},
		{"a DaemonSet's pod", admissionv1.Create, "team", daemon, false},
		{"bound at creation", admissionv1.Create, "team", bound, false},
		{"kube-system", admissionv1.Create, metav1.NamespaceSystem, pod("", nil), false},
		{"update", admissionv1.Update, "team", pod("", nil), false},
		{"not a pod", admissionv1.Create, "team", job("", nil, nil), false},
	}
	d := SchedulerDefaulter{SchedulerName: ours}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var old runtime.Object
			if c.op == admissionv1.Update {
				old = c.obj
			}
			resp := d.Handle(context.Background(), request(t, c.op, c.ns, c.obj, old))
			require.True(t, resp.Allowed, "a mutation never denies: %v", resp.Result)
			if !c.want {
				assert.Empty(t, resp.Patches)
				return
			}
			require.Len(t, resp.Patches, 1)
			p := resp.Patches[0]
			assert.Equal(t, "add", p.Operation)
			assert.Equal(t, "/spec/schedulerName", p.Path)
			assert.Equal(t, ours, p.Value)
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestKeySetValidator(t *testing.T) {
	k := base64.RawURLEncoding.EncodeToString([]byte(strings.Repeat("k", 32)))
	good := []byte(`{"keys":[{"kty":"oct","alg":"HS256","kid":"a","k":"` + k + `","use":"default"}]}`)
	twoDefaults := []byte(`{"keys":[{"kty":"oct","alg":"HS256","kid":"a","k":"` + k + `","use":"default"},` +
		`{"kty":"oct","alg":"HS256","kid":"b","k":"` + k + `","use":"default"}]}`)
	secret := func(data map[string][]byte) *corev1.Secret {
		return &corev1.Secret{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "slurm-slurm-key"}, Data: data}
	}
	for _, tc := range []struct {
		name     string
		op       admissionv1.Operation
		obj, old runtime.Object
		denied   string // a part of the denial; empty: allowed
	}{
		{name: "a key Secret without a key set", op: admissionv1.Create, obj: secret(map[string][]byte{"slurm.key": []byte("x")})},
		{name: "a good key set", op: admissionv1.Create, obj: secret(map[string][]byte{"slurm.jwks": good})},
		{name: "two default keys", op: admissionv1.Create, obj: secret(map[string][]byte{"slurm.jwks": twoDefaults}),
			denied: "slurm.jwks is a key set Slurm refuses (every daemon that read it would exit): keys[1]: a second default key"},
		{name: "changed to two default keys", op: admissionv1.Update,
			obj: secret(map[string][]byte{"slurm.jwks": twoDefaults}), old: secret(map[string][]byte{"slurm.jwks": good}),
			denied: "a second default key"},
		{name: "not JSON", op: admissionv1.Create, obj: secret(map[string][]byte{"slurm.jwks": []byte("{")}), denied: "not a JSON object"},
		// One written before the webhook was there does not block other edits.
		{name: "unchanged key set", op: admissionv1.Update,
			obj: secret(map[string][]byte{"slurm.jwks": twoDefaults, "slurm.key": []byte("new")}),
			old: secret(map[string][]byte{"slurm.jwks": twoDefaults})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := KeySetValidator{}.Handle(context.Background(), request(t, tc.op, "team", tc.obj, tc.old))
			if tc.denied == "" {
				assert.True(t, resp.Allowed, "%+v", resp.Result)
				return
			}
			require.False(t, resp.Allowed)
			assert.Contains(t, resp.Result.Message, tc.denied)
		})
	}
}
