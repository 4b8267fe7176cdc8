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
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

func TestRestAPIFollowsItsSection(t *testing.T) {
	c := newCluster()
	c.Spec.RestAPI = &slurmv1.RestAPISpec{Port: 6920}
	f := newFixture(t, c)
	f.reconcile()
	key := client.ObjectKey{Namespace: "hpc", Name: "slurm-restapi"}
	d := &appsv1.Deployment{}
	require.NoError(t, f.kube.Get(context.Background(), key, d))
	assert.True(t, metav1.IsControlledBy(d, f.cluster()))
	pod := d.Spec.Template.Spec
	ctr := pod.Containers[0]
	assert.Equal(t, DefaultRestAPIImage, ctr.Image)
	assert.Equal(t, []string{"-s", "openapi/slurmctld", "-a", "rest_auth/jwt", "0.0.0.0:6920"}, ctr.Args)
	assert.Equal(t, []v1.EnvVar{{Name: "SLURM_JWT", Value: "daemon"}}, ctr.Env)
	assert.NotEqual(t, int64(0), *pod.SecurityContext.RunAsUser, "slurmrestd refuses root")
	assert.NotEqual(t, int64(SlurmUID), *pod.SecurityContext.RunAsUser, "slurmrestd refuses SlurmUser")
	assert.Equal(t, "slurm-slurm-config", pod.Volumes[0].ConfigMap.Name, "slurm.conf only: no key")
	assert.Equal(t, f.cluster().Status.ConfigHash, d.Spec.Template.Annotations[wellknown.SlurmConfigHashAnnotation])
	svc := &v1.Service{}
	require.NoError(t, f.kube.Get(context.Background(), key, svc))
	assert.Equal(t, int32(6920), svc.Spec.Ports[0].Port)

	// Accounting adds slurmdbd's endpoints.
	f.update(func(c *slurmv1.SlurmCluster) {
		c.Spec.Accounting = accountingSpec()
	})
	f.reconcile()
	require.NoError(t, f.kube.Get(context.Background(), key, d))
	assert.Equal(t, "openapi/slurmctld,openapi/slurmdbd", d.Spec.Template.Spec.Containers[0].Args[1])

	// Removing the section removes slurmrestd.
	f.update(func(c *slurmv1.SlurmCluster) { c.Spec.RestAPI = nil })
	f.reconcile()
	assert.True(t, apierrors.IsNotFound(f.kube.Get(context.Background(), key, &appsv1.Deployment{})))
	assert.True(t, apierrors.IsNotFound(f.kube.Get(context.Background(), key, &v1.Service{})))
}
