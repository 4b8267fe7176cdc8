package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A deleted pod's containers get its deletion's grace period; a later delete with a shorter
// one shortens it, a longer one does not lengthen it (as a kubelet).
func TestGracePeriod(t *testing.T) {
	sec := func(n int64) *int64 { return &n }
	pod := func(termination *int64) *v1.Pod {
		return &v1.Pod{Spec: v1.PodSpec{TerminationGracePeriodSeconds: termination}}
	}
	for _, tc := range []struct {
		name        string
		termination *int64
		deletions   []*int64
		want        time.Duration
	}{
		{"not deleted, no grace set", nil, nil, 30 * time.Second},
		{"not deleted", sec(3600), nil, time.Hour},
		{"deleted with the pod's grace", sec(3600), []*int64{sec(3600)}, time.Hour},
		{"shortened", sec(3600), []*int64{sec(3600), sec(1)}, time.Second},
		{"not lengthened", sec(3600), []*int64{sec(5), sec(60)}, 5 * time.Second},
		{"deleted without a grace period field", sec(20), []*int64{nil}, 20 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pr := &podRun{pod: pod(tc.termination)}
			pr.grace.Store(-1)
			for _, d := range tc.deletions {
				pr.deleted(&v1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionGracePeriodSeconds: d}})
			}
			assert.Equal(t, tc.want, pr.gracePeriod())
		})
	}
}
