package computedomain

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func ptr[T any](v T) *T { return &v }

func TestNewAndReadSpec(t *testing.T) {
	u := New("hpc", "slurm-compute-domain", Spec{ResourceClaimTemplateName: "slurm-channel"})
	assert.Equal(t, GVK, u.GroupVersionKind())
	assert.Equal(t, "hpc", u.GetNamespace())
	got, err := ReadSpec(u)
	require.NoError(t, err)
	assert.Equal(t, Spec{NumNodes: 0, ResourceClaimTemplateName: "slurm-channel", AllocationMode: "Single"}, got, "allocationMode defaulted")

	// As the API server returns it: JSON, numbers decoded by the unstructured decoder.
	b, err := json.Marshal(u.Object)
	require.NoError(t, err)
	back := Empty()
	require.NoError(t, back.UnmarshalJSON(b))
	got, err = ReadSpec(back)
	require.NoError(t, err)
	assert.True(t, got.Equal(Spec{ResourceClaimTemplateName: "slurm-channel"}))
	assert.False(t, got.Equal(Spec{ResourceClaimTemplateName: "slurm-channel", AllocationMode: "All"}))
	assert.False(t, got.Equal(Spec{NumNodes: 2, ResourceClaimTemplateName: "slurm-channel"}))
	assert.Equal(t, "numNodes=0 channel.resourceClaimTemplate.name=slurm-channel channel.allocationMode=Single", got.String())
}

func TestReadSpecRefusesWrongTypes(t *testing.T) {
	for name, spec := range map[string]map[string]any{
		"numNodes a string":      {"numNodes": "0"},
		"template name a number": {"channel": map[string]any{"resourceClaimTemplate": map[string]any{"name": int64(1)}}},
		"allocationMode a list":  {"channel": map[string]any{"allocationMode": []any{"All"}}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ReadSpec(&unstructured.Unstructured{Object: map[string]any{"spec": spec}})
			assert.Error(t, err)
		})
	}
}

func TestReadStatus(t *testing.T) {
	for _, tc := range []struct {
		name    string
		status  any
		want    Status
		wantErr string
	}{
		{name: "none yet", status: nil, want: Status{}},
		{name: "not ready, no nodes", status: map[string]any{"status": "NotReady"}, want: Status{Status: "NotReady"}},
		{name: "nodes null", status: map[string]any{"status": "NotReady", "nodes": nil}, want: Status{Status: "NotReady"}},
		{name: "nodes not a list", status: map[string]any{"nodes": "node-1"}, wantErr: "not a list"},
		{name: "nodes sorted", status: map[string]any{"status": "Ready", "nodes": []any{
			map[string]any{"name": "node-3", "ipAddress": "10.0.0.3", "cliqueID": "a.1", "index": int64(1), "status": "Ready"},
			map[string]any{"name": "node-1", "ipAddress": "10.0.0.1", "cliqueID": "a.1", "index": int64(0), "status": "Ready"},
		}}, want: Status{Status: "Ready", Nodes: []string{"node-1", "node-3"}}},
		{name: "node without a name", status: map[string]any{"nodes": []any{map[string]any{"ipAddress": "10.0.0.1"}}}, wantErr: "no name"},
		{name: "node not an object", status: map[string]any{"nodes": []any{"node-1"}}, wantErr: "not an object"},
		{name: "status not a string", status: map[string]any{"status": true}, wantErr: "status.status"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := New("hpc", "cd", Spec{ResourceClaimTemplateName: "t"})
			if tc.status != nil {
				u.Object["status"] = tc.status
			}
			got, err := ReadStatus(u)
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestAddChannelClaim(t *testing.T) {
	channel := v1.PodResourceClaim{Name: ChannelClaimName, ResourceClaimTemplateName: ptr("cd-channel")}
	claim := v1.ResourceClaim{Name: ChannelClaimName}
	gpu := v1.ResourceClaim{Name: "gpu"}
	gpuClaim := v1.PodResourceClaim{Name: "gpu", ResourceClaimTemplateName: ptr("gpus")}
	two := func() v1.PodSpec {
		return v1.PodSpec{Containers: []v1.Container{{Name: "slurmd"}, {Name: "sidecar"}}}
	}
	for _, tc := range []struct {
		name       string
		spec       v1.PodSpec
		containers []string
		template   string
		want       v1.PodSpec
		wantErr    string
	}{
		{name: "every container", spec: two(), template: "cd-channel", want: v1.PodSpec{
			ResourceClaims: []v1.PodResourceClaim{channel},
			Containers: []v1.Container{
				{Name: "slurmd", Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{claim}}},
				{Name: "sidecar", Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{claim}}},
			}}},
		{name: "one named container", spec: two(), containers: []string{"slurmd"}, template: "cd-channel", want: v1.PodSpec{
			ResourceClaims: []v1.PodResourceClaim{channel},
			Containers: []v1.Container{
				{Name: "slurmd", Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{claim}}},
				{Name: "sidecar"},
			}}},
		{name: "beside other claims", template: "cd-channel",
			spec: v1.PodSpec{ResourceClaims: []v1.PodResourceClaim{gpuClaim},
				Containers: []v1.Container{{Name: "slurmd", Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{gpu}}}}},
			want: v1.PodSpec{ResourceClaims: []v1.PodResourceClaim{gpuClaim, channel},
				Containers: []v1.Container{{Name: "slurmd", Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{gpu, claim}}}}}},
		{name: "already there: unchanged", template: "cd-channel",
			spec: v1.PodSpec{ResourceClaims: []v1.PodResourceClaim{channel},
				Containers: []v1.Container{{Name: "slurmd", Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{claim}}}}},
			want: v1.PodSpec{ResourceClaims: []v1.PodResourceClaim{channel},
				Containers: []v1.Container{{Name: "slurmd", Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{claim}}}}}},
		{name: "claim of that name from another template", template: "cd-channel",
			spec: v1.PodSpec{ResourceClaims: []v1.PodResourceClaim{{Name: ChannelClaimName, ResourceClaimTemplateName: ptr("other")}},
				Containers: []v1.Container{{Name: "slurmd"}}},
			wantErr: "not from ResourceClaimTemplate cd-channel"},
		{name: "claim of that name from a ResourceClaim", template: "cd-channel",
			spec: v1.PodSpec{ResourceClaims: []v1.PodResourceClaim{{Name: ChannelClaimName, ResourceClaimName: ptr("shared")}},
				Containers: []v1.Container{{Name: "slurmd"}}},
			wantErr: "not from ResourceClaimTemplate"},
		{name: "unknown container", spec: two(), containers: []string{"nope"}, template: "cd-channel", wantErr: `no container "nope"`},
		{name: "no template", spec: two(), wantErr: "no ResourceClaimTemplate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := *tc.spec.DeepCopy()
			err := AddChannelClaim(&spec, tc.template, tc.containers...)
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.wantErr)
				assert.Equal(t, tc.spec, spec, "left as it was")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, spec)
			require.NoError(t, AddChannelClaim(&spec, tc.template, tc.containers...))
			assert.Equal(t, tc.want, spec, "adding it again changes nothing")
		})
	}
}
