package slurmcluster

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slurmv1 "github.com/kubeslurm/kubeslurm/api/v1alpha1"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

func (f *fixture) statefulSet() *appsv1.StatefulSet {
	sts := &appsv1.StatefulSet{}
	require.NoError(f.t, f.kube.Get(context.Background(), client.ObjectKey{Namespace: "hpc", Name: "slurm-controller"}, sts))
	return sts
}

func TestControllerRunsFromRenderedConfig(t *testing.T) {
	c := newCluster()
	c.Spec.Controller.Port = 6917
	f := newFixture(t, c)
	f.reconcile()

	svc := &v1.Service{}
	require.NoError(t, f.kube.Get(context.Background(), client.ObjectKey{Namespace: "hpc", Name: "slurm-controller"}, svc))
	assert.Equal(t, v1.ClusterIPNone, svc.Spec.ClusterIP)
	assert.Equal(t, int32(6917), svc.Spec.Ports[0].Port)
	assert.True(t, metav1.IsControlledBy(svc, f.cluster()))

	sts := f.statefulSet()
	assert.True(t, metav1.IsControlledBy(sts, f.cluster()))
	// Pod 0 of the headless Service is SlurmctldHost: slurm-controller-0(slurm-controller.hpc.svc).
	assert.Equal(t, "slurm-controller", sts.Spec.ServiceName)
	assert.Equal(t, int32(1), *sts.Spec.Replicas)
	assert.Equal(t, svc.Spec.Selector, sts.Spec.Template.Labels)
	pod := sts.Spec.Template.Spec
	require.Len(t, pod.Containers, 1)
	ctr := pod.Containers[0]
	assert.Equal(t, DefaultControllerImage, ctr.Image)
	assert.Equal(t, int32(6917), ctr.ReadinessProbe.TCPSocket.Port.IntVal)
	assert.Equal(t, int64(SlurmUID), *pod.SecurityContext.RunAsUser)
	// The configuration and both keys in /etc/slurm; the kept configuration beside it; the
	// state on the claim.
	proj := pod.Volumes[0].Projected
	require.NotNil(t, proj)
	assert.Equal(t, "slurm-slurm-config", proj.Sources[0].ConfigMap.Name)
	assert.Equal(t, slurmKeyProjections(f.cluster()), proj.Sources[1:3], "the auth/slurm key and its optional key set")
	assert.Equal(t, "slurm-jwt-key", proj.Sources[3].Secret.Name)
	assert.Equal(t, "slurm-slurm-config-applied", pod.Volumes[1].ConfigMap.Name)
	assert.True(t, *pod.Volumes[1].ConfigMap.Optional, "none before slurmctld ran a configuration")
	assert.Contains(t, ctr.VolumeMounts, v1.VolumeMount{Name: "applied-config", MountPath: "/etc/slurm-applied", ReadOnly: true})
	// slurmctld under its script, which reports on the pod as the pod's ServiceAccount,
	// allowed to read and annotate that pod alone.
	assert.Equal(t, []string{"/bin/sh", "-c", slurmctldScript(podSlurmctldPaths), "slurmctld"}, ctr.Command)
	assert.Empty(t, ctr.Args, "daemonized, not -D")
	assert.Equal(t, "slurm-controller", pod.ServiceAccountName)
	assert.Equal(t, "metadata.name", ctr.Env[0].ValueFrom.FieldRef.FieldPath)
	assert.Empty(t, sts.Spec.Template.Annotations, "no configuration hash: a new configuration is no restart")
	sa := &v1.ServiceAccount{}
	require.NoError(t, f.kube.Get(context.Background(), client.ObjectKey{Namespace: "hpc", Name: "slurm-controller"}, sa))
	assert.True(t, metav1.IsControlledBy(sa, f.cluster()))
	role := &rbacv1.Role{}
	require.NoError(t, f.kube.Get(context.Background(), client.ObjectKey{Namespace: "hpc", Name: "slurm-controller"}, role))
	assert.Equal(t, []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"},
		ResourceNames: []string{"slurm-controller-0"}, Verbs: []string{"get", "patch"}}}, role.Rules)
	binding := &rbacv1.RoleBinding{}
	require.NoError(t, f.kube.Get(context.Background(), client.ObjectKey{Namespace: "hpc", Name: "slurm-controller"}, binding))
	assert.Equal(t, "slurm-controller", binding.RoleRef.Name)
	assert.Equal(t, []rbacv1.Subject{{Kind: "ServiceAccount", Name: "slurm-controller", Namespace: "hpc"}}, binding.Subjects)
	assert.Equal(t, "slurm", binding.Labels[wellknown.SlurmClusterLabel], "labelled for the controller's cache")
	require.Len(t, sts.Spec.VolumeClaimTemplates, 1)
	assert.Equal(t, "1Gi", sts.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests.Storage().String())
	assert.Contains(t, ctr.VolumeMounts, v1.VolumeMount{Name: "state", MountPath: "/var/spool/slurmctld"})

	cond := condition(f.cluster(), slurmv1.ConditionControllerReady)
	assert.Equal(t, metav1.ConditionFalse, cond.Status)
	assert.Equal(t, ReasonControllerWaiting, cond.Reason)

	// The pod becomes ready: the condition says so, with one event.
	f.events()
	sts.Status.ReadyReplicas, sts.Status.Replicas = 1, 1
	require.NoError(t, f.kube.Status().Update(context.Background(), sts))
	f.reconcile()
	cond = condition(f.cluster(), slurmv1.ConditionControllerReady)
	assert.Equal(t, metav1.ConditionTrue, cond.Status, cond.Message)
	assert.Equal(t, []string{"Normal SlurmControllerReady slurmctld pod slurm-controller-0 is ready"}, f.events())

	// Level-based: nothing changes on another pass.
	rv := f.statefulSet().ResourceVersion
	f.reconcile()
	assert.Equal(t, rv, f.statefulSet().ResourceVersion)
	assert.Empty(t, f.events())

	// It stops being ready: a warning.
	sts = f.statefulSet()
	sts.Status.ReadyReplicas = 0
	require.NoError(t, f.kube.Status().Update(context.Background(), sts))
	f.reconcile()
	assert.Equal(t, metav1.ConditionFalse, condition(f.cluster(), slurmv1.ConditionControllerReady).Status)
	assert.Equal(t, []string{"Warning SlurmControllerNotReady slurmctld pod slurm-controller-0 is no longer ready"}, f.events())
}

func TestControllerWaitsForKeys(t *testing.T) {
	c := newCluster()
	c.Spec.Auth.JWTKeyRef = &v1.SecretKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "absent"}, Key: "k"}
	f := newFixture(t, c)
	f.reconcile()
	err := f.kube.Get(context.Background(), client.ObjectKey{Namespace: "hpc", Name: "slurm-controller"}, &appsv1.StatefulSet{})
	assert.True(t, client.IgnoreNotFound(err) == nil && err != nil, "no StatefulSet without the keys: %v", err)
	cond := condition(f.cluster(), slurmv1.ConditionControllerReady)
	assert.Equal(t, ReasonControllerWaiting, cond.Reason)
	assert.Contains(t, cond.Message, "KeysReady")
}

func TestControllerBadStateSize(t *testing.T) {
	c := newCluster()
	c.Spec.Controller.StateStorage.Size = "lots"
	sts := &appsv1.StatefulSet{}
	assert.ErrorContains(t, controllerStatefulSet(c, sts), `controller.stateStorage.size "lots"`)
}

// A new configuration reaches slurmctld in place: ConfigApplied and lastReconfigureTime
// follow what slurmctld's script reports on the ready pod, which stays the same pod.
func TestConfigAppliedInPlace(t *testing.T) {
	f := newFixture(t, newCluster())
	f.reconcile()
	hash := f.cluster().Status.ConfigHash
	require.NotEmpty(t, hash)
	assert.Equal(t, metav1.ConditionFalse, condition(f.cluster(), slurmv1.ConditionConfigApplied).Status)

	f.controllerPodOn(hash, true, runningCS)
	f.events()
	f.reconcile()
	c := f.cluster()
	assert.Equal(t, metav1.ConditionTrue, condition(c, slurmv1.ConditionConfigApplied).Status)
	assert.Equal(t, hash, c.Status.AppliedConfigHash)
	assert.Nil(t, c.Status.LastReconfigureTime, "the first configuration is no reconfigure")
	assert.Contains(t, f.events(), "Normal SlurmConfigApplied slurmctld (pod slurm-controller-0) runs configuration "+hash+` (was "")`)

	sts := f.statefulSet().ResourceVersion
	f.update(func(c *slurmv1.SlurmCluster) { c.Spec.Partitions[0].MaxTime = "120" })
	f.reconcile()
	newHash := f.cluster().Status.ConfigHash
	require.NotEqual(t, hash, newHash)
	assert.Equal(t, sts, f.statefulSet().ResourceVersion, "the StatefulSet is not touched")
	cond := condition(f.cluster(), slurmv1.ConditionConfigApplied)
	assert.Equal(t, metav1.ConditionFalse, cond.Status)
	assert.Equal(t, "slurmctld runs configuration "+hash+"; it is told to read "+newHash, cond.Message)

	f.controllerPodOn(newHash, true, runningCS)
	f.events()
	f.reconcile()
	c = f.cluster()
	assert.Equal(t, metav1.ConditionTrue, condition(c, slurmv1.ConditionConfigApplied).Status)
	assert.Equal(t, newHash, c.Status.AppliedConfigHash)
	assert.NotNil(t, c.Status.LastReconfigureTime)
	assert.Equal(t, []string{"Normal SlurmConfigApplied slurmctld (pod slurm-controller-0) runs configuration " + newHash + ` (was "` + hash + `")`}, f.events())
}
