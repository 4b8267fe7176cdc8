package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubeslurm/kubeslurm/pkg/slurm"
)

const (
	benchNodes     = 256
	benchNodeLabel = "kubeslurm.io/bench-node"
)

// BenchmarkGroupAllocationToBound measures, on the running local cluster, the time from
// Slurm allocating a pod group's job to the last member bound, for groups of 8, 64 and
// 256 pods on 256 extra kwok nodes. Those nodes' Slurm halves are dynamic nodes made with
// `scontrol create ... State=EXTERNAL`: Slurm keeps such nodes without a slurmd (it does
// not ping them), and a placeholder job launches nothing on its nodes, so slurmctld
// allocates them as it would real ones. The allocation is seen by polling slurmrestd every
// 20 ms; binds by polling the API server.
func BenchmarkGroupAllocationToBound(b *testing.B) {
	t := &testing.T{}
	addBenchKubeNodes(b, benchNodes)
	sl := benchSlurmClient(b)
	for _, size := range []int{8, 64, 256} {
		b.Run(fmt.Sprintf("members=%d", size), func(b *testing.B) {
			var lag []time.Duration
			for i := 0; i < b.N; i++ {
				lag = append(lag, groupRun(b, t, sl, size))
			}
			report(b, "allocated→all-bound", lag)
		})
	}
	if t.Failed() {
		b.Fatal("a step failed")
	}
}

// groupRun places one group of size members on fresh Slurm bench nodes and returns the
// time from its job's allocation to its last member bound.
func groupRun(b *testing.B, t *testing.T, sl slurm.Client, size int) time.Duration {
	ctx := context.Background()
	ns := fmt.Sprintf("bench-group-%d-%d", size, time.Now().UnixNano()%1000000)
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = kube.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptrTo[int64](0)}, metav1.ListOptions{})
		_ = kube.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
		// The job is cancelled once its pods are gone; its nodes stay COMPLETING a while, as
		// nothing on them answers slurmctld's terminate message (the next run waits for them).
		pollUntil(b, 3*time.Minute, func() (*v1.Pod, bool) {
			for _, j := range activeJobsNamed(t, ns+"/") {
				if j.State == "PENDING" || j.State == "RUNNING" {
					return nil, false
				}
			}
			return nil, true
		})
	}()
	onBenchNodes := func(p *v1.Pod) { p.Spec.NodeSelector = map[string]string{benchNodeLabel: "true"} }
	pods := createPodGroup(t, ns, "g", int32(size), nil, onBenchNodes)

	var id int32
	pollUntil(b, 60*time.Second, func() (*v1.Pod, bool) {
		p, err := kube.CoreV1().Pods(ns).Get(ctx, pods[0].Name, metav1.GetOptions{})
		if err != nil || p.Labels == nil || p.Labels["kubeslurm.io/job-id"] == "" {
			return nil, false
		}
		id = mustAtoi(t, p.Labels["kubeslurm.io/job-id"])
		return nil, true
	})
	var allocated time.Time
	// How long the job pends depends on what else Slurm runs; only what follows is measured.
	pollUntil(b, 5*time.Minute, func() (*v1.Pod, bool) {
		j, err := sl.GetJob(ctx, id)
		if err == nil && j.Allocated() {
			allocated = time.Now()
			return nil, true
		}
		time.Sleep(20 * time.Millisecond)
		return nil, false
	})
	waitBoundCount(b, ns, "", size, 120*time.Second, 0)
	return time.Since(allocated)
}

// waitBoundCount waits until n pods of ns whose names start with prefix are bound,
// listing them every pause (beyond pollUntil's own).
func waitBoundCount(b *testing.B, ns, prefix string, n int, timeout, pause time.Duration) {
	pollUntil(b, timeout, func() (*v1.Pod, bool) {
		time.Sleep(pause)
		list, err := kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return nil, false
		}
		bound := 0
		for _, p := range list.Items {
			if strings.HasPrefix(p.Name, prefix) && p.Spec.NodeName != "" {
				bound++
			}
		}
		return nil, bound == n
	})
}

// addBenchKubeNodes adds n kwok nodes (bench-1 …), labelled for the benchmark's pods, and
// their Slurm nodes, and removes both when the benchmark ends.
func addBenchKubeNodes(b *testing.B, n int) {
	ctx := context.Background()
	var names []string
	for i := 1; i <= n; i++ {
		names = append(names, fmt.Sprintf("bench-%d", i))
	}
	// Sixteen at a time: a thousand one by one take minutes.
	g := errgroup.Group{}
	g.SetLimit(16)
	for _, name := range names {
		g.Go(func() error {
			_, err := kube.CoreV1().Nodes().Create(ctx, kwokNode(name, map[string]string{benchNodeLabel: "true"}), metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return nil
			}
			return err
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		deleteBenchSlurmNodes(b, n)
		for _, name := range names {
			_ = kube.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
		}
	})
	createBenchSlurmNodes(b, n)
}

func createBenchSlurmNodes(b *testing.B, n int) {
	out, err := runCmd(filepath.Join(runDir, "bin", "scontrol"), "create",
		fmt.Sprintf("NodeName=bench-[1-%d]", n), "CPUs=4", "RealMemory=8000", "State=EXTERNAL",
		// An address that resolves: slurmctld still messages a job's nodes when it ends
		// (nothing listens there), and a name it must look up costs it seconds per node.
		"NodeAddr=127.0.0.1")
	if err != nil {
		b.Fatalf("scontrol create: %v: %s", err, out)
	}
}

func deleteBenchSlurmNodes(b *testing.B, n int) {
	// Nodes still completing a cancelled job refuse deletion for a moment: retry.
	pollUntil(b, 60*time.Second, func() (*v1.Pod, bool) {
		out, err := runCmd(filepath.Join(runDir, "bin", "scontrol"), "delete", fmt.Sprintf("NodeName=bench-[1-%d]", n))
		return nil, err == nil || strings.Contains(out, "Invalid node name")
	})
}

// benchSlurmClient talks to slurmrestd as the components do (token minted from the JWT key).
func benchSlurmClient(b *testing.B) slurm.Client {
	env, err := localEnv()
	if err != nil {
		b.Fatal(err)
	}
	c, err := slurm.NewClient(slurm.Config{URL: env["SLURMRESTD_URL"], User: env["SLURM_USER"], JWTKeyFile: env["SLURM_JWT_KEY_FILE"]})
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// localEnv is the local cluster's settings, as deploy/local writes them to its env file
// (SLURMRESTD_URL, SLURM_USER, SLURM_JWT_KEY_FILE, ...).
func localEnv() (map[string]string, error) {
	env, err := os.ReadFile(filepath.Join(runDir, "env"))
	if err != nil {
		return nil, err
	}
	vars := map[string]string{}
	for _, line := range strings.Split(string(env), "\n") {
		if k, v, ok := strings.Cut(strings.TrimPrefix(line, "export "), "="); ok {
			vars[k] = strings.Trim(v, "'")
		}
	}
	return vars, nil
}
