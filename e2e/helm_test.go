package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubeslurm/kubeslurm/pkg/slurmjob"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

const (
	helmRelease   = "kubeslurm-e2e"
	helmNamespace = "kubeslurm-helm-e2e"
	runnerNode    = "kubeslurm-podrunner"
)

// helmValues install the chart beside the local cluster's own objects (other names, and host
// ports clear of every local component's, lib.sh comp_ports: the pod runner runs pods in the
// host's network), against the local Slurm, with the webhook called by URL (the local API
// server reaches no Service).
var helmValues = []string{
	"namePrefix=" + helmRelease,
	"slurm.restdURL=http://127.0.0.1:6820",
	"slurm.user=slurm",
	"scheduler.image.tag=e2e", "controller.image.tag=e2e",
	"scheduler.replicas=1",
	"scheduler.securePort=10269",
	"controller.metricsPort=18080", "controller.healthPort=18081",
	"webhook.port=9453", "webhook.url=https://127.0.0.1:9453", "webhook.certHosts={127.0.0.1}",
}

// TestHelmInstall: `helm install charts/kubeslurm` brings up a scheduler and a controller
// (run by the pod runner, deploy/local/podrunner, in place of the local ones, which are
// stopped meanwhile) that then place a pod through Slurm; the controller's webhook answers;
// `helm uninstall` removes it all.
func TestHelmInstall(t *testing.T) {
	ctx := context.Background()
	component(t, "stop", "scheduler")
	component(t, "stop", "controller")
	t.Cleanup(func() {
		component(t, "start", "scheduler")
		component(t, "start", "controller")
	})
	startPodRunner(t)

	// The namespace and Slurm's JWT key Secret, as a user makes them before installing.
	_ = kube.CoreV1().Namespaces().Delete(ctx, helmNamespace, metav1.DeleteOptions{}) // a failed run's
	eventually(t, 60*time.Second, "no namespace "+helmNamespace+" left over", func() bool {
		_, err := kube.CoreV1().Namespaces().Get(ctx, helmNamespace, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	_, err := kube.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: helmNamespace}}, metav1.CreateOptions{})
	require.NoError(t, err)
	key, err := os.ReadFile(filepath.Join(runDir, "slurm", "jwt_hs256.key"))
	require.NoError(t, err)
	_, err = kube.CoreV1().Secrets(helmNamespace).Create(ctx, &v1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "slurm-jwt-key"}, Data: map[string][]byte{"jwt_hs256.key": key},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	helmEnv := helmHome(t)
	t.Cleanup(func() {
		out, err := runHelm(helmEnv, "uninstall", helmRelease, "--namespace", helmNamespace, "--wait", "--timeout", "2m")
		assert.NoError(t, err, "helm uninstall: %s", out)
		_, err = kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, helmRelease, metav1.GetOptions{})
		assert.True(t, apierrors.IsNotFound(err), "helm uninstall left the ValidatingWebhookConfiguration: %v", err)
		_, err = kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, helmRelease, metav1.GetOptions{})
		assert.True(t, apierrors.IsNotFound(err), "helm uninstall left the MutatingWebhookConfiguration: %v", err)
		for _, name := range []string{helmRelease + "-scheduler", helmRelease + "-controller"} {
			_, err = kube.RbacV1().ClusterRoles().Get(ctx, name, metav1.GetOptions{})
			assert.True(t, apierrors.IsNotFound(err), "helm uninstall left the ClusterRole %s: %v", name, err)
		}
		require.NoError(t, kube.CoreV1().Namespaces().Delete(ctx, helmNamespace, metav1.DeleteOptions{}))
	})
	args := []string{"install", helmRelease, filepath.Join(repoRoot, "charts", "kubeslurm"),
		"--namespace", helmNamespace, "--wait", "--timeout", "3m"}
	for _, v := range helmValues {
		args = append(args, "--set", v)
	}
	start := time.Now()
	out, err := runHelm(helmEnv, args...)
	require.NoError(t, err, "helm install: %s", out)
	t.Logf("helm install --wait: both Deployments available after %s", time.Since(start).Round(100*time.Millisecond))

	// Both Deployments' pods run on the runner's node and are ready (helm --wait saw the
	// Deployments available; this names the pods).
	for _, comp := range []string{"scheduler", "controller"} {
		pods, err := kube.CoreV1().Pods(helmNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=" + comp})
		require.NoError(t, err)
		require.Len(t, pods.Items, 1, comp)
		p := pods.Items[0]
		assert.Equal(t, runnerNode, p.Spec.NodeName, comp)
		assert.Equal(t, v1.PodRunning, p.Status.Phase, comp)
		assert.True(t, podReady(&p), "%s pod %s not ready: %+v", comp, p.Name, p.Status)
	}
	// Leader election in the release's namespace.
	for _, lease := range []string{helmRelease + "-scheduler", "kubeslurm-controller"} {
		eventually(t, 60*time.Second, "lease "+lease+" held", func() bool {
			l, err := kube.CoordinationV1().Leases(helmNamespace).Get(ctx, lease, metav1.GetOptions{})
			return err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != ""
		})
	}

	// The installed scheduler and controller place a pod through Slurm (the local ones are
	// stopped).
	ns := namespace(t)
	p := createPod(t, ns, "placed-by-helm")
	p = waitBound(t, ns, p.Name, 60*time.Second)
	job, ok := jobByID(t, jobIDOf(t, p))
	require.True(t, ok, "job of %s not in squeue", p.Name)
	assert.Equal(t, p.Spec.NodeName, job.Nodes)
	assert.Equal(t, ns+"/"+p.Name, job.Name)
	t.Logf("%s bound to %s, Slurm job %d %s on %s", p.Name, p.Spec.NodeName, job.ID, job.State, job.Nodes)
	eventually(t, 60*time.Second, "the controller writes the job's state onto the pod", func() bool {
		return getPod(t, ns, p.Name).Annotations[wellknown.JobStateAnnotation] != ""
	})

	// The installed controller's webhook: its CA in its configuration, and it refuses a bad annotation.
	eventually(t, 60*time.Second, "caBundle of "+helmRelease+" written by the controller", func() bool {
		c, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, helmRelease, metav1.GetOptions{})
		return err == nil && len(c.Webhooks) > 0 && len(c.Webhooks[0].ClientConfig.CABundle) > 0
	})
	_, err = kube.CoreV1().Pods(ns).Create(ctx, newPod(ns, "bad", withAnnotation("time-limit", "abc")), metav1.CreateOptions{})
	requireDenied(t, err, slurmjob.Annotation("time-limit"), "is not a time limit")
	assert.Contains(t, err.Error(), "pods.slurmjob.kubeslurm.io")
}

func podReady(p *v1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

// helmHome is helm's environment for the test: the local cluster's kubeconfig, and its
// cache, config and data in a temporary directory.
func helmHome(t *testing.T) []string {
	d := t.TempDir()
	return append(os.Environ(), "KUBECONFIG="+filepath.Join(runDir, "admin.kubeconfig"),
		"HELM_CACHE_HOME="+filepath.Join(d, "cache"), "HELM_CONFIG_HOME="+filepath.Join(d, "config"),
		"HELM_DATA_HOME="+filepath.Join(d, "data"))
}

func runHelm(env []string, args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(repoRoot, "bin", "helm"), args...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}
