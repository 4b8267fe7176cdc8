package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slurmv1 "github.com/kubeslurm/kubeslurm/api/v1alpha1"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

// setRunnerGPUs sets the pod runner's node's nvidia.com/gpu, as a device plugin would.
func setRunnerGPUs(t *testing.T, n string) {
	t.Helper()
	_, err := kube.CoreV1().Nodes().PatchStatus(context.Background(), runnerNode,
		[]byte(`{"status":{"capacity":{"nvidia.com/gpu":"`+n+`"},"allocatable":{"nvidia.com/gpu":"`+n+`"}}}`))
	require.NoError(t, err)
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
// Kubernetes node's nvidia.com/gpu count as Gres=gpu:<n>, and slurmd checks it against the
// devices it finds itself (gres.conf AutoDetect=nvidia). This machine has no NVIDIA GPU, so
// Slurm, as it should, refuses the registration and drains the node rather than schedule
// jobs onto GPUs that are not there; when the node reports no GPUs again, the worker is
// replaced by one without GRES and the node is idle again.
func TestSlurmClusterWorkerGPUs(t *testing.T) {
	ctx := context.Background()
	startPodRunner(t)
	ns := namespace(t)
	c := waitSlurmClusterUp(t, ns)

	setRunnerGPUs(t, "2")
	kc := slurmClient(t)
	require.NoError(t, kc.Get(ctx, client.ObjectKeyFromObject(c), c))
	c.Spec.NodeSets[0].GPUs = &slurmv1.NodeSetGPUs{}
	require.NoError(t, kc.Update(ctx, c))
	pod := waitWorker(t, ns, "with Gres=gpu:2", func(args string) bool { return strings.HasSuffix(args, " Gres=gpu:2") })
	assert.Contains(t, pod.Spec.Containers[0].Env, v1.EnvVar{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"})
	assert.Empty(t, pod.Spec.Containers[0].Resources.Requests, "the worker holds none of the node's GPUs")

	out, ok := slurmCommand(t, c, "/usr/bin/scontrol", "show", "config")
	require.True(t, ok, out)
	assert.Regexp(t, `(?m)^GresTypes\s+= gpu$`, out)
	var node string
	eventually(t, 60*time.Second, "Slurm refuses the node's 2 GPUs that slurmd does not find", func() bool {
		node, ok = slurmCommand(t, c, "/usr/bin/scontrol", "show", "node", runnerNode)
		return ok && strings.Contains(node, "INVALID_REG")
	})
	assert.Contains(t, node, "Gres=gpu:2")
	assert.Regexp(t, `State=\S*DRAIN`, node)
	assert.Contains(t, node, "Reason=gres/gpu count reported lower than configured (0 < 2)")

	// The node's GPUs gone (the device plugin reports 0): the worker is replaced by one
	// without GRES, whose node is idle.
	setRunnerGPUs(t, "0")
	waitWorker(t, ns, "without Gres", func(args string) bool { return !strings.Contains(args, "Gres=") })
	eventually(t, 90*time.Second, "sinfo lists the worker idle without GRES", func() bool {
		out, ok = slurmCommand(t, c, "/usr/bin/sinfo", "-h", "-N", "-o", "%N %t %G")
		return ok && strings.Contains(out, runnerNode+" idle (null)")
	})
}
