package slurmcluster

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"slices"

	"golang.org/x/crypto/ssh"

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
	// DefaultLoginImage runs sackd and has Slurm's commands: deploy/images/Dockerfile.login.
	DefaultLoginImage = "kubeslurm/login:26.05"

	componentLogin = "login"
	loginSetLabel  = "slurm.kubeslurm.io/loginset"
	// SSSDSecretDir holds every key of the sssd.conf's Secret in the sssd container: the
	// directory's CA (ldap_tls_cacert = /etc/sssd/secret/ca.crt), a client certificate or
	// a bind password file go in that Secret beside sssd.conf.
	SSSDSecretDir = "/etc/sssd/secret"
	// SSHHostKeyName is the key of SSHHostKeySecret and its file in the sshd container.
	SSHHostKeyName = "ssh_host_ed25519_key"
	sshHostKeyDir  = "/etc/ssh/kubeslurm"
	// LoginSackdPort is where sackd listens for slurmctld's configuration updates: not
	// slurmd's 6818 (sackd's default), so a login pod and a worker can share a host network
	// (hostNetwork pods, or the local pod runner).
	LoginSackdPort = 6828

	ReasonLoginsRunning   = "Running"
	ReasonLoginsWaiting   = "Waiting"
	ReasonSSSDConfMissing = "SSSDConfigMissing"
)

// LoginName names a LoginSet's Deployment.
func LoginName(c *slurmv1.SlurmCluster, set string) string { return c.Name + "-login-" + set }

// loginLabels mark a LoginSet's Deployment, pods and Service.
func loginLabels(c *slurmv1.SlurmCluster, set *slurmv1.LoginSetSpec) map[string]string {
	labels := componentLabels(c, componentLogin)
	labels[loginSetLabel] = set.Name
	return labels
}

// loginKeyDir is where a login pod mounts the auth/slurm key files, and sackdKeyDir where
// its script copies them for sackd (in the pod's own run directory).
const (
	loginKeyDir = "/etc/slurm-key"
	sackdKeyDir = "/run/slurm/key"
)

// loginScript runs sackd as SlurmUser, as Slurm wants it: as root, sackd refuses slurmctld's
// REQUEST_RECONFIGURE_SACKD (a credential for SlurmUser), and a login pod would keep the
// slurm.conf it fetched at its start. The container stays root (sshd and users' sessions
// need it). At each start of sackd the key files are copied where that user alone reads
// them (the mounted ones are root's, 0400); supervise (keyreload.go) restarts sackd when
// the mounted ones change.
var loginScript = "KEY_DIR=" + loginKeyDir + "\n" + fmt.Sprintf(`sackd() {
  chown %[1]d:%[1]d /run/slurm
  rm -rf %[2]s
  install -d -m 0700 -o %[1]d -g %[1]d %[2]s || exit 1
  for f in "$KEY_DIR"/slurm.key "$KEY_DIR"/slurm.jwks; do
    [ -f "$f" ] || continue
    install -m 0400 -o %[1]d -g %[1]d "$f" %[2]s/ || exit 1
  done
  SLURM_SACK_JWKS=%[2]s/slurm.jwks exec /usr/bin/setpriv --reuid=%[1]d --regid=%[1]d --clear-groups /usr/sbin/sackd "$@"
}
`, SlurmUID, sackdKeyDir) + keyWatchShell + `supervise restart sackd "$@"
`

// loginDeployment fills a LoginSet's Deployment: pods where users run sbatch, squeue and
// the rest (kubectl exec). Each runs sackd, configless: it fetches slurm.conf from slurmctld
// and hands Slurm's commands their auth/slurm credentials, so the pod holds the key but no
// configuration of its own. A pod is ready once `sinfo` answers through it.
func loginDeployment(c *slurmv1.SlurmCluster, set *slurmv1.LoginSetSpec, d *appsv1.Deployment) error {
	labels := loginLabels(c, set)
	image := set.Image
	if image == "" {
		image = DefaultLoginImage
	}
	_, addr := slurmconf.ControllerHost(c)
	d.Labels = labels
	d.Spec.Replicas = ptr(ptrOr(set.Replicas, 1))
	d.Spec.Selector = &metav1.LabelSelector{MatchLabels: labels}
	d.Spec.Template.Labels = labels
	d.Spec.Template.Spec = v1.PodSpec{
		// Root: the script hands sackd the key and drops to the slurm user; users come in
		// with kubectl exec (or ssh).
		SecurityContext: &v1.PodSecurityContext{RunAsUser: ptr[int64](0), RunAsGroup: ptr[int64](0)},
		Containers: []v1.Container{{
			Name:    componentLogin,
			Image:   image,
			Command: []string{"/bin/sh", "-c", loginScript, "sackd"},
			Args: []string{"-D", "--conf-server", fmt.Sprintf("%s:%d", addr, controllerPort(c)),
				"--key-file", sackdKeyDir + "/" + SlurmKeyName},
			// sackd 26.05 takes its port from the environment (its -p is documented, not parsed).
			Env:   []v1.EnvVar{{Name: "SACKD_PORT", Value: fmt.Sprint(LoginSackdPort)}},
			Ports: []v1.ContainerPort{{Name: "sackd", ContainerPort: LoginSackdPort}},
			ReadinessProbe: &v1.Probe{
				ProbeHandler:   v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"/usr/bin/sinfo", "--noheader", "--summarize"}}},
				PeriodSeconds:  5,
				TimeoutSeconds: 10,
			},
			VolumeMounts: []v1.VolumeMount{
				{Name: "key", MountPath: loginKeyDir, ReadOnly: true},
				// sackd's fetched configuration and its socket, which the commands look for.
				{Name: "run", MountPath: "/run/slurm"},
				// Empty: a slurm.conf in the image would win over sackd's.
				{Name: "etc", MountPath: slurmconf.ConfigDir},
			},
		}},
		Volumes: []v1.Volume{
			slurmKeyVolume(c, "key"),
			{Name: "run", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
			{Name: "etc", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
		},
	}
	if set.SSSDConfRef != nil {
		addSSSD(&d.Spec.Template.Spec, set.SSSDConfRef)
	}
	users := []int{0} // the containers users work in: login, and sshd's sessions
	if set.SSH != nil {
		addSSH(&d.Spec.Template.Spec, c, set.SSH)
		users = append(users, len(d.Spec.Template.Spec.Containers)-1)
	}
	// Last, so that it is checked against every volume and mount of kubeslurm's.
	return addStorage(&d.Spec.Template.Spec, set.PodStorage, users...)
}

// SSHHostKeySecret names the Secret of the login pods' ssh host key (key SSHHostKeyName,
// OpenSSH's private key format), one per cluster: every login pod behind a Service, and
// each pod that replaces another, presents the same key, so users' known_hosts stay true.
func SSHHostKeySecret(c *slurmv1.SlurmCluster) string { return c.Name + "-ssh-host-key" }

// SSHPort is the port of a LoginSet's sshd and Service (loginSets[].ssh.port, default 22).
func SSHPort(s *slurmv1.LoginSSHSpec) int32 {
	if s.Port == 0 {
		return 22
	}
	return s.Port
}

// sshdArgs: the host key from the Secret; users authenticate through PAM (pam_sss, the
// login image's sssd) or with the public keys sssd finds in the directory; no root login.
// No pid file: two login pods sharing /run (the local pod runner) would fight over it.
func sshdArgs(port int32) []string {
	args := []string{"-D", "-e", "-p", fmt.Sprint(port), "-h", sshHostKeyDir + "/" + SSHHostKeyName}
	for _, o := range []string{"PidFile=none", "UsePAM=yes", "PasswordAuthentication=yes", "KbdInteractiveAuthentication=yes",
		"PermitRootLogin=no", "AuthorizedKeysCommand=/usr/bin/sss_ssh_authorizedkeys", "AuthorizedKeysCommandUser=nobody"} {
		args = append(args, "-o", o)
	}
	return args
}

// addSSH gives a login pod an sshd container (the login image has OpenSSH's server). Its
// sessions see what the login container sees (sackd's configuration and socket, the
// sssd sockets) but not the auth/slurm key, which only sackd reads.
func addSSH(pod *v1.PodSpec, c *slurmv1.SlurmCluster, ssh *slurmv1.LoginSSHSpec) {
	login := pod.Containers[0]
	var mounts []v1.VolumeMount
	for _, m := range login.VolumeMounts {
		if m.Name != "key" {
			mounts = append(mounts, m)
		}
	}
	mounts = append(mounts, v1.VolumeMount{Name: "ssh-host-key", MountPath: sshHostKeyDir, ReadOnly: true})
	pod.Volumes = append(pod.Volumes, v1.Volume{Name: "ssh-host-key", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{
		// sshd refuses a private host key others may read.
		SecretName: SSHHostKeySecret(c), DefaultMode: ptr[int32](0o400), Items: []v1.KeyToPath{{Key: SSHHostKeyName, Path: SSHHostKeyName}},
	}}})
	port := SSHPort(ssh)
	pod.Containers = append(pod.Containers, v1.Container{
		Name:  "sshd",
		Image: login.Image,
		// sshd's privilege separation directory is made by its service unit, not its package.
		Command:        append([]string{"/bin/sh", "-c", `mkdir -p -m 0755 /run/sshd && exec /usr/sbin/sshd "$@"`, "sshd"}, sshdArgs(port)...),
		Ports:          []v1.ContainerPort{{Name: "ssh", ContainerPort: port}},
		ReadinessProbe: &v1.Probe{ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromString("ssh")}}, PeriodSeconds: 5},
		VolumeMounts:   mounts,
	})
}

// loginService fills the Service of a LoginSet with ssh: its port to sshd of its pods.
func loginService(c *slurmv1.SlurmCluster, set *slurmv1.LoginSetSpec, svc *v1.Service) {
	labels := loginLabels(c, set)
	svc.Labels = labels
	svc.Spec.Selector = labels
	svc.Spec.Type = set.SSH.ServiceType
	if svc.Spec.Type == "" {
		svc.Spec.Type = v1.ServiceTypeClusterIP
	}
	port := SSHPort(set.SSH)
	svc.Spec.Ports = []v1.ServicePort{{Name: "ssh", Port: port, TargetPort: intstr.FromString("ssh")}}
}

// generateHostKey creates the login pods' ssh host key Secret unless it exists.
func (r *Reconciler) generateHostKey(ctx context.Context, c *slurmv1.SlurmCluster) error {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	block, err := ssh.MarshalPrivateKey(key, c.Namespace+"/"+c.Name+" login")
	if err != nil {
		return err
	}
	name := SSHHostKeySecret(c)
	created, err := r.createSecret(ctx, c, name, SSHHostKeyName, pem.EncodeToMemory(block))
	if created != nil {
		r.Recorder.Eventf(c, created, v1.EventTypeNormal, wellknown.EventSlurmKeyGenerated, "GenerateKey",
			"Generated the login pods' ssh host key into Secret %s", name)
	}
	return err
}

// sssdDirs are sssd's state directories, each an emptyDir of the pod: its cache ("db"), and
// the sockets and memory-mapped cache that the name service switch module (libnss-sss,
// `passwd: files sss`) reads, which the login container mounts too. Per pod, so two login
// pods on one host (the local pod runner) never share them.
var sssdDirs = []struct{ volume, path string }{
	{"sssd-pipes", "/var/lib/sss/pipes"},
	{"sssd-mc", "/var/lib/sss/mc"},
	{"sssd-db", "/var/lib/sss/db"},
}

// sssdScript runs sssd (daemon) on $SSSD_CONF, the sssd.conf among the Secret's files in
// secretDir, and restarts it when any of those files changes (keyWatchShell, $WATCH_ALSO):
// sssd reads its configuration and the directory's CA only when it starts. Its cache
// (sssd-db) stays. sssd makes its private socket directory (under pipes) only where its
// packaging did; the emptyDir starts empty.
func sssdScript(secretDir, pipes, daemon string) string {
	return "KEY_DIR=" + secretDir + "\nWATCH_ALSO=" + secretDir + "/*\n" + keyWatchShell +
		"mkdir -p -m 0700 " + pipes + "/private\nsupervise restart " + daemon + ` --interactive --logger=stderr --config "$SSSD_CONF"` + "\n"
}

// addSSSD gives a login pod the users of a directory: an sssd container (the login image
// has it) with the LoginSet's sssd.conf and the other keys of its Secret (SSSDSecretDir),
// sharing its sockets with the login container, so `id alice`, `runuser -u alice --
// sbatch ...` and squeue's user names resolve there.
// sackd sends each command's user name and groups with its credential (AuthInfo
// use_client_ids, see slurmconf), so slurmctld and the workers need no directory of their own.
func addSSSD(pod *v1.PodSpec, ref *v1.SecretKeySelector) {
	// The whole Secret: the controller cannot read Secrets to list the other files sssd.conf
	// names, so they all come along.
	pod.Volumes = append(pod.Volumes, v1.Volume{Name: "sssd", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{
		// sssd refuses a configuration that is not root's and 0600.
		SecretName: ref.Name, DefaultMode: ptr[int32](0o600),
	}}})
	// sssd reads its sssd.conf from there, not from a subPath mount at its default place:
	// a subPath mount never sees an edit of the Secret.
	mounts := []v1.VolumeMount{{Name: "sssd", MountPath: SSSDSecretDir, ReadOnly: true}}
	for _, dir := range sssdDirs {
		pod.Volumes = append(pod.Volumes, v1.Volume{Name: dir.volume, VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}})
		mounts = append(mounts, v1.VolumeMount{Name: dir.volume, MountPath: dir.path})
		if dir.volume != "sssd-db" {
			pod.Containers[0].VolumeMounts = append(pod.Containers[0].VolumeMounts, v1.VolumeMount{Name: dir.volume, MountPath: dir.path})
		}
	}
	login := pod.Containers[0]
	pod.Containers = append(pod.Containers, v1.Container{
		Name:         "sssd",
		Image:        login.Image,
		Command:      []string{"/bin/sh", "-c", sssdScript(SSSDSecretDir, sssdDirs[0].path, "/usr/sbin/sssd")},
		Env:          []v1.EnvVar{{Name: "SSSD_CONF", Value: SSSDSecretDir + "/" + ref.Key}},
		VolumeMounts: mounts,
		// Ready once its name service responder listens: what the login container asks.
		ReadinessProbe: &v1.Probe{
			ProbeHandler:  v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"/usr/bin/test", "-S", "/var/lib/sss/pipes/nss"}}},
			PeriodSeconds: 5,
		},
	})
}

// ensureLogins runs a Deployment per LoginSet once slurmctld runs, deletes those of
// LoginSets that are gone, and sets LoginsReady. It asks to be called again while a
// LoginSet's sssd.conf Secret is missing (Secrets are not watched).
func (r *Reconciler) ensureLogins(ctx context.Context, c *slurmv1.SlurmCluster, status *slurmv1.SlurmClusterStatus) (bool, error) {
	want, wantService := map[string]bool{}, map[string]bool{}
	var deployments []*appsv1.Deployment
	if keysReady(status) && status.ConfigMap != "" {
		if slices.ContainsFunc(c.Spec.LoginSets, func(s slurmv1.LoginSetSpec) bool { return s.SSH != nil }) {
			if err := r.generateHostKey(ctx, c); err != nil {
				return false, err
			}
		}
		for i := range c.Spec.LoginSets {
			set := &c.Spec.LoginSets[i]
			if set.SSH != nil {
				svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: LoginName(c, set.Name)}}
				wantService[svc.Name] = true
				if _, err := controllerutil.CreateOrUpdate(ctx, r.Client, svc, func() error {
					loginService(c, set, svc)
					return controllerutil.SetControllerReference(c, svc, r.Client.Scheme())
				}); err != nil {
					return false, fmt.Errorf("login Service %s: %w", svc.Name, err)
				}
			}
			d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: LoginName(c, set.Name)}}
			want[d.Name] = true
			if _, err := controllerutil.CreateOrUpdate(ctx, r.Client, d, func() error {
				if err := loginDeployment(c, set, d); err != nil {
					return err
				}
				return controllerutil.SetControllerReference(c, d, r.Client.Scheme())
			}); err != nil {
				return false, fmt.Errorf("login Deployment %s: %w", d.Name, err)
			}
			deployments = append(deployments, d)
		}
	}
	if err := r.pruneLoginObjects(ctx, c, &appsv1.DeploymentList{}, want); err != nil {
		return false, err
	}
	if err := r.pruneLoginObjects(ctx, c, &v1.ServiceList{}, wantService); err != nil {
		return false, err
	}
	return r.loginsReady(ctx, c, status, deployments)
}

// pruneLoginObjects deletes the cluster's login objects of list's kind that want does not
// name (those of LoginSets gone from the spec, or Services of sets without ssh).
func (r *Reconciler) pruneLoginObjects(ctx context.Context, c *slurmv1.SlurmCluster, list client.ObjectList, want map[string]bool) error {
	if err := r.Client.List(ctx, list, client.InNamespace(c.Namespace), client.MatchingLabels(componentLabels(c, componentLogin))); err != nil {
		return fmt.Errorf("listing login objects: %w", err)
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return err
	}
	for _, item := range items {
		if o, ok := item.(client.Object); ok && !want[o.GetName()] && metav1.IsControlledBy(o, c) {
			if err := r.deleteOwned(ctx, c, o); err != nil {
				return err
			}
		}
	}
	return nil
}

// loginsReady sets LoginsReady: False with the first LoginSet whose sssd.conf Secret is
// missing (its pods wait for it, as a kubelet makes them), else whether every login pod
// is ready. Absent without LoginSets.
func (r *Reconciler) loginsReady(ctx context.Context, c *slurmv1.SlurmCluster, status *slurmv1.SlurmClusterStatus, deployments []*appsv1.Deployment) (bool, error) {
	if len(c.Spec.LoginSets) == 0 {
		meta.RemoveStatusCondition(&status.Conditions, slurmv1.ConditionLoginsReady)
		return false, nil
	}
	for _, set := range c.Spec.LoginSets {
		if set.SSSDConfRef == nil {
			continue
		}
		exists, err := r.secretExists(ctx, c.Namespace, set.SSSDConfRef.Name)
		if err != nil {
			return false, err
		}
		if !exists {
			msg := fmt.Sprintf("Secret %s of loginSets[%s].sssdConfRef does not exist: the LoginSet's pods wait for it", set.SSSDConfRef.Name, set.Name)
			if setCondition(status, c.Generation, slurmv1.ConditionLoginsReady, metav1.ConditionFalse, ReasonSSSDConfMissing, msg) {
				r.Recorder.Eventf(c, nil, v1.EventTypeWarning, wellknown.EventSlurmLoginNotReady, "RunLogins", "%s", msg)
			}
			return true, nil
		}
	}
	var ready, desired int32
	for _, d := range deployments {
		ready += d.Status.ReadyReplicas
	}
	for _, set := range c.Spec.LoginSets {
		desired += ptrOr(set.Replicas, 1)
	}
	cond, reason := metav1.ConditionTrue, ReasonLoginsRunning
	if ready < desired {
		cond, reason = metav1.ConditionFalse, ReasonLoginsWaiting
	}
	setCondition(status, c.Generation, slurmv1.ConditionLoginsReady, cond, reason, fmt.Sprintf("%d/%d login pods ready", ready, desired))
	return false, nil
}
