// Package e2e drives the real local cluster that `make up` brings up: a real
// kube-apiserver with kwok nodes, real slurmctld/slurmd/slurmrestd, and our scheduler and
// controller. Run it with `make e2e` (or `make test`); it fails, never skips, when the
// cluster is not there.
package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kubeslurm/kubeslurm/pkg/slurmjob"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

var (
	repoRoot string
	runDir   string
	kube     kubernetes.Interface
	// adminConfig is the local cluster's admin kubeconfig, for the clients of other APIs.
	adminConfig *rest.Config
	nodes       []string
)

func TestMain(m *testing.M) {
	_, file, _, _ := runtime.Caller(0)
	repoRoot = filepath.Dir(filepath.Dir(file))
	runDir = os.Getenv("KUBESLURM_RUN")
	if runDir == "" {
		runDir = filepath.Join(repoRoot, ".local")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(runDir, "admin.kubeconfig"))
	adminConfig = cfg
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: no local cluster (%v); run `make up` first\n", err)
		os.Exit(1)
	}
	kube = kubernetes.NewForConfigOrDie(cfg)
	if err := clearLocalSlurmCluster(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		os.Exit(1)
	}
	list, err := kube.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil || len(list.Items) == 0 {
		fmt.Fprintf(os.Stderr, "e2e: cannot list nodes of the local cluster (%v); run `make up` first\n", err)
		os.Exit(1)
	}
	for _, n := range list.Items {
		nodes = append(nodes, n.Name)
	}
	if err := clearExample(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// clearLocalSlurmCluster takes down what `make up-slurmcluster` added to the running
// cluster, if it runs: its nodes would be taken for the local Slurm's, and the tests count
// on having the nodes to themselves.
func clearLocalSlurmCluster() error {
	runners, err := filepath.Glob(filepath.Join(runDir, "pids", "podrunner-*.pid"))
	if err != nil || len(runners) == 0 {
		return err
	}
	out, err := slurmClusterScript("down")
	fmt.Fprintf(os.Stderr, "e2e: make up-slurmcluster's runners are up; taking it down first:\n%s\n", out)
	return err
}

// clearExample deletes the example pod `make up` applied, and waits until every Slurm node
// is idle: the tests count on having all nodes to themselves.
func clearExample() error {
	ctx := context.Background()
	err := kube.CoreV1().Pods("default").Delete(ctx, "slurm-placed", metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	var last string
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		out, err := runCmd(filepath.Join(runDir, "bin", "sinfo"), "-h", "-N", "-o", "%N %t")
		last = out
		if err != nil {
			return false, nil
		}
		// A node in several partitions has a line in each: count nodes, not lines.
		idle := map[string]bool{}
		for _, line := range strings.Split(out, "\n") {
			if name, ok := strings.CutSuffix(line, " idle"); ok {
				idle[name] = true
			}
		}
		return len(idle) == len(nodes), nil
	})
	if err != nil {
		return fmt.Errorf("Slurm nodes not all idle before the tests: %s", last)
	}
	return nil
}

// slurmCmd runs one of the Slurm command wrappers (squeue, sbatch, ...) of the local cluster.
func slurmCmd(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := runCmd(filepath.Join(runDir, "bin", name), args...)
	require.NoError(t, err, "%s %v: %s", name, args, out)
	return out
}

// commandLimit bounds every command a test runs: one that hangs fails its test with what
// it printed instead of holding the whole run until go test's own timeout.
const commandLimit = 10 * time.Minute

func runCmd(path string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), commandLimit)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	// A child that keeps the output pipe open (a daemon the command started) must not hold
	// Wait once the command is killed.
	cmd.WaitDelay = 10 * time.Second
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("killed after %s: %w", commandLimit, err)
	}
	return strings.TrimSpace(buf.String()), err
}

// component runs deploy/local/component.sh (start|stop|restart NAME).
func component(t *testing.T, action, name string) {
	t.Helper()
	out, err := runCmd(filepath.Join(repoRoot, "deploy", "local", "component.sh"), action, name)
	require.NoError(t, err, "component.sh %s %s: %s", action, name, out)
}

// slurmJob is one line of squeue.
type slurmJob struct {
	ID     int32
	Name   string
	State  string
	Nodes  string
	Reason string
}

// active: the job has not ended (what the tests' check for leaked jobs looks for).
func (j slurmJob) active() bool {
	switch j.State {
	case "PENDING", "RUNNING", "CONFIGURING", "SUSPENDED", "COMPLETING":
		return true
	}
	return false
}

// jobsNamed lists the local Slurm's jobs (any state still on record) whose name starts
// with prefix.
func jobsNamed(t *testing.T, prefix string) []slurmJob {
	t.Helper()
	return localStack().jobsNamed(t, prefix)
}

func activeJobsNamed(t *testing.T, prefix string) []slurmJob {
	t.Helper()
	return localStack().activeJobsNamed(t, prefix)
}

// parseSqueue reads the jobs whose name starts with prefix from squeue's lines in the
// format squeueFormat.
func parseSqueue(t *testing.T, out, prefix string) []slurmJob {
	var jobs []slurmJob
	for _, line := range strings.Split(out, "\n") {
		f := strings.Split(line, "|")
		if len(f) != 5 || !strings.HasPrefix(f[1], prefix) {
			continue
		}
		id, err := strconv.Atoi(f[0])
		require.NoError(t, err, line)
		jobs = append(jobs, slurmJob{ID: int32(id), Name: f[1], State: f[2], Nodes: f[3], Reason: f[4]})
	}
	return jobs
}

// squeueFormat is the squeue -o format parseSqueue reads.
const squeueFormat = "%i|%j|%T|%N|%r"

var nonName = regexp.MustCompile(`[^a-z0-9]+`)

// namespace creates a namespace for one test and, at its end, deletes it and checks that
// no placeholder job of its pods is left in the local Slurm.
func namespace(t *testing.T) string {
	t.Helper()
	return namespaceOn(t, localStack())
}

// namespaceOn is namespace for a test of the stack st, whose Slurm it checks at the end.
func namespaceOn(t *testing.T, st stack) string {
	t.Helper()
	name := strings.Trim(nonName.ReplaceAllString(strings.ToLower(t.Name()), "-"), "-")
	if len(name) > 50 {
		name = strings.Trim(name[:30], "-") + "-" + strings.Trim(name[len(name)-19:], "-") // keep a subtest's name
	}
	name += "-" + strconv.FormatInt(time.Now().Unix()%100000, 10)
	_, err := kube.CoreV1().Namespaces().Create(context.Background(), &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx := context.Background()
		if t.Failed() { // the evidence, where CI shows it
			t.Logf("pods of %s at the failure:\n%s%s", name, podTable(name), containerLogTails(name, 30))
		}
		_ = kube.CoreV1().Pods(name).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptrTo[int64](0)}, metav1.ListOptions{})
		eventually(t, 60*time.Second, "no Slurm job of namespace "+name+" left after its pods are gone", func() bool {
			return len(st.activeJobsNamed(t, name+"/")) == 0
		})
		_ = kube.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
	})
	return name
}

func ptrTo[T any](v T) *T { return &v }

// eventually polls cond every 250ms until it holds or the timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, timeout, true,
		func(context.Context) (bool, error) { return cond(), nil })
	require.NoError(t, err, "timed out after %s waiting for: %s", timeout, what)
}

type podOpt func(*v1.Pod)

func withAnnotation(key, value string) podOpt {
	return func(p *v1.Pod) { p.Annotations[slurmjob.Annotation(key)] = value }
}

func onlyOnNode(node string) podOpt {
	return func(p *v1.Pod) {
		p.Spec.Affinity = &v1.Affinity{NodeAffinity: &v1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
				MatchFields: []v1.NodeSelectorRequirement{{Key: "metadata.name", Operator: v1.NodeSelectorOpIn, Values: []string{node}}},
			}}},
		}}
	}
}

func createPod(t *testing.T, ns, name string, opts ...podOpt) *v1.Pod {
	t.Helper()
	created, err := kube.CoreV1().Pods(ns).Create(context.Background(), newPod(ns, name, opts...), metav1.CreateOptions{})
	require.NoError(t, err)
	return created
}

// newPod is the test pod: one container requesting 1 CPU and 256Mi, for our scheduler.
func newPod(ns, name string, opts ...podOpt) *v1.Pod {
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: map[string]string{}},
		Spec: v1.PodSpec{
			SchedulerName: wellknown.SchedulerName,
			Containers: []v1.Container{{
				Name: "main", Image: "busybox", Command: []string{"sleep", "3600"},
				Resources: v1.ResourceRequirements{Requests: v1.ResourceList{
					v1.ResourceCPU: resource.MustParse("1"), v1.ResourceMemory: resource.MustParse("256Mi"),
				}},
			}},
			TerminationGracePeriodSeconds: ptrTo[int64](0),
		},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func getPod(t *testing.T, ns, name string) *v1.Pod {
	t.Helper()
	p, err := kube.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(t, err)
	return p
}

func waitBound(t *testing.T, ns, name string, timeout time.Duration) *v1.Pod {
	t.Helper()
	var p *v1.Pod
	eventually(t, timeout, ns+"/"+name+" bound to a node", func() bool {
		p = getPod(t, ns, name)
		return p.Spec.NodeName != ""
	})
	return p
}

func waitGone(t *testing.T, ns, name string, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, ns+"/"+name+" deleted", func() bool {
		_, err := kube.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}

// complete marks a pod Succeeded, as a kubelet does when its containers exit 0. It waits
// for kwok to have started the pod first: a real pod ends only after it ran.
func complete(t *testing.T, p *v1.Pod) {
	t.Helper()
	eventually(t, 30*time.Second, p.Name+" Running before it completes", func() bool {
		return getPod(t, p.Namespace, p.Name).Status.Phase == v1.PodRunning
	})
	_, err := kube.CoreV1().Pods(p.Namespace).Patch(context.Background(), p.Name, types.MergePatchType,
		[]byte(`{"status":{"phase":"Succeeded"}}`), metav1.PatchOptions{}, "status")
	require.NoError(t, err)
}

// podEvents returns "Reason: message" lines of the pod's events (core and events.k8s.io).
func podEvents(t *testing.T, p *v1.Pod) string {
	t.Helper()
	list, err := kube.EventsV1().Events(p.Namespace).List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	var lines []string
	for _, e := range list.Items {
		if e.Regarding.Name == p.Name && e.Regarding.UID == p.UID {
			lines = append(lines, e.Reason+": "+e.Note)
		}
	}
	core, err := kube.CoreV1().Events(p.Namespace).List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	for _, e := range core.Items {
		if e.InvolvedObject.Name == p.Name && e.InvolvedObject.UID == p.UID {
			lines = append(lines, e.Reason+": "+e.Message)
		}
	}
	return strings.Join(lines, "\n")
}

func jobIDOf(t *testing.T, p *v1.Pod) int32 {
	t.Helper()
	id, err := strconv.Atoi(p.Labels[wellknown.JobIDLabel])
	require.NoError(t, err, "pod %s has no job-id label: %v", p.Name, p.Labels)
	return int32(id)
}

// jobByID is the local Slurm's job id, if it still has it on record.
func jobByID(t *testing.T, id int32) (slurmJob, bool) {
	t.Helper()
	return localStack().jobByID(t, id)
}
