package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	slurmv1 "github.com/kubeslurm/kubeslurm/api/v1alpha1"
	"github.com/kubeslurm/kubeslurm/pkg/controller/slurmcluster"
	"github.com/kubeslurm/kubeslurm/pkg/slurm"
	"github.com/kubeslurm/kubeslurm/pkg/slurmjob"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

// adoptedWorkerImage is the worker image under localhost/: on a kwok node, kwok's stages
// leave its pods to the pod runner that adopted the node (deploy/local/kwok-stages.yaml).
const adoptedWorkerImage = "localhost/" + slurmcluster.DefaultWorkerImage

// addAdoptedKwokNode adds a kwok node, and a pod runner that adopts it (--adopt-node) to run
// the pods of images under localhost/ bound there; kwok keeps the node and fakes its other
// pods. At the end the runner stops, then the node is deleted.
func addAdoptedKwokNode(t *testing.T, name string) *podRunner {
	t.Helper()
	// GPUs as the local cluster's nodes have them: the GPU feature discovery's count, which
	// the node's pod runner makes fake devices for, and the device plugin's resource.
	node := kwokNode(name, map[string]string{v1.LabelHostname: name, "nvidia.com/gpu.count": strconv.Itoa(gpusPerNode)})
	for _, l := range []v1.ResourceList{node.Status.Capacity, node.Status.Allocatable} {
		l[slurmjob.GPUResource] = resource.MustParse(strconv.Itoa(gpusPerNode))
	}
	_, err := kube.CoreV1().Nodes().Create(context.Background(), node, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		err := kube.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
		if !apierrors.IsNotFound(err) {
			assert.NoError(t, err)
		}
	})
	return startPodRunnerOn(t, name, "podrunner-"+name, runnerAdopts)
}

// requireAdoptedWorkersRunning: the SlurmCluster in ns has one worker pod on each of the
// kwok nodes, each really running there: its node's runner, not kwok, wrote its status.
func requireAdoptedWorkersRunning(t *testing.T, ns string, nodes []string) {
	t.Helper()
	workers, err := kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=slurmd"})
	require.NoError(t, err)
	var on []string
	for _, w := range workers.Items {
		on = append(on, w.Spec.NodeName)
		require.Len(t, w.Status.ContainerStatuses, 1, w.Name)
		cs := w.Status.ContainerStatuses[0]
		assert.True(t, cs.Ready && cs.State.Running != nil, "%s: %+v", w.Name, cs)
		assert.Equal(t, adoptedWorkerImage, cs.Image, w.Name)
		// The runner's address, not one of kwok's pod CIDR: kwok's stages left the pod alone.
		assert.Equal(t, "127.0.0.1", w.Status.PodIP, w.Name)
	}
	assert.ElementsMatch(t, nodes, on, "the nodes of the workers")
}

// kwokNodeOptions size a kwok node's worker as the node says (4 CPUs, 8Gi) and as
// deploy/local's slurmd are, whatever the host has; the cluster sets
// SlurmdParameters=config_overrides, as deploy/local does, for hosts with fewer.
var kwokNodeOptions = map[string]string{"CPUs": "4", "RealMemory": "7900"}

// kwokNodeSet is the NodeSet of the i-th kwok node's worker (1-based): one NodeSet per node,
// as the runners' pods share the host's network and each slurmd needs a port of its own.
func kwokNodeSet(i int, node string) slurmv1.NodeSetSpec {
	return slurmv1.NodeSetSpec{Name: fmt.Sprintf("kwok%d", i), Image: adoptedWorkerImage, Port: ptrTo(int32(6940 + i)),
		NodeSelector: map[string]string{v1.LabelHostname: node}, GPUs: &slurmv1.NodeSetGPUs{}, NodeOptions: kwokNodeOptions}
}

// waitIndexedJobPods waits until the indexed Job's n pods are bound and returns them in
// index order.
func waitIndexedJobPods(t *testing.T, ns, name string, n int) []*v1.Pod {
	t.Helper()
	var pods []*v1.Pod
	eventually(t, 90*time.Second, fmt.Sprintf("the Job's %d pods bound", n), func() bool {
		list, err := kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: batchv1.JobNameLabel + "=" + name})
		require.NoError(t, err)
		pods = make([]*v1.Pod, n)
		for i := range list.Items {
			p := &list.Items[i]
			idx, err := strconv.Atoi(p.Annotations[batchv1.JobCompletionIndexAnnotation])
			if err != nil || idx >= n || p.Spec.NodeName == "" {
				return false
			}
			pods[idx] = p
		}
		for _, p := range pods {
			if p == nil {
				return false
			}
		}
		return true
	})
	return pods
}

// nodeDeletionRemovesItsIdleSlurmNode, the idle half of TestNodeDeletionRemovesIdleDynamicSlurmNode
// on a SlurmCluster's workers: a joined node whose worker's Slurm node is idle is deleted
// from Kubernetes. No NodeSet asks for a worker on a node that does not exist, so the
// controller deletes the worker pod (a SlurmWorkerRemoved event on the cluster), whose
// wrapper drains and deletes its dynamic Slurm node; the node stays out of Slurm, and comes
// back with its worker when the Kubernetes node does. (The busy half does not carry over:
// the worker is a pod on the deleted node, so it goes, with its job steps, and no job can
// stay there.)
func nodeDeletionRemovesItsIdleSlurmNode(t *testing.T, st stack, c *slurmv1.SlurmCluster) {
	node := st.addNode(t)
	st.waitNodeIdle(t, node)
	saved := getNode(t, node)
	deleteNode(t, node)
	eventually(t, 60*time.Second, "the idle dynamic Slurm node "+node+" removed, and its worker pod gone", func() bool {
		return !st.hasNode(t, node) && workerPodOn(t, node) == nil
	})
	assert.Contains(t, namedClusterEvents(t, c.Namespace, c.Name, wellknown.EventSlurmWorkerRemoved), "(Slurm node "+node+"): its NodeSet no longer asks for it")
	consistently(t, 10*time.Second, "Slurm node "+node+" stays removed", func() bool { return !st.hasNode(t, node) })

	// The node back (as the runner that adopted it needs it at its end): its worker too.
	recreateNode(t, saved)
	eventually(t, 120*time.Second, node+"'s worker registered in Slurm again", func() bool { return st.hasNode(t, node) })
}

// createIndexedGang creates an indexed batch Job of n pods that kubeslurm places as one
// gang (one Slurm job), each pod made by opts, and deletes it at the end.
func createIndexedGang(t *testing.T, ns, name string, n int32, opts ...podOpt) {
	t.Helper()
	tmpl := newPod(ns, "", opts...)
	tmpl.Spec.RestartPolicy = v1.RestartPolicyNever
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
			Annotations: map[string]string{slurmjob.Annotation(slurmjob.AnnotationGang): "true"}},
		Spec: batchv1.JobSpec{
			Parallelism: ptrTo(n), Completions: ptrTo(n),
			CompletionMode: ptrTo(batchv1.IndexedCompletion),
			Template:       v1.PodTemplateSpec{Spec: tmpl.Spec},
		},
	}
	_, err := kube.BatchV1().Jobs(ns).Create(context.Background(), job, metav1.CreateOptions{})
	require.NoError(t, err)
	deleteJobAtEnd(t, ns, name)
}

// Issue 5, toward the local cluster's Slurm being one a SlurmCluster runs: Slurm workers on
// kwok nodes. kwok runs no process, so a pod runner adopts each kwok node: it runs the pods
// of images under localhost/ bound there (kwok's stages leave those alone), while kwok keeps
// the node and fakes its other pods. A SlurmCluster whose NodeSets use that image gets a
// real slurmd on each kwok node, registered as the Kubernetes node's name; the release's
// scheduler then makes an indexed Job's gang ONE job of that Slurm across the nodes, each
// pod (a kwok fake) bound to the node of its rank, and the Job completes. Each node has 4
// GPUs, which its runner makes fake devices for and its worker registers (nodeSets[].gpus),
// and its worker registers the node's 4 CPUs and 8Gi (nodeSets[].nodeOptions).
// The local cluster's scheduler scenarios whose outcome depends on this Slurm (its daemons
// as pods, the release, NodeSets, the workers' GPUs, slurmrestd as a Deployment with
// spec.restApi.replicas 0 for 30 s) then run on it too. In its node failure
// scenarios a node's machine fails (its runner and all the processes it started killed at
// once, so no worker drains) and comes back (a new runner starts the worker pod's
// containers again).
func TestSlurmClusterWorkersOnKwokNodes(t *testing.T) {
	ctx := context.Background()
	startPodRunner(t) // slurmctld and slurmrestd, on the runner's own node
	// Four, the gang below spanning them all.
	kwokNodes := []string{"kwok-worker-1", "kwok-worker-2", "kwok-worker-3", "kwok-worker-4"}
	runners := map[string]*podRunner{}
	for _, n := range kwokNodes {
		runners[n] = addAdoptedKwokNode(t, n)
	}
	ns := namespace(t)
	c := createLocalCluster(t, ns, func(c *slurmv1.SlurmCluster) {
		c.Spec.LoginSets = nil
		// Slurm marks a silent node DOWN after SlurmdTimeout (300 s by default). The
		// workers declare the kwok nodes' size (kwokNodeOptions), which the host may not have.
		c.Spec.ExtraConfig = "SlurmdTimeout=30\nSlurmdParameters=config_overrides"
		c.Spec.NodeSets = nil
		c.Spec.Partitions[0].NodeSets = nil
		for i, n := range kwokNodes {
			set := kwokNodeSet(i+1, n)
			c.Spec.NodeSets = append(c.Spec.NodeSets, set)
			c.Spec.Partitions[0].NodeSets = append(c.Spec.Partitions[0].NodeSets, set.Name)
		}
	})
	c = waitSlurmClusterReady(t, ns, kwokNodes...)
	// Each worker registered with its NodeSet's node options.
	for _, n := range kwokNodes {
		out, ok := slurmCommand(t, c, "/usr/bin/scontrol", "show", "node", n)
		require.True(t, ok, out)
		assert.Equal(t, kwokNodeOptions["CPUs"], regexpField(out, "CPUTot"), "%s: %s", n, out)
		assert.Equal(t, kwokNodeOptions["RealMemory"], regexpField(out, "RealMemory"), "%s: %s", n, out)
	}

	requireAdoptedWorkersRunning(t, ns, kwokNodes)

	installClusterRelease(t, ns, c)
	createIndexedGang(t, ns, "gang", int32(len(kwokNodes)), onCluster)
	pods := waitIndexedJobPods(t, ns, "gang", len(kwokNodes))
	// ONE job across the kwok nodes' workers, each index on the node of its rank in the
	// allocation (TestIndexedJobGangKeepsIndexRankOrder's check): the workers registered in
	// no particular order, so index 0 need not be on the first node by name.
	st := clusterStack(c, runners)
	id := requireOneJobOnTheirNodes(t, st, pods)
	out, ok := slurmCommand(t, c, "/usr/bin/scontrol", "show", "job", "-o", strconv.Itoa(int(id)))
	require.True(t, ok, out)
	state, nodeList := regexpField(out, "JobState"), regexpField(out, "NodeList")
	assert.ElementsMatch(t, kwokNodes, slurm.ExpandHostlist(nodeList), "ONE job across the kwok nodes' workers")
	// Rank 0 is where Slurm would run the job's batch step.
	assert.Equal(t, regexpField(out, "BatchHost"), pods[0].Spec.NodeName, "the pod of index 0 on the job's first node")
	t.Logf("gang: Slurm job %d of the SlurmCluster on %s (%s), index 0 on %s", id, nodeList, state, pods[0].Spec.NodeName)
	eventually(t, 90*time.Second, "the Job complete and its Slurm job ended", func() bool {
		j, err := kube.BatchV1().Jobs(ns).Get(ctx, "gang", metav1.GetOptions{})
		require.NoError(t, err)
		state := strings.Fields(clusterJobState(t, c, id))
		return j.Status.Succeeded == int32(len(kwokNodes)) && len(state) > 0 && state[0] != "RUNNING" && state[0] != "PENDING"
	})

	// The local scheduler tests' scenarios (e2e/stack_test.go) whose outcome depends on
	// what differs on this Slurm: its daemons are pods (slurmrestd a Deployment, slurmd a
	// worker pod per node), the scheduler and controller are a release of their own, nodes
	// join through NodeSets, and GPUs are the NodeSets'. The scenarios that exercise only
	// how a pod becomes a job (annotations, groups, JobSet, LWS, priority order, refusals)
	// run the same code against any Slurm, and run on the local cluster's alone.
	for _, sc := range []struct {
		name string
		run  func(t *testing.T, ns string)
	}{
		{"pod is placed by Slurm", func(t *testing.T, ns string) { podIsPlacedBySlurm(t, st, ns) }},
		{"job state on the pod", func(t *testing.T, ns string) { jobStateOnThePod(t, st, ns) }},
		{"sbatch and pods share nodes", func(t *testing.T, ns string) { sbatchJobAndPodShareNodes(t, st, ns) }},
		{"GPU pods get their Slurm GPU indices", func(t *testing.T, ns string) { gpuPodsGetTheirSlurmGPUIndices(t, st, ns) }},
		{"job mapping agent writes the pod's GPUs", func(t *testing.T, ns string) { jobMappingAgentWritesThePodsGPUs(t, st, ns) }},
		{"pod and job end together", func(t *testing.T, ns string) { podAndJobEndTogether(t, st, ns) }},
		{"scheduler restart keeps one job per pod", func(t *testing.T, ns string) { schedulerRestartKeepsOneJobPerPod(t, st, ns) }},
		{"NotReady node releases its job", func(t *testing.T, ns string) { notReadyNodeReleasesItsJob(t, st, ns) }},
		{"PodGroup larger than Slurm waits for a node", func(t *testing.T, ns string) { podGroupLargerThanSlurmWaitsForANode(t, st, ns) }},
		{"Slurm node failure ends the pod", func(t *testing.T, ns string) { slurmNodeFailureEndsThePod(t, st, ns) }},
		{"node down, drained, not responding", func(t *testing.T, _ string) { nodeDownDrainedNotRespondingConditions(t, st) }},
		{"drain waits for the Slurm job", func(t *testing.T, ns string) { drainWaitsForTheSlurmJob(t, st, ns) }},
		{"controller restart keeps drain and job", func(t *testing.T, ns string) { controllerRestartKeepsDrainAndJob(t, st, ns) }},
		{"slurmrestd outage is harmless", func(t *testing.T, ns string) { slurmrestdOutageIsHarmless(t, st, ns) }},
		{"node deletion removes its idle Slurm node", func(t *testing.T, _ string) { nodeDeletionRemovesItsIdleSlurmNode(t, st, c) }},
	} {
		t.Run(sc.name, func(t *testing.T) { sc.run(t, namespaceOn(t, st)) })
	}
}
