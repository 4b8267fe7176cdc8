package slurmjob

import (
	"fmt"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
)

// keyCase is one value of one annotation key: want is what ParseAnnotations makes of it,
// or wantErr a fragment of the error (which must also name the key).
type keyCase struct {
	value   string
	want    Options
	wantErr string
}

func TestEachKey(t *testing.T) {
	ok := func(v string, want Options) keyCase { return keyCase{value: v, want: want} }
	bad := func(v, why string) keyCase { return keyCase{value: v, wantErr: why} }
	// None of these may pass under any key (each is put between two letters).
	injections := []string{"\n--qos=high\n", ";", "$(id)", "`id`", " ", "'", `"`, "\x00", ">", "<", `\`, "\t", "\r", "{}", "%"}
	cases := map[string][]keyCase{
		AnnotationPartition:   {ok("gpu", Options{Partition: "gpu"}), ok("k8s_2.a-b", Options{Partition: "k8s_2.a-b"}), bad("-gpu", "not a valid partition"), bad("", "not a valid")},
		AnnotationAccount:     {ok("ml-team", Options{Account: "ml-team"}), bad("a/b", "not a valid account")},
		AnnotationQOS:         {ok("high", Options{QOS: "high"}), bad("hi,gh", "not a valid QOS")},
		AnnotationReservation: {ok("maint_1", Options{Reservation: "maint_1"}), bad("maint 1", "not a valid reservation")},
		AnnotationJobName:     {ok("train/llama-7b", Options{Name: "train/llama-7b"}), bad("$(id)", "not a valid job name")},
		AnnotationTimeLimit:   {ok("2-0", Options{TimeLimitMinutes: ptr.To[uint32](2880)}), bad("soon", "not a time limit")},
		AnnotationPriority:    {ok("5", Options{Priority: ptr.To[uint32](5)}), bad("2147483648", "not a priority")},
		AnnotationWCKey:       {ok("proj_x", Options{WCKey: "proj_x"}), ok(" proj ", Options{WCKey: "proj"}), bad("*proj", "not a valid wckey")},
		AnnotationNice: {ok("10", Options{Nice: ptr.To[int32](10)}), ok("-2147483645", Options{Nice: ptr.To[int32](-2147483645)}),
			ok("2147483645", Options{Nice: ptr.To[int32](2147483645)}), bad("2147483646", "nice value"), bad("-2147483646", "nice value"),
			bad("1.5", "nice value"), bad("ten", "nice value")},
		AnnotationConstraints: {
			ok("intel", Options{Constraints: "intel"}),
			ok("intel&gpu", Options{Constraints: "intel&gpu"}),
			ok("a100|h100", Options{Constraints: "a100|h100"}),
			ok("[rack1|rack2|rack3]", Options{Constraints: "[rack1|rack2|rack3]"}),
			ok("[rack1*2&rack2*4]", Options{Constraints: "[rack1*2&rack2*4]"}),
			ok("gpu&(a100|h100),ib", Options{Constraints: "gpu&(a100|h100),ib"}),
			ok("(knl&snc4)*4&haswell*1", Options{Constraints: "(knl&snc4)*4&haswell*1"}),
			bad("intel&", "feature name expected"), bad("&intel", "feature name expected"), bad("(intel", "missing )"),
			bad("intel)", "unexpected"), bad("[a|[b|c]]", "nested"), bad("a*0", "count"), bad("a*", "count"),
			bad("a||b", "feature name expected"), bad("a=b", "unexpected"),
		},
		AnnotationLicenses: {
			ok("matlab", Options{Licenses: "matlab"}), ok("matlab:2,ansys", Options{Licenses: "matlab:2,ansys"}),
			ok("fluent@db1:4", Options{Licenses: "fluent@db1:4"}), ok("a:1, b:2", Options{Licenses: "a:1,b:2"}),
			bad("matlab:0", "not a license list"), bad("matlab:-1", "not a license list"), bad("a,,b", "not a license list"),
			bad("a:1,a:2", "twice"), bad("a:1:2", "not a license list"),
		},
		AnnotationGRES: {
			ok("gpu", Options{GRES: []GRES{{Name: "gpu", Count: 1}}}),
			ok("gpu:2", Options{GRES: []GRES{{Name: "gpu", Count: 2}}}),
			ok("gpu:a100:2", Options{GRES: []GRES{{Name: "gpu", Type: "a100", Count: 2}}}),
			ok("gpu:a100", Options{GRES: []GRES{{Name: "gpu", Type: "a100", Count: 1}}}),
			ok("gres/gpu=2", Options{GRES: []GRES{{Name: "gpu", Count: 2}}}),
			ok("gres/gpu:h100=4,shard:1", Options{GRES: []GRES{{Name: "gpu", Type: "h100", Count: 4}, {Name: "shard", Count: 1}}}),
			ok("gpu:nvidia_a100_1g.5gb:1", Options{GRES: []GRES{{Name: "gpu", Type: "nvidia_a100_1g.5gb", Count: 1}}}),
			bad("gpu:0", "not a GRES list"), bad("gpu:a100:b:2", "too many parts"), bad("gpu:1:2", "not a GRES type"),
			bad("gpu:2,gpu:3", "twice"), bad("gpu=", "no count"), bad("2", "not a GRES name"), bad("gpu,", "not a GRES name"),
		},
		AnnotationCPUsPerTask: {ok("4", Options{CPUsPerTask: 4}), ok("1500m", Options{CPUsPerTask: 2}), ok("200m", Options{CPUsPerTask: 1}),
			bad("0", "not a CPU count"), bad("-1", "not a CPU count"), bad("many", "not a CPU count"), bad("70000", "not a CPU count")},
		AnnotationMemPerNode: {
			ok("4096", Options{MemPerNodeMB: 4096}), ok("4096M", Options{MemPerNodeMB: 4096}), ok("4G", Options{MemPerNodeMB: 4096}),
			ok("4g", Options{MemPerNodeMB: 4096}), ok("4Gi", Options{MemPerNodeMB: 4096}), ok("512Mi", Options{MemPerNodeMB: 512}),
			ok("1T", Options{MemPerNodeMB: 1 << 20}), ok("1500K", Options{MemPerNodeMB: 2}), ok("1.5Gi", Options{MemPerNodeMB: 1536}),
			bad("0", "memory size"), bad("4GB", "memory size"), bad("4e3", "memory size"), bad("-4G", "memory size"), bad("4 G", "memory size"),
			bad("4000000000T", "memory size"),
		},
		AnnotationMinNodes: {ok("1", Options{MinNodes: 1}), ok("8", Options{MinNodes: 8}), bad("0", "node count"), bad("1-4", "node count")},
		AnnotationMaxNodes: {ok("16", Options{MaxNodes: 16}), bad("-2", "node count"), bad("200000", "node count")},
		AnnotationUserID: {ok("1000", Options{UserID: ptr.To[uint32](1000)}), ok("4294967293", Options{UserID: ptr.To[uint32](4294967293)}),
			bad("0", "numeric user id"), bad("alice", "numeric user id"), bad("4294967294", "numeric user id")},
		AnnotationGroupID: {ok("2000", Options{GroupID: ptr.To[uint32](2000)}), bad("0", "numeric group id"), bad("staff", "numeric group id")},
		AnnotationDependency: {
			ok("afterok:123", Options{Dependencies: []Dependency{{Type: "afterok", JobIDs: []int32{123}}}}),
			ok("afterok:123:456", Options{Dependencies: []Dependency{{Type: "afterok", JobIDs: []int32{123, 456}}}}),
			ok("afterany:Job/train-a", Options{Dependencies: []Dependency{{Type: "afterany", Workloads: []WorkloadRef{{Kind: "Job", Name: "train-a"}}}}}),
			ok("after:PodGroup/prep,afternotok:7", Options{Dependencies: []Dependency{
				{Type: "after", Workloads: []WorkloadRef{{Kind: "PodGroup", Name: "prep"}}}, {Type: "afternotok", JobIDs: []int32{7}}}}),
			ok("afterany:12:LeaderWorkerSet/serve/0:Pod/setup:PodGroup.scheduling.k8s.io/pg:JobSet/train", Options{Dependencies: []Dependency{{Type: "afterany",
				JobIDs: []int32{12}, Workloads: []WorkloadRef{{Kind: "LeaderWorkerSet", Name: "serve", Replica: "0"}, {Kind: "Pod", Name: "setup"}, {Kind: "PodGroup.scheduling.k8s.io", Name: "pg"}, {Kind: "JobSet", Name: "train"}}}}}),
			bad("afterok:Job/train-a", "cannot name a workload"), bad("afternotok:PodGroup/prep", "cannot name a workload"),
			bad("singleton", "not one of after"), bad("aftercorr:12", "not one of after"), bad("afterok", "names no job"),
			bad("afterok:", "names no job"), bad("afterok:0", "not a Slurm job id"), bad("afterok:99999999999", "not a Slurm job id"),
			bad("afterok:12?afterany:13", "not \"?\""), bad("afterok:12+5", "neither a job id"), bad("afterany:Deployment/web", "kind \"Deployment\""),
			bad("afterany:Job/Train_A", "is not a name"), bad("afterany:LeaderWorkerSet/serve", "group index"),
			bad("afterany:Job/a/0", "only a LeaderWorkerSet"), bad("afterok:1,", "not one of after"), bad("AFTEROK:1", "not one of after"),
		},
		AnnotationExclusive: {ok("true", Options{Exclusive: ptr.To(true)}), ok("false", Options{Exclusive: ptr.To(false)}), bad("yes please", "not true or false")},
	}
	for key, kcs := range cases {
		for _, inj := range injections {
			kcs = append(kcs, bad("x"+inj+"y", ""))
		}
		for _, c := range kcs {
			t.Run(fmt.Sprintf("%s=%q", key, c.value), func(t *testing.T) {
				got, err := ParseAnnotations(map[string]string{Annotation(key): c.value})
				if c.want.isZero() {
					require.Error(t, err)
					assert.Contains(t, err.Error(), c.wantErr)
					assert.Contains(t, err.Error(), Annotation(key), "the error names the key")
					return
				}
				require.NoError(t, err)
				assert.Equal(t, c.want, got)
			})
		}
	}
	for key := range parsers {
		if key != AnnotationGang {
			assert.Contains(t, cases, key, "every key has cases")
		}
	}
}

func (o Options) isZero() bool {
	return fmt.Sprintf("%#v", o) == fmt.Sprintf("%#v", Options{})
}

func TestAliases(t *testing.T) {
	// slurm-bridge's example values, with its keys, mean what ours do.
	bridge := map[string]string{
		"account": "slurm", "constraints": "foo", "cpu-per-task": "200m", "exclusive": "false", "gres": "gres/gpu=2",
		"group-id": "1000", "job-name": "jobname", "licenses": "mathlib", "max-nodes": "4", "mem-per-node": "1Gi",
		"min-nodes": "2", "partition": "slurm-bridge", "priority": "100", "qos": "high", "reservation": "training",
		"timelimit": "30", "user-id": "1000", "wckey": "key",
	}
	assert.Equal(t, AliasKeys(), sortedKeys(bridge), "every slurm-bridge key is known")
	aliased, ours := map[string]string{}, map[string]string{}
	for k, v := range bridge {
		aliased[AliasAnnotation(k)] = v
		ours[Annotation(aliasKeys[k])] = v
	}
	got, err := ParseAnnotations(aliased)
	require.NoError(t, err)
	want, err := ParseAnnotations(ours)
	require.NoError(t, err)
	assert.Equal(t, want, got)
	assert.Equal(t, Options{
		Account: "slurm", Constraints: "foo", CPUsPerTask: 1, Exclusive: ptr.To(false), GRES: []GRES{{Name: "gpu", Count: 2}},
		GroupID: ptr.To[uint32](1000), Name: "jobname", Licenses: "mathlib", MaxNodes: 4, MemPerNodeMB: 1024, MinNodes: 2,
		Partition: "slurm-bridge", Priority: ptr.To[uint32](100), QOS: "high", Reservation: "training",
		TimeLimitMinutes: ptr.To[uint32](30), UserID: ptr.To[uint32](1000), WCKey: "key",
	}, got)

	// Both prefixes, same meaning: fine, even written differently.
	got, err = ParseAnnotations(map[string]string{Annotation("time-limit"): "1:00:00", AliasAnnotation("timelimit"): "60",
		Annotation("mem-per-node"): "4G", AliasAnnotation("mem-per-node"): "4Gi"})
	require.NoError(t, err)
	assert.Equal(t, Options{TimeLimitMinutes: ptr.To[uint32](60), MemPerNodeMB: 4096}, got)

	// Both prefixes, different values: an error naming both keys.
	_, err = ParseAnnotations(map[string]string{Annotation("time-limit"): "30", AliasAnnotation("timelimit"): "60"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), Annotation("time-limit"))
	assert.Contains(t, err.Error(), AliasAnnotation("timelimit"))
	_, err = ParseAnnotations(map[string]string{Annotation("cpus-per-task"): "2", AliasAnnotation("cpu-per-task"): "3"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), AliasAnnotation("cpu-per-task"))

	// An invalid alias value is an error naming the alias key.
	_, err = ParseAnnotations(map[string]string{AliasAnnotation("partition"): "a;b"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), AliasAnnotation("partition"))

	// Typos under either prefix; our own extra keys are not slurm-bridge's.
	for _, k := range []string{AliasAnnotation("time-limit"), AliasAnnotation("timelimt"), AliasAnnotation("nice"), Annotation("timelimit")} {
		_, err = ParseAnnotations(map[string]string{k: "10"})
		require.Error(t, err, k)
		assert.Contains(t, err.Error(), "unknown key", k)
		assert.Contains(t, err.Error(), k)
	}
	_, err = ParseAnnotations(map[string]string{AliasAnnotation("nice"): "10"})
	assert.Contains(t, err.Error(), "known keys: account, constraints, cpu-per-task", "lists slurm-bridge's keys")
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func TestMergeIsPerSetting(t *testing.T) {
	root := map[string]string{AliasAnnotation("timelimit"): "30", Annotation("qos"): "low", AliasAnnotation("partition"): "a", "other.io/x": "y"}
	pod := map[string]string{Annotation("time-limit"): "60", AliasAnnotation("qos"): "high"}
	assert.Equal(t, map[string]string{
		Annotation("time-limit"): "60", AliasAnnotation("qos"): "high", AliasAnnotation("partition"): "a",
	}, Merge(root, pod), "the pod's setting replaces the root's under either prefix")
	o, err := ParseAnnotations(Merge(root, pod))
	require.NoError(t, err)
	assert.Equal(t, Options{TimeLimitMinutes: ptr.To[uint32](60), QOS: "high", Partition: "a"}, o)
}

func TestAnnotationsAgainstRequests(t *testing.T) {
	req := func(kv ...string) v1.Container {
		rl := v1.ResourceList{}
		for i := 0; i < len(kv); i += 2 {
			rl[v1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
		}
		return container(rl, nil)
	}
	tests := []struct {
		name      string
		ann       map[string]string
		c         v1.Container
		wantErr   string
		wantCPUs  int32
		wantMemMB int64
		wantTRES  string
	}{
		{name: "cpus above request", ann: map[string]string{Annotation("cpus-per-task"): "4"}, c: req("cpu", "2"), wantCPUs: 4},
		{name: "cpus equal to request", ann: map[string]string{AliasAnnotation("cpu-per-task"): "1500m"}, c: req("cpu", "1500m"), wantCPUs: 2},
		{name: "cpus below request", ann: map[string]string{Annotation("cpus-per-task"): "1"}, c: req("cpu", "2"), wantErr: Annotation("cpus-per-task") + ": 1 CPUs is less than the 2"},
		{name: "alias named in error", ann: map[string]string{AliasAnnotation("cpu-per-task"): "1"}, c: req("cpu", "3"), wantErr: AliasAnnotation("cpu-per-task")},
		{name: "memory above request", ann: map[string]string{Annotation("mem-per-node"): "4G"}, c: req("memory", "1Gi"), wantCPUs: 1, wantMemMB: 4096},
		{name: "memory without request", ann: map[string]string{Annotation("mem-per-node"): "512"}, c: req(), wantCPUs: 1, wantMemMB: 512},
		{name: "memory below request", ann: map[string]string{Annotation("mem-per-node"): "512M"}, c: req("memory", "1Gi"), wantErr: Annotation("mem-per-node") + ": 512 MiB is less than the 1024 MiB"},
		{name: "gres agrees with gpus", ann: map[string]string{Annotation("gres"): "gpu:a100:2"}, c: req("nvidia.com/gpu", "2"), wantCPUs: 1, wantTRES: "gres/gpu:a100:2"},
		{name: "gres types add up", ann: map[string]string{Annotation("gres"): "gpu:a100:1,gpu:h100:1"}, c: req("nvidia.com/gpu", "2"), wantCPUs: 1, wantTRES: "gres/gpu:a100:1,gres/gpu:h100:1"},
		{name: "gres disagrees with gpus", ann: map[string]string{Annotation("gres"): "gpu:4"}, c: req("nvidia.com/gpu", "2"), wantErr: Annotation("gres") + ": 4 GPUs per node, but the pods request 2"},
		{name: "gres without gpu keeps requested gpus", ann: map[string]string{Annotation("gres"): "shard:2"}, c: req("nvidia.com/gpu", "1"), wantCPUs: 1, wantTRES: "gres/gpu:1,gres/shard:2"},
		{name: "gpu gres without gpu requests", ann: map[string]string{AliasAnnotation("gres"): "gres/gpu=2"}, c: req(), wantCPUs: 1, wantTRES: "gres/gpu:2"},
		{name: "one node fits", ann: map[string]string{Annotation("min-nodes"): "1", Annotation("max-nodes"): "4"}, c: req(), wantCPUs: 1},
		{name: "min nodes beyond one pod", ann: map[string]string{AliasAnnotation("min-nodes"): "2"}, c: req(), wantErr: AliasAnnotation("min-nodes") + ": 2 nodes asked for, but a single pod's job has 1 node"},
		{name: "min above max", ann: map[string]string{Annotation("min-nodes"): "3", Annotation("max-nodes"): "2"}, c: req(), wantErr: Annotation("min-nodes") + ": 3 is more than " + Annotation("max-nodes")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec, err := ForPod(pod(tt.ann, tt.c), nil, nil)
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.wantCPUs, spec.CPUsPerNode)
			assert.Equal(t, tt.wantMemMB, spec.MemoryPerNodeMB)
			assert.Equal(t, tt.wantTRES, spec.TRESPerNode())
		})
	}
}

func TestGroupNodeCountAnnotations(t *testing.T) {
	members := func(n int) []*v1.Pod {
		var out []*v1.Pod
		for i := 0; i < n; i++ {
			p := pod(nil, container(nil, nil))
			p.Name = fmt.Sprintf("m-%d", i)
			out = append(out, p)
		}
		return out
	}
	spec, err := ForGroup("PodGroup/ns/g", "ns/g", map[string]string{Annotation("min-nodes"): "3", AliasAnnotation("max-nodes"): "3"}, members(3), nil)
	require.NoError(t, err)
	assert.Equal(t, int32(3), spec.Nodes)

	_, err = ForGroup("PodGroup/ns/g", "ns/g", map[string]string{Annotation("max-nodes"): "2"}, members(3), nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), Annotation("max-nodes")+": at most 2 nodes asked for, but a group's job has one node per member, here 3")
	_, err = ForGroup("PodGroup/ns/g", "ns/g", map[string]string{Annotation("min-nodes"): "4"}, members(3), nil)
	assert.ErrorContains(t, err, "here 3")
}

func TestForPodCarriesAnnotatedFields(t *testing.T) {
	ann := map[string]string{
		Annotation("nice"): "5", Annotation("wckey"): "w", Annotation("constraints"): "a&b", Annotation("licenses"): "l:2",
		Annotation("user-id"): "1000", Annotation("group-id"): "1001", Annotation("dependency"): "afterok:4,afterany:Job/prep",
	}
	// The root workload sets them; the pod overrides one.
	spec, err := ForPod(pod(map[string]string{Annotation("nice"): "7"}, container(nil, nil)), ann, nil)
	require.NoError(t, err)
	assert.Equal(t, ptr.To[int32](7), spec.Nice)
	assert.Equal(t, "w", spec.WCKey)
	assert.Equal(t, "a&b", spec.Constraints)
	assert.Equal(t, "l:2", spec.Licenses)
	assert.Equal(t, ptr.To[uint32](1000), spec.UserID)
	assert.Equal(t, ptr.To[uint32](1001), spec.GroupID)
	assert.Equal(t, "afterok:4,afterany:Job/prep", spec.SlurmDependency(), "an unresolved reference is sent as written, so Slurm refuses it")
}
