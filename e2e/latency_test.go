package e2e

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BenchmarkPodLifecycleLatency measures, on the real local cluster, how long each direction
// takes to become visible: a pod created until it is bound to the node Slurm allocated
// (Kubernetes → Slurm → Kubernetes), and a `scancel` until the pod is gone (Slurm →
// Kubernetes). It prints p50/p99 of each; run with `make bench-e2e`.
func BenchmarkPodLifecycleLatency(b *testing.B) {
	t := &testing.T{}
	ns := fmt.Sprintf("bench-%d", time.Now().Unix()%100000)
	ctx := context.Background()
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = kube.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}) }()

	var bind, end []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		name := "lat-" + strconv.Itoa(i)
		start := time.Now()
		createPod(t, ns, name)
		p := pollUntil(b, 60*time.Second, func() (*v1.Pod, bool) {
			p, err := kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			return p, err == nil && p.Spec.NodeName != "" && p.Labels != nil
		})
		bind = append(bind, time.Since(start))

		start = time.Now()
		if _, err := runCmd(runDir+"/bin/scancel", p.Labels["kubeslurm.io/job-id"]); err != nil {
			b.Fatal(err)
		}
		pollUntil(b, 60*time.Second, func() (*v1.Pod, bool) {
			_, err := kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			return nil, apierrors.IsNotFound(err)
		})
		end = append(end, time.Since(start))
	}
	b.StopTimer()
	report(b, "create→bound", bind)
	report(b, "scancel→pod-gone", end)
	if t.Failed() {
		b.Fatal("a step failed")
	}
}

func pollUntil(b *testing.B, timeout time.Duration, f func() (*v1.Pod, bool)) *v1.Pod {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if p, ok := f(); ok {
			return p
		}
		time.Sleep(50 * time.Millisecond)
	}
	b.Fatalf("timed out after %s", timeout)
	return nil
}

func report(b *testing.B, what string, d []time.Duration) {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	pct := func(p float64) time.Duration { return d[int(float64(len(d)-1)*p)] }
	b.ReportMetric(pct(0.5).Seconds(), what+"-p50-s")
	b.ReportMetric(pct(0.99).Seconds(), what+"-p99-s")
	fmt.Printf("%s over %d runs: p50 %s, p99 %s\n", what, len(d), pct(0.5).Round(time.Millisecond), pct(0.99).Round(time.Millisecond))
}
