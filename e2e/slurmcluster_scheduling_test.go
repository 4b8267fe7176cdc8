package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
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
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	slurmv1 "github.com/kubeslurm/kubeslurm/api/v1alpha1"
	"github.com/kubeslurm/kubeslurm/pkg/controller/slurmcluster"
	"github.com/kubeslurm/kubeslurm/pkg/slurm"
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
	applyExample(t, ns, "slurmcluster-local.yaml")
	return waitSlurmClusterReady(t, ns, runnerNode)
}

// waitSlurmClusterReady waits until the SlurmCluster "slurm" in ns has slurmctld and
// slurmrestd ready and one ready worker on each of nodes, idle in sinfo.
func waitSlurmClusterReady(t *testing.T, ns string, nodes ...string) *slurmv1.SlurmCluster {
	t.Helper()
	kc := slurmClient(t)
	c := &slurmv1.SlurmCluster{}
	eventually(t, 120*time.Second, fmt.Sprintf("ControllerReady True and %d ready workers", len(nodes)), func() bool {
		return kc.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "slurm"}, c) == nil &&
			meta.IsStatusConditionTrue(c.Status.Conditions, slurmv1.ConditionControllerReady) &&
			c.Status.ReadyWorkers == int32(len(nodes))
	})
	eventually(t, 60*time.Second, "slurmrestd ready", func() bool {
		d, err := kube.AppsV1().Deployments(ns).Get(context.Background(), slurmcluster.RestAPIName(c), metav1.GetOptions{})
		return err == nil && d.Status.ReadyReplicas == 1
	})
	eventually(t, 60*time.Second, "sinfo lists the workers idle", func() bool {
		out, ok := slurmCommand(t, c, "/usr/bin/sinfo", "-h", "-N", "-o", "%N %t")
		for _, n := range nodes {
			ok = ok && strings.Contains(out, n+" idle")
		}
		return ok
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

// installClusterRelease installs the kubeslurm release of examples/
// kubeslurm-for-slurmcluster.values.yaml for the SlurmCluster c (uninstalled at the end).
func installClusterRelease(t *testing.T, ns string, c *slurmv1.SlurmCluster) {
	t.Helper()
	release := clusterRelease
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
		// The local controller's short NotReady grace and its drain on the GPUUnhealthy node
		// condition (deploy/local/lib.sh), for the same tests.
		"controller.extraArgs={--not-ready-grace-period=20s,--drain-on-node-conditions=GPUUnhealthy}",
	} {
		args = append(args, "--set", v)
	}
	secret, dataKey := slurmcluster.JWTKeySecret(c)
	require.Equal(t, "slurm-jwt-key/jwt_hs256.key", secret+"/"+dataKey, "the example's slurm.jwtKeySecret")
	out, err := runHelm(helmEnv, args...)
	require.NoError(t, err, "helm install: %s", out)
}

// clusterRelease is the name of the kubeslurm release installClusterRelease installs.
const clusterRelease = "slurm-kubeslurm"

// restartReleasePod deletes the pod of component (scheduler, controller) of the release in
// ns, as a node's loss or an eviction would, and waits until the pod its Deployment makes
// instead is ready.
func restartReleasePod(t *testing.T, ns, component string) {
	t.Helper()
	ctx := context.Background()
	selector := metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=" + component + ",app.kubernetes.io/instance=" + clusterRelease}
	pods, err := kube.CoreV1().Pods(ns).List(ctx, selector)
	require.NoError(t, err)
	require.Len(t, pods.Items, 1, "the release's one %s replica", component)
	old := pods.Items[0].Name
	require.NoError(t, kube.CoreV1().Pods(ns).Delete(ctx, old, metav1.DeleteOptions{}))
	eventually(t, 120*time.Second, "a new "+component+" pod ready in place of "+old, func() bool {
		pods, err := kube.CoreV1().Pods(ns).List(ctx, selector)
		require.NoError(t, err)
		return len(pods.Items) == 1 && pods.Items[0].Name != old && podReady(&pods.Items[0])
	})
}

// onCluster makes a test pod the release's: its schedulerName, and an image the pod runner
// runs (chrooted in the Slurm root), so that a bound pod really runs.
func onCluster(p *v1.Pod) {
	p.Spec.SchedulerName = clusterScheduler
	p.Spec.Containers[0].Image = slurmcluster.DefaultWorkerImage
	p.Spec.Containers[0].Command = []string{"/bin/sleep", "3600"}
}

// Issue 5: the scheduler runs against a Slurm cluster that our own controller deployed. A
// SlurmCluster's Slurm gets a kubeslurm release of its own (`helm install` with its
// schedulerName, the cluster's slurmrestd, and the JWT key Secret the controller generated,
// from which the release's scheduler and controller mint their tokens). A pod for that
// schedulerName becomes a job of that Slurm and is bound to the node the cluster's worker
// registered as; killing slurmctld leaves the bound pod and its running job as they were
// (test 3); after the JWT key is replaced in place, a second pod is placed; deleting the
// pods cancels their jobs there. The local kubeslurm, with another
// schedulerName and another Slurm, leaves the pod alone though its job id means nothing in
// its Slurm.
func TestSchedulerOnSlurmCluster(t *testing.T) {
	ctx := context.Background()
	startPodRunner(t)
	ns := namespace(t)
	c := waitSlurmClusterUp(t, ns)

	installClusterRelease(t, ns, c)

	p := createPod(t, ns, "on-slurmcluster", onCluster)
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

	// The JWT key replaced in its Secret in place: slurmctld reads it again, and the
	// release's scheduler and controller sign with it from their next request on (tokens of
	// the old key are refused; renewing only at half a token's lifetime would fail for 30 min).
	ctld, err := kube.CoreV1().Pods(ns).Get(ctx, old.Name, metav1.GetOptions{})
	require.NoError(t, err)
	jwtKeyRotated(t, c, daemon{pod: ctld.Name, container: "slurmctld", uid: string(ctld.UID)})

	// A second pod is placed by the same Slurm after its restart and the key's rotation.
	second := createPod(t, ns, "after-restart", onCluster)
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

// createLocalCluster creates, in ns, the SlurmCluster of examples/slurmcluster-local.yaml
// changed by mutate, and deletes it at the end (waiting until it is gone).
func createLocalCluster(t *testing.T, ns string, mutate func(*slurmv1.SlurmCluster)) *slurmv1.SlurmCluster {
	t.Helper()
	ctx := context.Background()
	raw, err := os.ReadFile(filepath.Join(repoRoot, "examples", "slurmcluster-local.yaml"))
	require.NoError(t, err)
	c := &slurmv1.SlurmCluster{}
	require.NoError(t, yaml.UnmarshalStrict(raw, c))
	c.Namespace = ns
	mutate(c)
	kc := slurmClient(t)
	require.NoError(t, kc.Create(ctx, c))
	t.Cleanup(func() {
		require.NoError(t, client.IgnoreNotFound(kc.Delete(ctx, c)))
		eventually(t, 120*time.Second, "SlurmCluster "+ns+"/slurm gone", func() bool {
			return apierrors.IsNotFound(kc.Get(ctx, client.ObjectKeyFromObject(c), &slurmv1.SlurmCluster{}))
		})
	})
	return c
}

// runnerNode2 is a second pod runner's node, for a SlurmCluster of two workers.
const runnerNode2 = runnerNode + "-2"

// twoRunnerCluster starts two pod runners (two Kubernetes nodes on this one host) and, in
// a new namespace, the SlurmCluster of examples/slurmcluster-local.yaml with one NodeSet
// per runner's node (the second slurmd takes another port), and waits until both workers
// are idle.
func twoRunnerCluster(t *testing.T) (string, *slurmv1.SlurmCluster) {
	t.Helper()
	startPodRunner(t)
	startPodRunnerOn(t, runnerNode2, "podrunner-2", runnerOnly)
	ns := namespace(t)
	createLocalCluster(t, ns, func(c *slurmv1.SlurmCluster) {
		c.Spec.NodeSets[0].NodeSelector = map[string]string{v1.LabelHostname: runnerNode}
		c.Spec.NodeSets = append(c.Spec.NodeSets, slurmv1.NodeSetSpec{Name: "runner2", Port: ptrTo[int32](6838),
			NodeSelector: map[string]string{v1.LabelHostname: runnerNode2}, Features: []string{"local"}})
		c.Spec.Partitions[0].NodeSets = []string{"runner", "runner2"}
	})
	return ns, waitSlurmClusterReady(t, ns, runnerNode, runnerNode2)
}

// Issue 5, a pod group through a SlurmCluster's Slurm: two pod runners (two Kubernetes
// nodes on this one host, so the second NodeSet's slurmd takes another port), a worker on
// each, and the release's scheduler makes the group's two pods ONE two-node job of that
// Slurm, each pod bound to one of its nodes, both running.
func TestPodGroupOnSlurmCluster(t *testing.T) {
	ns, c := twoRunnerCluster(t)
	installClusterRelease(t, ns, c)

	pods := waitAllBound(t, createPodGroup(t, ns, "train", 2, nil, onCluster), 90*time.Second)
	id := jobIDOf(t, pods[0])
	require.Equal(t, id, jobIDOf(t, pods[1]), "both members name the same Slurm job")
	state := strings.Fields(clusterJobState(t, c, id))
	require.Len(t, state, 2)
	assert.Equal(t, "RUNNING", state[0])
	nodes := slurm.ExpandHostlist(state[1])
	assert.ElementsMatch(t, []string{runnerNode, runnerNode2}, nodes, "one two-node job")
	assert.ElementsMatch(t, nodes, []string{pods[0].Spec.NodeName, pods[1].Spec.NodeName}, "each member on one of the job's nodes")
	eventually(t, 60*time.Second, "both members run (each on its runner)", func() bool {
		for _, p := range pods {
			if getPod(t, ns, p.Name).Status.Phase != v1.PodRunning {
				return false
			}
		}
		return true
	})
	t.Logf("group train: Slurm job %d on %s", id, state[1])

	// Deleting the group's pods cancels its one job.
	deleteGroupMembers(t, pods)
	eventually(t, 60*time.Second, "job "+strconv.Itoa(int(id))+" cancelled", func() bool {
		return strings.HasPrefix(clusterJobState(t, c, id), "CANCELLED ")
	})
}

// clusterSinfoNode is node's compact state and reason in the cluster's Slurm.
func clusterSinfoNode(t *testing.T, c *slurmv1.SlurmCluster, node string) (state, reason string) {
	t.Helper()
	return clusterStack(c, nil).sinfoNode(t, node)
}

// Issue 5, the controller's two-way sync on a Slurm our controller deployed: the release of
// the SlurmCluster's Slurm drains the worker's Slurm node when its Kubernetes node is
// cordoned and undrains it on uncordon; an admin's drain in that Slurm taints the
// Kubernetes node and shows as its condition, until resumed; a placeholder job cancelled in
// that Slurm ends its pod with the reason. The local release, whose Slurm has no such
// node, leaves the node alone.
func TestNodeAndJobSyncOnSlurmCluster(t *testing.T) {
	ctx := context.Background()
	startPodRunner(t)
	ns := namespace(t)
	c := waitSlurmClusterUp(t, ns)
	installClusterRelease(t, ns, c)
	t.Cleanup(func() {
		_, err := kube.CoreV1().Nodes().Patch(ctx, runnerNode, types.MergePatchType, []byte(`{"spec":{"unschedulable":null}}`), metav1.PatchOptions{})
		assert.NoError(t, err)
		if state, _ := clusterSinfoNode(t, c, runnerNode); strings.HasPrefix(state, "drain") {
			slurmCommand(t, c, "/usr/bin/scontrol", "update", "nodename="+runnerNode, "state=resume")
		}
		eventually(t, 30*time.Second, "no taint of ours on "+runnerNode, func() bool { return !hasSlurmTaint(getNode(t, runnerNode)) })
	})

	cordoned := wellknown.ReasonPrefix + "node " + runnerNode + " cordoned in Kubernetes"
	nodeKubectl(t, "cordon", runnerNode)
	eventually(t, 30*time.Second, "the cluster's Slurm drains "+runnerNode+" for the cordon", func() bool {
		state, reason := clusterSinfoNode(t, c, runnerNode)
		return strings.HasPrefix(state, "drain") && reason == cordoned
	})
	nodeKubectl(t, "uncordon", runnerNode)
	eventually(t, 30*time.Second, runnerNode+" undrained in the cluster's Slurm", func() bool {
		state, _ := clusterSinfoNode(t, c, runnerNode)
		return state == "idle"
	})

	out, ok := slurmCommand(t, c, "/usr/bin/scontrol", "update", "nodename="+runnerNode, "state=drain", "reason=hw")
	require.True(t, ok, out)
	eventually(t, 30*time.Second, "taint and SlurmNodeDrained=hw on "+runnerNode, func() bool {
		n := getNode(t, runnerNode)
		return hasSlurmTaint(n) && slurmConditionTypes(n)[wellknown.SlurmNodeDrainedCondition] == "hw"
	})
	out, ok = slurmCommand(t, c, "/usr/bin/scontrol", "update", "nodename="+runnerNode, "state=resume")
	require.True(t, ok, out)
	eventually(t, 30*time.Second, "taint and SlurmNodeDrained gone after resume", func() bool {
		n := getNode(t, runnerNode)
		_, drained := slurmConditionTypes(n)[wellknown.SlurmNodeDrainedCondition]
		return !hasSlurmTaint(n) && !drained
	})

	p := createPod(t, ns, "scancelled", onCluster)
	p = waitBound(t, ns, p.Name, 60*time.Second)
	id := jobIDOf(t, p)
	out, ok = slurmCommand(t, c, "/usr/bin/scancel", strconv.Itoa(int(id)))
	require.True(t, ok, out)
	waitGone(t, ns, p.Name, 60*time.Second)
	ev := podEvents(t, p)
	assert.Contains(t, ev, wellknown.EventSlurmJobCancelled)
	assert.Contains(t, ev, "CANCELLED")
}

// Issue 5, preemption on a Slurm our controller deployed: a SlurmCluster with two partition
// tiers and partition_prio preemption (spec.partitions[].priorityTier, extraConfig); a job
// submitted to the higher tier cancels the placeholder job holding the worker's node, and
// the release ends that pod with the reason.
func TestPreemptionOnSlurmCluster(t *testing.T) {
	startPodRunner(t)
	ns := namespace(t)
	c := createLocalCluster(t, ns, func(c *slurmv1.SlurmCluster) {
		c.Spec.ExtraConfig = "PreemptType=preempt/partition_prio\nPreemptMode=CANCEL\n"
		c.Spec.Partitions[0].PriorityTier = ptrTo[int32](1)
		c.Spec.Partitions = append(c.Spec.Partitions, slurmv1.PartitionSpec{Name: "urgent", NodeSets: []string{"runner"}, PriorityTier: ptrTo[int32](2)})
	})
	c = waitSlurmClusterReady(t, ns, runnerNode)
	installClusterRelease(t, ns, c)
	// Before the cluster goes (its worker drains, waiting for its jobs): no job left.
	t.Cleanup(func() { slurmCommand(t, c, "/usr/bin/scancel", "--user=slurm") })

	victim := createPod(t, ns, "victim", onCluster)
	victim = waitBound(t, ns, victim.Name, 60*time.Second)
	id := jobIDOf(t, victim)
	out, ok := slurmCommand(t, c, "/usr/bin/sbatch", "--partition", "urgent", "--exclusive", "--chdir", "/tmp", "--output", "/dev/null",
		"--job-name", ns+"/urgent", "--wrap", "sleep 300")
	require.True(t, ok, out)
	waitGone(t, ns, victim.Name, 60*time.Second)
	assert.True(t, strings.HasPrefix(clusterJobState(t, c, id), "PREEMPTED "), clusterJobState(t, c, id))
	ev := podEvents(t, victim)
	assert.Contains(t, ev, wellknown.EventSlurmJobPreempted)
	assert.Contains(t, ev, "PREEMPTED")
}

// Issue 5 with docs/topology.md: a SlurmCluster's spec.topology puts its workers in Slurm
// blocks by their nodes' NVLink clique label. The runner's node labelled e2e-a: its worker
// is in block e2e-a in `scontrol show topology`; relabelled e2e-b, it moves there (a new
// configuration, which slurmctld reads in place); annotated with the block e2e-pinned, which
// wins over the label, it moves again; and a job still runs on it.
func TestSlurmClusterTopologyBlocks(t *testing.T) {
	ctx := context.Background()
	startPodRunner(t)
	ns := namespace(t)
	const label = "nvidia.com/gpu.clique"
	setClique := func(v string) {
		value := "null"
		if v != "" {
			value = strconv.Quote(v)
		}
		_, err := kube.CoreV1().Nodes().Patch(ctx, runnerNode, types.MergePatchType,
			fmt.Appendf(nil, `{"metadata":{"labels":{%q:%s}}}`, label, value), metav1.PatchOptions{})
		require.NoError(t, err)
	}
	setClique("e2e-a")
	t.Cleanup(func() { setClique("") })
	createLocalCluster(t, ns, func(c *slurmv1.SlurmCluster) { c.Spec.Topology = &slurmv1.TopologySpec{BlockSizes: []int32{1}} })
	c := waitSlurmClusterReady(t, ns, runnerNode)
	inBlock := func(block string) func() bool {
		return func() bool {
			out, ok := slurmCommand(t, c, "/usr/bin/scontrol", "show", "topology")
			return ok && regexp.MustCompile(`BlockName=`+block+`\s+BlockIndex=\d+\s+Nodes=`+runnerNode+`\s`).MatchString(out)
		}
	}
	eventually(t, 60*time.Second, runnerNode+" in block e2e-a", inBlock("e2e-a"))

	setClique("e2e-b")
	eventually(t, 120*time.Second, runnerNode+" moved to block e2e-b", inBlock("e2e-b"))
	out, ok := slurmCommand(t, c, "/usr/bin/scontrol", "show", "topology")
	require.True(t, ok, out)
	t.Logf("scontrol show topology:\n%s", out)
	assert.NotContains(t, out, "BlockName=e2e-a")

	// The node's block annotation wins over its label.
	annotateBlock := func(value string) {
		_, err := kube.CoreV1().Nodes().Patch(ctx, runnerNode, types.MergePatchType,
			fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%s}}}`, wellknown.TopologyBlockAnnotation, value), metav1.PatchOptions{})
		require.NoError(t, err)
	}
	annotateBlock(`"e2e-pinned"`)
	t.Cleanup(func() { annotateBlock("null") })
	eventually(t, 120*time.Second, runnerNode+" moved to block e2e-pinned by its annotation", inBlock("e2e-pinned"))
	out, ok = slurmCommand(t, c, "/usr/bin/scontrol", "show", "topology")
	require.True(t, ok, out)
	assert.NotContains(t, out, "BlockName=e2e-b")

	out, ok = slurmCommand(t, c, "/usr/bin/sbatch", "--parsable", "--chdir", "/tmp", "--output", "/dev/null", "--wrap", "true")
	require.True(t, ok, out)
	id := sbatchJobID(out)
	eventually(t, 60*time.Second, "job "+id+" COMPLETED on "+runnerNode, func() bool {
		out, _ := slurmCommand(t, c, "/usr/bin/scontrol", "show", "job", "-o", id)
		return regexpField(out, "JobState") == "COMPLETED" && regexpField(out, "NodeList") == runnerNode
	})
}

// scaleRestAPI sets the SlurmCluster's spec.restApi.replicas to n and waits until its
// slurmrestd Deployment has n pods, all ready.
func scaleRestAPI(t *testing.T, c *slurmv1.SlurmCluster, n int32) {
	t.Helper()
	ctx := context.Background()
	kc := slurmClient(t)
	cur := &slurmv1.SlurmCluster{}
	require.NoError(t, kc.Get(ctx, client.ObjectKeyFromObject(c), cur))
	patch := client.MergeFrom(cur.DeepCopy())
	require.NotNil(t, cur.Spec.RestAPI, "the cluster runs slurmrestd")
	cur.Spec.RestAPI.Replicas = ptrTo(n)
	require.NoError(t, kc.Patch(ctx, cur, patch))
	eventually(t, 90*time.Second, fmt.Sprintf("slurmrestd at %d ready pods", n), func() bool {
		d, err := kube.AppsV1().Deployments(c.Namespace).Get(ctx, slurmcluster.RestAPIName(c), metav1.GetOptions{})
		if err != nil || d.Status.ReadyReplicas != n {
			return false
		}
		pods, err := kube.CoreV1().Pods(c.Namespace).List(ctx, metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(d.Spec.Selector)})
		return err == nil && len(pods.Items) == int(n)
	})
}
