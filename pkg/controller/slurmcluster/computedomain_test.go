package slurmcluster

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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
	"github.com/kubeslurm/kubeslurm/pkg/computedomain"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

// cdFixture is a fixture whose API server serves the ComputeDomain kind when crd is true
// (else the client answers as controller-runtime's RESTMapper does: NoKindMatch; the fake
// client itself does not consult a RESTMapper). funcs may fail calls; every write to a
// ComputeDomain is counted.
func cdFixture(t *testing.T, crd bool, funcs interceptor.Funcs, objs ...client.Object) (*fixture, *int) {
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	require.NoError(t, slurmv1.AddToScheme(scheme))
	writes := 0
	isCD := func(obj client.Object) bool { return obj.GetObjectKind().GroupVersionKind() == computedomain.GVK }
	count := func(obj client.Object) {
		if isCD(obj) {
			writes++
		}
	}
	noKind := &meta.NoKindMatchError{GroupKind: computedomain.GVK.GroupKind(), SearchedVersions: []string{"v1beta1"}}
	if funcs.Get == nil {
		funcs.Get = func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if !crd && isCD(obj) {
				return noKind
			}
			return c.Get(ctx, key, obj, opts...)
		}
	}
	if funcs.Create == nil {
		funcs.Create = func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if !crd && isCD(obj) {
				return noKind
			}
			count(obj)
			return dryRunCreate(ctx, c, obj, opts...)
		}
	}
	funcs.Update = func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
		count(obj)
		return c.Update(ctx, obj, opts...)
	}
	funcs.Patch = func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
		count(obj)
		return c.Patch(ctx, obj, p, opts...)
	}
	funcs.Delete = func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
		count(obj)
		return c.Delete(ctx, obj, opts...)
	}
	kube := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithStatusSubresource(&slurmv1.SlurmCluster{}).WithInterceptorFuncs(funcs).Build()
	rec := events.NewFakeRecorder(100)
	return &fixture{t: t, kube: kube, recorder: rec, r: &Reconciler{Client: kube, Recorder: rec}}, &writes
}

func cdCluster() *slurmv1.SlurmCluster {
	c := newCluster()
	c.Spec.ComputeDomain = &slurmv1.ComputeDomainSpec{Enabled: true}
	return c
}

func (f *fixture) reconcileResult() ctrl.Result {
	f.t.Helper()
	res, err := f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "hpc", Name: "slurm"}})
	require.NoError(f.t, err)
	return res
}

func (f *fixture) computeDomain() *unstructured.Unstructured {
	f.t.Helper()
	cd := computedomain.Empty()
	require.NoError(f.t, f.kube.Get(context.Background(), client.ObjectKey{Namespace: "hpc", Name: "slurm-compute-domain"}, cd))
	return cd
}

// setCDStatus writes what NVIDIA's driver would: status.status and status.nodes.
func (f *fixture) setCDStatus(state string, nodes ...string) {
	f.t.Helper()
	cd := f.computeDomain()
	var list []any
	for i, n := range nodes {
		list = append(list, map[string]any{"name": n, "ipAddress": "10.0.0.1", "cliqueID": "c.1", "index": int64(i), "status": "Ready"})
	}
	cd.Object["status"] = map[string]any{"status": state, "nodes": list}
	require.NoError(f.t, f.kube.Update(context.Background(), cd))
}

func TestComputeDomainCreatedOnceWithNumNodesZero(t *testing.T) {
	f, writes := cdFixture(t, true, interceptor.Funcs{}, cdCluster())
	res := f.reconcileResult()
	assert.Equal(t, computeDomainPoll, res.RequeueAfter, "the ComputeDomain is read again")

	cd := f.computeDomain()
	spec, err := computedomain.ReadSpec(cd)
	require.NoError(t, err)
	assert.Equal(t, computedomain.Spec{NumNodes: 0, ResourceClaimTemplateName: "slurm-compute-domain-channel", AllocationMode: "Single"}, spec)
	n, found, _ := unstructured.NestedFieldNoCopy(cd.Object, "spec", "numNodes")
	assert.True(t, found, "numNodes is written, as 0")
	assert.EqualValues(t, 0, n)
	c := f.cluster()
	assert.True(t, metav1.IsControlledBy(cd, c), "owned by the SlurmCluster")
	assert.Equal(t, "slurm", cd.GetLabels()[wellknown.SlurmClusterLabel])
	cond := condition(c, slurmv1.ConditionComputeDomainReady)
	assert.Equal(t, metav1.ConditionFalse, cond.Status)
	assert.Equal(t, ReasonComputeDomainNotReady, cond.Reason)
	assert.Contains(t, cond.Message, "no status yet")
	assert.Equal(t, &slurmv1.ComputeDomainStatus{Name: "slurm-compute-domain", ResourceClaimTemplateName: "slurm-compute-domain-channel"}, c.Status.ComputeDomain)
	assert.Contains(t, f.configMap().Data["slurm.conf"], "\nSwitchType=switch/nvidia_imex\n")
	assert.Contains(t, strings.Join(f.events(), "\n"), wellknown.EventComputeDomainCreated)
	assert.Equal(t, 1, *writes)

	// Idempotent: nothing written, no event.
	rv := c.ResourceVersion
	f.reconcile()
	assert.Empty(t, f.events())
	assert.Equal(t, 1, *writes)
	assert.Equal(t, rv, f.cluster().ResourceVersion, "status unchanged")
}

func TestComputeDomainSpecFromClusterSpec(t *testing.T) {
	c := cdCluster()
	c.Spec.ComputeDomain = &slurmv1.ComputeDomainSpec{Enabled: true, Name: "nvl72", ResourceClaimTemplateName: "imex", AllocationMode: slurmv1.ComputeDomainAllChannels}
	f, _ := cdFixture(t, true, interceptor.Funcs{}, c)
	f.reconcile()
	cd := computedomain.Empty()
	require.NoError(t, f.kube.Get(context.Background(), client.ObjectKey{Namespace: "hpc", Name: "nvl72"}, cd))
	spec, err := computedomain.ReadSpec(cd)
	require.NoError(t, err)
	assert.Equal(t, computedomain.Spec{ResourceClaimTemplateName: "imex", AllocationMode: "All"}, spec)
	assert.Equal(t, "imex", f.cluster().Status.ComputeDomain.ResourceClaimTemplateName)
}

// Issue test 2: nodes join and leave the domain (NVIDIA's driver writes its status); the
// SlurmCluster's status and condition follow, and the ComputeDomain is never written.
func TestComputeDomainMembershipFollowsStatus(t *testing.T) {
	f, writes := cdFixture(t, true, interceptor.Funcs{}, cdCluster())
	f.reconcile()
	f.events()
	for _, step := range []struct {
		state  string
		nodes  []string
		cond   metav1.ConditionStatus
		reason string
		msg    string
	}{
		{"NotReady", nil, metav1.ConditionFalse, ReasonComputeDomainNotReady, "is NotReady with 0 node(s)"},
		{"Ready", []string{"node-2", "node-1"}, metav1.ConditionTrue, ReasonComputeDomainReady, "is Ready with 2 node(s): node-1,node-2"},
		{"Ready", []string{"node-1", "node-2", "node-3"}, metav1.ConditionTrue, ReasonComputeDomainReady, "3 node(s): node-1,node-2,node-3"},
		{"Ready", []string{"node-1", "node-3"}, metav1.ConditionTrue, ReasonComputeDomainReady, "2 node(s): node-1,node-3"},
		{"NotReady", []string{"node-3"}, metav1.ConditionFalse, ReasonComputeDomainNotReady, "is NotReady with 1 node(s): node-3"},
	} {
		f.setCDStatus(step.state, step.nodes...)
		before := *writes
		f.reconcile()
		c := f.cluster()
		want := append([]string(nil), step.nodes...)
		if len(want) == 0 {
			want = nil
		}
		assert.ElementsMatch(t, want, c.Status.ComputeDomain.Nodes)
		assert.IsNonDecreasing(t, c.Status.ComputeDomain.Nodes)
		assert.EqualValues(t, len(step.nodes), c.Status.ComputeDomain.NodeCount)
		assert.Equal(t, step.state, c.Status.ComputeDomain.Status)
		cond := condition(c, slurmv1.ConditionComputeDomainReady)
		assert.Equal(t, step.cond, cond.Status, step.msg)
		assert.Equal(t, step.reason, cond.Reason)
		assert.Contains(t, cond.Message, step.msg)
		assert.Equal(t, before, *writes, "the ComputeDomain is not written")
	}
}

func TestComputeDomainCRDMissing(t *testing.T) {
	f, writes := cdFixture(t, false, interceptor.Funcs{}, cdCluster())
	res := f.reconcileResult()
	assert.Equal(t, computeDomainPoll, res.RequeueAfter, "looked for again")
	c := f.cluster()
	cond := condition(c, slurmv1.ConditionComputeDomainReady)
	assert.Equal(t, metav1.ConditionFalse, cond.Status)
	assert.Equal(t, ReasonComputeDomainCRDMissing, cond.Reason)
	assert.Contains(t, cond.Message, "computedomains.resource.nvidia.com")
	assert.Nil(t, c.Status.ComputeDomain)
	assert.Zero(t, *writes)
	// The rest of the cluster reconciles.
	assert.Equal(t, metav1.ConditionTrue, condition(c, slurmv1.ConditionConfigValid).Status)
	assert.Equal(t, metav1.ConditionTrue, condition(c, slurmv1.ConditionKeysReady).Status)
	assert.Contains(t, f.configMap().Data["slurm.conf"], "SwitchType=switch/nvidia_imex")
	ev := f.events()
	assert.Contains(t, strings.Join(ev, "\n"), "Warning "+wellknown.EventComputeDomainCRDMissing)

	f.reconcile()
	assert.NotContains(t, strings.Join(f.events(), "\n"), wellknown.EventComputeDomainCRDMissing, "reported once")
}

// The CRD was deleted after the client learnt the kind's mapping: the API server answers
// NotFound to the create.
func TestComputeDomainCRDGoneAfterMapping(t *testing.T) {
	f, _ := cdFixture(t, true, interceptor.Funcs{Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
		if obj.GetObjectKind().GroupVersionKind() == computedomain.GVK {
			return apierrors.NewNotFound(schema.GroupResource{}, "")
		}
		return dryRunCreate(ctx, c, obj, opts...)
	}}, cdCluster())
	f.reconcile()
	assert.Equal(t, ReasonComputeDomainCRDMissing, condition(f.cluster(), slurmv1.ConditionComputeDomainReady).Reason)
}

func TestComputeDomainReadErrorFailsClosed(t *testing.T) {
	f, writes := cdFixture(t, true, interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		if obj.GetObjectKind().GroupVersionKind() == computedomain.GVK {
			return apierrors.NewForbidden(computedomain.Resource, key.Name, nil)
		}
		return c.Get(ctx, key, obj, opts...)
	}}, cdCluster())
	_, err := f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "hpc", Name: "slurm"}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "reading ComputeDomain slurm-compute-domain")
	assert.Zero(t, *writes, "an unreadable ComputeDomain is not taken for absent")
}

func TestComputeDomainSpecDiffersIsReportedNotRewritten(t *testing.T) {
	c := cdCluster()
	f, writes := cdFixture(t, true, interceptor.Funcs{}, c)
	f.reconcile()
	f.events()
	created := f.computeDomain()
	// The user asks for another template: the immutable spec stays, the condition says why.
	f.update(func(c *slurmv1.SlurmCluster) { c.Spec.ComputeDomain.ResourceClaimTemplateName = "other" })
	before := *writes
	f.reconcile()
	cond := condition(f.cluster(), slurmv1.ConditionComputeDomainReady)
	assert.Equal(t, metav1.ConditionFalse, cond.Status)
	assert.Equal(t, ReasonComputeDomainSpecDiffers, cond.Reason)
	assert.Contains(t, cond.Message, "channel.resourceClaimTemplate.name=slurm-compute-domain-channel")
	assert.Contains(t, cond.Message, "asks for numNodes=0 channel.resourceClaimTemplate.name=other")
	assert.Equal(t, "slurm-compute-domain-channel", f.cluster().Status.ComputeDomain.ResourceClaimTemplateName, "status names the template pods must claim")
	assert.Equal(t, before, *writes, "not rewritten, not deleted")
	assert.Equal(t, created.GetResourceVersion(), f.computeDomain().GetResourceVersion())
	ev := f.events()
	require.Len(t, ev, 1)
	assert.Contains(t, ev[0], "Warning "+wellknown.EventComputeDomainMismatch)
	f.reconcile()
	assert.Empty(t, f.events(), "reported once")

	// Deleted by the user: created anew with the new spec.
	require.NoError(t, f.kube.Delete(context.Background(), f.computeDomain()))
	f.reconcile()
	spec, err := computedomain.ReadSpec(f.computeDomain())
	require.NoError(t, err)
	assert.Equal(t, "other", spec.ResourceClaimTemplateName)
}

func TestForeignComputeDomainIsNotTaken(t *testing.T) {
	foreign := computedomain.New("hpc", "slurm-compute-domain", computedomain.Spec{NumNodes: 4, ResourceClaimTemplateName: "theirs"})
	f, writes := cdFixture(t, true, interceptor.Funcs{}, cdCluster(), foreign)
	f.reconcile()
	c := f.cluster()
	cond := condition(c, slurmv1.ConditionComputeDomainReady)
	assert.Equal(t, ReasonComputeDomainNotOurs, cond.Reason)
	assert.Nil(t, c.Status.ComputeDomain)
	assert.Zero(t, *writes)
	assert.Empty(t, f.computeDomain().GetOwnerReferences())
}

func TestComputeDomainDisabled(t *testing.T) {
	f, writes := cdFixture(t, true, interceptor.Funcs{}, cdCluster())
	f.reconcile()
	require.NotNil(t, f.cluster().Status.ComputeDomain)
	f.update(func(c *slurmv1.SlurmCluster) { c.Spec.ComputeDomain.Enabled = false })
	before := *writes
	res := f.reconcileResult()
	assert.Zero(t, res.RequeueAfter)
	c := f.cluster()
	assert.Nil(t, meta.FindStatusCondition(c.Status.Conditions, slurmv1.ConditionComputeDomainReady))
	assert.Nil(t, c.Status.ComputeDomain)
	assert.NotContains(t, f.configMap().Data["slurm.conf"], "SwitchType")
	assert.Equal(t, before, *writes, "left in place: pods may still hold its channel")
	f.computeDomain()
}

func TestComputeDomainBeingDeleted(t *testing.T) {
	c := cdCluster()
	cd := computedomain.New("hpc", "slurm-compute-domain", ComputeDomainSpec(c))
	cd.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: slurmv1.GroupVersion.String(), Kind: "SlurmCluster", Name: "slurm", UID: "uid-1", Controller: ptr(true)}})
	cd.SetFinalizers([]string{"resource.nvidia.com/computeDomain"})
	now := metav1.Now()
	cd.SetDeletionTimestamp(&now)
	f, writes := cdFixture(t, true, interceptor.Funcs{}, c, cd)
	f.reconcile()
	cond := condition(f.cluster(), slurmv1.ConditionComputeDomainReady)
	assert.Equal(t, ReasonComputeDomainDeleting, cond.Reason)
	assert.Nil(t, f.cluster().Status.ComputeDomain)
	assert.Zero(t, *writes)
}
