package slurmcluster

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slurmv1 "github.com/kubeslurm/kubeslurm/api/v1alpha1"
)

func TestLoginSetsFollowTheSpec(t *testing.T) {
	c := newCluster()
	c.Spec.LoginSets = []slurmv1.LoginSetSpec{
		{Name: "users"},
		{Name: "ldap", Replicas: ptr[int32](2), SSSDConfRef: &v1.SecretKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "sssd"}, Key: "conf"}},
	}
	f := newFixture(t, c)
	f.reconcile()
	get := func(name string) (*appsv1.Deployment, error) {
		d := &appsv1.Deployment{}
		return d, f.kube.Get(context.Background(), client.ObjectKey{Namespace: "hpc", Name: name}, d)
	}
	users, err := get("slurm-login-users")
	require.NoError(t, err)
	assert.True(t, metav1.IsControlledBy(users, f.cluster()))
	assert.Equal(t, int32(1), *users.Spec.Replicas)
	ctr := users.Spec.Template.Spec.Containers[0]
	assert.Equal(t, DefaultLoginImage, ctr.Image)
	assert.Equal(t, []string{"-D", "--conf-server", "slurm-controller.hpc.svc:6817", "--key-file", "/etc/slurm-key/slurm.key"}, ctr.Args)
	assert.Equal(t, []v1.EnvVar{{Name: "SACKD_PORT", Value: "6828"}}, ctr.Env)
	assert.Equal(t, []string{"/usr/bin/sinfo", "--noheader", "--summarize"}, ctr.ReadinessProbe.Exec.Command)
	assert.Len(t, users.Spec.Template.Spec.Volumes, 3, "the key, /run/slurm and an empty /etc/slurm: no sssd.conf asked for")

	ldap, err := get("slurm-login-ldap")
	require.NoError(t, err)
	assert.Equal(t, int32(2), *ldap.Spec.Replicas)
	assert.Equal(t, "sssd", ldap.Spec.Template.Spec.Volumes[3].Secret.SecretName)
	assert.Contains(t, ldap.Spec.Template.Spec.Containers[0].VolumeMounts,
		v1.VolumeMount{Name: "sssd", MountPath: "/etc/sssd/sssd.conf", SubPath: "sssd.conf", ReadOnly: true})

	// A LoginSet removed from the spec loses its Deployment.
	f.update(func(c *slurmv1.SlurmCluster) { c.Spec.LoginSets = c.Spec.LoginSets[:1] })
	f.reconcile()
	_, err = get("slurm-login-ldap")
	assert.True(t, apierrors.IsNotFound(err), "%v", err)
	_, err = get("slurm-login-users")
	assert.NoError(t, err)
}
