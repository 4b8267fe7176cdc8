package plugin

import (
	"fmt"
	"sort"

	v1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	resourcelisters "k8s.io/client-go/listers/resource/v1"

	"github.com/kubeslurm/kubeslurm/pkg/slurmjob"
)

// Defaults of Args.GPUResourceNames and Args.GPUDeviceClasses: NVIDIA's device plugin
// resource, and the DeviceClass NVIDIA's DRA driver installs for whole GPUs.
var (
	defaultGPUResourceNames = []string{string(slurmjob.GPUResource)}
	defaultGPUDeviceClasses = []string{"gpu.nvidia.com"}
)

// gpuResources are the extended resources whose requests become the job's gres/gpu: the
// named ones, and those by which pods ask DRA for devices of the GPU device classes
// (Kubernetes' DRA extended resources): a class's spec.extendedResourceName, and its
// implicit deviceclass.resource.kubernetes.io/<class>. Sorted, each once.
func gpuResources(names, gpuClasses []string, classes []*resourcev1.DeviceClass) slurmjob.GPUResources {
	out := sets.New[v1.ResourceName]()
	for _, n := range names {
		out.Insert(v1.ResourceName(n))
	}
	wanted := sets.New(gpuClasses...)
	for _, c := range classes {
		if !wanted.Has(c.Name) {
			continue
		}
		out.Insert(v1.ResourceName(resourcev1.ResourceDeviceClassPrefix + c.Name))
		if c.Spec.ExtendedResourceName != nil && *c.Spec.ExtendedResourceName != "" {
			out.Insert(v1.ResourceName(*c.Spec.ExtendedResourceName))
		}
	}
	list := out.UnsortedList()
	sort.Slice(list, func(i, j int) bool { return list[i] < list[j] })
	return list
}

// gpuResourceSource reads the device classes when asked, so a class made or changed later
// counts from the next pod on.
type gpuResourceSource struct {
	names, classes []string
	lister         resourcelisters.DeviceClassLister // nil: no device classes are read
}

func (s gpuResourceSource) resources() (slurmjob.GPUResources, error) {
	var classes []*resourcev1.DeviceClass
	if s.lister != nil && len(s.classes) > 0 {
		var err error
		if classes, err = s.lister.List(labels.Everything()); err != nil {
			return nil, fmt.Errorf("listing DeviceClasses: %w", err)
		}
	}
	return gpuResources(s.names, s.classes, classes), nil
}

// validateGPUArgs checks that the names could be extended resources and device classes.
func validateGPUArgs(names, classes []string) error {
	for _, n := range names {
		if errs := validation.IsQualifiedName(n); len(errs) > 0 {
			return fmt.Errorf("pluginConfig args: gpuResourceNames: %q: %v", n, errs)
		}
	}
	for _, c := range classes {
		if errs := validation.IsDNS1123Subdomain(c); len(errs) > 0 {
			return fmt.Errorf("pluginConfig args: gpuDeviceClasses: %q: %v", c, errs)
		}
	}
	return nil
}
