package slurmcluster

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	slurmv1 "github.com/kubeslurm/kubeslurm/api/v1alpha1"
	"github.com/kubeslurm/kubeslurm/pkg/slurmconf"
)

const (
	// DefaultLoginImage runs sackd and has Slurm's commands: deploy/images/Dockerfile.login.
	DefaultLoginImage = "kubeslurm/login:26.05"

	componentLogin = "login"
	loginSetLabel  = "slurm.kubeslurm.io/loginset"
	// sssdConfPath is where a LoginSet's sssd.conf is mounted, for an image that runs sssd.
	sssdConfPath = "/etc/sssd/sssd.conf"
	// LoginSackdPort is where sackd listens for slurmctld's configuration updates: not
	// slurmd's 6818 (sackd's default), so a login pod and a worker can share a host network
	// (hostNetwork pods, or the local pod runner).
	LoginSackdPort = 6828
)

// LoginName names a LoginSet's Deployment.
func LoginName(c *slurmv1.SlurmCluster, set string) string { return c.Name + "-login-" + set }

// loginDeployment fills a LoginSet's Deployment: pods where users run sbatch, squeue and
// the rest (kubectl exec). Each runs sackd, configless: it fetches slurm.conf from slurmctld
// and hands Slurm's commands their auth/slurm credentials, so the pod holds the key but no
// configuration of its own. A pod is ready once `sinfo` answers through it.
func loginDeployment(c *slurmv1.SlurmCluster, set *slurmv1.LoginSetSpec, d *appsv1.Deployment) {
	labels := componentLabels(c, componentLogin)
	labels[loginSetLabel] = set.Name
	image, replicas := set.Image, set.Replicas
	if image == "" {
		image = DefaultLoginImage
	}
	if replicas == nil {
		replicas = ptr[int32](1)
	}
	_, addr := slurmconf.ControllerHost(c)
	keySecret, key := SlurmKeySecret(c)
	d.Labels = labels
	d.Spec.Replicas = replicas
	d.Spec.Selector = &metav1.LabelSelector{MatchLabels: labels}
	d.Spec.Template.Labels = labels
	d.Spec.Template.Spec = v1.PodSpec{
		// sackd reads the key as root; users come in with kubectl exec.
		SecurityContext: &v1.PodSecurityContext{RunAsUser: ptr[int64](0), RunAsGroup: ptr[int64](0)},
		Containers: []v1.Container{{
			Name:  componentLogin,
			Image: image,
			Args: []string{"-D", "--conf-server", fmt.Sprintf("%s:%d", addr, controllerPort(c)),
				"--key-file", "/etc/slurm-key/" + SlurmKeyName},
			// sackd 26.05 takes its port from the environment (its -p is documented, not parsed).
			Env:   []v1.EnvVar{{Name: "SACKD_PORT", Value: fmt.Sprint(LoginSackdPort)}},
			Ports: []v1.ContainerPort{{Name: "sackd", ContainerPort: LoginSackdPort}},
			ReadinessProbe: &v1.Probe{
				ProbeHandler:   v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"/usr/bin/sinfo", "--noheader", "--summarize"}}},
				PeriodSeconds:  5,
				TimeoutSeconds: 10,
			},
			VolumeMounts: []v1.VolumeMount{
				{Name: "key", MountPath: "/etc/slurm-key", ReadOnly: true},
				// sackd's fetched configuration and its socket, which the commands look for.
				{Name: "run", MountPath: "/run/slurm"},
				// Empty: a slurm.conf in the image would win over sackd's.
				{Name: "etc", MountPath: slurmconf.ConfigDir},
			},
		}},
		Volumes: []v1.Volume{
			{Name: "key", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{
				SecretName: keySecret, DefaultMode: ptr[int32](0o400), Items: []v1.KeyToPath{{Key: key, Path: SlurmKeyName}},
			}}},
			{Name: "run", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
			{Name: "etc", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
		},
	}
	if ref := set.SSSDConfRef; ref != nil {
		pod := &d.Spec.Template.Spec
		pod.Volumes = append(pod.Volumes, v1.Volume{Name: "sssd", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{
			SecretName: ref.Name, DefaultMode: ptr[int32](0o600), Items: []v1.KeyToPath{{Key: ref.Key, Path: "sssd.conf"}},
		}}})
		pod.Containers[0].VolumeMounts = append(pod.Containers[0].VolumeMounts,
			v1.VolumeMount{Name: "sssd", MountPath: sssdConfPath, SubPath: "sssd.conf", ReadOnly: true})
	}
}

// ensureLogins runs a Deployment per LoginSet once slurmctld runs, and deletes those of
// LoginSets that are gone.
func (r *Reconciler) ensureLogins(ctx context.Context, c *slurmv1.SlurmCluster, status *slurmv1.SlurmClusterStatus) error {
	want := map[string]bool{}
	if keysReady(status) && status.ConfigMap != "" {
		for i := range c.Spec.LoginSets {
			set := &c.Spec.LoginSets[i]
			d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: LoginName(c, set.Name)}}
			want[d.Name] = true
			if _, err := controllerutil.CreateOrUpdate(ctx, r.Client, d, func() error {
				loginDeployment(c, set, d)
				return controllerutil.SetControllerReference(c, d, r.Client.Scheme())
			}); err != nil {
				return fmt.Errorf("login Deployment %s: %w", d.Name, err)
			}
		}
	}
	list := &appsv1.DeploymentList{}
	if err := r.Client.List(ctx, list, client.InNamespace(c.Namespace), client.MatchingLabels(componentLabels(c, componentLogin))); err != nil {
		return fmt.Errorf("listing login Deployments: %w", err)
	}
	for i := range list.Items {
		if d := &list.Items[i]; !want[d.Name] && metav1.IsControlledBy(d, c) {
			if err := r.deleteOwned(ctx, c, d); err != nil {
				return err
			}
		}
	}
	return nil
}
