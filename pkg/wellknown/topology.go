package wellknown

// Names of the topology controller (pkg/controller/topology); see docs/topology.md.
const (
	// TopologyBlockAnnotation on a node names its Slurm block explicitly (it wins over the
	// label keys); on a pod, the controller writes the block of the node it runs on.
	TopologyBlockAnnotation = Domain + "/topology-block"

	// EventTopologyBlockChanged: the node's block in Slurm's topology changed (or was first set).
	EventTopologyBlockChanged = "TopologyBlockChanged"
	// EventInvalidTopologyBlock: the node's label or annotation is no usable block name; the
	// node is put in the default block.
	EventInvalidTopologyBlock = "InvalidTopologyBlock"
)
