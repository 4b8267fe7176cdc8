package slurmcluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"
	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
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
	assert.Equal(t, []string{"-D", "--conf-server", "slurm-controller.hpc.svc:6817", "--key-file", "/run/slurm/key/slurm.key"}, ctr.Args)
	assert.Equal(t, []v1.EnvVar{{Name: "SACKD_PORT", Value: "6828"}}, ctr.Env)
	assert.Equal(t, []string{"/bin/sh", "-c", loginScript, "sackd"}, ctr.Command)
	assert.Equal(t, []string{"/usr/bin/sinfo", "--noheader", "--summarize"}, ctr.ReadinessProbe.Exec.Command)
	assert.Len(t, users.Spec.Template.Spec.Volumes, 3, "the key, /run/slurm and an empty /etc/slurm: no sssd.conf asked for")

	ldap, err := get("slurm-login-ldap")
	require.NoError(t, err)
	assert.Equal(t, int32(2), *ldap.Spec.Replicas)
	// With sssdConfRef: an sssd container beside sackd, with the sssd.conf, sharing its
	// sockets and memory cache (not its database) with the login container.
	spec := ldap.Spec.Template.Spec
	require.Len(t, spec.Containers, 2)
	sssd := spec.Containers[1]
	assert.Equal(t, "sssd", sssd.Name)
	assert.Equal(t, DefaultLoginImage, sssd.Image)
	assert.Equal(t, []string{"/bin/sh", "-c", sssdScript("/etc/sssd/secret", "/var/lib/sss/pipes", "/usr/sbin/sssd")}, sssd.Command)
	assert.Equal(t, []v1.EnvVar{{Name: "SSSD_CONF", Value: "/etc/sssd/secret/conf"}}, sssd.Env,
		"sssd.conf read where the Secret's edits arrive (no subPath mount)")
	assert.Equal(t, []v1.VolumeMount{
		{Name: "sssd", MountPath: "/etc/sssd/secret", ReadOnly: true},
		{Name: "sssd-pipes", MountPath: "/var/lib/sss/pipes"},
		{Name: "sssd-mc", MountPath: "/var/lib/sss/mc"},
		{Name: "sssd-db", MountPath: "/var/lib/sss/db"},
	}, sssd.VolumeMounts)
	assert.Equal(t, []string{"/usr/bin/test", "-S", "/var/lib/sss/pipes/nss"}, sssd.ReadinessProbe.Exec.Command)
	assert.Equal(t, []v1.VolumeMount{
		{Name: "sssd-pipes", MountPath: "/var/lib/sss/pipes"},
		{Name: "sssd-mc", MountPath: "/var/lib/sss/mc"},
	}, spec.Containers[0].VolumeMounts[3:])
	volumes := map[string]v1.VolumeSource{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = v.VolumeSource
	}
	assert.Equal(t, &v1.SecretVolumeSource{SecretName: "sssd", DefaultMode: ptr[int32](0o600)},
		volumes["sssd"].Secret)
	for _, name := range []string{"sssd-pipes", "sssd-mc", "sssd-db"} {
		assert.NotNil(t, volumes[name].EmptyDir, name)
	}
	assert.Len(t, users.Spec.Template.Spec.Containers, 1, "no sssd without sssdConfRef")

	// A LoginSet removed from the spec loses its Deployment.
	f.update(func(c *slurmv1.SlurmCluster) { c.Spec.LoginSets = c.Spec.LoginSets[:1] })
	f.reconcile()
	_, err = get("slurm-login-ldap")
	assert.True(t, apierrors.IsNotFound(err), "%v", err)
	_, err = get("slurm-login-users")
	assert.NoError(t, err)
}

// LoginsReady tells a LoginSet whose sssd.conf Secret is missing (with a warning, looked
// for again), then counts ready login pods; it goes with the LoginSets.
func TestLoginsReadyCondition(t *testing.T) {
	c := newCluster()
	c.Spec.LoginSets = []slurmv1.LoginSetSpec{{Name: "ldap", Replicas: ptr[int32](2),
		SSSDConfRef: &v1.SecretKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "sssd"}, Key: "conf"}}}
	f := newFixture(t, c)
	f.events()
	assert.Equal(t, keyRetry, f.reconcileResult().RequeueAfter)
	cond := condition(f.cluster(), slurmv1.ConditionLoginsReady)
	assert.Equal(t, metav1.ConditionFalse, cond.Status)
	assert.Equal(t, ReasonSSSDConfMissing, cond.Reason)
	assert.Equal(t, "Secret sssd of loginSets[ldap].sssdConfRef does not exist: the LoginSet's pods wait for it", cond.Message)
	assert.Contains(t, f.events(), "Warning SlurmLoginNotReady "+cond.Message)
	d := &appsv1.Deployment{}
	require.NoError(t, f.kube.Get(context.Background(), client.ObjectKey{Namespace: "hpc", Name: "slurm-login-ldap"}, d),
		"the Deployment is made all the same: its pods start once the Secret exists")
	f.reconcile()
	assert.Empty(t, f.events(), "one warning")

	require.NoError(t, f.kube.Create(context.Background(), &v1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "hpc", Name: "sssd"}}))
	f.reconcile()
	cond = condition(f.cluster(), slurmv1.ConditionLoginsReady)
	assert.Equal(t, ReasonLoginsWaiting, cond.Reason)
	assert.Equal(t, "0/2 login pods ready", cond.Message)

	require.NoError(t, f.kube.Get(context.Background(), client.ObjectKeyFromObject(d), d))
	d.Status.ReadyReplicas = 2
	require.NoError(t, f.kube.Status().Update(context.Background(), d))
	f.reconcile()
	cond = condition(f.cluster(), slurmv1.ConditionLoginsReady)
	assert.Equal(t, metav1.ConditionTrue, cond.Status)
	assert.Equal(t, "2/2 login pods ready", cond.Message)

	f.update(func(c *slurmv1.SlurmCluster) { c.Spec.LoginSets = nil })
	f.reconcile()
	assert.Nil(t, meta.FindStatusCondition(f.cluster().Status.Conditions, slurmv1.ConditionLoginsReady))
}

// A LoginSet with ssh: the controller generates one ed25519 host key Secret for the
// cluster (never rewritten), each login pod runs sshd with it beside sackd and sssd, seeing
// what the login container sees but the auth/slurm key, and a Service of the asked type
// reaches sshd. Without ssh, the container and the Service go.
func TestLoginSSH(t *testing.T) {
	c := newCluster()
	c.Spec.LoginSets = []slurmv1.LoginSetSpec{{Name: "ldap",
		SSSDConfRef: &v1.SecretKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "sssd"}, Key: "conf"},
		SSH:         &slurmv1.LoginSSHSpec{Port: 2222, ServiceType: v1.ServiceTypeNodePort}}}
	f := newFixture(t, c)
	f.events()
	f.reconcile()
	ctx := context.Background()

	secret := &v1.Secret{}
	require.NoError(t, f.kube.Get(ctx, client.ObjectKey{Namespace: "hpc", Name: "slurm-ssh-host-key"}, secret))
	assert.True(t, metav1.IsControlledBy(secret, f.cluster()))
	key, err := ssh.ParsePrivateKey(secret.Data[SSHHostKeyName])
	require.NoError(t, err)
	assert.Equal(t, ssh.KeyAlgoED25519, key.PublicKey().Type())
	assert.Contains(t, f.events(), "Normal SlurmKeyGenerated Generated the login pods' ssh host key into Secret slurm-ssh-host-key")

	d := &appsv1.Deployment{}
	require.NoError(t, f.kube.Get(ctx, client.ObjectKey{Namespace: "hpc", Name: "slurm-login-ldap"}, d))
	spec := d.Spec.Template.Spec
	require.Len(t, spec.Containers, 3)
	sshd := spec.Containers[2]
	assert.Equal(t, "sshd", sshd.Name)
	assert.Equal(t, DefaultLoginImage, sshd.Image)
	assert.Equal(t, []string{"/bin/sh", "-c", `mkdir -p -m 0755 /run/sshd && exec /usr/sbin/sshd "$@"`, "sshd",
		"-D", "-e", "-p", "2222", "-h", "/etc/ssh/kubeslurm/ssh_host_ed25519_key",
		"-o", "PidFile=none", "-o", "UsePAM=yes", "-o", "PasswordAuthentication=yes", "-o", "KbdInteractiveAuthentication=yes",
		"-o", "PermitRootLogin=no", "-o", "AuthorizedKeysCommand=/usr/bin/sss_ssh_authorizedkeys", "-o", "AuthorizedKeysCommandUser=nobody"}, sshd.Command)
	assert.Equal(t, []v1.ContainerPort{{Name: "ssh", ContainerPort: 2222}}, sshd.Ports)
	assert.Equal(t, intstr.FromString("ssh"), sshd.ReadinessProbe.TCPSocket.Port)
	mounts := map[string]string{}
	for _, m := range sshd.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	assert.Equal(t, map[string]string{"run": "/run/slurm", "etc": "/etc/slurm", "sssd-pipes": "/var/lib/sss/pipes",
		"sssd-mc": "/var/lib/sss/mc", "ssh-host-key": "/etc/ssh/kubeslurm"}, mounts, "not the auth/slurm key")
	var hostKey *v1.Volume
	for i := range spec.Volumes {
		if spec.Volumes[i].Name == "ssh-host-key" {
			hostKey = &spec.Volumes[i]
		}
	}
	require.NotNil(t, hostKey)
	assert.Equal(t, "slurm-ssh-host-key", hostKey.Secret.SecretName)
	assert.Equal(t, int32(0o400), *hostKey.Secret.DefaultMode)

	svc := &v1.Service{}
	require.NoError(t, f.kube.Get(ctx, client.ObjectKey{Namespace: "hpc", Name: "slurm-login-ldap"}, svc))
	assert.Equal(t, v1.ServiceTypeNodePort, svc.Spec.Type)
	assert.Equal(t, []v1.ServicePort{{Name: "ssh", Port: 2222, TargetPort: intstr.FromString("ssh")}}, svc.Spec.Ports)
	assert.Equal(t, d.Spec.Template.Labels, svc.Spec.Selector)

	// The Secret is never written again: the same key on the next pass.
	f.reconcile()
	again := &v1.Secret{}
	require.NoError(t, f.kube.Get(ctx, client.ObjectKeyFromObject(secret), again))
	assert.Equal(t, secret.Data, again.Data)
	assert.NotContains(t, f.events(), "SlurmKeyGenerated")

	f.update(func(c *slurmv1.SlurmCluster) { c.Spec.LoginSets[0].SSH = nil })
	f.reconcile()
	require.NoError(t, f.kube.Get(ctx, client.ObjectKeyFromObject(d), d))
	assert.Len(t, d.Spec.Template.Spec.Containers, 2)
	assert.True(t, apierrors.IsNotFound(f.kube.Get(ctx, client.ObjectKeyFromObject(svc), &v1.Service{})), "the Service goes with ssh")
}

// loginScript, run by the host's sh (as root) with its paths moved into a temporary
// directory and sackd replaced by a script that shows what it got: sackd runs as the slurm
// user with a copy of the key files only that user reads, the key set among them; a
// changed key set starts it again with a new copy, and one removed from the Secret is gone
// from the copy too.
func TestLoginScript(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the script drops from root to the slurm user")
	}
	tmp := t.TempDir()
	// The slurm user runs the fake sackd in it.
	require.NoError(t, os.Chmod(tmp, 0o755))
	require.NoError(t, os.Chmod(filepath.Dir(tmp), 0o755))
	keys, run := filepath.Join(tmp, "keys"), filepath.Join(tmp, "run")
	require.NoError(t, os.Mkdir(keys, 0o755))
	require.NoError(t, os.Mkdir(run, 0o777))
	require.NoError(t, os.WriteFile(filepath.Join(keys, "slurm.key"), []byte("key"), 0o400))
	require.NoError(t, os.WriteFile(filepath.Join(keys, "slurm.jwks"), []byte("set1"), 0o400))
	fake := filepath.Join(tmp, "sackd")
	require.NoError(t, os.WriteFile(fake, []byte(`#!/bin/sh
trap 'exit 0' TERM
d=${SLURM_SACK_JWKS%/*}
echo "uid=$(id -u) args=$* jwks=$(cat "$SLURM_SACK_JWKS" 2>/dev/null) files=$(cd "$d" && echo $(stat -c '%n:%u:%a' *))" >>"$d/../starts"
while :; do sleep 0.1; done
`), 0o755))
	script := strings.NewReplacer(loginKeyDir, keys, sackdKeyDir, filepath.Join(run, "key"),
		"/run/slurm", run, "/usr/sbin/sackd", fake).Replace(loginScript)
	cmd := exec.Command("/bin/sh", "-c", script, "sackd", "-D")
	cmd.Env = append(os.Environ(), "KEY_WATCH_SECONDS=0.2")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	starts := func() []string {
		b, _ := os.ReadFile(filepath.Join(run, "starts"))
		return strings.Split(strings.TrimSpace(string(b)), "\n")
	}
	uid := fmt.Sprint(SlurmUID)
	first := "uid=" + uid + " args=-D jwks=set1 files=slurm.jwks:" + uid + ":400 slurm.key:" + uid + ":400"
	require.Eventually(t, func() bool { return starts()[0] == first }, 10*time.Second, 50*time.Millisecond, "starts: %q\n%s", starts(), out.String())

	require.NoError(t, os.Remove(filepath.Join(keys, "slurm.jwks")))
	second := "uid=" + uid + " args=-D jwks= files=slurm.key:" + uid + ":400"
	require.Eventually(t, func() bool { return len(starts()) == 2 && starts()[1] == second }, 10*time.Second, 50*time.Millisecond, "starts: %q\n%s", starts(), out.String())
	st, err := os.Stat(run)
	require.NoError(t, err)
	assert.Equal(t, uint32(SlurmUID), st.Sys().(*syscall.Stat_t).Uid, "sackd's run directory is the slurm user's")

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, cmd.Wait(), out.String())
}

// sssd's script runs sssd on the Secret's sssd.conf and restarts it when a file of the
// Secret changes (sssd reads its configuration and the CA only at start).
func TestSSSDScriptRestartsOnSecretChange(t *testing.T) {
	dir := t.TempDir()
	secret, pipes := filepath.Join(dir, "secret"), filepath.Join(dir, "pipes")
	require.NoError(t, os.MkdirAll(secret, 0o755))
	write := func(name, content string) {
		require.NoError(t, os.WriteFile(filepath.Join(secret, name), []byte(content), 0o600))
	}
	write("sssd.conf", "[sssd]\n")
	write("ca.crt", "old CA")
	daemon := filepath.Join(dir, "sssd")
	// Logs its arguments at each start; ends on SIGTERM.
	require.NoError(t, os.WriteFile(daemon, []byte("#!/bin/sh\ntrap 'exit 0' TERM\necho \"$*\" >>\"$LOG\"\nwhile :; do sleep 0.1; done\n"), 0o755))
	run := startScript(t, dir, sssdScript(secret, pipes, daemon),
		[]string{"LOG=" + filepath.Join(dir, "log"), "KEY_WATCH_SECONDS=0.2", "SSSD_CONF=" + filepath.Join(secret, "sssd.conf")})
	starts := func() []string {
		b, _ := os.ReadFile(filepath.Join(dir, "log"))
		return strings.Split(strings.TrimSpace(string(b)), "\n")
	}
	waitStarts := func(n int) {
		require.Eventually(t, func() bool { return len(starts()) >= n && starts()[0] != "" }, 10*time.Second, 50*time.Millisecond,
			"starts: %q; stderr: %s", starts(), run.stderr())
	}
	waitStarts(1)
	assert.Equal(t, "--interactive --logger=stderr --config "+filepath.Join(secret, "sssd.conf"), starts()[0])
	info, err := os.Stat(filepath.Join(pipes, "private"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), info.Mode().Perm())

	write("ca.crt", "new CA")
	waitStarts(2)
	write("sssd.conf", "[sssd]\ndomains = lab\n")
	waitStarts(3)
	assert.Contains(t, run.stderr(), "sssd reads them again (restart)")
	time.Sleep(time.Second)
	assert.Len(t, starts(), 3, "no restart without a change")
}
