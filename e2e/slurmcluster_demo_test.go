package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slurmv1 "github.com/kubeslurm/kubeslurm/api/v1alpha1"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

// What deploy/local/slurmcluster.sh (make up-slurmcluster) makes, as it names it.
const (
	demoNamespace = "slurmcluster-demo"
	demoHost      = "slurm-host"
	demoPod       = "slurm-placed" // examples/pod.yaml
)

var demoWorkers = []string{"slurm-worker-1", "slurm-worker-2"}

// slurmClusterScript runs deploy/local/slurmcluster.sh with args and returns its output.
func slurmClusterScript(args ...string) (string, error) {
	return runCmd(filepath.Join(repoRoot, "deploy", "local", "slurmcluster.sh"), args...)
}

// TestSlurmClusterScript: `make up-slurmcluster` on the running local cluster gives a Slurm
// that the controller runs from examples/slurmcluster-kwok.yaml, its slurmd really running on
// the two kwok nodes the script adds (each adopted by a pod runner), and a release of its own
// that places the example pod through it: the pod runs on a worker's node with a job of that
// Slurm, which the script's `slurm` command shows running there. A second `up` changes
// nothing; `down` removes the release, the namespace, the runners and the nodes.
func TestSlurmClusterScript(t *testing.T) {
	ctx := context.Background()
	downDone := false
	t.Cleanup(func() {
		if !downDone {
			out, err := slurmClusterScript("down")
			assert.NoError(t, err, "slurmcluster.sh down: %s", out)
		}
	})
	out, err := slurmClusterScript("up")
	t.Logf("slurmcluster.sh up:\n%s", out)
	require.NoError(t, err)

	c := &slurmv1.SlurmCluster{}
	require.NoError(t, slurmClient(t).Get(ctx, client.ObjectKey{Namespace: demoNamespace, Name: "slurm"}, c))
	assert.True(t, meta.IsStatusConditionTrue(c.Status.Conditions, slurmv1.ConditionControllerReady), "%+v", c.Status.Conditions)
	assert.Equal(t, int32(len(demoWorkers)), c.Status.ReadyWorkers)

	requireAdoptedWorkersRunning(t, demoNamespace, demoWorkers)

	// The example pod: placed through that Slurm, by the release's scheduler.
	pod, err := kube.CoreV1().Pods(demoNamespace).Get(ctx, demoPod, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, clusterScheduler, pod.Spec.SchedulerName)
	assert.Equal(t, v1.PodRunning, pod.Status.Phase)
	assert.Contains(t, demoWorkers, pod.Spec.NodeName)
	id := pod.Labels[wellknown.JobIDLabel]
	require.NotEmpty(t, id, "the pod's job id label")
	assert.Equal(t, "RUNNING", pod.Annotations[wellknown.JobStateAnnotation])
	squeue, err := slurmClusterScript("slurm", "squeue", "-h", "-o", "%i %T %N")
	require.NoError(t, err, squeue)
	assert.Contains(t, strings.Split(squeue, "\n"), id+" RUNNING "+pod.Spec.NodeName, "the cluster's squeue")
	// ...of the SlurmCluster's Slurm, not the local one, which has no such node.
	assert.NotContains(t, slurmCmd(t, "sinfo", "-h", "-N", "-o", "%N"), "slurm-worker")

	// Up again: already running; the same pod and job.
	out, err = slurmClusterScript("up")
	require.NoError(t, err, out)
	assert.Contains(t, out, "podrunner-"+demoHost+" already running")
	again, err := kube.CoreV1().Pods(demoNamespace).Get(ctx, demoPod, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, pod.UID, again.UID)
	assert.Equal(t, id, again.Labels[wellknown.JobIDLabel])

	downDone = true
	out, err = slurmClusterScript("down")
	t.Logf("slurmcluster.sh down:\n%s", out)
	require.NoError(t, err)
	_, err = kube.CoreV1().Namespaces().Get(ctx, demoNamespace, metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "namespace %s left: %v", demoNamespace, err)
	for _, n := range append([]string{demoHost}, demoWorkers...) {
		_, err := kube.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
		assert.True(t, apierrors.IsNotFound(err), "node %s left: %v", n, err)
		_, err = os.Stat(filepath.Join(runDir, "pids", "podrunner-"+n+".pid"))
		assert.True(t, os.IsNotExist(err), "PID file of %s's runner left: %v", n, err)
		_, err = os.Stat(filepath.Join(runDir, "podrunner-"+n, "claims", demoNamespace))
		assert.True(t, os.IsNotExist(err), "claims of %s's runner left: %v", n, err)
		// pgrep exits 1 when nothing matches.
		err = exec.Command("pgrep", "-f", "kubeslurm-podrunner .*--node-name "+n+" ").Run()
		assert.Error(t, err, "a pod runner of %s still runs", n)
	}
}
