package slurmjob

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func pod(annotations map[string]string, containers ...v1.Container) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "trainer", UID: "uid-1", Annotations: annotations},
		Spec:       v1.PodSpec{Containers: containers},
	}
}

func container(req, lim v1.ResourceList) v1.Container {
	return v1.Container{Name: "c", Resources: v1.ResourceRequirements{Requests: req, Limits: lim}}
}

func TestParseTimeLimit(t *testing.T) {
	tests := []struct {
		in      string
		want    uint32
		wantErr bool
	}{
		{in: "30", want: 30},
		{in: "30:01", want: 31},
		{in: "30:00", want: 30},
		{in: "2:00:00", want: 120},
		{in: "1-0", want: 1440},
		{in: "1-2:30", want: 1590},
		{in: "1-0:0:1", want: 1441},
		{in: "UNLIMITED", want: Unlimited},
		{in: "infinite", want: Unlimited},
		{in: "0", wantErr: true},
		{in: "-5", wantErr: true},
		{in: "1h", wantErr: true},
		{in: "", wantErr: true},
		{in: "1:2:3:4", wantErr: true},
		{in: "99999999999", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseTimeLimit(tt.in)
			if tt.wantErr {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestParseAnnotations(t *testing.T) {
	a := func(kv ...string) map[string]string {
		m := map[string]string{"unrelated.io/x": "anything; goes\n"}
		for i := 0; i < len(kv); i += 2 {
			m[Annotation(kv[i])] = kv[i+1]
		}
		return m
	}
	tests := []struct {
		name    string
		in      map[string]string
		want    Options
		wantErr string
	}{
		{name: "none", in: a(), want: Options{}},
		{
			name: "all fields",
			in: a("partition", "gpu", "account", "ml-team", "qos", "high", "reservation", "maint_1",
				"time-limit", "1:30:00", "job-name", "train/llama-7b", "priority", "100", "exclusive", "true"),
			want: Options{Partition: "gpu", Account: "ml-team", QOS: "high", Reservation: "maint_1",
				TimeLimitMinutes: ptr.To[uint32](90), Name: "train/llama-7b", Priority: ptr.To[uint32](100), Exclusive: ptr.To(true)},
		},
		{name: "negative time limit", in: a("time-limit", "-10"), wantErr: "time-limit"},
		{name: "malformed time limit", in: a("time-limit", "ten minutes"), wantErr: "time-limit"},
		{name: "non-numeric priority", in: a("priority", "high"), wantErr: "priority"},
		{name: "negative priority", in: a("priority", "-1"), wantErr: "priority"},
		{name: "priority beyond int32", in: a("priority", "2147483648"), wantErr: "priority"},
		{name: "newline in partition", in: a("partition", "gpu\nPartitionName=evil"), wantErr: "partition"},
		{name: "shell metacharacters", in: a("account", "a;rm -rf /"), wantErr: "account"},
		{name: "command substitution in job name", in: a("job-name", "$(id)"), wantErr: "job-name"},
		{name: "backtick", in: a("qos", "`id`"), wantErr: "qos"},
		{name: "bad bool", in: a("exclusive", "sometimes"), wantErr: "exclusive"},
		{name: "unknown key", in: a("time-limt", "10"), wantErr: "unknown key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseAnnotations(tt.in)
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
				var ae *AnnotationError
				assert.ErrorAs(t, err, &ae)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestForPod(t *testing.T) {
	rl := func(kv ...string) v1.ResourceList {
		out := v1.ResourceList{}
		for i := 0; i < len(kv); i += 2 {
			out[v1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
		}
		return out
	}
	tests := []struct {
		name     string
		pod      *v1.Pod
		wantCPUs int32
		wantMem  int64
		wantGPUs int64
		wantTRES string
		wantName string
		gpus     GPUResources
	}{
		{name: "no requests", pod: pod(nil, container(nil, nil)), wantCPUs: 1, wantName: "team-a/trainer"},
		{name: "fractional cpu rounds up", pod: pod(nil, container(rl("cpu", "1500m", "memory", "1Gi"), nil)),
			wantCPUs: 2, wantMem: 1024, wantName: "team-a/trainer"},
		{name: "memory rounds up to MiB", pod: pod(nil, container(rl("memory", "1000000"), nil)), wantCPUs: 1, wantMem: 1, wantName: "team-a/trainer"},
		{name: "containers add up", pod: pod(nil, container(rl("cpu", "2"), nil), container(rl("cpu", "3"), nil)),
			wantCPUs: 5, wantName: "team-a/trainer"},
		{name: "gpu from limits", pod: pod(map[string]string{Annotation("job-name"): "x"}, container(nil, rl("nvidia.com/gpu", "2"))),
			wantCPUs: 1, wantGPUs: 2, wantTRES: "gres/gpu:2", wantName: "x"},
		{name: "gpu from requests", pod: pod(nil, container(rl("nvidia.com/gpu", "1"), rl("nvidia.com/gpu", "1"))),
			wantCPUs: 1, wantGPUs: 1, wantTRES: "gres/gpu:1", wantName: "team-a/trainer"},
		{name: "DRA extended resource of a GPU class", gpus: GPUResources{GPUResource, "example.com/gpu"},
			pod:      pod(nil, container(rl("example.com/gpu", "2"), rl("example.com/gpu", "2"))),
			wantCPUs: 1, wantGPUs: 2, wantTRES: "gres/gpu:2", wantName: "team-a/trainer"},
		{name: "device plugin and DRA GPUs add up", gpus: GPUResources{GPUResource, "deviceclass.resource.kubernetes.io/gpu.nvidia.com"},
			pod:      pod(nil, container(nil, rl("nvidia.com/gpu", "1")), container(nil, rl("deviceclass.resource.kubernetes.io/gpu.nvidia.com", "2"))),
			wantCPUs: 1, wantGPUs: 3, wantTRES: "gres/gpu:3", wantName: "team-a/trainer"},
		{name: "an extended resource not named is no GPU", pod: pod(nil, container(rl("example.com/gpu", "2"), nil)),
			wantCPUs: 1, wantName: "team-a/trainer"},
		{name: "named resources replace the default", gpus: GPUResources{"example.com/gpu"},
			pod: pod(nil, container(nil, rl("nvidia.com/gpu", "2"))), wantCPUs: 1, wantName: "team-a/trainer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec, err := ForPod(tt.pod, nil, tt.gpus)
			require.NoError(t, err)
			assert.Equal(t, tt.wantCPUs, spec.CPUsPerNode)
			assert.Equal(t, tt.wantMem, spec.MemoryPerNodeMB)
			assert.Equal(t, tt.wantGPUs, spec.GPUsPerNode)
			assert.Equal(t, tt.wantTRES, spec.TRESPerNode())
			assert.Equal(t, tt.wantName, spec.Name)
			assert.Equal(t, int32(1), spec.Nodes)
			assert.Equal(t, []PodRef{{Namespace: "team-a", Name: "trainer", UID: "uid-1"}}, spec.Pods)
		})
	}
}

func TestForPodRejectsBadAnnotation(t *testing.T) {
	_, err := ForPod(pod(map[string]string{Annotation("priority"): "urgent"}, container(nil, nil)), nil, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), Annotation("priority"))
}

func TestWithExcludedNodes(t *testing.T) {
	s := JobSpec{}.WithExcludedNodes([]string{"n3", "n1", "", "n3"})
	assert.Equal(t, []string{"n1", "n3"}, s.ExcludedNodes)
}

func TestIdentityRoundTrip(t *testing.T) {
	refs := []PodRef{{Namespace: "ns", Name: "a", UID: "u1"}, {Namespace: "ns", Name: "b", UID: "u2"}}
	for _, id := range []Identity{{Pods: refs}, {Group: "Job/ns/train", Pods: refs}} {
		got, ok := DecodeIdentity(EncodeIdentity(id))
		require.True(t, ok)
		assert.Equal(t, id, got)
	}

	for _, other := range []string{"", "hand-written note", `{"other.io":{"pods":[]}}`, `{"kubeslurm.io":{"pods":[]}}`, `{"kubeslurm.io":`} {
		_, ok := DecodeIdentity(other)
		assert.False(t, ok, other)
	}
}
