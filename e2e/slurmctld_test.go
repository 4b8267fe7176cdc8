package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slurmv1 "github.com/kubeslurm/kubeslurm/api/v1alpha1"
	"github.com/kubeslurm/kubeslurm/pkg/controller/slurmcluster"
	"github.com/kubeslurm/kubeslurm/pkg/slurm"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

// clusterToken mints a JWT for the slurm user from the cluster's JWT key Secret.
func clusterToken(t *testing.T, c *slurmv1.SlurmCluster) string {
	t.Helper()
	secret, dataKey := slurmcluster.JWTKeySecret(c)
	s, err := kube.CoreV1().Secrets(c.Namespace).Get(context.Background(), secret, metav1.GetOptions{})
	require.NoError(t, err)
	return tokenFromKey(t, s.Data[dataKey])
}

// tokenFromKey mints a JWT for the slurm user signed with the HS256 key jwtKey.
func tokenFromKey(t *testing.T, jwtKey []byte) string {
	t.Helper()
	keyFile := filepath.Join(t.TempDir(), "jwt.key")
	require.NoError(t, os.WriteFile(keyFile, jwtKey, 0o600))
	token, err := slurm.NewTokenSource(keyFile, "slurm", 10*time.Minute).Token()
	require.NoError(t, err)
	return token
}

// restGet GETs url from the cluster's slurmrestd with a minted token.
func restGet(t *testing.T, c *slurmv1.SlurmCluster, url string) ([]byte, int) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	req.Header.Set("X-SLURM-USER-NAME", "slurm")
	req.Header.Set("X-SLURM-USER-TOKEN", clusterToken(t, c))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, 0
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return body, resp.StatusCode
}

// slurmCommand runs a Slurm command in a pod of the cluster's slurmctld image, as a user
// would from a login pod (the cluster's /etc/slurm mounted, as the slurm user), waits for it
// to end and returns its output (the pod runner's container log) and whether it exited 0.
// It authenticates with auth/jwt: a token minted from the cluster's JWT key (Slurm's
// commands make auth/slurm credentials only through a local sackd or slurmd).
func slurmCommand(t *testing.T, c *slurmv1.SlurmCluster, args ...string) (string, bool) {
	t.Helper()
	return slurmCommandWithToken(t, c, clusterToken(t, c), args...)
}

// commandOutput is what the command of slurmCommand printed: its pod's log without the pod
// runner's header lines.
func commandOutput(log string) string {
	var lines []string
	for _, l := range strings.Split(log, "\n") {
		if !strings.HasPrefix(l, "===== ") {
			lines = append(lines, l)
		}
	}
	return strings.TrimSpace(strings.Join(lines, "\n"))
}

// sbatchJobID is the job id in the log of slurmCommand's `sbatch --parsable`: its last line
// (a warning may come before it).
func sbatchJobID(log string) string { return lastLine(commandOutput(log)) }

// lastLine is the last line of s, trimmed (s trimmed first: a final newline ends no line).
func lastLine(s string) string {
	s = strings.TrimSpace(s)
	return strings.TrimSpace(s[strings.LastIndexByte(s, '\n')+1:])
}

// slurmCommandWithToken is slurmCommand authenticated with token.
func slurmCommandWithToken(t *testing.T, c *slurmv1.SlurmCluster, token string, args ...string) (string, bool) {
	t.Helper()
	ctx := context.Background()
	name := fmt.Sprintf("slurm-cmd-%d", time.Now().UnixNano()%1_000_000_000)
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: name},
		Spec: v1.PodSpec{
			RestartPolicy:   v1.RestartPolicyNever,
			SecurityContext: slurmcluster.SlurmPodSecurity(),
			Containers: []v1.Container{{
				Name: "cmd", Image: slurmcluster.DefaultControllerImage, Command: args, WorkingDir: "/tmp",
				Env:          []v1.EnvVar{{Name: "SLURM_JWT", Value: token}},
				VolumeMounts: []v1.VolumeMount{{Name: "config", MountPath: "/etc/slurm", ReadOnly: true}},
			}},
			Volumes: []v1.Volume{slurmcluster.ConfigVolume(c)},
		},
	}
	_, err := kube.CoreV1().Pods(c.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)
	var phase v1.PodPhase
	eventually(t, 60*time.Second, "pod "+name+" ("+strings.Join(args, " ")+") ended", func() bool {
		p, err := kube.CoreV1().Pods(c.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		phase = p.Status.Phase
		return phase == v1.PodSucceeded || phase == v1.PodFailed
	})
	out, err := os.ReadFile(filepath.Join(runDir, "podrunner", "logs", c.Namespace+"_"+name+"_cmd.log"))
	require.NoError(t, err)
	require.NoError(t, kube.CoreV1().Pods(c.Namespace).Delete(ctx, name, metav1.DeleteOptions{}))
	t.Logf("%s: %s\n%s", strings.Join(args, " "), phase, out)
	return string(out), phase == v1.PodSucceeded
}

// clusterSbatch submits a batch job with sbatch args through the cluster's Slurm and
// returns its id.
func clusterSbatch(t *testing.T, c *slurmv1.SlurmCluster, args ...string) string {
	t.Helper()
	out, ok := slurmCommand(t, c, append([]string{"/usr/bin/sbatch"}, args...)...)
	require.True(t, ok, out)
	m := regexp.MustCompile(`Submitted batch job (\d+)`).FindStringSubmatch(out)
	require.NotNil(t, m, out)
	return m[1]
}

// workerConfCache is the slurm.conf a configless worker fetched from slurmctld: slurmd's
// conf-cache in its spool, an emptyDir the pod runner keeps as a directory of the pod.
func workerConfCache(t *testing.T, ns, worker string) string {
	t.Helper()
	p, err := kube.CoreV1().Pods(ns).Get(context.Background(), worker, metav1.GetOptions{})
	require.NoError(t, err)
	b, err := os.ReadFile(filepath.Join(runDir, "podrunner", "pods", string(p.UID), "volumes", "spool", "conf-cache", "slurm.conf"))
	require.NoError(t, err)
	return string(b)
}

// loginConfCache is the slurm.conf the login pod's sackd (configless) fetched from
// slurmctld, in the pod's run directory (an emptyDir the pod runner keeps), and the pod.
func loginConfCache(t *testing.T, ns string) (string, *v1.Pod) {
	t.Helper()
	pods, err := kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: wellknown.SlurmComponentLabel + "=login"})
	require.NoError(t, err)
	require.Len(t, pods.Items, 1)
	p := &pods.Items[0]
	b, _ := os.ReadFile(filepath.Join(runDir, "podrunner", "pods", string(p.UID), "volumes", "run", "conf", "slurm.conf"))
	return string(b), p
}

// updateCluster changes the SlurmCluster key (read into c), retrying on conflicts.
func updateCluster(t *testing.T, kc client.Client, key client.ObjectKey, c *slurmv1.SlurmCluster, mutate func(*slurmv1.SlurmCluster)) {
	t.Helper()
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := kc.Get(context.Background(), key, c); err != nil {
			return err
		}
		mutate(c)
		return kc.Update(context.Background(), c)
	}))
}

// Issue 5, tests 1 and 3: a SlurmCluster yields a working Slurm from the rendered
// configuration alone (no hand-written slurm.conf): slurmctld, and a slurmd worker that
// registers as the Kubernetes node it runs on and runs jobs. Slurm's own client reaches it
// through the cluster's Service. Killing the slurmctld pod brings it back with its state:
// the running job keeps running and a held job is still there. A partition change reaches
// slurmctld; a refused one, or one slurmctld itself refuses, leaves it running as it was.
func TestSlurmClusterRunsSlurm(t *testing.T) {
	ctx := context.Background()
	startPodRunner(t)
	ns := namespace(t)
	kc := slurmClient(t)
	applyExample(t, ns, "slurmcluster-local.yaml")
	key := client.ObjectKey{Namespace: ns, Name: "slurm"}
	c := &slurmv1.SlurmCluster{}
	ready := func(oldUID string) func() bool {
		return func() bool {
			if kc.Get(ctx, key, c) != nil || !meta.IsStatusConditionTrue(c.Status.Conditions, slurmv1.ConditionControllerReady) ||
				c.Status.ReadyWorkers != 1 {
				return false
			}
			p, err := kube.CoreV1().Pods(ns).Get(ctx, "slurm-controller-0", metav1.GetOptions{})
			return err == nil && string(p.UID) != oldUID
		}
	}
	eventually(t, 120*time.Second, "ControllerReady True and one ready worker", ready(""))
	assert.Equal(t, int32(1), c.Status.DesiredWorkers)

	out, ok := slurmCommand(t, c, "/usr/bin/scontrol", "ping")
	require.True(t, ok, out)
	assert.Contains(t, out, "Slurmctld(primary) at slurm-controller-0 is UP")
	out, ok = slurmCommand(t, c, "/usr/bin/scontrol", "show", "config")
	require.True(t, ok, out)
	assert.Regexp(t, `(?m)^ClusterName\s+= podrun$`, out)
	assert.Regexp(t, `(?m)^SlurmctldPort\s+= 6917$`, out)
	// The worker registered under its Kubernetes node's name, with its NodeSet's features.
	eventually(t, 60*time.Second, "sinfo lists the worker idle", func() bool {
		out, ok = slurmCommand(t, c, "/usr/bin/sinfo", "-h", "-N", "-o", "%N %P %t %f")
		return ok && strings.Contains(out, runnerNode+" main* idle runner,local")
	})

	// slurmrestd answers a token minted from the cluster's JWT key.
	var nodes struct {
		Nodes []struct {
			Name string `json:"name"`
		} `json:"nodes"`
	}
	eventually(t, 60*time.Second, "slurmrestd lists the worker", func() bool {
		body, code := restGet(t, c, "http://127.0.0.1:6920/slurm/v0.0.44/nodes")
		return code == http.StatusOK && json.Unmarshal(body, &nodes) == nil && len(nodes.Nodes) == 1 && nodes.Nodes[0].Name == runnerNode
	})

	// The controller reads the cluster's Slurm (through its slurmrestd, with a token of its
	// own key, which slurmctld trusts through the JWKS in the cluster's configuration).
	eventually(t, 90*time.Second, "status.nodeSummary idle=1", func() bool {
		return kc.Get(ctx, key, c) == nil && c.Status.NodeSummary == "idle=1" && c.Status.Nodes.Idle == 1
	})

	// A login pod: sackd fetched the configuration and gives `sinfo` (its readiness probe,
	// run inside it) its credentials.
	eventually(t, 90*time.Second, "the login pod ready", func() bool {
		d, err := kube.AppsV1().Deployments(ns).Get(ctx, "slurm-login-users", metav1.GetOptions{})
		return err == nil && d.Status.ReadyReplicas == 1
	})

	submit := func(args ...string) string {
		out, ok := slurmCommand(t, c, append([]string{"/usr/bin/sbatch", "--partition", "main", "--chdir", "/tmp", "--output", "/dev/null"}, args...)...)
		require.True(t, ok, out)
		m := regexp.MustCompile(`Submitted batch job (\d+)`).FindStringSubmatch(out)
		require.NotNil(t, m, out)
		return m[1]
	}
	// Before the cluster goes (its workers drain, waiting for their jobs): no job left.
	t.Cleanup(func() { slurmCommand(t, c, "/usr/bin/scancel", "--user=slurm") })
	running := submit("--wrap", "sleep 600")
	held := submit("--hold", "--wrap", "true")
	squeue := func() string {
		out, ok := slurmCommand(t, c, "/usr/bin/squeue", "-h", "-o", "%i %T %R")
		require.True(t, ok, out)
		return out
	}
	eventually(t, 60*time.Second, "job "+running+" running on the worker", func() bool {
		return strings.Contains(squeue(), running+" RUNNING "+runnerNode)
	})

	// The busy worker is labelled so, and its PodDisruptionBudget refuses its eviction (a
	// `kubectl drain` of its node waits for the job).
	worker := "slurm-runner-" + runnerNode
	eventually(t, 90*time.Second, "the busy worker labelled and counted by its PodDisruptionBudget", func() bool {
		p, err := kube.CoreV1().Pods(ns).Get(ctx, worker, metav1.GetOptions{})
		if err != nil || p.Labels[slurmcluster.BusyLabel] != "true" {
			return false
		}
		pdb, err := kube.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "slurm-busy-workers", metav1.GetOptions{})
		return err == nil && pdb.Status.ExpectedPods == 1 && pdb.Status.DisruptionsAllowed == 0
	})
	err := kube.PolicyV1().Evictions(ns).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: worker}})
	require.Error(t, err, "evicting a busy worker")
	assert.True(t, apierrors.IsTooManyRequests(err), "refused by the disruption budget: %v", err)

	old, err := kube.CoreV1().Pods(ns).Get(ctx, "slurm-controller-0", metav1.GetOptions{})
	require.NoError(t, err)
	require.NoError(t, kube.CoreV1().Pods(ns).Delete(ctx, old.Name, metav1.DeleteOptions{}))
	eventually(t, 180*time.Second, "a new slurmctld pod ready", ready(string(old.UID)))
	out = squeue()
	assert.Contains(t, out, running+" RUNNING "+runnerNode, "the running job survived the slurmctld pod's restart")
	assert.Contains(t, out, held+" PENDING (JobHeldUser)", "the held job survived the slurmctld pod's restart")

	// Issue 5, test 2: a partition change in the spec reaches slurmctld in place (its
	// script has it re-read the files; the same pod) while the job keeps running, and
	// slurmctld's reconfigure sends it to the configless worker and login pod.
	update := func(mutate func(*slurmv1.SlurmCluster)) { updateCluster(t, kc, key, c, mutate) }
	require.NoError(t, kc.Get(ctx, key, c))
	applied := c.Status.AppliedConfigHash
	ctld, err := kube.CoreV1().Pods(ns).Get(ctx, "slurm-controller-0", metav1.GetOptions{})
	require.NoError(t, err)
	require.NotEmpty(t, applied)
	require.Contains(t, workerConfCache(t, ns, worker), " MaxTime=1:00:00 ")
	loginConf, login := loginConfCache(t, ns)
	require.Contains(t, loginConf, " MaxTime=1:00:00 ")
	update(func(c *slurmv1.SlurmCluster) { c.Spec.Partitions[0].MaxTime = "2:00:00" })
	eventually(t, 180*time.Second, "the new configuration applied", func() bool {
		return kc.Get(ctx, key, c) == nil && c.Status.AppliedConfigHash != applied &&
			c.Status.AppliedConfigHash == c.Status.ConfigHash && c.Status.LastReconfigureTime != nil &&
			meta.IsStatusConditionTrue(c.Status.Conditions, slurmv1.ConditionConfigApplied)
	})
	eventually(t, 60*time.Second, "sinfo shows the new MaxTime", func() bool {
		out, ok := slurmCommand(t, c, "/usr/bin/sinfo", "-h", "-o", "%P %l")
		return ok && strings.Contains(out, "main* 2:00:00")
	})
	eventually(t, 90*time.Second, "the worker's slurmd told of the new configuration", func() bool {
		return strings.Contains(workerConfCache(t, ns, worker), " MaxTime=2:00:00 ")
	})
	// The login pod's sackd (the slurm user's, as slurmctld's message is) fetches it too.
	eventually(t, 60*time.Second, "the login pod's sackd fetched the new configuration", func() bool {
		conf, now := loginConfCache(t, ns)
		return strings.Contains(conf, " MaxTime=2:00:00 ") && now.UID == login.UID
	})
	assert.Contains(t, squeue(), running+" RUNNING "+runnerNode, "the running job survived the reconfiguration")
	now, err := kube.CoreV1().Pods(ns).Get(ctx, "slurm-controller-0", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, ctld.UID, now.UID, "reconfigured in place: the same slurmctld pod")
	assert.Equal(t, c.Status.AppliedConfigHash, now.Annotations[wellknown.SlurmctldConfigAnnotation])

	// A refused value: ConfigValid False, and slurmctld keeps running the old configuration.
	applied = c.Status.AppliedConfigHash
	update(func(c *slurmv1.SlurmCluster) { c.Spec.ExtraConfig = "SlurmctldHost=elsewhere" })
	eventually(t, 30*time.Second, "ConfigValid False", func() bool {
		return kc.Get(ctx, key, c) == nil && meta.IsStatusConditionFalse(c.Status.Conditions, slurmv1.ConditionConfigValid)
	})
	assert.Contains(t, meta.FindStatusCondition(c.Status.Conditions, slurmv1.ConditionConfigValid).Message, "SlurmctldHost")
	time.Sleep(5 * time.Second) // a restart, were one wrongly started, would show by now
	require.NoError(t, kc.Get(ctx, key, c))
	assert.Equal(t, applied, c.Status.AppliedConfigHash)
	assert.True(t, meta.IsStatusConditionTrue(c.Status.Conditions, slurmv1.ConditionConfigApplied))
	now, err = kube.CoreV1().Pods(ns).Get(ctx, "slurm-controller-0", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, ctld.UID, now.UID, "slurmctld was not restarted for a refused spec")
	update(func(c *slurmv1.SlurmCluster) { c.Spec.ExtraConfig = "" })

	// A line kubeslurm's validation lets through but slurmctld refuses: a scheduler plugin
	// that does not exist. slurmctld runs on with the applied configuration (never down),
	// ConfigApplied says why in slurmctld's words, the job runs on, the rejected
	// configuration is not retried, a new slurmctld pod starts on the applied one, and a
	// fixed spec is applied.
	rejectedByCtld(t, c, update, squeue, running)
	// A slurmctld that starts on a configuration it was not told of in place sends it to
	// the worker.
	startedOnNewConfig(t, c, update, squeue, running, worker)

	// Issue 5, test 4: scaling in (the runner's node leaves the NodeSet's selector) drains
	// the worker's Slurm node and waits for its running job before the node goes.
	out, ok = slurmCommand(t, c, "/usr/bin/scancel", running)
	require.True(t, ok, out)

	// Issue 5, test 5: a worker whose slurmd runs while Slurm has no node of its name (here:
	// its record deleted by hand) is recreated, with an event, and registers again.
	before, err := kube.CoreV1().Pods(ns).Get(ctx, worker, metav1.GetOptions{})
	require.NoError(t, err)
	eventually(t, 60*time.Second, "the idle node's record deleted", func() bool {
		_, ok := slurmCommand(t, c, "/usr/bin/scontrol", "delete", "nodename="+runnerNode)
		return ok
	})
	eventually(t, 120*time.Second, "the worker pod recreated and ready", func() bool {
		p, err := kube.CoreV1().Pods(ns).Get(ctx, worker, metav1.GetOptions{})
		return err == nil && p.UID != before.UID && podReady(p)
	})
	eventually(t, 30*time.Second, "event SlurmWorkerNotRegistered", func() bool {
		return strings.Contains(namedClusterEvents(t, ns, "slurm", wellknown.EventSlurmWorkerNotRegistered), "Deleted worker pod "+worker)
	})
	eventually(t, 60*time.Second, "the node registered again, idle", func() bool {
		out, ok := slurmCommand(t, c, "/usr/bin/sinfo", "-h", "-N", "-o", "%N %t")
		return ok && strings.Contains(out, runnerNode+" idle")
	})

	short := submit("--wrap", "sleep 20")
	eventually(t, 60*time.Second, "job "+short+" running on the worker", func() bool {
		return strings.Contains(squeue(), short+" RUNNING "+runnerNode)
	})
	update(func(c *slurmv1.SlurmCluster) {
		c.Spec.NodeSets[0].NodeSelector = map[string]string{"kubeslurm.io/pod-runner": "never"}
	})
	eventually(t, 60*time.Second, "the worker's node draining while its job runs", func() bool {
		out, ok := slurmCommand(t, c, "/usr/bin/scontrol", "show", "node", runnerNode)
		return ok && regexp.MustCompile(`State=\S*DRAIN`).MatchString(out) &&
			strings.Contains(out, "Reason=kubeslurm: worker pod "+worker+" deleted")
	})
	assert.Contains(t, squeue(), short+" RUNNING "+runnerNode, "the job runs on while the node drains")
	_, err = kube.CoreV1().Pods(ns).Get(ctx, worker, metav1.GetOptions{})
	require.NoError(t, err, "the worker pod waits for the job")
	eventually(t, 90*time.Second, "the worker pod gone after its job ended", func() bool {
		_, err := kube.CoreV1().Pods(ns).Get(ctx, worker, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	out, ok = slurmCommand(t, c, "/usr/bin/scontrol", "show", "job", short)
	require.True(t, ok, out)
	assert.Contains(t, out, "JobState=COMPLETED", "the job ended by itself, not killed")
	out, ok = slurmCommand(t, c, "/usr/bin/sinfo", "-h", "-N", "-o", "%N")
	require.True(t, ok, out)
	assert.NotContains(t, out, runnerNode, "the drained node was removed from Slurm")
	require.NoError(t, kc.Get(ctx, key, c))
	assert.Equal(t, int32(0), c.Status.DesiredWorkers)
}

// waitRejectedBySlurmctld waits until c (refreshed) has ConfigApplied False for a
// configuration slurmctld refused, calling each (if not nil) at every look; it returns the
// condition.
func waitRejectedBySlurmctld(t *testing.T, kc client.Client, c *slurmv1.SlurmCluster, timeout time.Duration, each func()) *metav1.Condition {
	t.Helper()
	var cond *metav1.Condition
	eventually(t, timeout, "ConfigApplied False, RejectedBySlurmctld", func() bool {
		if each != nil {
			each()
		}
		if kc.Get(context.Background(), client.ObjectKeyFromObject(c), c) != nil {
			return false
		}
		cond = meta.FindStatusCondition(c.Status.Conditions, slurmv1.ConditionConfigApplied)
		return cond != nil && cond.Status == metav1.ConditionFalse && cond.Reason == slurmcluster.ReasonRejectedBySlurmctld
	})
	return cond
}

// waitFixedConfigApplied waits until c (refreshed) runs a configuration none of before
// (the refused one, maybe the one applied then), nothing refused any more.
func waitFixedConfigApplied(t *testing.T, kc client.Client, c *slurmv1.SlurmCluster, timeout time.Duration, before ...string) {
	t.Helper()
	eventually(t, timeout, "the fixed configuration applied", func() bool {
		return kc.Get(context.Background(), client.ObjectKeyFromObject(c), c) == nil && !slices.Contains(before, c.Status.ConfigHash) &&
			c.Status.AppliedConfigHash == c.Status.ConfigHash && c.Status.RejectedConfigHash == "" &&
			meta.IsStatusConditionTrue(c.Status.Conditions, slurmv1.ConditionConfigApplied)
	})
}

// rejectedByCtld is TestSlurmClusterRunsSlurm's part for a configuration slurmctld itself
// refuses (issue 5, test 2): running is the id of a job running on the worker.
func rejectedByCtld(t *testing.T, c *slurmv1.SlurmCluster, update func(func(*slurmv1.SlurmCluster)), squeue func() string, running string) {
	ctx := context.Background()
	kc := slurmClient(t)
	key := client.ObjectKeyFromObject(c)
	require.NoError(t, kc.Get(ctx, key, c))
	applied := c.Status.AppliedConfigHash
	require.Equal(t, applied, c.Status.ConfigHash)
	podName := slurmcluster.ControllerName(c) + "-0"
	ctld, err := kube.CoreV1().Pods(c.Namespace).Get(ctx, podName, metav1.GetOptions{})
	require.NoError(t, err)
	ping := func() bool {
		out, ok := slurmCommand(t, c, "/usr/bin/scontrol", "ping")
		return ok && strings.Contains(out, "Slurmctld(primary) at slurm-controller-0 is UP")
	}
	start := time.Now()
	update(func(c *slurmv1.SlurmCluster) { c.Spec.ExtraConfig = "SchedulerType=sched/nonexistent" })
	// slurmctld answers all along: each ping until the refusal is known must find it UP.
	pings := 0
	cond := waitRejectedBySlurmctld(t, kc, c, 180*time.Second, func() {
		require.True(t, ping(), "slurmctld UP while it is told of a configuration it refuses")
		pings++
	})
	rejected := c.Status.ConfigHash
	require.NotEqual(t, applied, rejected)
	assert.Equal(t, rejected, c.Status.RejectedConfigHash)
	assert.Equal(t, applied, c.Status.AppliedConfigHash)
	t.Logf("rejected %s after the spec change (%d pings, all UP): ConfigApplied: %s", time.Since(start).Round(time.Second), pings, cond.Message)
	// slurmctld's own words, from its log through the annotations its script wrote.
	assert.Contains(t, cond.Message, "slurmctld refused configuration "+rejected+": ")
	assert.Contains(t, cond.Message, "error: cannot create sched context for sched/nonexistent")
	assert.Contains(t, cond.Message, "fatal: Failed to initialize the various schedulers")
	assert.Contains(t, cond.Message, "it runs configuration "+applied+" until the spec changes")
	eventually(t, 30*time.Second, "event SlurmConfigRejected", func() bool {
		return strings.Contains(namedClusterEvents(t, c.Namespace, c.Name, wellknown.EventSlurmConfigRejected), "slurmctld refused configuration "+rejected)
	})
	// The configuration slurmctld runs (and serves to its configless workers), in the same pod.
	out, ok := slurmCommand(t, c, "/usr/bin/scontrol", "show", "config")
	require.True(t, ok, out)
	assert.Regexp(t, `(?m)^SchedulerType\s+= sched/backfill$`, out)
	assert.Contains(t, squeue(), running+" RUNNING "+runnerNode, "the running job survived the rejected configuration")
	now, err := kube.CoreV1().Pods(c.Namespace).Get(ctx, podName, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, ctld.UID, now.UID, "the same slurmctld pod")
	assert.Equal(t, applied, now.Annotations[wellknown.SlurmctldConfigAnnotation])

	// Not retried.
	time.Sleep(10 * time.Second) // a retry would show by now
	require.NoError(t, kc.Get(ctx, key, c))
	assert.Equal(t, rejected, c.Status.RejectedConfigHash)
	assert.Equal(t, slurmcluster.ReasonRejectedBySlurmctld, meta.FindStatusCondition(c.Status.Conditions, slurmv1.ConditionConfigApplied).Reason)
	assert.Equal(t, 1, strings.Count(namedClusterEvents(t, c.Namespace, c.Name, wellknown.EventSlurmConfigRejected), rejected), "one event")

	// A new slurmctld pod while the spec's configuration is refused: its script finds it
	// refused at start and starts slurmctld on the applied one (the kept ConfigMap).
	require.NoError(t, kube.CoreV1().Pods(c.Namespace).Delete(ctx, podName, metav1.DeleteOptions{}))
	start = time.Now()
	eventually(t, 180*time.Second, "a new slurmctld pod ready on configuration "+applied, func() bool {
		p, err := kube.CoreV1().Pods(c.Namespace).Get(ctx, podName, metav1.GetOptions{})
		if err == nil {
			now = p
		}
		return err == nil && p.UID != ctld.UID && podReady(p) && p.Annotations[wellknown.SlurmctldConfigAnnotation] == applied &&
			p.Annotations[wellknown.SlurmctldRefusedConfigAnnotation] == rejected
	})
	t.Logf("the new slurmctld pod ready on configuration %s %s after the old one's deletion", applied, time.Since(start).Round(time.Second))
	eventually(t, 30*time.Second, "scontrol ping: the new slurmctld UP", ping)
	out, ok = slurmCommand(t, c, "/usr/bin/scontrol", "show", "config")
	require.True(t, ok, out)
	assert.Regexp(t, `(?m)^SchedulerType\s+= sched/backfill$`, out)
	assert.Contains(t, squeue(), running+" RUNNING "+runnerNode, "the running job survived the new slurmctld pod")
	require.NoError(t, kc.Get(ctx, key, c))
	assert.Equal(t, rejected, c.Status.RejectedConfigHash)
	assert.Equal(t, applied, c.Status.AppliedConfigHash)
	ctld = now

	// A fixed spec: applied in place, and no longer rejected.
	start = time.Now()
	update(func(c *slurmv1.SlurmCluster) { c.Spec.ExtraConfig = "SchedulerType=sched/builtin" })
	waitFixedConfigApplied(t, kc, c, 180*time.Second, rejected, applied)
	t.Logf("fixed configuration %s applied %s after the spec change", c.Status.AppliedConfigHash, time.Since(start).Round(time.Second))
	out, ok = slurmCommand(t, c, "/usr/bin/scontrol", "show", "config")
	require.True(t, ok, out)
	assert.Regexp(t, `(?m)^SchedulerType\s+= sched/builtin$`, out)
	assert.Contains(t, squeue(), running+" RUNNING "+runnerNode, "the running job survived the fixed configuration")
	now, err = kube.CoreV1().Pods(c.Namespace).Get(ctx, podName, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, ctld.UID, now.UID, "applied in place")
}

// Issue 5: a cluster whose first configuration slurmctld refuses has nothing to run
// instead. The refusal is told in slurmctld's words, its pod waits (not ready, its
// container not restarted), and a fixed spec starts slurmctld within seconds, without a
// kubelet back-off.
func TestSlurmClusterFirstConfigurationRefused(t *testing.T) {
	startPodRunner(t)
	ns := namespace(t)
	kc := slurmClient(t)
	key := client.ObjectKey{Namespace: ns, Name: "slurm"}
	c := createLocalCluster(t, ns, func(c *slurmv1.SlurmCluster) { c.Spec.ExtraConfig = "SchedulerType=sched/nonexistent" })
	podName := slurmcluster.ControllerName(c) + "-0"
	cond := waitRejectedBySlurmctld(t, kc, c, 120*time.Second, nil)
	rejected := c.Status.ConfigHash
	assert.Contains(t, cond.Message, "slurmctld refused configuration "+rejected+": ")
	assert.Contains(t, cond.Message, "fatal: Failed to initialize the various schedulers")
	assert.Contains(t, cond.Message, "it is not running: it starts on the spec's next configuration at once")
	assert.Empty(t, c.Status.AppliedConfigHash)
	assert.False(t, meta.IsStatusConditionTrue(c.Status.Conditions, slurmv1.ConditionControllerReady))
	p := getPod(t, ns, podName)
	assert.False(t, podReady(p))
	require.Len(t, p.Status.ContainerStatuses, 1)
	assert.Zero(t, p.Status.ContainerStatuses[0].RestartCount, "the script waits for a new configuration; it does not end")

	start := time.Now()
	updateCluster(t, kc, key, c, func(c *slurmv1.SlurmCluster) { c.Spec.ExtraConfig = "SchedulerType=sched/builtin" })
	waitFixedConfigApplied(t, kc, c, 60*time.Second, rejected)
	t.Logf("slurmctld ran the fixed configuration %s after the spec change", time.Since(start).Round(time.Second))
	c = waitSlurmClusterReady(t, ns, runnerNode)
	out, ok := slurmCommand(t, c, "/usr/bin/scontrol", "show", "config")
	require.True(t, ok, out)
	assert.Regexp(t, `(?m)^SchedulerType\s+= sched/builtin$`, out)
	p = getPod(t, ns, podName)
	assert.Equal(t, int32(0), p.Status.ContainerStatuses[0].RestartCount, "the same container")
}

// A configuration slurmctld accepts but hangs on: its SlurmctldPrimaryOnProg never ends,
// and slurmctld runs it in the new process of the reconfigure, before that process takes
// over; the running one waits for it and answers no request meanwhile. After
// spec.controller.reconfigureTimeoutSeconds the script stops the new process (and the
// program), slurmctld goes on with the configuration before, in the same pod, and the
// configuration is refused with why; the running job is kept. A new slurmctld pod
// meanwhile starts on that configuration, hangs before it answers anything, and is stopped
// the same way, slurmctld starting on the configuration before. A fixed spec is taken.
func TestSlurmClusterHungReconfigureStopped(t *testing.T) {
	startPodRunner(t)
	ns := namespace(t)
	kc := slurmClient(t)
	key := client.ObjectKey{Namespace: ns, Name: "slurm"}
	// The program, in the Slurm root the pod runner runs slurmctld in (its /var/tmp is
	// shared, not a container's own).
	prog := "/var/tmp/kubeslurm-e2e-" + ns + "-hang.sh"
	host := filepath.Join(runDir, "slurm-root", prog)
	// Two processes name it: the program's shell, and a shell it starts (what the program
	// started must go with it).
	require.NoError(t, os.WriteFile(host, []byte("#!/bin/sh\n/bin/sh -c 'sleep 3600; :' \"$0\"\n"), 0o755))
	t.Cleanup(func() { _ = os.Remove(host) })
	running := func() []string { // the processes naming it
		var out []string
		dirs, _ := filepath.Glob("/proc/[0-9]*")
		for _, d := range dirs {
			if b, err := os.ReadFile(filepath.Join(d, "cmdline")); err == nil && strings.Contains(string(b), prog) {
				out = append(out, filepath.Base(d))
			}
		}
		return out
	}
	t.Cleanup(func() { // should the script not have stopped it
		for _, p := range running() {
			if pid, err := strconv.Atoi(p); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	createLocalCluster(t, ns, func(c *slurmv1.SlurmCluster) { c.Spec.Controller.ReconfigureTimeoutSeconds = 10 })
	c := waitSlurmClusterReady(t, ns, runnerNode)
	applied := c.Status.AppliedConfigHash
	t.Cleanup(func() { slurmCommand(t, c, "/usr/bin/scancel", "--user=slurm") })
	job := clusterSbatch(t, c, "--chdir", "/tmp", "--output", "/dev/null", "--wrap", "sleep 600")
	squeue := func() string {
		out, ok := slurmCommand(t, c, "/usr/bin/squeue", "-h", "-o", "%i %T %R")
		require.True(t, ok, out)
		return out
	}
	eventually(t, 60*time.Second, "job "+job+" running", func() bool { return strings.Contains(squeue(), job+" RUNNING "+runnerNode) })
	podName := slurmcluster.ControllerName(c) + "-0"
	ctld := getPod(t, ns, podName)

	start := time.Now()
	updateCluster(t, kc, key, c, func(c *slurmv1.SlurmCluster) { c.Spec.ExtraConfig = "SlurmctldPrimaryOnProg=" + prog })
	eventually(t, 60*time.Second, "slurmctld's reconfigure running the program", func() bool { return len(running()) == 2 })
	cond := waitRejectedBySlurmctld(t, kc, c, 120*time.Second, nil)
	hung := c.Status.ConfigHash
	t.Logf("refused %s after the spec change: ConfigApplied: %s", time.Since(start).Round(time.Second), cond.Message)
	assert.Contains(t, cond.Message, "slurmctld refused configuration "+hung+": ")
	assert.Contains(t, cond.Message, "the reconfigure had not ended after 10 s (its last log line: _run_primary_prog: Running SlurmctldPrimaryOnProg): its new slurmctld process was stopped")
	assert.Contains(t, cond.Message, "it runs configuration "+applied+" until the spec changes")
	assert.Empty(t, running(), "the program stopped with the new slurmctld process")
	out, ok := slurmCommand(t, c, "/usr/bin/scontrol", "show", "config")
	require.True(t, ok, out)
	assert.Regexp(t, `(?m)^SlurmctldPrimaryOnProg\s+= \(null\)$`, out, "slurmctld runs the configuration before")
	assert.Contains(t, squeue(), job+" RUNNING "+runnerNode, "the running job survived")
	now := getPod(t, ns, podName)
	assert.Equal(t, ctld.UID, now.UID, "the same slurmctld pod")
	assert.Zero(t, now.Status.ContainerStatuses[0].RestartCount, "the same container")

	// A new slurmctld pod while that configuration is refused starts slurmctld on it (the
	// refusal of a reconfigure does not say the start fails). slurmctld hangs in the program
	// before it answers anything, is stopped after the timeout with the program, and starts
	// on the configuration before (the kept ConfigMap); the job is kept.
	require.NoError(t, kube.CoreV1().Pods(ns).Delete(context.Background(), podName, metav1.DeleteOptions{}))
	start = time.Now()
	eventually(t, 180*time.Second, "a new slurmctld pod on configuration "+applied+", its start on "+hung+" stopped", func() bool {
		p, err := kube.CoreV1().Pods(ns).Get(context.Background(), podName, metav1.GetOptions{})
		return err == nil && p.UID != ctld.UID && p.Annotations[wellknown.SlurmctldConfigAnnotation] == applied &&
			strings.Contains(p.Annotations[wellknown.SlurmctldRefusedReasonAnnotation], "slurmctld had not answered 10 s after its start")
	})
	t.Logf("slurmctld runs configuration %s %s after the pod's deletion", applied, time.Since(start).Round(time.Second))
	assert.Empty(t, running(), "the program stopped with slurmctld")
	assert.Contains(t, squeue(), job+" RUNNING "+runnerNode, "the running job survived")
	eventually(t, 60*time.Second, "ConfigApplied saying why the start was stopped", func() bool {
		if kc.Get(context.Background(), key, c) != nil {
			return false
		}
		cond := meta.FindStatusCondition(c.Status.Conditions, slurmv1.ConditionConfigApplied)
		return cond != nil && cond.Reason == slurmcluster.ReasonRejectedBySlurmctld &&
			strings.Contains(cond.Message, "slurmctld had not answered 10 s after its start (its last log line: _run_primary_prog: Running SlurmctldPrimaryOnProg): it was stopped")
	})

	updateCluster(t, kc, key, c, func(c *slurmv1.SlurmCluster) { c.Spec.ExtraConfig = "" })
	waitFixedConfigApplied(t, kc, c, 60*time.Second, hung)
	assert.Contains(t, squeue(), job+" RUNNING "+runnerNode)
}

// startedOnNewConfig is TestSlurmClusterRunsSlurm's part for a slurmctld pod that starts
// on a configuration the old one never read (the spec changed while no slurmctld ran): its
// script's reconfigure sends it to the configless worker, which slurmctld's start alone
// does not (issue 5: a change reaches slurmctld and all slurmd). The old slurmctld is kept
// from reading it by stopping its script (SIGSTOP) until the pod's deletion has sent it
// SIGTERM. running is the id of a job running on worker's node.
func startedOnNewConfig(t *testing.T, c *slurmv1.SlurmCluster, update func(func(*slurmv1.SlurmCluster)), squeue func() string, running, worker string) {
	ctx := context.Background()
	kc := slurmClient(t)
	key := client.ObjectKeyFromObject(c)
	podName := slurmcluster.ControllerName(c) + "-0"
	ctld := getPod(t, c.Namespace, podName)
	workerPod := getPod(t, c.Namespace, worker)
	require.Contains(t, workerConfCache(t, c.Namespace, worker), " MaxTime=2:00:00 ")
	script := runningContainerPID(t, ctld, "slurmctld")
	require.NoError(t, syscall.Kill(script, syscall.SIGSTOP))
	t.Cleanup(func() { _ = syscall.Kill(script, syscall.SIGCONT) })

	require.NoError(t, kc.Get(ctx, key, c))
	applied := c.Status.AppliedConfigHash
	update(func(c *slurmv1.SlurmCluster) { c.Spec.Partitions[0].MaxTime = "3:00:00" })
	eventually(t, 30*time.Second, "the new configuration rendered", func() bool {
		return kc.Get(ctx, key, c) == nil && c.Status.ConfigHash != applied
	})
	fresh := c.Status.ConfigHash
	require.NoError(t, kube.CoreV1().Pods(c.Namespace).Delete(ctx, podName, metav1.DeleteOptions{}))
	eventually(t, 60*time.Second, "SIGTERM pending for the stopped script", func() bool { return signalPending(script, syscall.SIGTERM) })
	require.NoError(t, syscall.Kill(script, syscall.SIGCONT))
	start := time.Now()
	eventually(t, 180*time.Second, "a new slurmctld pod ready on configuration "+fresh, func() bool {
		p, err := kube.CoreV1().Pods(c.Namespace).Get(ctx, podName, metav1.GetOptions{})
		return err == nil && p.UID != ctld.UID && podReady(p) && p.Annotations[wellknown.SlurmctldConfigAnnotation] == fresh
	})
	eventually(t, 90*time.Second, "the worker's slurmd sent the configuration slurmctld started on", func() bool {
		return strings.Contains(workerConfCache(t, c.Namespace, worker), " MaxTime=3:00:00 ")
	})
	t.Logf("configuration %s reached the worker %s after the old slurmctld pod's end", fresh, time.Since(start).Round(time.Second))
	assert.Equal(t, workerPod.UID, getPod(t, c.Namespace, worker).UID, "the same worker pod")
	assert.Contains(t, squeue(), running+" RUNNING "+runnerNode, "the running job survived")
	eventually(t, 60*time.Second, "ConfigApplied True on configuration "+fresh, func() bool {
		return kc.Get(ctx, key, c) == nil && c.Status.AppliedConfigHash == fresh &&
			meta.IsStatusConditionTrue(c.Status.Conditions, slurmv1.ConditionConfigApplied)
	})
}

// runningContainerPID is the PID of pod p's running container (the pod runner's container
// ID): the container's own process, leader of its process group.
func runningContainerPID(t *testing.T, p *v1.Pod, container string) int {
	t.Helper()
	for _, s := range p.Status.ContainerStatuses {
		if s.Name == container && s.State.Running != nil {
			pid, err := strconv.Atoi(strings.TrimPrefix(s.ContainerID, "podrunner://"))
			require.NoError(t, err, s.ContainerID)
			return pid
		}
	}
	require.FailNow(t, "container not running", "container %s of pod %s/%s", container, p.Namespace, p.Name)
	return 0
}

// signalPending: sig waits for process pid (its SigPnd or ShdPnd mask in /proc).
func signalPending(pid int, sig syscall.Signal) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		name, mask, ok := strings.Cut(line, ":")
		if !ok || (name != "SigPnd" && name != "ShdPnd") {
			continue
		}
		if m, err := strconv.ParseUint(strings.TrimSpace(mask), 16, 64); err == nil && m&(1<<(uint(sig)-1)) != 0 {
			return true
		}
	}
	return false
}

// Issue 5: a worker lost without its wrapper leaves its dynamic node in Slurm, DOWN for
// good; the controller deletes that record once it has been DOWN and not responding for
// the NodeSet's pruneDownAfterSeconds, with no worker pod and no job. Here the worker is
// lost as a hung node loses it: its processes frozen (SIGSTOP, so the wrapper never runs
// its drain), then its pod force-deleted once the NodeSet no longer asks for it.
func TestSlurmClusterPrunesLostWorker(t *testing.T) {
	ctx := context.Background()
	startPodRunner(t)
	ns := namespace(t)
	kc := slurmClient(t)
	key := client.ObjectKey{Namespace: ns, Name: "slurm"}
	createLocalCluster(t, ns, func(c *slurmv1.SlurmCluster) {
		// Slurm marks a silent node DOWN after SlurmdTimeout (300 s by default).
		c.Spec.ExtraConfig = "SlurmdTimeout=30"
		c.Spec.NodeSets[0].PruneDownAfterSeconds = ptrTo[int64](30)
	})
	c := waitSlurmClusterReady(t, ns, runnerNode)
	out, ok := slurmCommand(t, c, "/usr/bin/scontrol", "show", "config")
	require.True(t, ok, out)
	require.Regexp(t, `(?m)^SlurmdTimeout\s+= 30 sec$`, out)

	// Freeze the worker's container: its process group (the wrapper and slurmd) is the
	// pod runner's container process, whose PID is its container ID.
	worker := "slurm-runner-" + runnerNode
	p := getPod(t, ns, worker)
	require.Len(t, p.Status.ContainerStatuses, 1)
	pid := runningContainerPID(t, p, p.Status.ContainerStatuses[0].Name)
	require.NoError(t, syscall.Kill(-pid, syscall.SIGSTOP))
	t.Cleanup(func() { _ = syscall.Kill(-pid, syscall.SIGKILL) })

	// The NodeSet no longer asks for it (or it would be recreated); its pod, deleted by the
	// controller, waits for a wrapper that cannot run, and is force-deleted.
	updateCluster(t, kc, key, c, func(c *slurmv1.SlurmCluster) {
		c.Spec.NodeSets[0].NodeSelector = map[string]string{"kubeslurm.io/pod-runner": "never"}
	})
	eventually(t, 60*time.Second, "the controller deleting the worker pod", func() bool {
		p, err := kube.CoreV1().Pods(ns).Get(ctx, worker, metav1.GetOptions{})
		return err == nil && p.DeletionTimestamp != nil
	})
	require.NoError(t, kube.CoreV1().Pods(ns).Delete(ctx, worker, metav1.DeleteOptions{GracePeriodSeconds: ptrTo[int64](0)}))
	eventually(t, 30*time.Second, "the worker pod gone", func() bool {
		_, err := kube.CoreV1().Pods(ns).Get(ctx, worker, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})

	// Slurm itself marks the node DOWN, not responding; the record stays.
	eventually(t, 180*time.Second, "Slurm shows the node DOWN and not responding", func() bool {
		out, ok = slurmCommand(t, c, "/usr/bin/scontrol", "show", "node", runnerNode)
		return ok && regexp.MustCompile(`State=DOWN\S*\+NOT_RESPONDING`).MatchString(out)
	})
	assert.Contains(t, out, "Reason=Not responding")
	out, ok = slurmCommand(t, c, "/usr/bin/sinfo", "-h", "-N", "-o", "%N %t")
	require.True(t, ok, out)
	assert.Contains(t, out, runnerNode+" down")

	// Pruned after the grace period: gone from Slurm, with an event.
	eventually(t, 150*time.Second, "event SlurmNodePruned", func() bool {
		return strings.Contains(namedClusterEvents(t, ns, "slurm", wellknown.EventSlurmNodePruned), "Deleted Slurm node "+runnerNode+" of NodeSet runner")
	})
	t.Log(namedClusterEvents(t, ns, "slurm", wellknown.EventSlurmNodePruned))
	out, ok = slurmCommand(t, c, "/usr/bin/sinfo", "-h", "-N", "-o", "%N %t")
	require.True(t, ok, out)
	assert.NotContains(t, out, runnerNode, "the lost worker's node pruned from Slurm")
	out, _ = slurmCommand(t, c, "/usr/bin/scontrol", "show", "node", runnerNode)
	assert.Contains(t, out, "not found")
}

// Deleting a SlurmCluster's namespace (not the cluster first) takes slurmctld with the
// workers, so a worker running a job could never drain and would hold the namespace for
// its drainSeconds (an hour by default). The controller cuts the workers' grace instead:
// the namespace goes within a minute or two, job and all.
func TestSlurmClusterNamespaceDeleted(t *testing.T) {
	ctx := context.Background()
	startPodRunner(t)
	ns := namespace(t)
	nodeKubectl(t, "apply", "-n", ns, "-f", filepath.Join(repoRoot, "examples", "slurmcluster-local.yaml"))
	c := waitSlurmClusterReady(t, ns, runnerNode)
	out, ok := slurmCommand(t, c, "/usr/bin/sbatch", "--chdir", "/tmp", "--output", "/dev/null", "--wrap", "sleep 600")
	require.True(t, ok, out)
	id := regexp.MustCompile(`Submitted batch job (\d+)`).FindStringSubmatch(out)
	require.NotNil(t, id, out)
	eventually(t, 60*time.Second, "job "+id[1]+" running", func() bool {
		out, _ := slurmCommand(t, c, "/usr/bin/scontrol", "show", "job", "-o", id[1])
		return regexpField(out, "JobState") == "RUNNING"
	})

	deleted := time.Now()
	require.NoError(t, kube.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}))
	eventually(t, 150*time.Second, "namespace "+ns+" gone", func() bool {
		_, err := kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	t.Logf("namespace gone %s after its deletion", time.Since(deleted).Round(time.Second))
}

// Issue 5, configuration propagation from a referenced ConfigMap: spec.extraConfigFrom's
// text reaches slurmctld and the worker's slurmd in place, each edit of the ConfigMap
// alone; a ConfigMap missing or holding a line kubeslurm refuses is refused with a
// condition, and the running configuration stays.
func TestSlurmClusterExtraConfigFromConfigMap(t *testing.T) {
	ctx := context.Background()
	startPodRunner(t)
	ns := namespace(t)
	c := createLocalCluster(t, ns, func(c *slurmv1.SlurmCluster) {
		c.Spec.ExtraConfigFrom = &v1.ConfigMapKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "site-slurm"}, Key: "slurm.conf"}
	})
	kc, key := slurmClient(t), client.ObjectKeyFromObject(c)
	validMessage := func() string {
		cond := clusterCondition(t, c, slurmv1.ConditionConfigValid)
		if cond == nil || cond.Status != metav1.ConditionFalse {
			return ""
		}
		return cond.Message
	}
	eventually(t, 30*time.Second, "ConfigValid False: the ConfigMap does not exist", func() bool {
		return strings.HasPrefix(validMessage(), "extraConfigFrom: ConfigMap site-slurm does not exist")
	})
	_, err := kube.AppsV1().StatefulSets(ns).Get(ctx, slurmcluster.ControllerName(c), metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "no slurmctld without a configuration: %v", err)

	site := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "site-slurm"},
		Data: map[string]string{"slurm.conf": "# the site's own lines\nMessageTimeout=23\n"}}
	site, err = kube.CoreV1().ConfigMaps(ns).Create(ctx, site, metav1.CreateOptions{})
	require.NoError(t, err)
	c = waitSlurmClusterReady(t, ns, runnerNode)
	worker := "slurm-runner-" + runnerNode
	showsTimeout := func(sec int) func() bool {
		return func() bool {
			out, ok := slurmCommand(t, c, "/usr/bin/scontrol", "show", "config")
			return ok && regexp.MustCompile(fmt.Sprintf(`(?m)^MessageTimeout\s+= %d sec$`, sec)).MatchString(out)
		}
	}
	eventually(t, 60*time.Second, "slurmctld runs MessageTimeout=23", showsTimeout(23))
	assert.Contains(t, workerConfCache(t, ns, worker), "\nMessageTimeout=23\n")
	ctld := getPod(t, ns, slurmcluster.ControllerName(c)+"-0")

	// An edit of the ConfigMap alone: in place, to slurmctld and the worker.
	out, ok := slurmCommand(t, c, "/usr/bin/sbatch", "--parsable", "--chdir", "/tmp", "--output", "/dev/null", "--wrap", "sleep 600")
	require.True(t, ok, out)
	job := sbatchJobID(out)
	// Before the cluster's deletion, which drains its worker and so waits for the job.
	t.Cleanup(func() { slurmCommand(t, c, "/usr/bin/scancel", job) })
	setText := func(text string) {
		site.Data["slurm.conf"] = text
		site, err = kube.CoreV1().ConfigMaps(ns).Update(ctx, site, metav1.UpdateOptions{})
		require.NoError(t, err)
	}
	setText("# the site's own lines\nMessageTimeout=24\n")
	start := time.Now()
	eventually(t, 60*time.Second, "slurmctld runs MessageTimeout=24", showsTimeout(24))
	t.Logf("the ConfigMap's edit ran in slurmctld %s after it", time.Since(start).Round(time.Second))
	eventually(t, 60*time.Second, "the worker's slurmd has MessageTimeout=24", func() bool {
		return strings.Contains(workerConfCache(t, ns, worker), "\nMessageTimeout=24\n")
	})
	applied := func() bool {
		return kc.Get(ctx, key, c) == nil && c.Status.AppliedConfigHash == c.Status.ConfigHash &&
			meta.IsStatusConditionTrue(c.Status.Conditions, slurmv1.ConditionConfigApplied)
	}
	eventually(t, 30*time.Second, "ConfigApplied True", applied)
	assert.Equal(t, ctld.UID, getPod(t, ns, ctld.Name).UID, "the same slurmctld pod")
	out, ok = slurmCommand(t, c, "/usr/bin/scontrol", "show", "job", "-o", job)
	require.True(t, ok, out)
	assert.Equal(t, "RUNNING", regexpField(out, "JobState"), "the job runs on through the change")

	// A line kubeslurm refuses: ConfigValid False, the running configuration stays.
	running := c.Status.ConfigHash
	setText("MessageTimeout=25\nAuthType=auth/none\n")
	eventually(t, 30*time.Second, "ConfigValid False for the refused line", func() bool {
		return strings.HasPrefix(validMessage(), "extraConfigFrom (ConfigMap site-slurm, key slurm.conf): ")
	})
	assert.Contains(t, validMessage(), "the last valid configuration stays in place")
	require.NoError(t, kc.Get(ctx, key, c))
	assert.Equal(t, running, c.Status.ConfigHash)
	assert.True(t, showsTimeout(24)(), "slurmctld still runs MessageTimeout=24")
	assert.Contains(t, namedClusterEvents(t, ns, "slurm", wellknown.EventSlurmConfigRefused), "AuthType")

	// Fixed: taken again.
	setText("MessageTimeout=25\n")
	eventually(t, 60*time.Second, "slurmctld runs MessageTimeout=25", showsTimeout(25))
	eventually(t, 30*time.Second, "ConfigApplied True", applied)
}
