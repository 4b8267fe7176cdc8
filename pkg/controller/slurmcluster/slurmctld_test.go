package slurmcluster

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
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
	// The configuration and both keys in /etc/slurm; the state on the claim.
	proj := pod.Volumes[0].Projected
	require.NotNil(t, proj)
	assert.Equal(t, "slurm-slurm-config", proj.Sources[0].ConfigMap.Name)
	assert.Equal(t, slurmKeyProjections(f.cluster()), proj.Sources[1:3], "the auth/slurm key and its optional key set")
	assert.Equal(t, "slurm-jwt-key", proj.Sources[3].Secret.Name)
	// slurmctld under the script that reloads changed keys.
	assert.Equal(t, []string{"/bin/sh", "-c", supervisedScript("/etc/slurm", "hup", "/usr/sbin/slurmctld"), "slurmctld"}, ctr.Command)
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
	assert.ErrorContains(t, controllerStatefulSet(c, "cm", "h", sts), `controller.stateStorage.size "lots"`)
}

// A new configuration restarts slurmctld through its pod template; ConfigApplied and
// lastReconfigureTime follow the hash the running pod started with.
func TestConfigAppliedByRestart(t *testing.T) {
	f := newFixture(t, newCluster())
	f.reconcile()
	hash := f.cluster().Status.ConfigHash
	require.NotEmpty(t, hash)
	assert.Equal(t, hash, f.statefulSet().Spec.Template.Annotations[wellknown.SlurmConfigHashAnnotation])
	assert.Equal(t, metav1.ConditionFalse, condition(f.cluster(), slurmv1.ConditionConfigApplied).Status)

	// The StatefulSet's pod, as kube-controller-manager makes it from the template, ready.
	runPod := func(h string) {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "hpc", Name: "slurm-controller-0",
			Annotations: map[string]string{wellknown.SlurmConfigHashAnnotation: h}}}
		_ = f.kube.Delete(context.Background(), p)
		require.NoError(t, f.kube.Create(context.Background(), p))
		f.setReady(p, true)
	}
	runPod(hash)
	f.events()
	f.reconcile()
	c := f.cluster()
	assert.Equal(t, metav1.ConditionTrue, condition(c, slurmv1.ConditionConfigApplied).Status)
	assert.Equal(t, hash, c.Status.AppliedConfigHash)
	assert.Nil(t, c.Status.LastReconfigureTime, "the first configuration is no reconfigure")
	assert.Contains(t, f.events(), "Normal SlurmConfigApplied slurmctld pod slurm-controller-0 runs configuration "+hash+` (was "")`)

	f.update(func(c *slurmv1.SlurmCluster) { c.Spec.Partitions[0].MaxTime = "120" })
	f.reconcile()
	newHash := f.cluster().Status.ConfigHash
	require.NotEqual(t, hash, newHash)
	assert.Equal(t, newHash, f.statefulSet().Spec.Template.Annotations[wellknown.SlurmConfigHashAnnotation], "the template asks for a restart")
	cond := condition(f.cluster(), slurmv1.ConditionConfigApplied)
	assert.Equal(t, metav1.ConditionFalse, cond.Status)
	assert.Equal(t, "slurmctld runs configuration "+hash+"; restarting it with "+newHash, cond.Message)

	runPod(newHash)
	f.events()
	f.reconcile()
	c = f.cluster()
	assert.Equal(t, metav1.ConditionTrue, condition(c, slurmv1.ConditionConfigApplied).Status)
	assert.Equal(t, newHash, c.Status.AppliedConfigHash)
	assert.NotNil(t, c.Status.LastReconfigureTime)
	assert.Equal(t, []string{"Normal SlurmConfigApplied slurmctld pod slurm-controller-0 runs configuration " + newHash + ` (was "` + hash + `")`}, f.events())
}
