package slurmcluster

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	slurmv1 "github.com/kubeslurm/kubeslurm/api/v1alpha1"
	"github.com/kubeslurm/kubeslurm/pkg/slurmconf"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

const (
	// DefaultControllerImage runs slurmctld: deploy/images/Dockerfile.slurmctld, Debian's
	// Slurm 26.05 packages.
	DefaultControllerImage = "kubeslurm/slurmctld:26.05"
	// SlurmUID is the slurm user of Debian's packages (a fixed uid there), SlurmUser of
	// the rendered slurm.conf: slurmctld runs as it and owns its state.
	SlurmUID = 64030
	// DefaultStateSize of slurmctld's state claim.
	DefaultStateSize = "1Gi"

	componentSlurmctld = "slurmctld"
	stateVolume        = "state"
	configVolume       = "config"

	ReasonControllerRunning = "Running"
	ReasonControllerWaiting = "Waiting"
)

// ControllerName names slurmctld's StatefulSet and its headless Service, whose pod 0 is
// slurm.conf's SlurmctldHost (slurmconf.ControllerHost).
func ControllerName(c *slurmv1.SlurmCluster) string { return c.Name + "-controller" }

// controllerPodName is slurmctld's pod: the StatefulSet's pod 0, the host slurm.conf names.
func controllerPodName(c *slurmv1.SlurmCluster) string {
	host, _ := slurmconf.ControllerHost(c)
	return host
}

func controllerPort(c *slurmv1.SlurmCluster) int32 {
	if p := c.Spec.Controller.Port; p != 0 {
		return p
	}
	return slurmconf.DefaultPort
}

func componentLabels(c *slurmv1.SlurmCluster, component string) map[string]string {
	return map[string]string{wellknown.SlurmClusterLabel: c.Name, wellknown.SlurmComponentLabel: component}
}

// ConfigVolume is the volume every Slurm daemon and client mounts at /etc/slurm: the rendered
// files and both keys, readable by the slurm group alone.
func ConfigVolume(c *slurmv1.SlurmCluster) v1.Volume { return configVolumeOf(c, ConfigMapName(c)) }

// configVolumeOf is ConfigVolume with the files of ConfigMap cm (slurmctld's may be the kept
// one, configapply.go).
func configVolumeOf(c *slurmv1.SlurmCluster, cm string) v1.Volume {
	jwtSecret, jwtKey := JWTKeySecret(c)
	sources := []v1.VolumeProjection{{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: cm}}}}
	sources = append(sources, slurmKeyProjections(c)...)
	sources = append(sources, v1.VolumeProjection{Secret: &v1.SecretProjection{LocalObjectReference: v1.LocalObjectReference{Name: jwtSecret},
		Items: []v1.KeyToPath{{Key: jwtKey, Path: JWTKeyName}}}})
	return v1.Volume{Name: configVolume, VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{
		DefaultMode: ptr[int32](0o440), Sources: sources,
	}}}
}

// SlurmPodSecurity runs a daemon as the slurm user, with the mounted keys readable by its group.
func SlurmPodSecurity() *v1.PodSecurityContext {
	return &v1.PodSecurityContext{
		RunAsUser: ptr[int64](SlurmUID), RunAsGroup: ptr[int64](SlurmUID), FSGroup: ptr[int64](SlurmUID),
		RunAsNonRoot: ptr(true),
	}
}

// controllerService is slurmctld's headless Service: its DNS name is SlurmctldHost's
// address, and slurmd and clients find slurmctld by it before it is ready too.
func controllerService(c *slurmv1.SlurmCluster, svc *v1.Service) {
	svc.Labels = componentLabels(c, componentSlurmctld)
	svc.Spec.ClusterIP = v1.ClusterIPNone
	svc.Spec.PublishNotReadyAddresses = true
	svc.Spec.Selector = componentLabels(c, componentSlurmctld)
	svc.Spec.Ports = []v1.ServicePort{{Name: componentSlurmctld, Port: controllerPort(c), TargetPort: intstr.FromInt32(controllerPort(c))}}
}

// controllerStatefulSet fills slurmctld's StatefulSet: one pod, its state on a claim that
// outlives the pod (a new pod after a kill finds the jobs it knew). The pod template carries
// the configuration's hash, so a new configuration restarts slurmctld in place: it reads
// its state back, and running jobs keep running (slurmd runs them). configMap holds the
// files of configHash. The claim template is set on create only (it is immutable).
func controllerStatefulSet(c *slurmv1.SlurmCluster, configMap, configHash string, sts *appsv1.StatefulSet) error {
	labels := componentLabels(c, componentSlurmctld)
	image := c.Spec.Controller.Image
	if image == "" {
		image = DefaultControllerImage
	}
	port := controllerPort(c)
	sts.Labels = labels
	sts.Spec.Replicas = ptr[int32](1)
	sts.Spec.ServiceName = ControllerName(c)
	sts.Spec.Selector = &metav1.LabelSelector{MatchLabels: labels}
	sts.Spec.Template.Labels = labels
	sts.Spec.Template.Annotations = map[string]string{wellknown.SlurmConfigHashAnnotation: configHash}
	sts.Spec.Template.Spec = v1.PodSpec{
		SecurityContext: SlurmPodSecurity(),
		// slurmctld saves its state on SIGTERM.
		TerminationGracePeriodSeconds: ptr[int64](60),
		Containers: []v1.Container{{
			Name:  componentSlurmctld,
			Image: image,
			// Foreground, logging to stderr; it reads changed key files again (keyreload.go).
			Command:   []string{"/bin/sh", "-c", supervisedScript(slurmconf.ConfigDir, "hup", "/usr/sbin/slurmctld"), "slurmctld"},
			Args:      []string{"-D"},
			Ports:     []v1.ContainerPort{{Name: componentSlurmctld, ContainerPort: port}},
			Resources: c.Spec.Controller.Resources,
			// The end of its log becomes the termination message: why it refused a
			// configuration goes into the ConfigApplied condition.
			TerminationMessagePolicy: v1.TerminationMessageFallbackToLogsOnError,
			ReadinessProbe: &v1.Probe{
				ProbeHandler:  v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(port)}},
				PeriodSeconds: 2,
			},
			VolumeMounts: []v1.VolumeMount{
				{Name: configVolume, MountPath: slurmconf.ConfigDir, ReadOnly: true},
				{Name: stateVolume, MountPath: slurmconf.StateSaveDir},
				{Name: "run", MountPath: "/run/slurmctld"},
			},
		}},
		Volumes: []v1.Volume{
			configVolumeOf(c, configMap),
			{Name: "run", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
		},
	}
	if sts.CreationTimestamp.IsZero() {
		size := c.Spec.Controller.StateStorage.Size
		if size == "" {
			size = DefaultStateSize
		}
		q, err := resource.ParseQuantity(size)
		if err != nil {
			return fmt.Errorf("controller.stateStorage.size %q: %w", size, err)
		}
		sts.Spec.VolumeClaimTemplates = []v1.PersistentVolumeClaim{{
			ObjectMeta: metav1.ObjectMeta{Name: stateVolume, Labels: labels},
			Spec: v1.PersistentVolumeClaimSpec{
				AccessModes:      []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
				StorageClassName: c.Spec.Controller.StateStorage.StorageClassName,
				Resources:        v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: q}},
			},
		}}
	}
	return nil
}

// ensureController creates or updates slurmctld's Service and StatefulSet, once the
// configuration and keys it mounts exist, and sets ControllerReady from the StatefulSet and
// ConfigApplied from its pod (configapply.go). It reports whether to look again soon.
func (r *Reconciler) ensureController(ctx context.Context, c *slurmv1.SlurmCluster, status *slurmv1.SlurmClusterStatus) (bool, error) {
	if status.ConfigMap == "" || !keysReady(status) {
		setCondition(status, c.Generation, slurmv1.ConditionControllerReady, metav1.ConditionFalse, ReasonControllerWaiting,
			"slurmctld waits for its configuration and keys (conditions ConfigValid and KeysReady)")
		return false, nil
	}
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: ControllerName(c)}}
	err := r.Client.Get(ctx, client.ObjectKeyFromObject(sts), sts)
	if err != nil && !apierrors.IsNotFound(err) {
		return false, err
	}
	if apierrors.IsNotFound(err) && c.Spec.Accounting != nil && !meta.IsStatusConditionTrue(status.Conditions, slurmv1.ConditionAccountingReady) {
		// slurmctld's first start registers the cluster with slurmdbd (and takes its
		// cluster ID from it): it starts once slurmdbd runs. A running one is left alone.
		setCondition(status, c.Generation, slurmv1.ConditionControllerReady, metav1.ConditionFalse, ReasonControllerWaiting,
			"slurmctld waits for slurmdbd (condition AccountingReady)")
		return false, nil
	}
	svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: ControllerName(c)}}
	if _, err := controllerutil.CreateOrUpdate(ctx, r.Client, svc, func() error {
		controllerService(c, svc)
		return controllerutil.SetControllerReference(c, svc, r.Client.Scheme())
	}); err != nil {
		return false, fmt.Errorf("slurmctld Service %s: %w", svc.Name, err)
	}
	p, err := r.controllerPod(ctx, c)
	if err != nil {
		return false, err
	}
	rejectedOnStatefulSet(sts, status)
	if err := r.checkRejected(ctx, c, status, p); err != nil {
		return false, err
	}
	configMap, hash, err := r.servedConfig(ctx, c, status)
	if err != nil {
		return false, err
	}
	if _, err := controllerutil.CreateOrUpdate(ctx, r.Client, sts, func() error {
		if err := controllerStatefulSet(c, configMap, hash, sts); err != nil {
			return err
		}
		if status.RejectedConfigHash != "" {
			metav1.SetMetaDataAnnotation(&sts.ObjectMeta, wellknown.SlurmRejectedConfigHashAnnotation, status.RejectedConfigHash)
		} else {
			delete(sts.Annotations, wellknown.SlurmRejectedConfigHashAnnotation)
		}
		return controllerutil.SetControllerReference(c, sts, r.Client.Scheme())
	}); err != nil {
		return false, fmt.Errorf("slurmctld StatefulSet %s: %w", sts.Name, err)
	}
	if err := r.replaceFailedController(ctx, c, p, hash); err != nil {
		return false, err
	}
	poll, err := r.configApplied(ctx, c, status, p)
	if err != nil {
		return false, err
	}
	pod := controllerPodName(c)
	if sts.Status.ReadyReplicas > 0 {
		if setCondition(status, c.Generation, slurmv1.ConditionControllerReady, metav1.ConditionTrue, ReasonControllerRunning,
			fmt.Sprintf("slurmctld pod %s is ready on port %d", pod, controllerPort(c))) {
			r.Recorder.Eventf(c, nil, v1.EventTypeNormal, wellknown.EventSlurmControllerReady, "RunController", "slurmctld pod %s is ready", pod)
		}
		return poll, nil
	}
	wasReady := meta.IsStatusConditionTrue(status.Conditions, slurmv1.ConditionControllerReady)
	msg := fmt.Sprintf("slurmctld pod %s is not ready", pod)
	// Why it keeps exiting, from its log: a configuration (ConfigApplied says so too) or
	// anything else it reads at start, such as a key set it refuses.
	if p != nil {
		if failed, why := slurmctldFailed(p); failed {
			msg += ": " + why
		}
	}
	setCondition(status, c.Generation, slurmv1.ConditionControllerReady, metav1.ConditionFalse, ReasonControllerWaiting, msg)
	if wasReady {
		r.Recorder.Eventf(c, nil, v1.EventTypeWarning, wellknown.EventSlurmControllerNotReady, "RunController", "slurmctld pod %s is no longer ready", pod)
	}
	return poll, nil
}

func keysReady(status *slurmv1.SlurmClusterStatus) bool {
	return meta.IsStatusConditionTrue(status.Conditions, slurmv1.ConditionKeysReady)
}

func ptr[T any](v T) *T { return &v }

// ptrOr is *p, or def when p is nil (an optional field's default).
func ptrOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}
