package e2e

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slurmv1 "github.com/kubeslurm/kubeslurm/api/v1alpha1"
	"github.com/kubeslurm/kubeslurm/pkg/controller/slurmcluster"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

// clusterScheduler is the schedulerName of the kubeslurm release that places pods through
// the SlurmCluster's Slurm (examples/kubeslurm-for-slurmcluster.values.yaml); the local
// cluster's own kubeslurm has wellknown.SchedulerName.
const clusterScheduler = "kubeslurm-slurm"

// waitSlurmClusterUp applies examples/slurmcluster-local.yaml in ns and waits until its
// slurmctld is ready and its one worker (on the pod runner's node) is idle in sinfo.
func waitSlurmClusterUp(t *testing.T, ns string) *slurmv1.SlurmCluster {
	t.Helper()
	kc := slurmClient(t)
	applyExample(t, ns, "slurmcluster-local.yaml")
	c := &slurmv1.SlurmCluster{}
	eventually(t, 120*time.Second, "ControllerReady True, one ready worker and slurmrestd ready", func() bool {
		return kc.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "slurm"}, c) == nil &&
			meta.IsStatusConditionTrue(c.Status.Conditions, slurmv1.ConditionControllerReady) &&
			c.Status.ReadyWorkers == 1
	})
	eventually(t, 60*time.Second, "slurmrestd ready", func() bool {
		d, err := kube.AppsV1().Deployments(ns).Get(context.Background(), slurmcluster.RestAPIName(c), metav1.GetOptions{})
		return err == nil && d.Status.ReadyReplicas == 1
	})
	eventually(t, 60*time.Second, "sinfo lists the worker idle", func() bool {
		out, ok := slurmCommand(t, c, "/usr/bin/sinfo", "-h", "-N", "-o", "%N %t")
		return ok && strings.Contains(out, runnerNode+" idle")
	})
	return c
}

// clusterJobState is job id's state and nodes in the cluster's Slurm (scontrol show job).
func clusterJobState(t *testing.T, c *slurmv1.SlurmCluster, id int32) string {
	t.Helper()
	out, ok := slurmCommand(t, c, "/usr/bin/scontrol", "show", "job", "-o", strconv.Itoa(int(id)))
	require.True(t, ok, out)
	state := regexpField(out, "JobState")
	return state + " " + regexpField(out, "NodeList")
}

// regexpField is the value of a Key=value field of scontrol's one-line output.
func regexpField(out, key string) string {
	for _, f := range strings.Fields(out) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v
		}
	}
	return ""
}

// Issue 5: the scheduler runs against a Slurm cluster that our own controller deployed. A
// SlurmCluster's Slurm gets a kubeslurm release of its own (`helm install` with its
// schedulerName, the cluster's slurmrestd, and the JWT key Secret the controller generated,
// from which the release's scheduler and controller mint their tokens). A pod for that
// schedulerName becomes a job of that Slurm and is bound to the node the cluster's worker
// registered as; killing slurmctld leaves the bound pod and its running job as they were
// (test 3); deleting the pod cancels its job there. The local kubeslurm, with another
// schedulerName and another Slurm, leaves the pod alone though its job id means nothing in
// its Slurm.
func TestSchedulerOnSlurmCluster(t *testing.T) {
	ctx := context.Background()
	startPodRunner(t)
	ns := namespace(t)
	c := waitSlurmClusterUp(t, ns)

	release := "slurm-kubeslurm"
	helmEnv := helmHome(t)
	t.Cleanup(func() {
		out, err := runHelm(helmEnv, "uninstall", release, "--namespace", ns, "--wait", "--timeout", "2m")
		assert.NoError(t, err, "helm uninstall: %s", out)
	})
	// The example's values, and what differs on the local cluster: slurmrestd's port on the
	// host (no cluster DNS; the pod runner runs pods in the host's network, so ports clear
	// of the local components'), the images' tag, one scheduler replica.
	args := []string{"install", release, filepath.Join(repoRoot, "charts", "kubeslurm"), "--namespace", ns, "--wait", "--timeout", "3m",
		"-f", filepath.Join(repoRoot, "examples", "kubeslurm-for-slurmcluster.values.yaml")}
	for _, v := range []string{
		"slurm.restdURL=http://127.0.0.1:" + strconv.Itoa(int(c.Spec.RestAPI.Port)),
		"scheduler.image.tag=e2e", "controller.image.tag=e2e", "scheduler.replicas=1",
		"scheduler.securePort=10279", "controller.metricsPort=18090", "controller.healthPort=18091",
	} {
		args = append(args, "--set", v)
	}
	secret, dataKey := slurmcluster.JWTKeySecret(c)
	require.Equal(t, "slurm-jwt-key/jwt_hs256.key", secret+"/"+dataKey, "the example's slurm.jwtKeySecret")
	out, err := runHelm(helmEnv, args...)
	require.NoError(t, err, "helm install: %s", out)

	p := newPod(ns, "on-slurmcluster")
	p.Spec.SchedulerName = clusterScheduler
	// An image the pod runner runs (chrooted in the Slurm root), so the bound pod really runs.
	p.Spec.Containers[0].Image = slurmcluster.DefaultWorkerImage
	p.Spec.Containers[0].Command = []string{"/bin/sleep", "3600"}
	_, err = kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
	require.NoError(t, err)
	p = waitBound(t, ns, p.Name, 60*time.Second)
	assert.Equal(t, runnerNode, p.Spec.NodeName)
	id := jobIDOf(t, p)
	assert.Equal(t, "RUNNING "+runnerNode, clusterJobState(t, c, id))
	eventually(t, 60*time.Second, "the pod runs, with its job's state written by the release's controller", func() bool {
		p = getPod(t, ns, p.Name)
		return p.Status.Phase == v1.PodRunning && p.Annotations[wellknown.JobStateAnnotation] == "RUNNING"
	})
	t.Logf("%s bound to %s, job %d of the SlurmCluster's Slurm", p.Name, p.Spec.NodeName, id)

	// Test 3: slurmctld killed and back; the bound pod and its job stay.
	old, err := kube.CoreV1().Pods(ns).Get(ctx, slurmcluster.ControllerName(c)+"-0", metav1.GetOptions{})
	require.NoError(t, err)
	require.NoError(t, kube.CoreV1().Pods(ns).Delete(ctx, old.Name, metav1.DeleteOptions{}))
	eventually(t, 120*time.Second, "a new slurmctld pod ready", func() bool {
		n, err := kube.CoreV1().Pods(ns).Get(ctx, old.Name, metav1.GetOptions{})
		return err == nil && n.UID != old.UID && podReady(n)
	})
	eventually(t, 60*time.Second, "slurmctld answers again", func() bool {
		out, ok := slurmCommand(t, c, "/usr/bin/scontrol", "ping")
		return ok && strings.Contains(out, "is UP")
	})
	assert.Equal(t, "RUNNING "+runnerNode, clusterJobState(t, c, id))
	after := getPod(t, ns, p.Name)
	assert.Equal(t, p.UID, after.UID)
	assert.Equal(t, runnerNode, after.Spec.NodeName)
	assert.Equal(t, v1.PodRunning, after.Status.Phase)
	assert.Equal(t, strconv.Itoa(int(id)), after.Labels[wellknown.JobIDLabel])

	// A second pod is placed by the same Slurm after its restart.
	second := newPod(ns, "after-restart")
	second.Spec.SchedulerName = clusterScheduler
	second.Spec.Containers[0].Image = slurmcluster.DefaultWorkerImage
	second.Spec.Containers[0].Command = []string{"/bin/sleep", "3600"}
	_, err = kube.CoreV1().Pods(ns).Create(ctx, second, metav1.CreateOptions{})
	require.NoError(t, err)
	second = waitBound(t, ns, second.Name, 90*time.Second)
	assert.Equal(t, "RUNNING "+runnerNode, clusterJobState(t, c, jobIDOf(t, second)))

	// Deleting the pods cancels their jobs in that Slurm (the release's controller does).
	for _, pod := range []*v1.Pod{p, second} {
		jid := jobIDOf(t, pod)
		require.NoError(t, kube.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{}))
		eventually(t, 60*time.Second, "job "+strconv.Itoa(int(jid))+" cancelled", func() bool {
			return strings.HasPrefix(clusterJobState(t, c, jid), "CANCELLED ")
		})
		eventually(t, 60*time.Second, "pod "+pod.Name+" gone", func() bool {
			_, err := kube.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		})
	}
}
