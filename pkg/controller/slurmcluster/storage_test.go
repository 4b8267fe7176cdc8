package slurmcluster

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slurmv1 "github.com/kubeslurm/kubeslurm/api/v1alpha1"
)

// homes is a shared filesystem of the users: a claim mounted at /home.
func homes() slurmv1.PodStorage {
	return slurmv1.PodStorage{
		Volumes: []v1.Volume{{Name: "home", VolumeSource: v1.VolumeSource{
			PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "home"}}}},
		VolumeMounts: []v1.VolumeMount{{Name: "home", MountPath: "/home"}},
	}
}

func mountsOf(c v1.Container) map[string]string {
	out := map[string]string{}
	for _, m := range c.VolumeMounts {
		out[m.MountPath] = m.Name
	}
	return out
}

// A NodeSet's and a LoginSet's storage reach their pods: the workers' slurmd container
// (where jobs run) and the login and sshd containers (where users are).
func TestStorageReachesWorkersAndLogins(t *testing.T) {
	f := newWorkersFixture(t, 1)
	f.update(func(c *slurmv1.SlurmCluster) {
		c.Spec.NodeSets[0].PodStorage = homes()
		c.Spec.LoginSets = []slurmv1.LoginSetSpec{{Name: "users", PodStorage: homes(),
			SSSDConfRef: &v1.SecretKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "sssd"}, Key: "conf"},
			SSH:         &slurmv1.LoginSSHSpec{}}}
	})
	f.reconcile()
	f.controllerUp() // slurmctld restarted with the login set's configuration
	f.reconcile()    // the worker is replaced: the old pod goes, then the new one comes
	f.reconcile()
	w := f.workers()["slurm-r-0"]
	require.NotNil(t, w)
	assert.Equal(t, "home", mountsOf(w.Spec.Containers[0])["/home"])
	assert.Contains(t, w.Spec.Volumes, homes().Volumes[0])

	d := &appsv1.Deployment{}
	require.NoError(t, f.kube.Get(context.Background(), client.ObjectKey{Namespace: "hpc", Name: "slurm-login-users"}, d))
	spec := d.Spec.Template.Spec
	assert.Contains(t, spec.Volumes, homes().Volumes[0])
	for _, ctr := range spec.Containers {
		want := map[string]string{"login": "home", "sshd": "home", "sssd": ""}[ctr.Name]
		assert.Equal(t, want, mountsOf(ctr)["/home"], ctr.Name)
	}
}

// Storage that clashes with kubeslurm's own volumes, or mounts a volume not given, is
// refused in ConfigValid with an event, and the running pods are left as they are.
func TestStorageClashRefused(t *testing.T) {
	for _, tc := range []struct {
		name    string
		storage slurmv1.PodStorage
		want    string
	}{
		{"volume name", slurmv1.PodStorage{Volumes: []v1.Volume{{Name: "key"}}},
			`nodeSets[r]: volume "key": the name is kubeslurm's own`},
		{"mount path", slurmv1.PodStorage{Volumes: homes().Volumes, VolumeMounts: []v1.VolumeMount{{Name: "home", MountPath: "/etc/slurm"}}},
			`nodeSets[r]: volumeMount /etc/slurm: kubeslurm mounts its own volume there`},
		{"login volume name", slurmv1.PodStorage{Volumes: []v1.Volume{{Name: "ssh-host-key"}}},
			`loginSets[users]: volume "ssh-host-key": the name is kubeslurm's own`},
		{"login mount path", slurmv1.PodStorage{Volumes: homes().Volumes, VolumeMounts: []v1.VolumeMount{{Name: "home", MountPath: "/var/lib/sss/pipes"}}},
			`loginSets[users]: volumeMount /var/lib/sss/pipes: kubeslurm mounts its own volume there`},
		{"unknown volume", slurmv1.PodStorage{VolumeMounts: []v1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}},
			`nodeSets[r]: volumeMount /scratch: no volume "scratch" among the volumes`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newWorkersFixture(t, 1)
			before := f.workers()["slurm-r-0"]
			require.NotNil(t, before)
			f.events()
			f.update(func(c *slurmv1.SlurmCluster) {
				if strings.HasPrefix(tc.name, "login") {
					c.Spec.LoginSets = []slurmv1.LoginSetSpec{{Name: "users", PodStorage: tc.storage, SSH: &slurmv1.LoginSSHSpec{},
						SSSDConfRef: &v1.SecretKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "sssd"}, Key: "conf"}}}
					return
				}
				c.Spec.NodeSets[0].PodStorage = tc.storage
			})
			f.reconcile()
			cond := condition(f.cluster(), slurmv1.ConditionConfigValid)
			assert.Equal(t, metav1.ConditionFalse, cond.Status)
			assert.Contains(t, cond.Message, tc.want)
			assert.Contains(t, f.events(), "Warning SlurmConfigRefused "+cond.Message)
			after := f.workers()["slurm-r-0"]
			require.NotNil(t, after, "the worker is kept")
			assert.Equal(t, before.ResourceVersion, after.ResourceVersion, "and not touched")
		})
	}
}
