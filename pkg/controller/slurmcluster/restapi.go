package slurmcluster

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	slurmv1 "github.com/kubeslurm/kubeslurm/api/v1alpha1"
	"github.com/kubeslurm/kubeslurm/pkg/slurmconf"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

const (
	// DefaultRestAPIImage runs slurmrestd: deploy/images/Dockerfile.slurmrestd.
	DefaultRestAPIImage = "kubeslurm/slurmrestd:26.05"
	// DefaultRestAPIPort is slurmrestd's port.
	DefaultRestAPIPort = 6820
	// restAPIUID: slurmrestd refuses to run as root or as SlurmUser; any other user does.
	restAPIUID = 65532

	componentSlurmrestd = "slurmrestd"
)

// RestAPIName names slurmrestd's Deployment and Service.
func RestAPIName(c *slurmv1.SlurmCluster) string { return c.Name + "-restapi" }

func restAPIPort(c *slurmv1.SlurmCluster) int32 {
	if a := c.Spec.RestAPI; a != nil && a.Port != 0 {
		return a.Port
	}
	return DefaultRestAPIPort
}

// restAPIDeployment fills slurmrestd's Deployment. slurmrestd takes each client's JWT and
// passes it on to slurmctld (SLURM_JWT=daemon, rest_auth/jwt), which checks it: slurmrestd
// itself needs only slurm.conf, not the keys.
func restAPIDeployment(c *slurmv1.SlurmCluster, configMap, configHash string, d *appsv1.Deployment) {
	labels := componentLabels(c, componentSlurmrestd)
	image, replicas := c.Spec.RestAPI.Image, c.Spec.RestAPI.Replicas
	if image == "" {
		image = DefaultRestAPIImage
	}
	if replicas == nil {
		replicas = ptr[int32](1)
	}
	plugins := "openapi/slurmctld"
	if c.Spec.Accounting != nil {
		plugins += ",openapi/slurmdbd"
	}
	port := restAPIPort(c)
	d.Labels = labels
	d.Spec.Replicas = replicas
	d.Spec.Selector = &metav1.LabelSelector{MatchLabels: labels}
	d.Spec.Template.Labels = labels
	// slurmrestd reads slurm.conf when it starts: a new configuration rolls it.
	d.Spec.Template.Annotations = map[string]string{wellknown.SlurmConfigHashAnnotation: configHash}
	d.Spec.Template.Spec = v1.PodSpec{
		SecurityContext: &v1.PodSecurityContext{
			RunAsUser: ptr[int64](restAPIUID), RunAsGroup: ptr[int64](restAPIUID), RunAsNonRoot: ptr(true),
		},
		Containers: []v1.Container{{
			Name:  componentSlurmrestd,
			Image: image,
			Args:  []string{"-s", plugins, "-a", "rest_auth/jwt", fmt.Sprintf("0.0.0.0:%d", port)},
			Env:   []v1.EnvVar{{Name: "SLURM_JWT", Value: "daemon"}},
			Ports: []v1.ContainerPort{{Name: componentSlurmrestd, ContainerPort: port}},
			ReadinessProbe: &v1.Probe{
				ProbeHandler:  v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(port)}},
				PeriodSeconds: 2,
			},
			VolumeMounts: []v1.VolumeMount{{Name: configVolume, MountPath: slurmconf.ConfigDir, ReadOnly: true}},
		}},
		Volumes: []v1.Volume{{Name: configVolume, VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
			LocalObjectReference: v1.LocalObjectReference{Name: configMap},
		}}}},
	}
}

// ensureRestAPI runs slurmrestd while spec.restApi is set (and slurmctld runs), and
// removes it when the section goes.
func (r *Reconciler) ensureRestAPI(ctx context.Context, c *slurmv1.SlurmCluster, status *slurmv1.SlurmClusterStatus) error {
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: RestAPIName(c)}}
	svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: RestAPIName(c)}}
	if c.Spec.RestAPI == nil {
		for _, o := range []client.Object{d, svc} {
			if err := r.deleteOwned(ctx, c, o); err != nil {
				return err
			}
		}
		return nil
	}
	if status.ConfigMap == "" {
		return nil
	}
	if _, err := controllerutil.CreateOrUpdate(ctx, r.Client, svc, func() error {
		svc.Labels = componentLabels(c, componentSlurmrestd)
		svc.Spec.Selector = componentLabels(c, componentSlurmrestd)
		svc.Spec.Ports = []v1.ServicePort{{Name: componentSlurmrestd, Port: restAPIPort(c), TargetPort: intstr.FromInt32(restAPIPort(c))}}
		return controllerutil.SetControllerReference(c, svc, r.Client.Scheme())
	}); err != nil {
		return fmt.Errorf("slurmrestd Service %s: %w", svc.Name, err)
	}
	// The slurm.conf slurmctld runs: the kept one while it rejects the rendered one.
	configMap, hash, err := r.servedConfig(ctx, c, status)
	if err != nil {
		return err
	}
	if _, err := controllerutil.CreateOrUpdate(ctx, r.Client, d, func() error {
		restAPIDeployment(c, configMap, hash, d)
		return controllerutil.SetControllerReference(c, d, r.Client.Scheme())
	}); err != nil {
		return fmt.Errorf("slurmrestd Deployment %s: %w", d.Name, err)
	}
	return nil
}

// deleteOwned deletes o if it exists and is the cluster's.
func (r *Reconciler) deleteOwned(ctx context.Context, c *slurmv1.SlurmCluster, o client.Object) error {
	err := r.Client.Get(ctx, client.ObjectKeyFromObject(o), o)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return err
	case !metav1.IsControlledBy(o, c):
		return nil
	}
	if err := r.Client.Delete(ctx, o); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting %s: %w", o.GetName(), err)
	}
	return nil
}
