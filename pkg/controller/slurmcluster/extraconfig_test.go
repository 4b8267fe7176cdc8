package slurmcluster

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slurmv1 "github.com/kubeslurm/kubeslurm/api/v1alpha1"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

func siteConfigMap(text string) *v1.ConfigMap {
	return &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "hpc", Name: "site"}, Data: map[string]string{"slurm.conf": text}}
}

func withExtraConfigFrom(optional bool) *slurmv1.SlurmCluster {
	c := newCluster()
	c.Spec.ExtraConfigFrom = &v1.ConfigMapKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "site"}, Key: "slurm.conf"}
	if optional {
		c.Spec.ExtraConfigFrom.Optional = ptr(true)
	}
	return c
}

// The referenced ConfigMap's text reaches slurm.conf; a missing ConfigMap or key, and a
// text that fails validation, are refused with the last configuration kept.
func TestExtraConfigFromReachesTheConfiguration(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, withExtraConfigFrom(false))
	f.reconcile()
	cond := condition(f.cluster(), slurmv1.ConditionConfigValid)
	assert.Equal(t, metav1.ConditionFalse, cond.Status)
	assert.Equal(t, "extraConfigFrom: ConfigMap site does not exist; the last valid configuration stays in place", cond.Message)
	assert.Contains(t, f.events(), "Warning "+wellknown.EventSlurmConfigRefused+" "+cond.Message)

	site := siteConfigMap("MessageTimeout=30\n")
	require.NoError(t, f.kube.Create(ctx, site))
	f.reconcile()
	assert.True(t, meta.IsStatusConditionTrue(f.cluster().Status.Conditions, slurmv1.ConditionConfigValid))
	first := f.configMap()
	assert.Contains(t, first.Data["slurm.conf"], "\n# spec.extraConfigFrom: ConfigMap site, key slurm.conf\nMessageTimeout=30\n")

	site.Data["slurm.conf"] = "MessageTimeout=40\n"
	require.NoError(t, f.kube.Update(ctx, site))
	f.reconcile()
	second := f.configMap()
	assert.Contains(t, second.Data["slurm.conf"], "\nMessageTimeout=40\n")
	assert.NotEqual(t, first.Annotations[wellknown.SlurmConfigHashAnnotation], second.Annotations[wellknown.SlurmConfigHashAnnotation])

	for text, want := range map[string]string{
		"AuthType=auth/none":  "extraConfigFrom (ConfigMap site, key slurm.conf): ",
		"Include /etc/passwd": "Include",
	} {
		site.Data["slurm.conf"] = text
		require.NoError(t, f.kube.Update(ctx, site))
		f.reconcile()
		cond := condition(f.cluster(), slurmv1.ConditionConfigValid)
		assert.Equal(t, metav1.ConditionFalse, cond.Status, text)
		assert.Contains(t, cond.Message, want, text)
		assert.Equal(t, second.Data, f.configMap().Data, "the last valid configuration stays: %s", text)
	}

	delete(site.Data, "slurm.conf")
	require.NoError(t, f.kube.Update(ctx, site))
	f.reconcile()
	assert.Equal(t, "extraConfigFrom: ConfigMap site has no key slurm.conf; the last valid configuration stays in place",
		condition(f.cluster(), slurmv1.ConditionConfigValid).Message)
	assert.Equal(t, second.Data, f.configMap().Data)
}

// An optional reference to a missing ConfigMap adds nothing.
func TestOptionalExtraConfigFromMayBeMissing(t *testing.T) {
	f := newFixture(t, withExtraConfigFrom(true))
	f.reconcile()
	assert.True(t, meta.IsStatusConditionTrue(f.cluster().Status.Conditions, slurmv1.ConditionConfigValid))
	assert.NotContains(t, f.configMap().Data["slurm.conf"], "extraConfigFrom")
}

// A ConfigMap that cannot be read changes nothing: the reconcile fails and is retried.
func TestUnreadableExtraConfigFromChangesNothing(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, withExtraConfigFrom(false), siteConfigMap("MessageTimeout=30\n"))
	f.reconcile()
	before := f.configMap()
	c := f.cluster()

	site := &v1.ConfigMap{}
	require.NoError(t, f.kube.Get(ctx, client.ObjectKey{Namespace: "hpc", Name: "site"}, site))
	site.Data["slurm.conf"] = "MessageTimeout=50\n"
	require.NoError(t, f.kube.Update(ctx, site))
	failing := &Reconciler{Client: readFails{Client: f.kube, name: "site"}, Recorder: f.recorder}
	_, err := failing.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "hpc", Name: "slurm"}})
	require.ErrorContains(t, err, "reading ConfigMap site of spec.extraConfigFrom")
	assert.Equal(t, before.Data, f.configMap().Data)
	assert.Equal(t, c.Status.Conditions, f.cluster().Status.Conditions)
}

// readFails fails every Get of the ConfigMap name.
type readFails struct {
	client.Client
	name string
}

func (r readFails) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*v1.ConfigMap); ok && key.Name == r.name {
		return errors.New("the API server is unavailable")
	}
	return r.Client.Get(ctx, key, obj, opts...)
}

// A ConfigMap change queues the clusters of its namespace that name it, and only those.
func TestConfigMapChangeQueuesReferencingClusters(t *testing.T) {
	other := withExtraConfigFrom(false)
	other.Name, other.Spec.ExtraConfigFrom.Name = "other", "elsewhere"
	plain := newCluster()
	plain.Name = "plain"
	f := newFixture(t, withExtraConfigFrom(false), other, plain)
	reqs := f.r.clustersReferencing(context.Background(), siteConfigMap(""))
	require.Len(t, reqs, 1)
	assert.Equal(t, "slurm", reqs[0].Name)
	elsewhere := siteConfigMap("")
	elsewhere.Namespace = "other-ns"
	assert.Empty(t, f.r.clustersReferencing(context.Background(), elsewhere))
}
