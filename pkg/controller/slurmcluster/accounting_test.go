package slurmcluster

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slurmv1 "github.com/kubeslurm/kubeslurm/api/v1alpha1"
	"github.com/kubeslurm/kubeslurm/pkg/slurmconf"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

func accountingSpec() *slurmv1.AccountingSpec {
	return &slurmv1.AccountingSpec{Port: 6929, Database: slurmv1.DatabaseSpec{
		Host: "127.0.0.1", Port: 3316, User: "slurm",
		PasswordRef: v1.SecretKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "db"}, Key: "password"},
	}}
}

func dbSecret() *v1.Secret {
	return &v1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "hpc", Name: "db"}, Data: map[string][]byte{"password": []byte("pw")}}
}

var accountingKey = client.ObjectKey{Namespace: "hpc", Name: "slurm-accounting"}

func (f *fixture) accounting() *appsv1.Deployment {
	d := &appsv1.Deployment{}
	require.NoError(f.t, f.kube.Get(context.Background(), accountingKey, d))
	return d
}

func (f *fixture) setAccountingReady(ready int32) {
	d := f.accounting()
	d.Status.ReadyReplicas, d.Status.Replicas = ready, 1
	require.NoError(f.t, f.kube.Status().Update(context.Background(), d))
}

func TestAccountingRunsSlurmdbdBeforeSlurmctld(t *testing.T) {
	c := newCluster()
	c.Spec.Accounting = accountingSpec()
	f := newFixture(t, c, dbSecret())
	f.reconcile()

	// slurmdbd.conf in the ConfigMap, without the password.
	dbdConf := f.configMap().Data[slurmconf.SlurmdbdConfFile]
	assert.Contains(t, dbdConf, "\nStorageHost=127.0.0.1\nStoragePort=3316\nStorageUser=slurm\n")
	assert.NotContains(t, strings.ToLower(dbdConf), "storagepass=")
	assert.Contains(t, f.configMap().Data[slurmconf.SlurmConfFile], "\nAccountingStorageHost=slurm-accounting.hpc.svc\nAccountingStoragePort=6929\n")

	svc := &v1.Service{}
	require.NoError(t, f.kube.Get(context.Background(), accountingKey, svc))
	assert.Equal(t, int32(6929), svc.Spec.Ports[0].Port)
	assert.True(t, metav1.IsControlledBy(svc, f.cluster()))

	d := f.accounting()
	assert.True(t, metav1.IsControlledBy(d, f.cluster()))
	assert.Equal(t, int32(1), *d.Spec.Replicas)
	assert.Equal(t, appsv1.RecreateDeploymentStrategyType, d.Spec.Strategy.Type, "never two slurmdbd on one database")
	assert.Equal(t, svc.Spec.Selector, d.Spec.Template.Labels)
	assert.Equal(t, slurmconf.Files{slurmconf.SlurmdbdConfFile: dbdConf}.Hash(), d.Spec.Template.Annotations[wellknown.SlurmConfigHashAnnotation])
	pod := d.Spec.Template.Spec
	assert.Equal(t, int64(SlurmUID), *pod.SecurityContext.RunAsUser, "slurmdbd runs as SlurmUser")
	ctr := pod.Containers[0]
	assert.Equal(t, DefaultAccountingImage, ctr.Image)
	assert.Equal(t, []string{"/bin/sh", "-c", slurmdbdScript, "slurmdbd"}, ctr.Command)
	assert.Equal(t, []string{"-D"}, ctr.Args)
	assert.Equal(t, int32(6929), ctr.ReadinessProbe.TCPSocket.Port.IntVal)
	assert.Equal(t, ConfigVolume(f.cluster()), pod.Volumes[0], "configuration and both keys")
	assert.Equal(t, &v1.SecretVolumeSource{SecretName: "db", DefaultMode: ptr[int32](0o440),
		Items: []v1.KeyToPath{{Key: "password", Path: "password"}}}, pod.Volumes[1].Secret)
	assert.Contains(t, ctr.VolumeMounts, v1.VolumeMount{Name: passwordVolume, MountPath: passwordDir, ReadOnly: true})

	// Not ready yet: slurmctld waits (its first start registers the cluster).
	cond := condition(f.cluster(), slurmv1.ConditionAccountingReady)
	assert.Equal(t, metav1.ConditionFalse, cond.Status)
	assert.Equal(t, ReasonAccountingWaiting, cond.Reason)
	err := f.kube.Get(context.Background(), client.ObjectKey{Namespace: "hpc", Name: "slurm-controller"}, &appsv1.StatefulSet{})
	assert.True(t, apierrors.IsNotFound(err), "no slurmctld before slurmdbd: %v", err)
	assert.Contains(t, condition(f.cluster(), slurmv1.ConditionControllerReady).Message, "AccountingReady")

	f.events()
	f.setAccountingReady(1)
	f.reconcile()
	cond = condition(f.cluster(), slurmv1.ConditionAccountingReady)
	assert.Equal(t, metav1.ConditionTrue, cond.Status, cond.Message)
	assert.Contains(t, f.events(), "Normal SlurmAccountingReady slurmdbd is ready")
	sts := f.statefulSet()

	// Idempotent.
	rv, stsRV := f.accounting().ResourceVersion, sts.ResourceVersion
	f.reconcile()
	assert.Equal(t, rv, f.accounting().ResourceVersion)
	assert.Equal(t, stsRV, f.statefulSet().ResourceVersion)
	assert.Empty(t, f.events())

	// slurmdbd stops being ready: a running slurmctld stays, a warning says so.
	f.setAccountingReady(0)
	f.reconcile()
	assert.Equal(t, metav1.ConditionFalse, condition(f.cluster(), slurmv1.ConditionAccountingReady).Status)
	assert.Equal(t, []string{"Warning SlurmAccountingNotReady slurmdbd is no longer ready"}, f.events())
	assert.Equal(t, stsRV, f.statefulSet().ResourceVersion)
}

// slurmdbd restarts for a new slurmdbd.conf, not for a slurm.conf change.
func TestAccountingRestartsForItsOwnConfig(t *testing.T) {
	c := newCluster()
	c.Spec.Accounting = accountingSpec()
	f := newFixture(t, c, dbSecret())
	f.reconcile()
	hash := f.accounting().Spec.Template.Annotations[wellknown.SlurmConfigHashAnnotation]

	f.update(func(c *slurmv1.SlurmCluster) { c.Spec.Partitions[0].MaxTime = "120" })
	f.reconcile()
	assert.Equal(t, hash, f.accounting().Spec.Template.Annotations[wellknown.SlurmConfigHashAnnotation])

	f.update(func(c *slurmv1.SlurmCluster) { c.Spec.Accounting.ExtraConfig = "CommitDelay=1" })
	f.reconcile()
	assert.Contains(t, f.configMap().Data[slurmconf.SlurmdbdConfFile], "\nCommitDelay=1\n")
	assert.NotEqual(t, hash, f.accounting().Spec.Template.Annotations[wellknown.SlurmConfigHashAnnotation])

	// A refused line changes nothing.
	f.update(func(c *slurmv1.SlurmCluster) { c.Spec.Accounting.ExtraConfig = "StoragePass=x" })
	rv := f.accounting().ResourceVersion
	f.reconcile()
	assert.Equal(t, rv, f.accounting().ResourceVersion)
	cond := condition(f.cluster(), slurmv1.ConditionConfigValid)
	assert.Equal(t, metav1.ConditionFalse, cond.Status)
	assert.Contains(t, cond.Message, "accounting.extraConfig")
}

// A missing password Secret holds slurmdbd back with a warning, and is looked for again.
func TestAccountingWaitsForPasswordSecret(t *testing.T) {
	c := newCluster()
	c.Spec.Accounting = accountingSpec()
	f := newFixture(t, c)
	req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "hpc", Name: "slurm"}}
	res, err := f.r.Reconcile(context.Background(), req)
	require.NoError(t, err)
	assert.Equal(t, keyRetry, res.RequeueAfter)
	cond := condition(f.cluster(), slurmv1.ConditionAccountingReady)
	assert.Equal(t, ReasonDBSecretMissing, cond.Reason)
	assert.Contains(t, cond.Message, "Secret db")
	assert.Contains(t, f.events(), "Warning SlurmAccountingNotReady "+cond.Message)
	assert.True(t, apierrors.IsNotFound(f.kube.Get(context.Background(), accountingKey, &appsv1.Deployment{})))

	// Once more: no second event.
	_, err = f.r.Reconcile(context.Background(), req)
	require.NoError(t, err)
	assert.Empty(t, f.events())

	require.NoError(t, f.kube.Create(context.Background(), dbSecret()))
	f.reconcile()
	f.accounting()
	assert.Equal(t, ReasonAccountingWaiting, condition(f.cluster(), slurmv1.ConditionAccountingReady).Reason)
}

// A password the pod cannot write into slurmdbd.conf is named in the condition.
func TestAccountingReportsRefusedPassword(t *testing.T) {
	c := newCluster()
	c.Spec.Accounting = accountingSpec()
	f := newFixture(t, c, dbSecret())
	f.reconcile()
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "hpc", Name: "slurm-accounting-x", Labels: componentLabels(c, componentSlurmdbd)}}
	require.NoError(t, f.kube.Create(context.Background(), p))
	p.Status.ContainerStatuses = []v1.ContainerStatus{{Name: componentSlurmdbd,
		State:                v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
		LastTerminationState: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: passwordRefusedExit}}}}
	require.NoError(t, f.kube.Status().Update(context.Background(), p))
	f.events()
	f.reconcile()
	cond := condition(f.cluster(), slurmv1.ConditionAccountingReady)
	assert.Equal(t, ReasonDBPasswordRefused, cond.Reason)
	assert.Contains(t, cond.Message, "Secret db (key password)")
	assert.Len(t, f.events(), 1)

	// Running again (the Secret fixed): no longer reported.
	p.Status.ContainerStatuses[0].State = v1.ContainerState{Running: &v1.ContainerStateRunning{}}
	require.NoError(t, f.kube.Status().Update(context.Background(), p))
	f.reconcile()
	assert.Equal(t, ReasonAccountingWaiting, condition(f.cluster(), slurmv1.ConditionAccountingReady).Reason)
}

func TestAccountingRemovedWithItsSection(t *testing.T) {
	c := newCluster()
	c.Spec.Accounting = accountingSpec()
	f := newFixture(t, c, dbSecret())
	f.reconcile()
	f.accounting()
	f.update(func(c *slurmv1.SlurmCluster) { c.Spec.Accounting = nil })
	f.reconcile()
	assert.True(t, apierrors.IsNotFound(f.kube.Get(context.Background(), accountingKey, &appsv1.Deployment{})))
	assert.True(t, apierrors.IsNotFound(f.kube.Get(context.Background(), accountingKey, &v1.Service{})))
	assert.Equal(t, metav1.Condition{}, condition(f.cluster(), slurmv1.ConditionAccountingReady))
	assert.NotContains(t, f.configMap().Data, slurmconf.SlurmdbdConfFile)
	f.statefulSet()
}

// slurmdbdScript, run by the host's sh with its paths moved into a temporary directory and
// slurmdbd replaced by a script that shows what it got: the password lands in a private
// slurmdbd.conf (mode 0600) as given, shell characters and all, and the rest of /etc/slurm
// next to it; a password slurmdbd.conf cannot hold ends it with exit code 4 and no file.
func TestSlurmdbdScript(t *testing.T) {
	for _, tc := range []struct {
		name, password string
		ok             bool
	}{
		{"shell characters", "p$(id)`id`;|&<>*?[]{}'!~%^=,.:/+-@_", true},
		{"trailing newline dropped", "secret\n", true},
		{"empty", "", false},
		{"space", "a b", false},
		{"newline inside", "a\nStorageHost=evil", false},
		{"comment", "a#b", false},
		{"double quote", `a"b`, false},
		{"backslash", `a\b`, false},
		{"tab", "a\tb", false},
		{"non-ASCII", "pässword", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newSlurmdbdDirs(t, tc.password, "#!/bin/sh\necho \"args=$* conf=$SLURM_CONF pass=${pass-unset}\"\n")
			etc, run := d.etc, d.run
			out, err := d.cmd().CombinedOutput()
			conf := filepath.Join(run, "slurmdbd.conf")
			if !tc.ok {
				var exit *exec.ExitError
				require.ErrorAs(t, err, &exit, "%s", out)
				assert.Equal(t, passwordRefusedExit, exit.ExitCode())
				assert.Contains(t, string(out), "slurmdbd.conf cannot hold")
				assert.NoFileExists(t, conf)
				return
			}
			require.NoError(t, err, "%s", out)
			assert.Equal(t, "args=-D conf="+run+"/slurm.conf pass=unset\n", string(out))
			b, err := os.ReadFile(conf)
			require.NoError(t, err)
			assert.Equal(t, "StorageUser=slurm\nStoragePass="+strings.TrimRight(tc.password, "\n")+"\n", string(b))
			st, err := os.Stat(conf)
			require.NoError(t, err)
			assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())
			link, err := os.Readlink(filepath.Join(run, "slurm.key"))
			require.NoError(t, err)
			assert.Equal(t, filepath.Join(etc, "slurm.key"), link)
		})
	}
}

// slurmdbdDirs is slurmdbdScript's paths moved into a temporary directory, and slurmdbd
// replaced by a fake.
type slurmdbdDirs struct{ etc, pw, run, script string }

func newSlurmdbdDirs(t *testing.T, password, fakeSlurmdbd string) slurmdbdDirs {
	t.Helper()
	tmp := t.TempDir()
	d := slurmdbdDirs{etc: filepath.Join(tmp, "etc"), pw: filepath.Join(tmp, "pw"), run: filepath.Join(tmp, "run")}
	for _, dir := range []string{d.etc, d.pw, d.run} {
		require.NoError(t, os.Mkdir(dir, 0o755))
	}
	require.NoError(t, os.WriteFile(filepath.Join(d.etc, "slurmdbd.conf"), []byte("StorageUser=slurm\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(d.etc, "slurm.key"), []byte("key"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(d.pw, "password"), []byte(password), 0o644))
	fake := filepath.Join(tmp, "slurmdbd")
	require.NoError(t, os.WriteFile(fake, []byte(fakeSlurmdbd), 0o755))
	d.script = strings.NewReplacer(passwordDir, d.pw, slurmconf.SlurmdbdRunDir, d.run,
		slurmconf.ConfigDir, d.etc, "/usr/sbin/slurmdbd", fake).Replace(slurmdbdScript)
	return d
}

// cmd runs the script as slurmdbd's container does, checking its files every 0.2 s.
func (d slurmdbdDirs) cmd() *exec.Cmd {
	cmd := exec.Command("/bin/sh", "-c", d.script, "slurmdbd", "-D")
	cmd.Env = append(os.Environ(), "KEY_WATCH_SECONDS=0.2")
	return cmd
}

// A password changed in its Secret starts slurmdbd again in its container with the new
// one; a new password slurmdbd.conf cannot hold ends the container with exit code 4.
func TestSlurmdbdScriptPasswordChanged(t *testing.T) {
	d := newSlurmdbdDirs(t, "one", `#!/bin/sh
trap 'exit 0' TERM
grep StoragePass "${SLURM_CONF%/*}/slurmdbd.conf" >>"${SLURM_CONF%/*}/starts"
while :; do sleep 0.1; done
`)
	cmd := d.cmd()
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	starts := func() string {
		b, _ := os.ReadFile(filepath.Join(d.run, "starts"))
		return string(b)
	}
	require.Eventually(t, func() bool { return starts() == "StoragePass=one\n" }, 10*time.Second, 50*time.Millisecond, "starts: %q", starts())

	require.NoError(t, os.WriteFile(filepath.Join(d.pw, "password"), []byte("two\n"), 0o644))
	require.Eventually(t, func() bool { return starts() == "StoragePass=one\nStoragePass=two\n" }, 10*time.Second, 50*time.Millisecond, "starts: %q", starts())

	require.NoError(t, os.WriteFile(filepath.Join(d.pw, "password"), []byte("a b"), 0o644))
	var exit *exec.ExitError
	require.ErrorAs(t, cmd.Wait(), &exit, "%s", out.String())
	assert.Equal(t, passwordRefusedExit, exit.ExitCode())
	assert.Equal(t, "StoragePass=one\nStoragePass=two\n", starts())
	assert.Contains(t, out.String(), "kubeslurm: the key files in "+d.etc+" or "+d.pw+"/password changed: slurmdbd reads them again (restart)")
}
