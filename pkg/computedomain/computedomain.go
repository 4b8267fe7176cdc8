// Package computedomain is the shape of NVIDIA's ComputeDomain (resource.nvidia.com/v1beta1,
// the DRA driver for GPUs) as kubeslurm reads and writes it: the object it creates, its
// spec and status read back, and the channel claim a worker pod needs to join it. Objects
// are unstructured: NVIDIA's Go module is not served by the module proxy, and these few
// fields are all kubeslurm touches. Pure: no API calls.
package computedomain

import (
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GVK of NVIDIA's ComputeDomain, and its resource (for errors and RBAC).
var (
	GVK      = schema.GroupVersionKind{Group: "resource.nvidia.com", Version: "v1beta1", Kind: "ComputeDomain"}
	Resource = schema.GroupResource{Group: "resource.nvidia.com", Resource: "computedomains"}
)

// Values of the ComputeDomain's status.status (and of each node's status).
const (
	StatusReady    = "Ready"
	StatusNotReady = "NotReady"
	// DefaultAllocationMode is what NVIDIA's CRD defaults an empty allocationMode to.
	DefaultAllocationMode = "Single"
)

// ChannelClaimName is the name of the channel claim in a worker pod (pod.spec.resourceClaims
// and the containers' resources.claims).
const ChannelClaimName = "compute-domain-channel"

// Spec is the part of a ComputeDomain's spec kubeslurm sets. NVIDIA's CRD makes the whole
// spec immutable.
type Spec struct {
	// NumNodes is 0: the driver adds nodes as pods claiming the channel land on them.
	NumNodes int64
	// ResourceClaimTemplateName is the channel's template, which NVIDIA's driver creates.
	ResourceClaimTemplateName string
	// AllocationMode is Single or All.
	AllocationMode string
}

// normal is s with an empty allocation mode as NVIDIA's CRD defaults it.
func (s Spec) normal() Spec {
	if s.AllocationMode == "" {
		s.AllocationMode = DefaultAllocationMode
	}
	return s
}

// Equal compares two specs as the API server stores them (allocationMode defaulted).
func (s Spec) Equal(o Spec) bool { return s.normal() == o.normal() }

func (s Spec) String() string {
	s = s.normal()
	return fmt.Sprintf("numNodes=%d channel.resourceClaimTemplate.name=%s channel.allocationMode=%s",
		s.NumNodes, s.ResourceClaimTemplateName, s.AllocationMode)
}

// Empty is an unstructured ComputeDomain with only its kind set, to read one into.
func Empty() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(GVK)
	return u
}

// New is the ComputeDomain to create.
func New(namespace, name string, s Spec) *unstructured.Unstructured {
	s = s.normal()
	u := Empty()
	u.SetNamespace(namespace)
	u.SetName(name)
	u.Object["spec"] = map[string]any{
		"numNodes": s.NumNodes,
		"channel": map[string]any{
			"resourceClaimTemplate": map[string]any{"name": s.ResourceClaimTemplateName},
			"allocationMode":        s.AllocationMode,
		},
	}
	return u
}

// ReadSpec reads the spec of a ComputeDomain; a field of the wrong type is an error.
func ReadSpec(u *unstructured.Unstructured) (Spec, error) {
	var s Spec
	n, _, err := unstructured.NestedFieldNoCopy(u.Object, "spec", "numNodes")
	if err != nil {
		return s, fmt.Errorf("spec.numNodes: %w", err)
	}
	switch n := n.(type) {
	case nil:
	case int64:
		s.NumNodes = n
	case float64: // JSON decoded without the schema's integer hint
		s.NumNodes = int64(n)
	default:
		return s, fmt.Errorf("spec.numNodes is %T, not a number", n)
	}
	if s.ResourceClaimTemplateName, _, err = unstructured.NestedString(u.Object, "spec", "channel", "resourceClaimTemplate", "name"); err != nil {
		return s, fmt.Errorf("spec.channel.resourceClaimTemplate.name: %w", err)
	}
	if s.AllocationMode, _, err = unstructured.NestedString(u.Object, "spec", "channel", "allocationMode"); err != nil {
		return s, fmt.Errorf("spec.channel.allocationMode: %w", err)
	}
	return s.normal(), nil
}

// Status is what NVIDIA's driver reports of a ComputeDomain.
type Status struct {
	// Status is status.status: Ready, NotReady, or empty before the driver wrote it.
	Status string
	// Nodes are the names of status.nodes, sorted.
	Nodes []string
}

// ReadStatus reads a ComputeDomain's status; a field of the wrong type is an error.
func ReadStatus(u *unstructured.Unstructured) (Status, error) {
	var s Status
	var err error
	if s.Status, _, err = unstructured.NestedString(u.Object, "status", "status"); err != nil {
		return s, fmt.Errorf("status.status: %w", err)
	}
	raw, _, err := unstructured.NestedFieldNoCopy(u.Object, "status", "nodes")
	if err != nil {
		return s, fmt.Errorf("status.nodes: %w", err)
	}
	nodes, ok := raw.([]any)
	if raw != nil && !ok {
		return s, fmt.Errorf("status.nodes is %T, not a list", raw)
	}
	for i, n := range nodes {
		m, ok := n.(map[string]any)
		if !ok {
			return s, fmt.Errorf("status.nodes[%d] is %T, not an object", i, n)
		}
		name, ok := m["name"].(string)
		if !ok || name == "" {
			return s, fmt.Errorf("status.nodes[%d] has no name", i)
		}
		s.Nodes = append(s.Nodes, name)
	}
	slices.Sort(s.Nodes)
	return s, nil
}

// AddChannelClaim makes a pod claim the ComputeDomain's channel: a pod resource claim
// ChannelClaimName from the template, used by the named containers (every container when
// none is named). NVIDIA's driver then adds the pod's node to the domain. Adding it again
// changes nothing; a claim of that name from another source, or an unknown container, is
// an error and leaves the spec as it was.
func AddChannelClaim(spec *v1.PodSpec, template string, containers ...string) error {
	if template == "" {
		return fmt.Errorf("no ResourceClaimTemplate named for the ComputeDomain channel")
	}
	var targets []int
	for _, name := range containers {
		i := slices.IndexFunc(spec.Containers, func(c v1.Container) bool { return c.Name == name })
		if i < 0 {
			return fmt.Errorf("pod has no container %q to give the ComputeDomain channel", name)
		}
		targets = append(targets, i)
	}
	if len(containers) == 0 {
		for i := range spec.Containers {
			targets = append(targets, i)
		}
	}
	hasClaim := false
	for _, rc := range spec.ResourceClaims {
		if rc.Name != ChannelClaimName {
			continue
		}
		if rc.ResourceClaimTemplateName == nil || *rc.ResourceClaimTemplateName != template || rc.ResourceClaimName != nil {
			return fmt.Errorf("pod already has a resource claim %q that is not from ResourceClaimTemplate %s", ChannelClaimName, template)
		}
		hasClaim = true
	}
	if !hasClaim {
		spec.ResourceClaims = append(spec.ResourceClaims, v1.PodResourceClaim{Name: ChannelClaimName, ResourceClaimTemplateName: &template})
	}
	for _, i := range targets {
		claims := &spec.Containers[i].Resources.Claims
		if !slices.ContainsFunc(*claims, func(c v1.ResourceClaim) bool { return c.Name == ChannelClaimName }) {
			*claims = append(*claims, v1.ResourceClaim{Name: ChannelClaimName})
		}
	}
	return nil
}
