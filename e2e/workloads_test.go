package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	jobsetclientset "sigs.k8s.io/jobset/client-go/clientset/versioned"

	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
	"github.com/kubeslurm/kubeslurm/pkg/workload"
)

// The workloads whose own controllers make the pods: JobSet and LeaderWorkerSet, run on the
// local cluster as their users install them (deploy/local: controllers and webhooks).

func jobSets(t *testing.T) jobsetclientset.Interface {
	t.Helper()
	return jobsetclientset.NewForConfigOrDie(adminConfig)
}

// applyExample applies examples/<file> in ns, deleting it at the test's end.
func applyExample(t *testing.T, ns, file string) {
	applyFile(t, ns, filepath.Join(repoRoot, "examples", file))
}

// applyFile applies the manifests of path in ns and deletes them at the end of the test.
func applyFile(t *testing.T, ns, path string) {
	nodeKubectl(t, "apply", "-n", ns, "-f", path)
	t.Cleanup(func() { deleteWaiting(t, ns, path) })
}

// deleteWaiting deletes the objects of the manifests at path in ns and waits for them to be
// gone (a SlurmCluster's finalizer, say, until its workers drained), at most 3 minutes; when
// they are not gone by then, the test fails with what is left in ns.
func deleteWaiting(t *testing.T, ns, path string) {
	t.Helper()
	out, err := adminKubectl("delete", "-n", ns, "--wait=true", "--timeout=3m", "-f", path)
	if err != nil {
		t.Errorf("kubectl delete -f %s: %v: %s\nleft in %s:\n%s%s", path, err, out, ns, podTable(ns), containerLogTails(ns, 20))
	}
}

// podTable is kubectl's table of the pods and SlurmClusters in ns, with their deletion
// and finalizers.
func podTable(ns string) string {
	out, err := adminKubectl("get", "-n", ns, "pods,slurmclusters", "-o", "custom-columns=KIND:.kind,NAME:.metadata.name,DELETED:.metadata.deletionTimestamp,FINALIZERS:.metadata.finalizers,PHASE:.status.phase,NODE:.spec.nodeName")
	if err != nil {
		return fmt.Sprintf("(kubectl get: %v: %s)", err, out)
	}
	return out
}

// containerLogTails is the last lines of the logs of the containers the pod runners ran
// for ns: a failure's evidence in the test's output, where CI shows it.
func containerLogTails(ns string, lines int) string {
	paths, _ := filepath.Glob(filepath.Join(runDir, "podrunner*", "logs", ns+"_*.log"))
	var b strings.Builder
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		all := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		fmt.Fprintf(&b, "\n--- last %d lines of %s:\n%s", lines, filepath.Base(p), lastLines(all, lines))
	}
	// What the pod runners and the controller said of them.
	daemons, _ := filepath.Glob(filepath.Join(runDir, "logs", "podrunner*.log"))
	for _, p := range append(daemons, filepath.Join(runDir, "logs", "controller.log")) {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		var about []string
		for _, l := range strings.Split(string(data), "\n") {
			if strings.Contains(l, ns) {
				about = append(about, l)
			}
		}
		if len(about) > 0 {
			fmt.Fprintf(&b, "\n--- last %d lines of %s about %s:\n%s", lines, filepath.Base(p), ns, lastLines(about, lines))
		}
	}
	return b.String()
}

// lastLines joins the last n of lines.
func lastLines(lines []string, n int) string {
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// applyEditedExample is applyExample of the example as edit changes it: what a user fills
// in (a CA certificate, say) that the test has its own of.
func applyEditedExample(t *testing.T, ns, file string, edit func(example string) string) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "examples", file))
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), file)
	require.NoError(t, os.WriteFile(path, []byte(edit(string(b))), 0o600))
	applyFile(t, ns, path)
}

// waitPods waits until the selector matches n live pods and returns them.
func waitPods(t *testing.T, ns, selector string, n int) []*v1.Pod {
	t.Helper()
	var pods []*v1.Pod
	eventually(t, 90*time.Second, strconv.Itoa(n)+" pods "+selector, func() bool {
		list, err := kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
		require.NoError(t, err)
		pods = pods[:0]
		for i := range list.Items {
			if workload.Live(&list.Items[i]) {
				pods = append(pods, &list.Items[i])
			}
		}
		return len(pods) == n
	})
	return pods
}

// sortByIndices orders pods by the integer values of the given labels or annotations, in turn.
func sortByIndices(pods []*v1.Pod, keys ...string) {
	value := func(p *v1.Pod, k string) int {
		v, ok := p.Labels[k]
		if !ok {
			v = p.Annotations[k]
		}
		i, _ := strconv.Atoi(v)
		return i
	}
	sort.SliceStable(pods, func(i, j int) bool {
		for _, k := range keys {
			if a, b := value(pods[i], k), value(pods[j], k); a != b {
				return a < b
			}
		}
		return false
	})
}

func TestJobSetIsOneSlurmJob(t *testing.T) {
	jobSetIsOneSlurmJob(t, localStack(), namespace(t))
}

func TestJobSetThatCannotStartAtOnceIsRefusedWithAnEvent(t *testing.T) {
	jobSetThatCannotStartAtOnceIsRefusedWithAnEvent(t, localStack(), namespace(t))
}

// jobSetThatCannotStartAtOnceIsRefusedWithAnEvent: a JobSet whose jobs start one after the
// other (startupPolicyOrder InOrder) cannot be one all-at-once Slurm job: its pod gets an
// event saying so, and nothing is submitted.
func jobSetThatCannotStartAtOnceIsRefusedWithAnEvent(t *testing.T, st stack, ns string) {
	one := int32(1)
	member := &v1.Pod{Spec: v1.PodSpec{
		SchedulerName: wellknown.SchedulerName, RestartPolicy: v1.RestartPolicyNever,
		Containers: []v1.Container{{Name: "c", Image: "busybox"}},
	}}
	st.pod(member)
	podSpec := v1.PodTemplateSpec{Spec: member.Spec}
	js := &jobsetv1alpha2.JobSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ordered"},
		Spec: jobsetv1alpha2.JobSetSpec{
			StartupPolicy: &jobsetv1alpha2.StartupPolicy{StartupPolicyOrder: jobsetv1alpha2.InOrder},
			ReplicatedJobs: []jobsetv1alpha2.ReplicatedJob{
				{Name: "first", Replicas: 1, Template: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Parallelism: &one, Completions: &one, Template: podSpec}}},
				{Name: "second", Replicas: 1, Template: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Parallelism: &one, Completions: &one, Template: podSpec}}},
			},
		},
	}
	_, err := jobSets(t).JobsetV1alpha2().JobSets(ns).Create(context.Background(), js, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = jobSets(t).JobsetV1alpha2().JobSets(ns).Delete(context.Background(), "ordered", metav1.DeleteOptions{PropagationPolicy: ptrTo(metav1.DeletePropagationForeground)})
	})
	pods := waitPods(t, ns, workload.JobSetNameLabel+"=ordered", 1)
	eventually(t, 30*time.Second, "an event saying why no Slurm job is submitted", func() bool {
		return strings.Contains(podEvents(t, pods[0]), "startupPolicyOrder InOrder")
	})
	consistently(t, 5*time.Second, "no Slurm job for the JobSet, and its pod unbound", func() bool {
		return len(st.jobsNamed(t, ns+"/")) == 0 && getPod(t, ns, pods[0].Name).Spec.NodeName == ""
	})
}

func TestLeaderWorkerSetGroupsAreSlurmJobs(t *testing.T) {
	leaderWorkerSetGroupsAreSlurmJobs(t, localStack(), namespace(t))
}

func TestWebhookValidatesJobSetsAndLeaderWorkerSets(t *testing.T) {
	waitWebhook(t)
	ns := namespace(t)
	for _, c := range []struct{ kind, manifest string }{
		{"JobSet", `apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata:
  name: bad
  annotations: {slurmjob.kubeslurm.io/time-limit: soon}
spec:
  replicatedJobs:
  - name: w
    replicas: 1
    template:
      spec:
        template:
          spec:
            schedulerName: kubeslurm-scheduler
            restartPolicy: Never
            containers: [{name: c, image: busybox}]
`},
		{"LeaderWorkerSet", `apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
metadata:
  name: bad
  annotations: {slurmjob.kubeslurm.io/time-limit: soon}
spec:
  leaderWorkerTemplate:
    size: 2
    workerTemplate:
      spec:
        schedulerName: kubeslurm-scheduler
        containers: [{name: c, image: busybox}]
`},
	} {
		t.Run(c.kind, func(t *testing.T) {
			out, err := kubectlStdin(c.manifest, "apply", "-n", ns, "-f", "-")
			require.Error(t, err, "admitted: %s", out)
			assert.Contains(t, out, "denied the request")
			assert.Contains(t, out, "annotation slurmjob.kubeslurm.io/time-limit: ")
		})
	}
}

// kubectlStdin runs kubectl as admin with stdin; it returns the combined output.
func kubectlStdin(stdin string, args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(repoRoot, "bin", "kubectl"), append([]string{"--kubeconfig", filepath.Join(runDir, "admin.kubeconfig")}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// jobSetIsOneSlurmJob: the JobSet of examples/jobset.yaml (a driver and two workers) is ONE
// Slurm job, the driver rank 0; the JobSet carries the job id, with an event naming it.
func jobSetIsOneSlurmJob(t *testing.T, st stack, ns string) {
	st.applyExample(t, ns, "jobset.yaml")
	pods := waitPods(t, ns, workload.JobSetNameLabel+"=train", 3)
	bound := waitAllBound(t, pods, 60*time.Second)
	// Rank order: the job's global index (driver first), then the completion index.
	sortByIndices(bound, workload.JobSetIndexLabel, batchv1.JobCompletionIndexAnnotation)
	assert.Equal(t, "driver", bound[0].Labels[jobsetv1alpha2.ReplicatedJobNameKey], "the driver is rank 0")
	id := requireOneJobOnTheirNodes(t, st, bound)

	// kubectl describe jobset: the job id on the JobSet, and an event naming the job.
	eventually(t, 30*time.Second, "the JobSet carries its Slurm job id", func() bool {
		js, err := jobSets(t).JobsetV1alpha2().JobSets(ns).Get(context.Background(), "train", metav1.GetOptions{})
		require.NoError(t, err)
		return js.Annotations[wellknown.JobIDLabel] == strconv.Itoa(int(id))
	})
	eventually(t, 30*time.Second, "an event on the JobSet names the job", func() bool {
		return strings.Contains(objectEvents(t, ns, workload.KindJobSet, "train"), strconv.Itoa(int(id)))
	})
}

// leaderWorkerSetGroupsAreSlurmJobs: each group (a leader and a worker) of the
// LeaderWorkerSet of examples/leaderworkerset.yaml is ONE Slurm job, the leader rank 0.
func leaderWorkerSetGroupsAreSlurmJobs(t *testing.T, st stack, ns string) {
	st.applyExample(t, ns, "leaderworkerset.yaml")
	pods := waitPods(t, ns, workload.LWSNameLabel+"=serve", 4)
	bound := waitAllBound(t, pods, 60*time.Second)
	byGroup := map[string][]*v1.Pod{}
	for _, p := range bound {
		g := p.Labels[workload.LWSGroupIndexLabel]
		byGroup[g] = append(byGroup[g], p)
	}
	require.Len(t, byGroup, 2, "two LWS replicas")
	ids := map[int32]bool{}
	for g, members := range byGroup {
		require.Len(t, members, 2, "group %s: a leader and a worker", g)
		sortByIndices(members, workload.LWSWorkerIndexLabel)
		assert.Equal(t, "0", members[0].Labels[workload.LWSWorkerIndexLabel], "group %s: the leader is rank 0", g)
		ids[requireOneJobInRankOrder(t, st, members)] = true
	}
	assert.Len(t, ids, 2, "one Slurm job per LWS group")
}
