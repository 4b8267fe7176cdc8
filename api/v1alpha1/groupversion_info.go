// Package v1alpha1 is the slurm.kubeslurm.io API: the Slurm cluster itself as Kubernetes
// resources (docs/slurm-cluster.md).
// +kubebuilder:object:generate=true
// +groupName=slurm.kubeslurm.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of every kind here.
	GroupVersion = schema.GroupVersion{Group: "slurm.kubeslurm.io", Version: "v1alpha1"}
	// SchemeBuilder registers the kinds with a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}
	// AddToScheme adds the kinds to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
