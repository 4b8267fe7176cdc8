package workload

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	jobsetlisters "sigs.k8s.io/jobset/client-go/listers/jobset/v1alpha2"
	lwsv1 "sigs.k8s.io/lws/api/leaderworkerset/v1"
	lwslisters "sigs.k8s.io/lws/client-go/listers/leaderworkerset/v1"
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

func jobSet(name string, restarts int32, rjs ...jobsetv1alpha2.ReplicatedJob) *jobsetv1alpha2.JobSet {
	return &jobsetv1alpha2.JobSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Annotations: map[string]string{"slurmjob.kubeslurm.io/account": "ml"}},
		Spec:       jobsetv1alpha2.JobSetSpec{ReplicatedJobs: rjs},
		Status:     jobsetv1alpha2.JobSetStatus{Restarts: restarts},
	}
}

func replicatedJob(name string, replicas int32, parallelism, completions *int32) jobsetv1alpha2.ReplicatedJob {
	return jobsetv1alpha2.ReplicatedJob{Name: name, Replicas: replicas, Template: batchv1.JobTemplateSpec{
		Spec: batchv1.JobSpec{Parallelism: parallelism, Completions: completions}}}
}

func TestJobSetLayout(t *testing.T) {
	tests := []struct {
		name    string
		js      *jobsetv1alpha2.JobSet
		size    int32
		offsets []int
		err     string
	}{
		{name: "one replicated job of 2 jobs of 2 pods",
			js:   jobSet("a", 0, replicatedJob("workers", 2, ptr.To[int32](2), ptr.To[int32](2))),
			size: 4, offsets: []int{0, 2}},
		{name: "driver then workers: global index order",
			js:   jobSet("a", 0, replicatedJob("driver", 1, nil, nil), replicatedJob("workers", 3, ptr.To[int32](2), nil)),
			size: 7, offsets: []int{0, 1, 3, 5}},
		{name: "completions differ", js: jobSet("a", 0, replicatedJob("w", 1, ptr.To[int32](2), ptr.To[int32](4))),
			err: "replicated job w has parallelism 2 and completions 4"},
		{name: "no pods", js: jobSet("a", 0, replicatedJob("w", 0, nil, nil)), err: "runs no pods"},
		{name: "in order", js: func() *jobsetv1alpha2.JobSet {
			js := jobSet("a", 0, replicatedJob("w", 1, nil, nil))
			js.Spec.StartupPolicy = &jobsetv1alpha2.StartupPolicy{StartupPolicyOrder: jobsetv1alpha2.InOrder}
			return js
		}(), err: "startupPolicyOrder InOrder"},
		{name: "depends on", js: func() *jobsetv1alpha2.JobSet {
			js := jobSet("a", 0, replicatedJob("d", 1, nil, nil), replicatedJob("w", 1, nil, nil))
			js.Spec.ReplicatedJobs[1].DependsOn = []jobsetv1alpha2.DependsOn{{Name: "d", Status: jobsetv1alpha2.DependencyReady}}
			return js
		}(), err: "replicated job w depends on d"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			size, offsets, err := jobSetLayout(tt.js)
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.size, size)
			assert.Equal(t, tt.offsets, offsets)
		})
	}
}

// resolverWith builds a Resolver over indexers holding the given objects.
func resolverWith(t *testing.T, objs ...interface{}) *Resolver {
	pods := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	jobSets := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	lwss := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, o := range objs {
		var err error
		switch o.(type) {
		case *v1.Pod:
			err = pods.Add(o)
		case *jobsetv1alpha2.JobSet:
			err = jobSets.Add(o)
		case *lwsv1.LeaderWorkerSet:
			err = lwss.Add(o)
		}
		require.NoError(t, err)
	}
	return &Resolver{Pods: corelisters.NewPodLister(pods), JobSets: jobsetlisters.NewJobSetLister(jobSets),
		LeaderWorkerSets: lwslisters.NewLeaderWorkerSetLister(lwss)}
}

func TestJobSetGroupRanksByGlobalIndexThenCompletionIndex(t *testing.T) {
	pod := func(name, global, completion, restart string) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name,
			Labels:      map[string]string{JobSetNameLabel: "train", JobSetIndexLabel: global, JobSetRestartLabel: restart},
			Annotations: map[string]string{batchv1.JobCompletionIndexAnnotation: completion}}}
	}
	js := jobSet("train", 1, replicatedJob("driver", 1, nil, nil), replicatedJob("workers", 2, ptr.To[int32](2), ptr.To[int32](2)))
	r := resolverWith(t, js,
		pod("w1-1", "2", "1", "1"), pod("w0-0", "1", "0", "1"), pod("d", "0", "0", "1"),
		pod("w1-0", "2", "0", "1"), pod("w0-1", "1", "1", "1"),
		pod("old", "0", "0", "0")) // the previous attempt's pod is not a member
	g, err := r.GroupOf(pod("d", "0", "0", "1"))
	require.NoError(t, err)
	assert.Equal(t, "JobSet/ns/train", g.Key())
	assert.EqualValues(t, 5, g.Size)
	assert.Equal(t, "ml", g.Annotations["slurmjob.kubeslurm.io/account"])
	members, err := r.Members(g)
	require.NoError(t, err)
	var names []string
	for _, p := range members {
		names = append(names, p.Name)
	}
	assert.Equal(t, []string{"d", "w0-0", "w0-1", "w1-0", "w1-1"}, names)

	_, err = (&Resolver{}).GroupOf(pod("d", "0", "0", "1"))
	assert.ErrorContains(t, err, "JobSet API (jobset.x-k8s.io/v1alpha2) is not installed")
	_, err = resolverWith(t).GroupOf(pod("d", "0", "0", "1"))
	assert.ErrorContains(t, err, "JobSet ns/train not found")
	assert.True(t, IsMissing(err), "a JobSet not (yet) read is waited for")
	_, err = resolverWith(t, jobSet("train", 1)).GroupOf(pod("d", "0", "0", "1"))
	assert.ErrorContains(t, err, "runs no pods")
	assert.False(t, IsMissing(err), "a JobSet that cannot be one Slurm job is a mistake in its spec")
}

func TestLeaderWorkerSetGroup(t *testing.T) {
	pod := func(name, group, worker string) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name,
			Labels:      map[string]string{LWSNameLabel: "serve", LWSGroupIndexLabel: group, LWSWorkerIndexLabel: worker},
			Annotations: map[string]string{LWSSizeAnnotation: "3"}}}
	}
	lws := &lwsv1.LeaderWorkerSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "serve", Annotations: map[string]string{"slurmjob.kubeslurm.io/qos": "high"}}}
	r := resolverWith(t, lws, pod("serve-1", "1", "0"), pod("serve-1-2", "1", "2"), pod("serve-1-1", "1", "1"), pod("serve-0", "0", "0"))
	g, err := r.GroupOf(pod("serve-1", "1", "0"))
	require.NoError(t, err)
	assert.Equal(t, "LeaderWorkerSet/ns/serve/1", g.Key())
	assert.EqualValues(t, 3, g.Size)
	assert.Equal(t, "high", g.Annotations["slurmjob.kubeslurm.io/qos"])
	assert.Equal(t, KindLeaderWorkerSet, g.Object.GetObjectKind().GroupVersionKind().Kind)
	members, err := r.Members(g)
	require.NoError(t, err)
	require.Len(t, members, 3)
	assert.Equal(t, []string{"serve-1", "serve-1-1", "serve-1-2"}, []string{members[0].Name, members[1].Name, members[2].Name})

	lws.Spec.StartupPolicy = lwsv1.LeaderReadyStartupPolicy
	_, err = r.GroupOf(pod("serve-1", "1", "0"))
	assert.ErrorContains(t, err, "startupPolicy LeaderReady")

	bad := pod("x", "1", "0")
	bad.Annotations[LWSSizeAnnotation] = "zero"
	_, err = r.GroupOf(bad)
	assert.ErrorContains(t, err, `annotation leaderworkerset.sigs.k8s.io/size="zero" is not a group size`)
}
