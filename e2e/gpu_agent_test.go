package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kubeslurm/kubeslurm/pkg/dcgmjobmap"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

// agentKubeconfig is the admin kubeconfig with a token of the agent's ServiceAccount
// instead (manifests/local/rbac.yaml, from the chart): the agent runs with its RBAC only.
func agentKubeconfig(t *testing.T) string {
	t.Helper()
	tok, err := kube.CoreV1().ServiceAccounts("kubeslurm-system").CreateToken(context.Background(), "kubeslurm-job-mapping-agent",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptrTo[int64](3600)}}, metav1.CreateOptions{})
	require.NoError(t, err)
	cfg, err := clientcmd.LoadFromFile(filepath.Join(runDir, "admin.kubeconfig"))
	require.NoError(t, err)
	for _, auth := range cfg.AuthInfos {
		auth.Token, auth.TokenFile = tok.Status.Token, ""
	}
	f := filepath.Join(t.TempDir(), "agent.kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*cfg, f))
	return f
}

// startJobMappingAgent runs `kubeslurm-controller job-mapping-agent` for node as a host
// process (as its DaemonSet pod would on that node), writing into dir, until the test ends.
func startJobMappingAgent(t *testing.T, node, dir string) {
	t.Helper()
	logFile := filepath.Join(t.TempDir(), "agent.log")
	out, err := os.Create(logFile)
	require.NoError(t, err)
	cmd := exec.Command(filepath.Join(repoRoot, "bin", "kubeslurm-controller"), "job-mapping-agent",
		"--kubeconfig", agentKubeconfig(t), "--node-name", node, "--dir", dir,
		"--health-probe-bind-address=0", "-v=1")
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		out.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logFile)
			t.Logf("job mapping agent's log:\n%s", b)
		}
	})
}

// mappingFiles is dir's numbered files (GPU index -> content) and whether the agent's
// state file is there.
func mappingFiles(t *testing.T, dir string) (map[string]string, bool) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	out := map[string]string{}
	state := false
	for _, e := range entries {
		if e.Name() == dcgmjobmap.StateFile {
			state = true
		}
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		out[e.Name()] = string(b)
	}
	return out, state
}

// 5. The job mapping agent of a node writes the mapping files of the placeholder job of a
// pod on 2 GPUs there, for exactly the indices Slurm gave it, beside a batch job's line the
// prolog wrote; it takes them out when the pod goes, and the batch job's line stays. A GPU
// pod on another node is not this agent's.
func TestJobMappingAgentWritesThePodsGPUs(t *testing.T) {
	jobMappingAgentWritesThePodsGPUs(t, localStack(), namespace(t))
}

func jobMappingAgentWritesThePodsGPUs(t *testing.T, st stack, ns string) {
	node, other := st.nodes[0], st.nodes[1]
	dir := t.TempDir()
	// A batch job's line in every GPU's file, as the prolog writes it.
	const batchJob = "424242"
	prologLines := map[string]string{}
	for i := 0; i < gpusPerNode; i++ {
		prologLines[strconv.Itoa(i)] = batchJob + "\n"
		require.NoError(t, os.WriteFile(filepath.Join(dir, strconv.Itoa(i)), []byte(batchJob+"\n"), 0o644))
	}
	startJobMappingAgent(t, node, dir)

	createPod(t, ns, "gpu-there", st.pod, withGPUs(2), onlyOnNode(other))
	pod := createPod(t, ns, "gpu", st.pod, withGPUs(2), onlyOnNode(node))
	pod = waitBound(t, ns, pod.Name, 60*time.Second)
	require.Equal(t, node, pod.Spec.NodeName)
	eventually(t, 30*time.Second, "the pod's GPU indices", func() bool {
		pod = getPod(t, ns, pod.Name)
		return pod.Annotations[wellknown.GPUIndicesAnnotation] != ""
	})
	idx := pod.Annotations[wellknown.GPUIndicesAnnotation]
	job := strconv.Itoa(int(jobIDOf(t, pod)))
	require.Len(t, strings.Split(idx, ","), 2, idx)
	require.Equal(t, gresIndices(t, st, jobIDOf(t, pod)), idx, "the annotation says what scontrol says")

	want := map[string]string{}
	for k, v := range prologLines {
		want[k] = v
	}
	for _, i := range strings.Split(idx, ",") {
		want[i] = batchJob + "\n" + job + "\n"
	}
	var got map[string]string
	eventually(t, 30*time.Second, "the agent wrote job "+job+" into the files of GPUs "+idx, func() bool {
		got, _ = mappingFiles(t, dir)
		return assert.ObjectsAreEqual(want, got)
	})
	t.Logf("pod %s: job %s on GPUs %s of %s; mapping %v", pod.Name, job, idx, node, got)
	var there = waitBound(t, ns, "gpu-there", 60*time.Second)
	eventually(t, 30*time.Second, "the GPU indices of the pod on "+other, func() bool {
		there = getPod(t, ns, there.Name)
		return there.Annotations[wellknown.GPUIndicesAnnotation] != ""
	})
	got, _ = mappingFiles(t, dir)
	assert.Equal(t, want, got, "nothing of job %d, on %s", jobIDOf(t, there), other)

	require.NoError(t, kube.CoreV1().Pods(ns).Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptrTo[int64](0)}))
	waitGone(t, ns, pod.Name, 60*time.Second)
	eventually(t, 30*time.Second, "the agent took job "+job+" out again", func() bool {
		got, state := mappingFiles(t, dir)
		return assert.ObjectsAreEqual(prologLines, got) && !state
	})
}
