package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// BenchmarkScale is `make bench-scale`: kubeslurm on a thousand nodes beside ten thousand
// queued sbatch jobs, on the running local cluster. Sizes come from the environment:
// KUBESLURM_BENCH_NODES kwok nodes with a Slurm node each (default 1100: room for a gang
// of 1,024), KUBESLURM_BENCH_QUEUED held sbatch jobs of another user (default 10000),
// KUBESLURM_BENCH_PODS single pods in the burst (default 2000), KUBESLURM_BENCH_IDLE the
// idle window measured at each queue depth (default 60s). It prints:
//   - Slurm read traffic of the scheduler and the controller (their request and byte
//     counters), and slurmctld's own RPC counts (sdiag), idle at queue depths 0, 1/10 and
//     all of the queue;
//   - a user's submit latency with kubeslurm running and with it stopped;
//   - a burst of single pods placed by kubeslurm, then the same pods placed by a plain
//     kube-scheduler (the same binary, default plugins only), pods per second each;
//   - allocation → bound and pod created → Running, p50 and p99, and read traffic during
//     the burst;
//   - gangs of 8, 64, 256 and 1,024 pods, allocation → last member bound;
//   - resident memory of the scheduler and the controller.
//
// No figure is asserted: the targets are read off the printout.
func BenchmarkScale(b *testing.B) {
	nodes, queued, pods := envInt("KUBESLURM_BENCH_NODES", 1100), envInt("KUBESLURM_BENCH_QUEUED", 10000), envInt("KUBESLURM_BENCH_PODS", 2000)
	idle := envDuration("KUBESLURM_BENCH_IDLE", 60*time.Second)
	// client-go's default 5 requests/s would make a thousand nodes and bursts of pods
	// measure this client's throttle: the benchmark's own client is faster.
	fast := rest.CopyConfig(adminConfig)
	fast.QPS, fast.Burst = 200, 400
	defaultClient := kube
	kube = kubernetes.NewForConfigOrDie(fast)
	defer func() { kube = defaultClient }()
	// The e2e helpers take a *testing.T; a failed step of theirs ends the benchmark, and
	// the deferred check below reports it.
	t := &testing.T{}
	ns := fmt.Sprintf("bench-scale-%d", time.Now().Unix()%100000)
	if _, err := kube.CoreV1().Namespaces().Create(context.Background(), &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	defer func() {
		if t.Failed() {
			fmt.Println("a step failed: the figures above are all there is")
		}
	}()
	token := metricsReaderToken(t, ns)
	// t is no test's: its clean-ups never run, so the benchmark's own do their work.
	b.Cleanup(func() {
		_, _ = runCmd(filepath.Join(runDir, "bin", "scancel"), "--user", queueUser)
		_ = kube.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	})
	defer func() {
		if t.Failed() {
			b.Fatal("a step failed")
		}
	}()
	start := time.Now()
	addBenchKubeNodes(b, nodes)
	fmt.Printf("%d kwok nodes with a Slurm node each, made in %v\n", nodes, time.Since(start).Round(time.Second))
	waitMetricsReadable(b, token)

	fmt.Printf("\n## Idle read traffic over %v (nothing of ours changing)\n", idle)
	fmt.Printf("| queued sbatch jobs | process | requests/s | bytes/s | full job listings | state reads |\n|---|---|---|---|---|---|\n")
	var sdiagRows []string
	submitted := 0
	for _, depth := range []int{0, queued / 10, queued} {
		if depth > submitted {
			submitQueuedJobs(t, queueUser, fmt.Sprintf("%s/queued-%d", ns, depth), depth-submitted)
			submitted = depth
		}
		time.Sleep(5 * time.Second) // the submits' own effects settle
		slurmCmd(t, "sdiag", "--reset")
		sched, ctrl := mustScrape(t, schedulerMetricsURL, token), mustScrape(t, controllerMetricsURL, "")
		began := time.Now()
		time.Sleep(idle)
		window := time.Since(began)
		sched2, ctrl2 := mustScrape(t, schedulerMetricsURL, token), mustScrape(t, controllerMetricsURL, "")
		diag := sdiag(t)
		for _, p := range []struct {
			name          string
			before, after series
		}{{"scheduler", sched, sched2}, {"controller", ctrl, ctrl2}} {
			tr := trafficOf(p.before, p.after, window)
			fmt.Printf("| %d | %s | %.1f | %.0f | %.0f | %.0f |\n", depth, p.name, tr.requests, tr.bytes, tr.listings, tr.states)
		}
		sdiagRows = append(sdiagRows, fmt.Sprintf("| %d | %d | %d | %d | %d | %d |", depth, diag["REQUEST_JOB_INFO"], diag["REQUEST_NODE_INFO"],
			diag["REQUEST_JOB_STATE"], diag["REQUEST_JOB_INFO_SINGLE"], diag["Server thread count"]))
	}
	fmt.Printf("\nslurmctld over each window (sdiag after --reset; a node read that finds no change counts as a REQUEST_NODE_INFO):\n")
	fmt.Printf("| queued | REQUEST_JOB_INFO | REQUEST_NODE_INFO | REQUEST_JOB_STATE | REQUEST_JOB_INFO_SINGLE | server threads |\n|---|---|---|---|---|---|\n%s\n",
		strings.Join(sdiagRows, "\n"))

	fmt.Printf("\n## A user's submit latency (%d held jobs, one at a time)\n", 50)
	running := submitLatencies(t, queueUser, ns+"/latency-running", 50)
	component(t, "stop", "scheduler")
	component(t, "stop", "controller")
	stopped := submitLatencies(t, queueUser, ns+"/latency-stopped", 50)
	component(t, "start", "controller")
	component(t, "start", "scheduler")
	fmt.Printf("kubeslurm running: p50 %v, p99 %v; stopped: p50 %v, p99 %v\n",
		pct(running, 0.5), pct(running, 0.99), pct(stopped, 0.5), pct(stopped, 0.99))
	waitMetricsReadable(b, token)

	fmt.Printf("\n## A burst of %d single pods beside %d queued jobs\n", pods, submitted)
	sched, ctrl := mustScrape(t, schedulerMetricsURL, token), mustScrape(t, controllerMetricsURL, "")
	ours := burst(b, t, ns, "kubeslurm", pods, func(p *v1.Pod) {})
	sched2, ctrl2 := mustScrape(t, schedulerMetricsURL, token), mustScrape(t, controllerMetricsURL, "")
	theirs := burstWithKubeScheduler(b, t, ns, pods)
	fmt.Printf("kubeslurm: %.1f pods/s; kube-scheduler (default plugins, same binary and nodes): %.1f pods/s; ratio %.2f\n",
		ours.podsPerSecond, theirs.podsPerSecond, ours.podsPerSecond/theirs.podsPerSecond)
	fmt.Printf("pod created → Running (kubeslurm): p50 %v, p99 %v (API times have 1 s resolution)\n", pct(ours.toRunning, 0.5), pct(ours.toRunning, 0.99))
	fmt.Printf("allocation → bound (scheduler's kubeslurm_bind_latency_seconds): p50 ≤ %v, p99 ≤ %v\n",
		histogramQuantile(sched, sched2, "kubeslurm_bind_latency_seconds", 0.5), histogramQuantile(sched, sched2, "kubeslurm_bind_latency_seconds", 0.99))
	for _, p := range []struct {
		name          string
		before, after series
	}{{"scheduler", sched, sched2}, {"controller", ctrl, ctrl2}} {
		tr := trafficOf(p.before, p.after, ours.duration)
		fmt.Printf("read traffic during the burst, %s: %.1f requests/s, %.0f bytes/s, %.0f full job listings\n", p.name, tr.requests, tr.bytes, tr.listings)
	}

	fmt.Printf("\n## Gangs: Slurm allocation → last member bound\n")
	sl := benchSlurmClient(b)
	for _, size := range []int{8, 64, 256, 1024} {
		if size > nodes {
			fmt.Printf("gang of %d: skipped, only %d nodes\n", size, nodes)
			continue
		}
		fmt.Printf("gang of %d: %v\n", size, groupRun(b, t, sl, size).Round(time.Millisecond))
	}

	fmt.Printf("\n## Resident memory\n")
	for _, c := range []string{"scheduler", "controller"} {
		fmt.Printf("%s: %s\n", c, residentMemory(c))
	}
}

// traffic is one process's Slurm reads over a window, per second.
type traffic struct{ requests, bytes, listings, states float64 }

func trafficOf(before, after series, window time.Duration) traffic {
	var tr traffic
	for k, v := range after {
		if strings.HasPrefix(k, "kubeslurm_slurmrestd_requests_total{") {
			tr.requests += v - before[k]
		}
	}
	tr.requests /= window.Seconds()
	tr.bytes = (after["kubeslurm_slurmrestd_response_bytes_total"] - before["kubeslurm_slurmrestd_response_bytes_total"]) / window.Seconds()
	tr.listings = after[`kubeslurm_slurmrestd_requests_total{code="ok",operation="list_jobs"}`] - before[`kubeslurm_slurmrestd_requests_total{code="ok",operation="list_jobs"}`]
	tr.states = after[`kubeslurm_slurmrestd_requests_total{code="ok",operation="job_states"}`] - before[`kubeslurm_slurmrestd_requests_total{code="ok",operation="job_states"}`]
	return tr
}

// histogramQuantile is the upper bound of the bucket holding quantile q of what a
// histogram observed between two scrapes.
func histogramQuantile(before, after series, name string, q float64) string {
	type bucket struct {
		le    float64
		count float64
	}
	var buckets []bucket
	re := regexp.MustCompile(`^` + name + `_bucket\{le="([^"]+)"\}$`)
	for k, v := range after {
		if m := re.FindStringSubmatch(k); m != nil {
			le, err := strconv.ParseFloat(m[1], 64)
			if err == nil {
				buckets = append(buckets, bucket{le, v - before[k]})
			}
		}
	}
	sort.Slice(buckets, func(i, j int) bool { return buckets[i].le < buckets[j].le })
	if len(buckets) == 0 || buckets[len(buckets)-1].count == 0 {
		return "n/a"
	}
	total := buckets[len(buckets)-1].count
	for _, bk := range buckets {
		if bk.count >= q*total {
			return fmt.Sprintf("%gs", bk.le)
		}
	}
	return "+Inf"
}

// sdiag reads slurmctld's RPC counts by message type, and its server thread count.
func sdiag(t *testing.T) map[string]int {
	out := slurmCmd(t, "sdiag")
	counts := map[string]int{}
	rpc := regexp.MustCompile(`^\s*(REQUEST_[A-Z_]+)\s+\(\s*\d+\)\s+count:(\d+)`)
	for _, line := range strings.Split(out, "\n") {
		if m := rpc.FindStringSubmatch(line); m != nil {
			counts[m[1]], _ = strconv.Atoi(m[2])
		}
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "Server thread count:"); ok {
			counts["Server thread count"], _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return counts
}

// submitLatencies submits n held jobs of user one after the other and returns each one's time.
func submitLatencies(t *testing.T, user, name string, n int) []time.Duration {
	var out []time.Duration
	for range n {
		began := time.Now()
		submitQueuedJobs(t, user, name, 1)
		out = append(out, time.Since(began))
	}
	return out
}

func pct(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[int(float64(len(s)-1)*p)].Round(time.Millisecond)
}

// burstResult is what one burst of pods measured.
type burstResult struct {
	podsPerSecond float64
	duration      time.Duration
	toRunning     []time.Duration
}

// burst creates n one-CPU pods on the bench nodes at once (16 creators), waits until all
// are bound, and deletes them again (and, for kubeslurm's, waits for their jobs to end).
func burst(b *testing.B, t *testing.T, ns, name string, n int, opt podOpt) burstResult {
	ctx := context.Background()
	prefix := name + "-"
	onBench := func(p *v1.Pod) {
		p.Spec.NodeSelector = map[string]string{benchNodeLabel: "true"}
		p.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceCPU: resource.MustParse("1"), v1.ResourceMemory: resource.MustParse("256Mi")}
		opt(p)
	}
	began := time.Now()
	var wg sync.WaitGroup
	work := make(chan int, n)
	for i := range n {
		work <- i
	}
	close(work)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				p := newPod(ns, fmt.Sprintf("%s%d", prefix, i), onBench)
				if _, err := kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
					t.Errorf("creating %s: %v", p.Name, err)
				}
			}
		}()
	}
	wg.Wait()
	waitBoundCount(b, ns, prefix, n, 20*time.Minute, 200*time.Millisecond)
	var res burstResult
	res.duration = time.Since(began)
	res.podsPerSecond = float64(n) / res.duration.Seconds()
	pollUntil(b, 5*time.Minute, func() (*v1.Pod, bool) {
		list, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, false
		}
		res.toRunning = res.toRunning[:0]
		for _, p := range list.Items {
			if !strings.HasPrefix(p.Name, prefix) {
				continue
			}
			if !podReady(&p) {
				return nil, false
			}
			for _, c := range p.Status.Conditions {
				if c.Type == v1.PodReady {
					res.toRunning = append(res.toRunning, c.LastTransitionTime.Sub(p.CreationTimestamp.Time))
				}
			}
		}
		return nil, true
	})
	require := func(err error) {
		if err != nil {
			t.Errorf("%v", err)
		}
	}
	require(kube.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptrTo[int64](0)}, metav1.ListOptions{}))
	pollUntil(b, 10*time.Minute, func() (*v1.Pod, bool) {
		list, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		time.Sleep(time.Second)
		return nil, err == nil && len(list.Items) == 0 && len(activeJobsNamed(t, ns+"/"+prefix)) == 0
	})
	return res
}

// burstWithKubeScheduler runs the same burst through a second scheduler process of the same
// binary whose only profile is the default one, for the comparison.
func burstWithKubeScheduler(b *testing.B, t *testing.T, ns string, n int) burstResult {
	dir := b.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %s
  qps: 500
  burst: 1000
leaderElection:
  leaderElect: false
profiles:
- schedulerName: bench-kube-scheduler
`, filepath.Join(runDir, "scheduler.kubeconfig"))), 0o600); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(repoRoot, "bin", "kubeslurm-scheduler"), "--config", cfg, "--secure-port", "0")
	log, err := os.Create(filepath.Join(dir, "scheduler.log"))
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	return burst(b, t, ns, "kube-scheduler", n, func(p *v1.Pod) { p.Spec.SchedulerName = "bench-kube-scheduler" })
}

// residentMemory is the VmRSS of a local cluster component, from its PID file.
func residentMemory(component string) string {
	pid, err := os.ReadFile(filepath.Join(runDir, "pids", component+".pid"))
	if err != nil {
		return err.Error()
	}
	status, err := os.ReadFile(filepath.Join("/proc", strings.TrimSpace(string(pid)), "status"))
	if err != nil {
		return err.Error()
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// waitMetricsReadable waits until the scheduler's /metrics answers the token.
func waitMetricsReadable(b *testing.B, token string) {
	pollUntil(b, 60*time.Second, func() (*v1.Pod, bool) {
		code, _ := scrape(&testing.T{}, schedulerMetricsURL, token)
		return nil, code == 200
	})
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func envDuration(name string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
