package e2e

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubeslurm/kubeslurm/pkg/dcgmjobmap"
	"github.com/kubeslurm/kubeslurm/pkg/slurmjob"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

// The local cluster's fake GPUs (deploy/local/lib.sh GPUS_PER_NODE, DCGM_JOB_MAPPING_DIR).
const (
	gpusPerNode    = 4
	jobMappingDir  = dcgmjobmap.DefaultDir
	jobMappingConf = "kubeslurm-dcgm-job-mapping"
)

func withGPUs(n int) podOpt {
	return func(p *v1.Pod) {
		q := resource.MustParse(strconv.Itoa(n))
		p.Spec.Containers[0].Resources.Requests[slurmjob.GPUResource] = q
		p.Spec.Containers[0].Resources.Limits = v1.ResourceList{slurmjob.GPUResource: q}
	}
}

// gresIndices is what `scontrol show job -d` says of the job's GPUs on its (one) node:
// the indices of "GRES=gpu:2(IDX:0-1)", as "0,1".
func gresIndices(t *testing.T, st stack, id int32) string {
	t.Helper()
	out := st.slurm(t, "scontrol", "show", "job", "-d", strconv.Itoa(int(id)))
	m := regexp.MustCompile(`\sGRES=gpu[^ ]*\(IDX:([0-9,-]+)\)`).FindStringSubmatch(out)
	require.NotNil(t, m, "no GPU indices in scontrol show job -d %d:\n%s", id, out)
	var idx []string
	for _, r := range strings.Split(m[1], ",") {
		lo, hi, isRange := strings.Cut(r, "-")
		if !isRange {
			hi = lo
		}
		for i := mustAtoi(t, lo); i <= mustAtoi(t, hi); i++ {
			idx = append(idx, strconv.Itoa(int(i)))
		}
	}
	return strings.Join(idx, ",")
}

// nodeRoot is the filesystem the slurmd of a node (and its prolog and epilog) sees: its
// own tmpfs mounts (fake GPUs, job mapping directory) live in its mount namespace.
func nodeRoot(t *testing.T, node string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(runDir, "pids", "slurmd-"+node+".pid"))
	require.NoError(t, err)
	return filepath.Join("/proc", strings.TrimSpace(string(b)), "root")
}

// jobMapping reads a node's DCGM job mapping: GPU index -> its file's content.
func jobMapping(t *testing.T, node string) map[string]string {
	t.Helper()
	dir := filepath.Join(nodeRoot(t, node), jobMappingDir)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	out := map[string]string{}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue // .lock and the like: dcgm-exporter reads only numbered files
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		out[e.Name()] = string(b)
	}
	return out
}

// 1. Kubernetes and Slurm see the same fake GPUs: kwok nodes advertise nvidia.com/gpu and
// the GPU operator's labels, and each slurmd has as many file-backed gres/gpu.
func TestNodesHaveMatchingGPUs(t *testing.T) {
	for _, n := range nodes {
		node, err := kube.CoreV1().Nodes().Get(context.Background(), n, metav1.GetOptions{})
		require.NoError(t, err)
		q := node.Status.Allocatable[slurmjob.GPUResource]
		assert.Equal(t, int64(gpusPerNode), q.Value(), n)
		assert.Equal(t, strconv.Itoa(gpusPerNode), node.Labels["nvidia.com/gpu.count"], n)
		assert.Contains(t, slurmCmd(t, "scontrol", "show", "node", n), "Gres=gpu:"+strconv.Itoa(gpusPerNode), n)
	}
}

// 2. A pod on 2 GPUs gets the 2 indices Slurm allocated its job (annotation and SlurmJob
// condition); a second GPU pod on the same node gets the other two; a CPU-only pod is
// placed as before, with no GPUs and no gres.
func TestGPUPodsGetTheirSlurmGPUIndices(t *testing.T) {
	gpuPodsGetTheirSlurmGPUIndices(t, localStack(), namespace(t))
}

func gpuPodsGetTheirSlurmGPUIndices(t *testing.T, st stack, ns string) {
	node := st.nodes[0]
	createPod(t, ns, "gpu-a", st.pod, withGPUs(2), onlyOnNode(node))
	createPod(t, ns, "gpu-b", st.pod, withGPUs(2), onlyOnNode(node))
	// Anywhere: a SlurmCluster's worker has the host's CPUs, which two pods may fill.
	createPod(t, ns, "cpu", st.pod)

	var all []string
	for _, name := range []string{"gpu-a", "gpu-b"} {
		p := waitBound(t, ns, name, 60*time.Second)
		require.Equal(t, node, p.Spec.NodeName)
		// Two writes: the annotation, then the condition (the pod's status).
		var c *v1.PodCondition
		eventually(t, 30*time.Second, name+" annotated with its GPU indices, and its SlurmJob condition naming some", func() bool {
			p = getPod(t, ns, name)
			c = podConditionOf(p, wellknown.SlurmJobCondition)
			return p.Annotations[wellknown.GPUIndicesAnnotation] != "" && c != nil && strings.Contains(c.Message, " with GPU indices ")
		})
		idx := p.Annotations[wellknown.GPUIndicesAnnotation]
		assert.Len(t, strings.Split(idx, ","), 2, idx)
		assert.Equal(t, gresIndices(t, st, jobIDOf(t, p)), idx, "the annotation says what scontrol says")
		assert.Contains(t, c.Message, "with GPU indices "+idx)
		t.Logf("%s: job %d, GPU indices %s", name, jobIDOf(t, p), idx)
		all = append(all, strings.Split(idx, ",")...)
	}
	sort.Strings(all)
	assert.Equal(t, []string{"0", "1", "2", "3"}, all, "the two pods hold different GPUs of the node")

	cpu := waitBound(t, ns, "cpu", 60*time.Second)
	assert.NotContains(t, cpu.Annotations, wellknown.GPUIndicesAnnotation)
	out := st.slurm(t, "scontrol", "show", "job", "-d", strconv.Itoa(int(jobIDOf(t, cpu))))
	assert.NotContains(t, out, "TresPerNode=gres/gpu")
}

// 3. A job on 2 GPUs: the prolog writes a mapping file naming its job id for exactly those
// GPU indices (on its node, in DCGM exporter's format); the epilog removes them when it
// ends. An sbatch job, as slurmd runs no prolog for placeholder (external) jobs; it shares
// the node with a GPU pod, whose GPUs Slurm keeps apart from the batch job's.
func TestDCGMJobMappingFollowsSlurmGPUAllocation(t *testing.T) {
	ns := namespace(t)
	node := nodes[len(nodes)-1]
	pod := createPod(t, ns, "gpu-pod", withGPUs(1), onlyOnNode(node))
	pod = waitBound(t, ns, pod.Name, 60*time.Second)
	eventually(t, 30*time.Second, "the pod's GPU index", func() bool {
		pod = getPod(t, ns, pod.Name)
		return pod.Annotations[wellknown.GPUIndicesAnnotation] != ""
	})
	require.Empty(t, jobMapping(t, node), "no mapping before any batch job")

	id := sbatchJob(t, "-w", node, "--gres=gpu:2", "-J", ns+"/batch", "-o", "/dev/null", "--wrap", "sleep 600")
	waitJobState(t, id, "RUNNING")
	want := map[string]string{}
	for _, i := range strings.Split(gresIndices(t, localStack(), id), ",") {
		want[i] = strconv.Itoa(int(id)) + "\n"
	}
	require.Len(t, want, 2)
	eventually(t, 30*time.Second, "mapping files for the job's GPUs", func() bool {
		return len(jobMapping(t, node)) == len(want)
	})
	assert.Equal(t, want, jobMapping(t, node), "one file per GPU the job holds, holding its id")
	t.Logf("batch job %d on %s: mapping %v; the pod's GPU: %s", id, node, jobMapping(t, node), pod.Annotations[wellknown.GPUIndicesAnnotation])
	assert.NotContains(t, want, pod.Annotations[wellknown.GPUIndicesAnnotation], "Slurm gave the pod another GPU")

	slurmCmd(t, "scancel", strconv.Itoa(int(id)))
	eventually(t, 60*time.Second, "the epilog removed the job's mapping files", func() bool {
		return len(jobMapping(t, node)) == 0
	})
}

// 4. The controller publishes the scripts the slurmd run, in its ConfigMap.
func TestControllerShipsTheJobMappingScripts(t *testing.T) {
	var cm *v1.ConfigMap
	eventually(t, 30*time.Second, "the controller's job mapping ConfigMap", func() bool {
		var err error
		cm, err = kube.CoreV1().ConfigMaps("kubeslurm-system").Get(context.Background(), jobMappingConf, metav1.GetOptions{})
		return err == nil
	})
	root := nodeRoot(t, nodes[0])
	for key, installed := range map[string]string{
		dcgmjobmap.PrologKey: "etc/slurm/prolog.d/dcgm-job-mapping.sh",
		dcgmjobmap.EpilogKey: "etc/slurm/epilog.d/dcgm-job-mapping.sh",
	} {
		b, err := os.ReadFile(filepath.Join(root, installed))
		require.NoError(t, err)
		assert.Equal(t, string(b), cm.Data[key], "%s is what the slurmd run as %s", key, installed)
	}
	assert.True(t, slices.ContainsFunc(strings.Split(slurmCmd(t, "scontrol", "show", "config"), "\n"), func(l string) bool {
		return strings.HasPrefix(l, "PrologFlags") && strings.Contains(l, "Alloc")
	}), "PrologFlags=Alloc")
}
