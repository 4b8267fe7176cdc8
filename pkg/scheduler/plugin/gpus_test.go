package plugin

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/utils/ptr"

	"github.com/kubeslurm/kubeslurm/pkg/slurmjob"
)

func TestGPUResources(t *testing.T) {
	class := func(name, extended string) *resourcev1.DeviceClass {
		c := &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if extended != "" {
			c.Spec.ExtendedResourceName = ptr.To(extended)
		}
		return c
	}
	classes := []*resourcev1.DeviceClass{
		class("gpu.nvidia.com", "nvidia.com/dra-gpu"),
		class("mig.nvidia.com", ""),
		class("nic.example.com", "example.com/nic"),
	}
	tests := []struct {
		name         string
		names, gpuCl []string
		want         slurmjob.GPUResources
	}{
		{name: "defaults", names: defaultGPUResourceNames, gpuCl: defaultGPUDeviceClasses,
			want: slurmjob.GPUResources{"deviceclass.resource.kubernetes.io/gpu.nvidia.com", "nvidia.com/dra-gpu", "nvidia.com/gpu"}},
		{name: "a class without extendedResourceName has its implicit name", gpuCl: []string{"mig.nvidia.com"},
			want: slurmjob.GPUResources{"deviceclass.resource.kubernetes.io/mig.nvidia.com"}},
		{name: "a class not in the cluster adds nothing", names: []string{"nvidia.com/gpu"}, gpuCl: []string{"absent.example.com"},
			want: slurmjob.GPUResources{"nvidia.com/gpu"}},
		{name: "other classes are no GPUs", gpuCl: nil, names: []string{"amd.com/gpu", "nvidia.com/gpu", "amd.com/gpu"},
			want: slurmjob.GPUResources{"amd.com/gpu", "nvidia.com/gpu"}},
		{name: "nothing counts", want: slurmjob.GPUResources{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, gpuResources(tt.names, tt.gpuCl, classes))
		})
	}
}

func TestGPUArgs(t *testing.T) {
	a := Args{SlurmrestdURL: "http://x", SlurmUser: "slurm", JWTKeyFile: "k"}
	a.setDefaults()
	assert.Equal(t, []string{"nvidia.com/gpu"}, a.GPUResourceNames)
	assert.Equal(t, []string{"gpu.nvidia.com"}, a.GPUDeviceClasses)
	assert.NoError(t, a.validate())

	none := Args{SlurmrestdURL: "http://x", SlurmUser: "slurm", JWTKeyFile: "k", GPUResourceNames: []string{}, GPUDeviceClasses: []string{}}
	none.setDefaults()
	assert.Empty(t, none.GPUResourceNames, "an explicit empty list stays empty")
	assert.Empty(t, none.GPUDeviceClasses)

	bad := a
	bad.GPUResourceNames = []string{"not a name"}
	assert.ErrorContains(t, bad.validate(), `gpuResourceNames: "not a name"`)
	bad = a
	bad.GPUDeviceClasses = []string{"Bad_Class"}
	assert.ErrorContains(t, bad.validate(), `gpuDeviceClasses: "Bad_Class"`)
}

func TestDRAExtendedResourceOfAGPUClassBecomesGRES(t *testing.T) {
	pod := newPod("p", nil)
	pod.Spec.Containers[0].Resources.Requests = v1.ResourceList{"example.com/gpu": resource.MustParse("2")}
	pod.Spec.Containers[0].Resources.Limits = v1.ResourceList{"example.com/gpu": resource.MustParse("2")}
	f := newFixture(t, pod)
	classes := f.handle.informers.Resource().V1().DeviceClasses()
	f.plugin.gpus = gpuResourceSource{names: defaultGPUResourceNames, classes: defaultGPUDeviceClasses, lister: classes.Lister()}
	f.poll()

	// Before the class exists, example.com/gpu is some other extended resource.
	_, st := f.cycle(pod, nil)
	require.Equal(t, fwk.Unschedulable, st.Code())
	require.NotNil(t, f.slurm.LastSubmit)
	assert.Nil(t, f.slurm.LastSubmit.TresPerNode)

	other := newPod("q", nil)
	other.Spec.Containers[0].Resources = pod.Spec.Containers[0].Resources
	require.NoError(t, f.handle.informers.Core().V1().Pods().Informer().GetStore().Add(other))
	_, err := f.handle.cs.CoreV1().Pods("default").Create(t.Context(), other, metav1.CreateOptions{})
	require.NoError(t, err)
	c := &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "gpu.nvidia.com"}}
	c.Spec.ExtendedResourceName = ptr.To("example.com/gpu")
	require.NoError(t, classes.Informer().GetStore().Add(c))
	_, st = f.cycle(other, nil)
	require.Equal(t, fwk.Unschedulable, st.Code())
	require.NotNil(t, f.slurm.LastSubmit.TresPerNode)
	assert.Equal(t, "gres/gpu:2", *f.slurm.LastSubmit.TresPerNode)
}
