package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slurmv1 "github.com/kubeslurm/kubeslurm/api/v1alpha1"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

// setRunnerGPUs gives the pod runner's node GPUs: physical is its nvidia.com/gpu.count
// label (what GPU feature discovery finds on the host, and what the runner makes fake
// devices for), offered its nvidia.com/gpu (what the device plugin offers to pods).
func setRunnerGPUs(t *testing.T, physical, offered string) {
	t.Helper()
	ctx := context.Background()
	_, err := kube.CoreV1().Nodes().Patch(ctx, runnerNode, types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"nvidia.com/gpu.count":"`+physical+`"}}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	_, err = kube.CoreV1().Nodes().PatchStatus(ctx, runnerNode,
		[]byte(`{"status":{"capacity":{"nvidia.com/gpu":"`+offered+`"},"allocatable":{"nvidia.com/gpu":"`+offered+`"}}}`))
	require.NoError(t, err)
}

// mappingFile is the content of a DCGM job mapping file ("" when there is none).
func mappingFile(dir, gpu string) string {
	b, _ := os.ReadFile(filepath.Join(dir, gpu))
	return string(b)
}

// waitWorker waits for the cluster's one worker pod to be ready with args matching want.
func waitWorker(t *testing.T, ns, what string, want func(args string) bool) *v1.Pod {
	t.Helper()
	var pod *v1.Pod
	eventually(t, 120*time.Second, "a ready worker "+what, func() bool {
		pods, err := kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: wellknown.SlurmComponentLabel + "=slurmd"})
		if err != nil || len(pods.Items) != 1 {
			return false
		}
		pod = &pods.Items[0]
		return want(strings.Join(pod.Spec.Containers[0].Args, " ")) && podReady(pod)
	})
	return pod
}

// Issue 5, GRES from the node's GPUs: with nodeSets[].gpus, the worker registers its
// Kubernetes node's nvidia.com/gpu count as Gres=gpu:<n>, and slurmd finds the devices
// itself (gres.conf AutoDetect=nvidia), here the pod runner's fake ones (it plays NVIDIA's
// container runtime for NVIDIA_VISIBLE_DEVICES=all, with the model "Kubeslurm Fake GPU",
// which Slurm names kubeslurm_fake_gpu and gpus.type fake_gpu matches, as h100 does an
// "NVIDIA H100 80GB HBM3"). A job asking for GPUs gets them by index, and the prolog and
// epilog keep the node's DCGM job mapping (spec.dcgmJobMapping). When the device plugin
// offers more GPUs than slurmd finds, Slurm, as it should, refuses the registration and
// drains the node rather than schedule jobs onto GPUs that are not there; when the node
// reports no GPUs, the worker is replaced by one without GRES and the node is idle again.
func TestSlurmClusterWorkerGPUs(t *testing.T) {
	ctx := context.Background()
	startPodRunner(t)
	ns := namespace(t)
	c := waitSlurmClusterUp(t, ns)

	setRunnerGPUs(t, "2", "2")
	kc := slurmClient(t)
	require.NoError(t, kc.Get(ctx, client.ObjectKeyFromObject(c), c))
	c.Spec.NodeSets[0].GPUs = &slurmv1.NodeSetGPUs{Type: "fake_gpu"}
	// The node's DCGM job mapping directory: a directory of this test on the host.
	mapping := t.TempDir()
	c.Spec.DCGMJobMapping = &slurmv1.DCGMJobMappingSpec{Dir: mapping}
	require.NoError(t, kc.Update(ctx, c))
	pod := waitWorker(t, ns, "with Gres=gpu:fake_gpu:2", func(args string) bool { return strings.HasSuffix(args, " Gres=gpu:fake_gpu:2") })
	assert.Contains(t, pod.Spec.Containers[0].Env, v1.EnvVar{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"})
	assert.Empty(t, pod.Spec.Containers[0].Resources.Requests, "the worker holds none of the node's GPUs")

	out, ok := slurmCommand(t, c, "/usr/bin/scontrol", "show", "config")
	require.True(t, ok, out)
	assert.Regexp(t, `(?m)^GresTypes\s+= gpu$`, out)
	eventually(t, 90*time.Second, "sinfo lists the worker idle with the 2 GPUs slurmd found", func() bool {
		out, ok = slurmCommand(t, c, "/usr/bin/sinfo", "-h", "-N", "-o", "%N %t %G")
		return ok && strings.Contains(out, runnerNode+" idle gpu:fake_gpu:2")
	})

	// A job asking for both GPUs gets them, by device index.
	out, ok = slurmCommand(t, c, "/usr/bin/sbatch", "--parsable", "--gres=gpu:2", "--chdir", "/tmp", "--output", "/dev/null", "--wrap", "sleep 600")
	if !ok {
		node, _ := slurmCommand(t, c, "/usr/bin/scontrol", "show", "node", "-d", runnerNode)
		require.Fail(t, "sbatch --gres=gpu:2 failed", "%s\n%s", out, node)
	}
	job := sbatchJobID(out)
	cancelled := false
	t.Cleanup(func() { // the worker's teardown would wait for the job
		if !cancelled {
			slurmCommand(t, c, "/usr/bin/scancel", job)
		}
	})
	var detail string
	eventually(t, 60*time.Second, "job "+job+" running on GPUs 0-1", func() bool {
		detail, ok = slurmCommand(t, c, "/usr/bin/scontrol", "show", "job", "-d", job)
		return ok && strings.Contains(detail, "JobState=RUNNING")
	})
	assert.Contains(t, detail, "GRES=gpu:fake_gpu:2(IDX:0-1)")
	// The prolog slurmctld shipped to the worker wrote the job into the node's DCGM job
	// mapping, under each of its GPUs; the epilog takes it out when the job ends.
	eventually(t, 30*time.Second, "job "+job+" in the mapping files of GPUs 0 and 1", func() bool {
		return mappingFile(mapping, "0") == job+"\n" && mappingFile(mapping, "1") == job+"\n"
	})
	out, ok = slurmCommand(t, c, "/usr/bin/scancel", job)
	require.True(t, ok, out)
	cancelled = true
	eventually(t, 60*time.Second, "the mapping files gone with job "+job, func() bool {
		_, err0 := os.Stat(filepath.Join(mapping, "0"))
		_, err1 := os.Stat(filepath.Join(mapping, "1"))
		return os.IsNotExist(err0) && os.IsNotExist(err1)
	})

	// The device plugin offers a GPU more than the node has: the worker is replaced by one
	// registering 3, and Slurm refuses it.
	setRunnerGPUs(t, "2", "3")
	waitWorker(t, ns, "with Gres=gpu:fake_gpu:3", func(args string) bool { return strings.HasSuffix(args, " Gres=gpu:fake_gpu:3") })
	var node string
	eventually(t, 90*time.Second, "Slurm refuses the node's 3 GPUs of which slurmd finds 2", func() bool {
		node, ok = slurmCommand(t, c, "/usr/bin/scontrol", "show", "node", runnerNode)
		return ok && strings.Contains(node, "INVALID_REG")
	})
	assert.Regexp(t, `State=\S*DRAIN`, node)
	assert.Contains(t, node, "Reason=gres/gpu count reported lower than configured (2 < 3)")

	// The node's GPUs gone (the device plugin reports 0): the worker is replaced by one
	// without GRES, whose node is idle.
	setRunnerGPUs(t, "0", "0")
	waitWorker(t, ns, "without Gres", func(args string) bool { return !strings.Contains(args, "Gres=") })
	eventually(t, 90*time.Second, "sinfo lists the worker idle without GRES", func() bool {
		out, ok = slurmCommand(t, c, "/usr/bin/sinfo", "-h", "-N", "-o", "%N %t %G")
		return ok && strings.Contains(out, runnerNode+" idle (null)")
	})
}
