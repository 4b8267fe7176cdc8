package workload

import (
	"testing"

	"github.com/stretchr/testify/assert"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestKeyRoundTrip(t *testing.T) {
	tests := []struct {
		g    Group
		key  string
		name string
	}{
		{g: Group{Kind: KindPodGroup, Namespace: "ns", Name: "train"}, key: "PodGroup/ns/train", name: "ns/train"},
		{g: Group{Kind: KindLeaderWorkerSet, Namespace: "ns", Name: "lws", Replica: "2"}, key: "LeaderWorkerSet/ns/lws/2", name: "ns/lws-2"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.key, tt.g.Key())
		assert.Equal(t, tt.name, tt.g.JobName())
		assert.Equal(t, Key{Kind: tt.g.Kind, Namespace: tt.g.Namespace, Name: tt.g.Name, Replica: tt.g.Replica}, ParseKey(tt.key))
	}
	assert.Equal(t, Key{}, ParseKey("not-a-key"))
}

func TestSortByRank(t *testing.T) {
	pod := func(name string, created int64, index string) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.Unix(created, 0),
			Labels: map[string]string{LWSWorkerIndexLabel: index}}}
	}
	names := func(pods []*v1.Pod) []string {
		var out []string
		for _, p := range pods {
			out = append(out, p.Name)
		}
		return out
	}
	byIndex := func(p *v1.Pod) (int, bool) { return atoi(p.Labels[LWSWorkerIndexLabel]) }

	pods := []*v1.Pod{pod("c", 1, "2"), pod("a", 3, "0"), pod("b", 2, "1")}
	SortByRank(pods, byIndex)
	assert.Equal(t, []string{"a", "b", "c"}, names(pods), "the workload's index wins over creation time")

	pods = []*v1.Pod{pod("b", 5, ""), pod("z", 4, ""), pod("a", 5, "")}
	SortByRank(pods, nil)
	assert.Equal(t, []string{"z", "a", "b"}, names(pods), "creation time, then name")

	pods = []*v1.Pod{pod("late", 1, "x"), pod("ranked", 9, "0")}
	SortByRank(pods, byIndex)
	assert.Equal(t, []string{"ranked", "late"}, names(pods), "pods without a valid index come after indexed ones")
}

func TestLive(t *testing.T) {
	now := metav1.Now()
	assert.True(t, Live(&v1.Pod{Status: v1.PodStatus{Phase: v1.PodPending}}))
	assert.False(t, Live(&v1.Pod{Status: v1.PodStatus{Phase: v1.PodSucceeded}}))
	assert.False(t, Live(&v1.Pod{Status: v1.PodStatus{Phase: v1.PodFailed}}))
	assert.False(t, Live(&v1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &now}}))
}
