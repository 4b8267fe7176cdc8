package plugin

import (
	"context"
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BenchmarkSchedulingAttempt measures one scheduling attempt of a pod (PreFilter, Filter on
// every node, PostFilter) with 100 and 5000 other jobs in Slurm's queue, and reports the
// slurmrestd requests each attempt makes. "waiting" is a pod whose job is pending (the
// common retry); "submit" is a pod's first attempt, which submits its job.
func BenchmarkSchedulingAttempt(b *testing.B) {
	for _, queued := range []int{100, 5000} {
		b.Run(fmt.Sprintf("waiting/jobs=%d", queued), func(b *testing.B) {
			f := benchFixture(b, queued)
			pod := f.addPod(b, newPod("waiting", nil))
			f.cycle(pod, nil) // submits its job
			f.poll()
			f.slurm.Requests()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				f.cycle(pod, nil)
			}
			reportRequests(b, f)
		})
		b.Run(fmt.Sprintf("submit/jobs=%d", queued), func(b *testing.B) {
			f := benchFixture(b, queued)
			pods := make([]*v1.Pod, b.N)
			for i := range pods {
				pods[i] = f.addPod(b, newPod(fmt.Sprintf("p%d", i), nil))
			}
			f.slurm.Requests()
			b.ResetTimer()
			for _, pod := range pods {
				f.cycle(pod, nil)
			}
			reportRequests(b, f)
		})
	}
}

// BenchmarkWatcherPoll is the shared cost, once per poll interval for all pods, between
// full listings: a state read of our jobs (none here) and a node read that finds no
// change, whatever the number of queued jobs or of pods waiting.
func BenchmarkWatcherPoll(b *testing.B) {
	for _, queued := range []int{100, 5000} {
		b.Run(fmt.Sprintf("jobs=%d", queued), func(b *testing.B) {
			f := benchFixture(b, queued)
			f.slurm.Requests()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := f.watcher.Poll(context.Background()); err != nil {
					b.Fatal(err)
				}
			}
			reportRequests(b, f)
		})
	}
}

func benchFixture(b *testing.B, queued int) *fixture {
	t := &testing.T{}
	f := newFixture(t)
	if err := f.slurm.AddForeignJobs(queued); err != nil {
		b.Fatal(err)
	}
	if err := f.watcher.Poll(context.Background()); err != nil {
		b.Fatal(err)
	}
	f.t = t
	f.handle.recorder.Events = nil // a FakeRecorder without a channel drops events
	return f
}

func (f *fixture) addPod(b *testing.B, pod *v1.Pod) *v1.Pod {
	if _, err := f.handle.cs.CoreV1().Pods(pod.Namespace).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	return pod
}

func reportRequests(b *testing.B, f *fixture) {
	total := 0
	for _, n := range f.slurm.Requests() {
		total += n
	}
	b.ReportMetric(float64(total)/float64(b.N), "slurm-requests/op")
}
