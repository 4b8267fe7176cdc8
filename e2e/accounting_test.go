package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slurmv1 "github.com/kubeslurm/kubeslurm/api/v1alpha1"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

// mariaDBScript runs inside the Slurm root (deploy/local/slurm-exec.sh), on a tmpfs of its
// own at $DIR: a new data directory, then mariadbd as the mysql user on 127.0.0.1:$PORT
// alone, creating the test's database user from $INIT_SQL when it starts. slurmdbd wants
// innodb_snapshot_isolation off (on by default since MariaDB 11.6) and a long lock wait;
// the memory sizes are a test's, below what slurmdbd recommends. Its PID is the
// one slurm-exec.sh started with (exec all the way), so SIGTERM stops it cleanly.
const mariaDBScript = `set -e
chown mysql:mysql "$DIR"
printf '%s\n' "$INIT_SQL" >"$DIR/init.sql"
# --force: the root has no /etc/hosts to look the host name up in (grants use addresses).
mariadb-install-db --no-defaults --force --user=mysql --datadir="$DIR/data" --skip-test-db \
  --auth-root-authentication-method=socket >"$DIR/install.log" 2>&1 || { cat "$DIR/install.log" >&2; exit 1; }
exec mariadbd --no-defaults --user=mysql --datadir="$DIR/data" --socket="$DIR/mysqld.sock" \
  --pid-file="$DIR/mariadbd.pid" --port="$PORT" --bind-address=127.0.0.1 --skip-name-resolve \
  --init-file="$DIR/init.sql" --innodb-buffer-pool-size=64M --innodb-log-file-size=16M \
  --innodb-lock-wait-timeout=900 --innodb-snapshot-isolation=OFF
`

// startMariaDB runs MariaDB (Debian's mariadb-server, from the Slurm root) as a host
// process on 127.0.0.1:port, with user identified by password and allowed every right on
// database db, until the test ends. Its data lives on a tmpfs that goes with it.
func startMariaDB(t *testing.T, port int, user, password, db string) {
	t.Helper()
	sql := fmt.Sprintf("CREATE USER '%[1]s'@'127.0.0.1' IDENTIFIED BY '%[2]s';\nGRANT ALL ON %[3]s.* TO '%[1]s'@'127.0.0.1';",
		user, password, db)
	startRootDaemon(t, "MariaDB", port, mariaDBScript, "INIT_SQL="+sql)
}

// startRootDaemon runs script (sh) inside the Slurm root as a host process that serves on
// 127.0.0.1:port, with DIR (a tmpfs of its own, going with it), PORT and env set, until the
// test ends; it waits until the port accepts connections. The script must exec the daemon,
// so that SIGTERM reaches it. Its output goes to .local/logs/<name>-e2e.log.
func startRootDaemon(t *testing.T, name string, port int, script string, env ...string) {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		_ = c.Close()
		t.Fatalf("port %d is taken: the test's %s needs it", port, name)
	}
	slug := strings.ToLower(name)
	dir := "/run/kubeslurm-e2e-" + slug
	logPath := filepath.Join(runDir, "logs", slug+"-e2e.log")
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	require.NoError(t, err)
	args := []string{"--clean", "--tmpfs", dir, "--env", "DIR=" + dir, "--env", fmt.Sprintf("PORT=%d", port)}
	for _, e := range env {
		args = append(args, "--env", e)
	}
	cmd := exec.Command(filepath.Join(repoRoot, "deploy", "local", "slurm-exec.sh"), append(args, "--", "/bin/sh", "-c", script)...)
	cmd.Stdout, cmd.Stderr = log, log
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	var exitErr error
	go func() { exitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(60 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("%s did not stop within 60s of SIGTERM (log %s)", name, logPath)
		}
		_ = log.Close()
	})
	eventually(t, 120*time.Second, fmt.Sprintf("%s listening on %s (log %s)", name, addr, logPath), func() bool {
		select {
		case <-exited:
			out, _ := os.ReadFile(logPath)
			t.Fatalf("%s ended: %v\n%s", name, exitErr, out)
		default:
		}
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return false
		}
		_ = c.Close()
		return true
	})
}

// Issue 5, test 7: with spec.accounting, kubeslurm runs slurmdbd against a real MariaDB
// (Debian's, started here), slurmctld registers the cluster with it, and a finished job
// shows COMPLETED in sacct (and in slurmrestd's slurmdbd endpoints). The database password
// reaches slurmdbd from its Secret, shell and Slurm-parser characters and all, without the
// controller reading it. The auth/slurm key and then the database password are changed in
// place, each read again by slurmdbd with no container restarted.
func TestSlurmClusterAccounting(t *testing.T) {
	ctx := context.Background()
	startPodRunner(t)
	ns := namespace(t)
	kc := slurmClient(t)
	b := make([]byte, 12)
	_, err := rand.Read(b)
	require.NoError(t, err)
	// No quote or backslash (the SQL above quotes it), but '$', '`', ';' and '=' for the
	// shell and slurmdbd.conf to keep as they are.
	password := "kS" + hex.EncodeToString(b) + "!$%&*+,-./:;<=>?@^_`{|}~[]()"
	startMariaDB(t, 3316, "slurm", password, "slurm_acct_db")
	_, err = kube.CoreV1().Secrets(ns).Create(ctx, &v1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "slurm-db"},
		// A trailing newline, as `kubectl create secret --from-file` of an echoed file has.
		Data: map[string][]byte{"password": []byte(password + "\n")},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	applyExample(t, ns, "slurmcluster-accounting.yaml")
	t.Cleanup(func() {
		if t.Failed() {
			logDaemons(t, ns, "slurmdbd", "slurmctld")
		}
	})
	key := client.ObjectKey{Namespace: ns, Name: "slurm"}
	// Before the cluster is deleted, its worker leaves while slurmctld still runs: a worker
	// pod being deleted drains its node through slurmctld, and would wait out its grace
	// period for a slurmctld deleted with it.
	t.Cleanup(func() {
		require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			c := &slurmv1.SlurmCluster{}
			if err := kc.Get(ctx, key, c); err != nil {
				return err
			}
			c.Spec.NodeSets[0].NodeSelector = map[string]string{"kubeslurm.io/pod-runner": "none"}
			return kc.Update(ctx, c)
		}))
		eventually(t, 90*time.Second, "the worker pod gone", func() bool {
			pods, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: wellknown.SlurmComponentLabel + "=slurmd"})
			return err == nil && len(pods.Items) == 0
		})
	})

	c := &slurmv1.SlurmCluster{}
	eventually(t, 180*time.Second, "AccountingReady and ControllerReady True, one ready worker", func() bool {
		return kc.Get(ctx, key, c) == nil &&
			meta.IsStatusConditionTrue(c.Status.Conditions, slurmv1.ConditionAccountingReady) &&
			meta.IsStatusConditionTrue(c.Status.Conditions, slurmv1.ConditionControllerReady) &&
			c.Status.ReadyWorkers == 1
	})
	// The password is in no object the controller wrote.
	cm, err := kube.CoreV1().ConfigMaps(ns).Get(ctx, c.Status.ConfigMap, metav1.GetOptions{})
	require.NoError(t, err)
	require.Contains(t, cm.Data, "slurmdbd.conf")
	for name, text := range cm.Data {
		assert.NotContains(t, text, password, name)
	}

	// slurmctld registered the cluster itself.
	eventually(t, 60*time.Second, "sacctmgr lists cluster acct", func() bool {
		out, ok := slurmCommand(t, c, "/usr/bin/sacctmgr", "-n", "-P", "show", "cluster", "format=Cluster")
		// The output is the pod's log: the pod runner's header line, then sacctmgr's.
		return ok && regexp.MustCompile(`(?m)^acct$`).MatchString(out)
	})

	accounted := func() string {
		id := clusterSbatch(t, c, "--chdir", "/tmp", "--output", "/dev/null", "--wrap", "true")
		eventually(t, 120*time.Second, "sacct shows job "+id+" COMPLETED", func() bool {
			out, ok := slurmCommand(t, c, "/usr/bin/sacct", "-X", "-n", "-P", "-j", id, "-o", "JobID,State")
			return ok && regexp.MustCompile(`(?m)^`+id+`\|COMPLETED$`).MatchString(out)
		})
		return id
	}
	id := accounted()

	// slurmrestd serves the same record from slurmdbd (openapi/slurmdbd).
	eventually(t, 60*time.Second, "slurmrestd's slurmdb endpoint has job "+id+" COMPLETED", func() bool {
		body, code := restGet(t, c, "http://127.0.0.1:6930/slurmdb/v0.0.44/job/"+id)
		return code == 200 && regexp.MustCompile(`"job_id":\s*`+id+`\b`).Match(body) &&
			regexp.MustCompile(`"current":\s*\[\s*"COMPLETED"`).Match(body)
	})

	// The auth/slurm key rotated in place reaches slurmdbd too: it starts again in its
	// container with the new key set. Once the old key is dropped, slurmctld signs with the
	// new one alone, so a job's record reaches sacct only through a slurmdbd that read it.
	daemons := clusterDaemons(t, ns, "slurmctld", "slurmd", "slurmdbd")
	require.Len(t, daemons, 3)
	// (slurmdbd's first start on the new database ends once, before this.)
	before := restarts(t, ns, daemons)
	rotateSlurmKey(t, c, daemons)
	accounted()
	assert.Equal(t, before, restarts(t, ns, daemons), "no container restarted, no pod replaced")

	// The database password changed, first in the database (slurmdbd's open connection
	// stays), then in its Secret: slurmdbd starts again in its container with the new one,
	// and a job's record reaches sacct only through a slurmdbd that connected with it.
	dbd := daemonOf(t, daemons, "slurmdbd")
	_, err = rand.Read(b)
	require.NoError(t, err)
	newPassword := "kS" + hex.EncodeToString(b) + "-2"
	out, err := runCmd(filepath.Join(repoRoot, "deploy", "local", "slurm-exec.sh"), "--clean", "--",
		"/usr/bin/mariadb", "--no-defaults", "-h", "127.0.0.1", "-P", "3316", "-u", "slurm", "-p"+password,
		"-e", "SET PASSWORD = PASSWORD('"+newPassword+"')")
	require.NoError(t, err, "the password changed in MariaDB: %s", out)
	starts := reloads(t, ns, dbd)
	require.NoError(t, writeSecretData(ns, "slurm-db", "password", []byte(newPassword+"\n")))
	start := time.Now()
	eventually(t, 90*time.Second, "slurmdbd started again with the new password", func() bool {
		return reloads(t, ns, dbd) > starts
	})
	t.Logf("the database password changed: slurmdbd started again after %s", time.Since(start).Round(time.Second))
	accounted()
	assert.Equal(t, before, restarts(t, ns, daemons), "no container restarted, no pod replaced")
}

// logDaemons logs the pod runner's container logs of the namespace's pods whose container
// is one of names (the Slurm daemons' own logs), for a failed test.
func logDaemons(t *testing.T, ns string, names ...string) {
	for _, name := range names {
		files, _ := filepath.Glob(filepath.Join(runDir, "podrunner", "logs", ns+"_*_"+name+".log"))
		for _, f := range files {
			b, _ := os.ReadFile(f)
			if len(b) > 8000 {
				b = b[len(b)-8000:]
			}
			t.Logf("%s:\n%s", filepath.Base(f), b)
		}
	}
}
