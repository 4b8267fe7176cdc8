package slurmcluster

import (
	"context"
	"fmt"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
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
	appliedVolume      = "applied-config"

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
func ConfigVolume(c *slurmv1.SlurmCluster) v1.Volume {
	jwtSecret, jwtKey := JWTKeySecret(c)
	sources := []v1.VolumeProjection{{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: ConfigMapName(c)}}}}
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

// DefaultReconfigureTimeoutSeconds is spec.controller.reconfigureTimeoutSeconds' default.
const DefaultReconfigureTimeoutSeconds = 120

func reconfigureTimeout(c *slurmv1.SlurmCluster) int32 {
	if t := c.Spec.Controller.ReconfigureTimeoutSeconds; t > 0 {
		return t
	}
	return DefaultReconfigureTimeoutSeconds
}

// controllerStatefulSet fills slurmctld's StatefulSet: one pod, its state on a claim that
// outlives the pod (a new pod after a kill finds the jobs it knew). A new configuration
// does not touch the template: slurmctld's script has slurmctld re-read it in place
// (slurmctldscript.go), and the kept ConfigMap of the last one it ran is mounted beside it
// to start from should the new one be refused. The claim template is set on create only
// (it is immutable).
func controllerStatefulSet(c *slurmv1.SlurmCluster, sts *appsv1.StatefulSet) error {
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
	sts.Spec.Template.Annotations = nil
	applied := v1.Volume{Name: appliedVolume, VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
		LocalObjectReference: v1.LocalObjectReference{Name: AppliedConfigMapName(c)}, Optional: ptr(true), DefaultMode: ptr[int32](0o440),
	}}}
	sts.Spec.Template.Spec = v1.PodSpec{
		SecurityContext: SlurmPodSecurity(),
		// Its script writes the outcome of each configuration onto the pod.
		ServiceAccountName: ControllerName(c),
		// slurmctld saves its state on SIGTERM.
		TerminationGracePeriodSeconds: ptr[int64](60),
		Containers: []v1.Container{{
			Name:    componentSlurmctld,
			Image:   image,
			Command: []string{"/bin/sh", "-c", slurmctldScript(podSlurmctldPaths), "slurmctld"},
			Env: []v1.EnvVar{
				{Name: "POD_NAME", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
				{Name: "POD_NAMESPACE", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
				{Name: "RECONFIGURE_TIMEOUT_SECONDS", Value: strconv.Itoa(int(reconfigureTimeout(c)))},
			},
			Ports:     []v1.ContainerPort{{Name: componentSlurmctld, ContainerPort: port}},
			Resources: c.Spec.Controller.Resources,
			// The end of its log becomes the termination message: why it did not start
			// goes into the ControllerReady condition.
			TerminationMessagePolicy: v1.TerminationMessageFallbackToLogsOnError,
			ReadinessProbe: &v1.Probe{
				ProbeHandler:  v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(port)}},
				PeriodSeconds: 2,
			},
			VolumeMounts: []v1.VolumeMount{
				{Name: configVolume, MountPath: slurmconf.ConfigDir, ReadOnly: true},
				{Name: appliedVolume, MountPath: appliedConfigDir, ReadOnly: true},
				{Name: stateVolume, MountPath: slurmconf.StateSaveDir},
				{Name: "run", MountPath: podSlurmctldPaths.Run},
			},
		}},
		Volumes: []v1.Volume{
			ConfigVolume(c),
			applied,
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
	if err := r.ensureControllerIdentity(ctx, c); err != nil {
		return false, err
	}
	if _, err := controllerutil.CreateOrUpdate(ctx, r.Client, sts, func() error {
		if err := controllerStatefulSet(c, sts); err != nil {
			return err
		}
		return controllerutil.SetControllerReference(c, sts, r.Client.Scheme())
	}); err != nil {
		return false, fmt.Errorf("slurmctld StatefulSet %s: %w", sts.Name, err)
	}
	p, err := r.controllerPod(ctx, c)
	if err != nil {
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

// ensureControllerIdentity makes slurmctld's ServiceAccount and what it may do: read and
// annotate its own pod (the outcome of each configuration, slurmctldscript.go), nothing
// else.
func (r *Reconciler) ensureControllerIdentity(ctx context.Context, c *slurmv1.SlurmCluster) error {
	name := ControllerName(c)
	labels := componentLabels(c, componentSlurmctld)
	sa := &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: name}}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: name}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: name}}
	for _, o := range []struct {
		obj  client.Object
		fill func()
	}{
		{sa, func() {}},
		{role, func() {
			role.Rules = []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"},
				ResourceNames: []string{controllerPodName(c)}, Verbs: []string{"get", "patch"}}}
		}},
		{binding, func() {
			binding.RoleRef = rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name}
			binding.Subjects = []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: c.Namespace}}
		}},
	} {
		if _, err := controllerutil.CreateOrUpdate(ctx, r.Client, o.obj, func() error {
			o.obj.SetLabels(labels)
			o.fill()
			return controllerutil.SetControllerReference(c, o.obj, r.Client.Scheme())
		}); err != nil {
			return fmt.Errorf("slurmctld's %T %s: %w", o.obj, name, err)
		}
	}
	return nil
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

// CacheByObject limits the manager's cache of the kinds only SlurmClusters' objects are
// read of (slurmctld's identity, ensureControllerIdentity) to those objects: a cluster has
// many ServiceAccounts, Roles and RoleBindings that are none of kubeslurm's business.
func CacheByObject() map[client.Object]cache.ByObject {
	ours := cache.ByObject{Label: labels.NewSelector().Add(clusterLabelExists)}
	return map[client.Object]cache.ByObject{&v1.ServiceAccount{}: ours, &rbacv1.Role{}: ours, &rbacv1.RoleBinding{}: ours}
}

var clusterLabelExists = func() labels.Requirement {
	r, err := labels.NewRequirement(wellknown.SlurmClusterLabel, selection.Exists, nil)
	if err != nil {
		panic(err)
	}
	return *r
}()
