package slurmcluster

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	slurmv1 "github.com/kubeslurm/kubeslurm/api/v1alpha1"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

type fixture struct {
	t        testing.TB
	kube     client.Client
	recorder *events.FakeRecorder
	r        *Reconciler
}

func newFixture(t testing.TB, objs ...client.Object) *fixture {
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	require.NoError(t, slurmv1.AddToScheme(scheme))
	kube := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithStatusSubresource(&slurmv1.SlurmCluster{}).
		WithIndex(&slurmv1.SlurmCluster{}, extraConfigFromField, extraConfigFromName).
		WithInterceptorFuncs(interceptor.Funcs{Create: dryRunCreate}).Build()
	rec := events.NewFakeRecorder(100)
	return &fixture{t: t, kube: kube, recorder: rec, r: &Reconciler{Client: kube, Recorder: rec}}
}

// dryRunCreate answers a dry-run create as the API server does (AlreadyExists when the
// object exists), which the fake client does not: it returns nil for every dry run.
func dryRunCreate(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
	o := &client.CreateOptions{}
	o.ApplyOptions(opts)
	if len(o.DryRun) > 0 {
		existing := obj.DeepCopyObject().(client.Object)
		if err := c.Get(ctx, client.ObjectKeyFromObject(obj), existing); err == nil {
			return apierrors.NewAlreadyExists(schema.GroupResource{Resource: "secrets"}, obj.GetName())
		}
		return nil
	}
	return c.Create(ctx, obj, opts...)
}

func newCluster() *slurmv1.SlurmCluster {
	return &slurmv1.SlurmCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: "hpc", Name: "slurm", UID: "uid-1"},
		Spec: slurmv1.SlurmClusterSpec{
			NodeSets:   []slurmv1.NodeSetSpec{{Name: "cpu", NodeSelector: map[string]string{"pool": "cpu"}}, {Name: "r", Mode: slurmv1.NodeSetReplicas, Replicas: ptr[int32](3)}},
			Partitions: []slurmv1.PartitionSpec{{Name: "batch", Default: true, MaxTime: "60"}},
		},
	}
}

func (f *fixture) reconcile() {
	f.t.Helper()
	_, err := f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "hpc", Name: "slurm"}})
	require.NoError(f.t, err)
}

func (f *fixture) cluster() *slurmv1.SlurmCluster {
	c := &slurmv1.SlurmCluster{}
	require.NoError(f.t, f.kube.Get(context.Background(), client.ObjectKey{Namespace: "hpc", Name: "slurm"}, c))
	return c
}

func (f *fixture) update(mutate func(*slurmv1.SlurmCluster)) {
	c := f.cluster()
	mutate(c)
	c.Generation++
	require.NoError(f.t, f.kube.Update(context.Background(), c))
}

func (f *fixture) secret(name string) *v1.Secret {
	s := &v1.Secret{}
	require.NoError(f.t, f.kube.Get(context.Background(), client.ObjectKey{Namespace: "hpc", Name: name}, s))
	return s
}

func (f *fixture) configMap() *v1.ConfigMap {
	cm := &v1.ConfigMap{}
	require.NoError(f.t, f.kube.Get(context.Background(), client.ObjectKey{Namespace: "hpc", Name: "slurm-slurm-config"}, cm))
	return cm
}

// events drains the recorded events.
func (f *fixture) events() []string {
	var out []string
	for {
		select {
		case e := <-f.recorder.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func condition(c *slurmv1.SlurmCluster, typ string) metav1.Condition {
	cond := meta.FindStatusCondition(c.Status.Conditions, typ)
	if cond == nil {
		return metav1.Condition{}
	}
	return *cond
}

func TestKeysGeneratedOnceAndConfigRendered(t *testing.T) {
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"pool": "cpu"}}}
	other := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"}}
	f := newFixture(t, newCluster(), node, other)
	f.reconcile()

	slurmKey, jwtKey := f.secret("slurm-slurm-key"), f.secret("slurm-jwt-key")
	assert.Len(t, slurmKey.Data[SlurmKeyName], slurmKeyBytes)
	assert.Len(t, jwtKey.Data[JWTKeyName], jwtKeyBytes)
	assert.NotEqual(t, slurmKey.Data[SlurmKeyName][:32], jwtKey.Data[JWTKeyName][:32])
	for _, s := range []*v1.Secret{slurmKey, jwtKey} {
		assert.True(t, metav1.IsControlledBy(s, f.cluster()), "%s owned by the cluster", s.Name)
	}
	cm := f.configMap()
	assert.True(t, metav1.IsControlledBy(cm, f.cluster()))
	assert.Contains(t, cm.Data["slurm.conf"], "PartitionName=batch Nodes=ALL Default=YES MaxTime=60 State=UP\n")
	assert.Contains(t, cm.Data["slurm.conf"], "SlurmctldParameters=enable_configless\n")
	assert.Contains(t, cm.Data, "cgroup.conf")

	c := f.cluster()
	assert.Equal(t, cm.Annotations[wellknown.SlurmConfigHashAnnotation], c.Status.ConfigHash)
	assert.Equal(t, metav1.ConditionTrue, condition(c, slurmv1.ConditionConfigValid).Status)
	assert.Equal(t, metav1.ConditionTrue, condition(c, slurmv1.ConditionKeysReady).Status)
	assert.NotNil(t, c.Status.ConfigUpdateTime)
	assert.EqualValues(t, 1+3, c.Status.DesiredWorkers, "one matching node and three replicas")
	ev := strings.Join(f.events(), "\n")
	assert.Contains(t, ev, wellknown.EventSlurmKeyGenerated)
	assert.Contains(t, ev, wellknown.EventSlurmConfigUpdated)

	// Level-based and idempotent: nothing changes, no event, keys kept.
	f.reconcile()
	assert.Empty(t, f.events())
	assert.Equal(t, slurmKey.Data, f.secret("slurm-slurm-key").Data)
	assert.Equal(t, jwtKey.Data, f.secret("slurm-jwt-key").Data)
	assert.Equal(t, cm.ResourceVersion, f.configMap().ResourceVersion)
}

func TestPartitionChangeUpdatesConfigMap(t *testing.T) {
	f := newFixture(t, newCluster())
	f.reconcile()
	before := f.configMap()
	f.events()

	f.update(func(c *slurmv1.SlurmCluster) { c.Spec.Partitions[0].MaxTime = "120" })
	f.reconcile()
	after := f.configMap()
	assert.Contains(t, after.Data["slurm.conf"], "PartitionName=batch Nodes=ALL Default=YES MaxTime=120 State=UP\n")
	assert.NotEqual(t, before.Annotations[wellknown.SlurmConfigHashAnnotation], after.Annotations[wellknown.SlurmConfigHashAnnotation])
	assert.Equal(t, after.Annotations[wellknown.SlurmConfigHashAnnotation], f.cluster().Status.ConfigHash)
	ev := f.events()
	require.Len(t, ev, 1)
	assert.Contains(t, ev[0], wellknown.EventSlurmConfigUpdated)
	assert.Contains(t, ev[0], before.Annotations[wellknown.SlurmConfigHashAnnotation], "the event names the old configuration")
}

func TestRefusedExtraConfigKeepsOldConfigMap(t *testing.T) {
	f := newFixture(t, newCluster())
	f.reconcile()
	before := f.configMap()
	f.events()

	f.update(func(c *slurmv1.SlurmCluster) {
		c.Spec.Partitions[0].MaxTime = "120"
		c.Spec.ExtraConfig = "SchedulerParameters=bf_interval=60 AuthType=auth/none"
	})
	f.reconcile()
	assert.Equal(t, before.Data, f.configMap().Data, "old configuration kept")
	assert.Equal(t, before.ResourceVersion, f.configMap().ResourceVersion)
	c := f.cluster()
	cond := condition(c, slurmv1.ConditionConfigValid)
	assert.Equal(t, metav1.ConditionFalse, cond.Status)
	assert.Equal(t, ReasonInvalidConfig, cond.Reason)
	assert.Contains(t, cond.Message, "AuthType is set by kubeslurm")
	assert.Equal(t, c.Generation, c.Status.ObservedGeneration)
	assert.Equal(t, before.Annotations[wellknown.SlurmConfigHashAnnotation], c.Status.ConfigHash, "status still names the configuration in use")
	ev := f.events()
	require.Len(t, ev, 1)
	assert.Contains(t, ev[0], wellknown.EventSlurmConfigRefused)

	f.reconcile()
	assert.Empty(t, f.events(), "the refusal is reported once, not on every reconcile")

	f.update(func(c *slurmv1.SlurmCluster) { c.Spec.ExtraConfig = "SchedulerParameters=bf_interval=60" })
	f.reconcile()
	assert.Equal(t, metav1.ConditionTrue, condition(f.cluster(), slurmv1.ConditionConfigValid).Status)
	assert.Contains(t, f.configMap().Data["slurm.conf"], "SchedulerParameters=bf_interval=60\n")
}

func TestExistingKeySecretsAreNeverOverwritten(t *testing.T) {
	c := newCluster()
	c.Spec.Auth.SlurmKeyRef = &v1.SecretKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "site-key"}, Key: "k"}
	// A Secret already under the generated name is the user's: kept as it is.
	existing := &v1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "hpc", Name: "slurm-jwt-key"}, Data: map[string][]byte{JWTKeyName: []byte("jwt")}}
	f := newFixture(t, c, existing)
	res, err := f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "hpc", Name: "slurm"}})
	require.NoError(t, err)
	assert.Positive(t, res.RequeueAfter, "a missing referenced Secret is looked for again")
	cond := condition(f.cluster(), slurmv1.ConditionKeysReady)
	assert.Equal(t, metav1.ConditionFalse, cond.Status)
	assert.Equal(t, "Secret site-key of the auth/slurm key (spec.auth) does not exist", cond.Message)
	assert.Equal(t, existing.Data, f.secret("slurm-jwt-key").Data)
	assert.Nil(t, f.secret("slurm-jwt-key").OwnerReferences)
	assert.Contains(t, strings.Join(f.events(), "\n"), wellknown.EventSlurmKeyMissing)
	// The dry-run probe wrote nothing.
	err = f.kube.Get(context.Background(), client.ObjectKey{Namespace: "hpc", Name: "site-key"}, &v1.Secret{})
	assert.True(t, apierrors.IsNotFound(err))
	// The configuration does not depend on the keys' presence.
	assert.Equal(t, metav1.ConditionTrue, condition(f.cluster(), slurmv1.ConditionConfigValid).Status)

	require.NoError(t, f.kube.Create(context.Background(), &v1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "hpc", Name: "site-key"}, Data: map[string][]byte{"k": []byte("site")}}))
	f.reconcile()
	assert.Equal(t, metav1.ConditionTrue, condition(f.cluster(), slurmv1.ConditionKeysReady).Status)
	assert.Equal(t, []byte("site"), f.secret("site-key").Data["k"])
	assert.Equal(t, existing.Data, f.secret("slurm-jwt-key").Data)
}

func TestDeletedGeneratedKeyIsRegeneratedLoudly(t *testing.T) {
	f := newFixture(t, newCluster())
	f.reconcile()
	old := f.secret("slurm-slurm-key")
	f.events()
	require.NoError(t, f.kube.Delete(context.Background(), old))
	f.reconcile()
	assert.NotEqual(t, old.Data, f.secret("slurm-slurm-key").Data)
	ev := f.events()
	require.Len(t, ev, 1)
	assert.Contains(t, ev[0], "Warning "+wellknown.EventSlurmKeyRegenerated)
}

func TestForeignConfigMapIsNotTaken(t *testing.T) {
	foreign := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "hpc", Name: "slurm-slurm-config"}, Data: map[string]string{"a": "b"}}
	f := newFixture(t, newCluster(), foreign)
	f.reconcile()
	assert.Equal(t, foreign.Data, f.configMap().Data)
	cond := condition(f.cluster(), slurmv1.ConditionConfigValid)
	assert.Equal(t, metav1.ConditionFalse, cond.Status)
	assert.Equal(t, ReasonConfigMapOwned, cond.Reason)
}

func TestGoneClusterIsNoError(t *testing.T) {
	f := newFixture(t)
	f.reconcile()
}
