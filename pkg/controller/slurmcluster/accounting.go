package slurmcluster

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	slurmv1 "github.com/kubeslurm/kubeslurm/api/v1alpha1"
	"github.com/kubeslurm/kubeslurm/pkg/slurmconf"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

const (
	// DefaultAccountingImage runs slurmdbd: deploy/images/Dockerfile.slurmdbd.
	DefaultAccountingImage = "kubeslurm/slurmdbd:26.05"

	componentSlurmdbd = "slurmdbd"
	passwordVolume    = "db-password"
	// passwordDir is where slurmdbd's pod mounts the database password, as passwordFile.
	passwordDir  = "/etc/slurmdbd-password"
	passwordFile = passwordDir + "/password"

	ReasonAccountingRunning = "Running"
	ReasonAccountingWaiting = "Waiting"
	ReasonDBSecretMissing   = "DatabaseSecretMissing"
	ReasonDBPasswordRefused = "DatabasePasswordRefused"
	// passwordRefusedExit is slurmdbdScript's exit code for a password it cannot write.
	passwordRefusedExit = 4
)

// AccountingName names slurmdbd's Deployment and Service; the Service is slurm.conf's
// AccountingStorageHost (slurmconf.AccountingHost).
func AccountingName(c *slurmv1.SlurmCluster) string { return c.Name + "-accounting" }

// slurmdbdScript starts slurmdbd with the database password, which the controller never
// sees (it may not read Secrets): slurmdbd.conf from the ConfigMap lacks StoragePass, so
// the script writes slurmdbd.conf plus StoragePass, read from the mounted Secret, into the
// pod's own run directory, mode 0600 and owned by the slurm user it runs as (slurmdbd
// demands both). The other files of /etc/slurm are linked there, and SLURM_CONF points
// there: slurmdbd looks for slurmdbd.conf and slurm.key next to slurm.conf. A password
// that slurmdbd.conf cannot hold unquoted (empty, not printable ASCII, a space, '#', '"'
// or '\') ends the container with exit code 4, never written into the file.
// All that is done at each start of slurmdbd, under supervise (keyreload.go), which also
// watches the password file: a password changed in its Secret (after the database's) makes
// slurmdbd start again in its container with it, as a changed key does.
var slurmdbdScript = `set -u
umask 077
dir=` + slurmconf.SlurmdbdRunDir + `
export SLURM_CONF="$dir/slurm.conf"
slurmdbd() {
  pass=$(cat ` + passwordFile + `) || exit 1
  case $pass in
  '' | *[!!-~]* | *[\#\"\\]*)
    echo "kubeslurm: the database password (spec.accounting.database.passwordRef) is empty or holds a space, a control or non-ASCII character, '#', '\"' or '\\', which slurmdbd.conf cannot hold" >&2
    exit 4 ;;
  esac
  rm -f "$dir/slurmdbd.conf"
  { cat ` + slurmconf.ConfigDir + `/slurmdbd.conf; printf 'StoragePass=%s\n' "$pass"; } >"$dir/slurmdbd.conf" || exit 1
  chmod 600 "$dir/slurmdbd.conf"
  unset pass
  # Linked at each start: a key file that appeared since (slurm.jwks) is seen too.
  for f in ` + slurmconf.ConfigDir + `/*; do
    [ "${f##*/}" = slurmdbd.conf ] || ln -sf "$f" "$dir/"
  done
  exec /usr/sbin/slurmdbd "$@"
}
KEY_DIR=` + slurmconf.ConfigDir + `
WATCH_ALSO=` + passwordFile + `
` + keyWatchShell + `supervise restart slurmdbd "$@"
`

// accountingDeployment fills slurmdbd's Deployment: one pod (Recreate: never two slurmdbd
// on one database), as the slurm user, with /etc/slurm (configuration and both keys: the
// auth/slurm key for slurmctld, the JWT key for Slurm's commands) and the password Secret.
// dbdHash is slurmdbd.conf's hash: a new slurmdbd.conf restarts it; slurm.conf's changes
// do not.
func accountingDeployment(c *slurmv1.SlurmCluster, dbdHash string, d *appsv1.Deployment) {
	a := c.Spec.Accounting
	labels := componentLabels(c, componentSlurmdbd)
	image := a.Image
	if image == "" {
		image = DefaultAccountingImage
	}
	port := slurmconf.AccountingPort(a)
	d.Labels = labels
	d.Spec.Replicas = ptr[int32](1)
	d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}
	d.Spec.Selector = &metav1.LabelSelector{MatchLabels: labels}
	d.Spec.Template.Labels = labels
	d.Spec.Template.Annotations = map[string]string{wellknown.SlurmConfigHashAnnotation: dbdHash}
	d.Spec.Template.Spec = v1.PodSpec{
		SecurityContext: SlurmPodSecurity(),
		Containers: []v1.Container{{
			Name:      componentSlurmdbd,
			Image:     image,
			Command:   []string{"/bin/sh", "-c", slurmdbdScript, "slurmdbd"},
			Args:      []string{"-D"},
			Ports:     []v1.ContainerPort{{Name: componentSlurmdbd, ContainerPort: port}},
			Resources: a.Resources,
			ReadinessProbe: &v1.Probe{
				ProbeHandler:  v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(port)}},
				PeriodSeconds: 2,
			},
			VolumeMounts: []v1.VolumeMount{
				{Name: configVolume, MountPath: slurmconf.ConfigDir, ReadOnly: true},
				{Name: passwordVolume, MountPath: passwordDir, ReadOnly: true},
				{Name: "run", MountPath: slurmconf.SlurmdbdRunDir},
			},
		}},
		Volumes: []v1.Volume{
			ConfigVolume(c),
			{Name: passwordVolume, VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{
				SecretName: a.Database.PasswordRef.Name, DefaultMode: ptr[int32](0o440),
				Items: []v1.KeyToPath{{Key: a.Database.PasswordRef.Key, Path: "password"}},
			}}},
			{Name: "run", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory}}},
		},
	}
}

// ensureAccounting runs slurmdbd while spec.accounting is set (once the configuration and
// keys exist), sets AccountingReady, and removes slurmdbd when the section goes. It
// reports whether to look again soon: a missing password Secret is not watched.
func (r *Reconciler) ensureAccounting(ctx context.Context, c *slurmv1.SlurmCluster, status *slurmv1.SlurmClusterStatus) (bool, error) {
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: AccountingName(c)}}
	svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: AccountingName(c)}}
	a := c.Spec.Accounting
	if a == nil {
		for _, o := range []client.Object{d, svc} {
			if err := r.deleteOwned(ctx, c, o); err != nil {
				return false, err
			}
		}
		meta.RemoveStatusCondition(&status.Conditions, slurmv1.ConditionAccountingReady)
		return false, nil
	}
	dbdHash, err := r.slurmdbdConfHash(ctx, c, status)
	if err != nil {
		return false, err
	}
	if dbdHash == "" || !keysReady(status) {
		setCondition(status, c.Generation, slurmv1.ConditionAccountingReady, metav1.ConditionFalse, ReasonAccountingWaiting,
			"slurmdbd waits for its configuration and keys (conditions ConfigValid and KeysReady)")
		return false, nil
	}
	ref := a.Database.PasswordRef
	exists, err := r.secretExists(ctx, c.Namespace, ref.Name)
	if err != nil {
		return false, err
	}
	if !exists {
		msg := fmt.Sprintf("Secret %s of the database password (spec.accounting.database.passwordRef) does not exist", ref.Name)
		if setCondition(status, c.Generation, slurmv1.ConditionAccountingReady, metav1.ConditionFalse, ReasonDBSecretMissing, msg) {
			r.Recorder.Eventf(c, nil, v1.EventTypeWarning, wellknown.EventSlurmAccountingNotReady, "RunAccounting", "%s", msg)
		}
		return true, nil
	}
	port := slurmconf.AccountingPort(a)
	if _, err := controllerutil.CreateOrUpdate(ctx, r.Client, svc, func() error {
		svc.Labels = componentLabels(c, componentSlurmdbd)
		svc.Spec.Selector = componentLabels(c, componentSlurmdbd)
		svc.Spec.Ports = []v1.ServicePort{{Name: componentSlurmdbd, Port: port, TargetPort: intstr.FromInt32(port)}}
		return controllerutil.SetControllerReference(c, svc, r.Client.Scheme())
	}); err != nil {
		return false, fmt.Errorf("slurmdbd Service %s: %w", svc.Name, err)
	}
	if _, err := controllerutil.CreateOrUpdate(ctx, r.Client, d, func() error {
		accountingDeployment(c, dbdHash, d)
		return controllerutil.SetControllerReference(c, d, r.Client.Scheme())
	}); err != nil {
		return false, fmt.Errorf("slurmdbd Deployment %s: %w", d.Name, err)
	}
	return false, r.accountingReady(ctx, c, status, d)
}

// accountingReady sets AccountingReady from the Deployment, with an event on each change,
// and names a password the pod refused.
func (r *Reconciler) accountingReady(ctx context.Context, c *slurmv1.SlurmCluster, status *slurmv1.SlurmClusterStatus, d *appsv1.Deployment) error {
	wasReady := meta.IsStatusConditionTrue(status.Conditions, slurmv1.ConditionAccountingReady)
	if d.Status.ReadyReplicas > 0 {
		if setCondition(status, c.Generation, slurmv1.ConditionAccountingReady, metav1.ConditionTrue, ReasonAccountingRunning,
			fmt.Sprintf("slurmdbd is ready on port %d of Service %s", slurmconf.AccountingPort(c.Spec.Accounting), AccountingName(c))) {
			r.Recorder.Eventf(c, nil, v1.EventTypeNormal, wellknown.EventSlurmAccountingReady, "RunAccounting", "slurmdbd is ready")
		}
		return nil
	}
	pods := &v1.PodList{}
	if err := r.Client.List(ctx, pods, client.InNamespace(c.Namespace), client.MatchingLabels(componentLabels(c, componentSlurmdbd))); err != nil {
		return fmt.Errorf("listing slurmdbd pods: %w", err)
	}
	for i := range pods.Items {
		if p := &pods.Items[i]; p.DeletionTimestamp == nil && endsWith(p, passwordRefusedExit) {
			ref := c.Spec.Accounting.Database.PasswordRef
			msg := fmt.Sprintf("slurmdbd pod %s refused the database password in Secret %s (key %s): it is empty or holds a space, "+
				"a control or non-ASCII character, '#', '\"' or '\\'", p.Name, ref.Name, ref.Key)
			if setCondition(status, c.Generation, slurmv1.ConditionAccountingReady, metav1.ConditionFalse, ReasonDBPasswordRefused, msg) {
				r.Recorder.Eventf(c, p, v1.EventTypeWarning, wellknown.EventSlurmAccountingNotReady, "RunAccounting", "%s", msg)
			}
			return nil
		}
	}
	setCondition(status, c.Generation, slurmv1.ConditionAccountingReady, metav1.ConditionFalse, ReasonAccountingWaiting,
		fmt.Sprintf("slurmdbd (Deployment %s) is not ready", d.Name))
	if wasReady {
		r.Recorder.Eventf(c, nil, v1.EventTypeWarning, wellknown.EventSlurmAccountingNotReady, "RunAccounting", "slurmdbd is no longer ready")
	}
	return nil
}

// slurmdbdConfHash is the hash of the ConfigMap's slurmdbd.conf: the file slurmdbd runs
// with. Empty while the ConfigMap (or the file in it) is not there yet.
func (r *Reconciler) slurmdbdConfHash(ctx context.Context, c *slurmv1.SlurmCluster, status *slurmv1.SlurmClusterStatus) (string, error) {
	if status.ConfigMap == "" {
		return "", nil
	}
	cm := &v1.ConfigMap{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: status.ConfigMap}, cm); err != nil {
		return "", client.IgnoreNotFound(err)
	}
	text, ok := cm.Data[slurmconf.SlurmdbdConfFile]
	if !ok {
		return "", nil
	}
	return slurmconf.Files{slurmconf.SlurmdbdConfFile: text}.Hash(), nil
}

// endsWith: a container of p has ended with code and not run again since (terminated, or
// waiting to restart after it).
func endsWith(p *v1.Pod, code int32) bool {
	for _, cs := range p.Status.ContainerStatuses {
		t := cs.State.Terminated
		if cs.State.Waiting != nil {
			t = cs.LastTerminationState.Terminated
		}
		if t != nil && t.ExitCode == code {
			return true
		}
	}
	return false
}
