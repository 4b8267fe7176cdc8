package wellknown

// Names the node controller reads from and writes onto Kubernetes nodes (see the README's
// "Nodes: two-way state").
const (
	// DrainReasonAnnotation on a cordoned node carries the reason to give Slurm for the
	// drain, after the standard one (sanitised and capped like every reason we write).
	DrainReasonAnnotation = Domain + "/drain-reason"

	// SlurmDrainTaint is put on a node Slurm has drained or marked down, so Kubernetes
	// places no new pod there either. Its effect is configurable (NoSchedule by default).
	SlurmDrainTaint = Domain + "/slurm-drain"

	// SlurmNodeConditionPrefix starts the node condition types mirroring Slurm's node state
	// flags, one per flag: SlurmNodeIdle, SlurmNodeAllocated, SlurmNodeDown, SlurmNodeDrained,
	// SlurmNodeDraining, SlurmNodeNotResponding, ... Every condition with this prefix is ours.
	SlurmNodeConditionPrefix = "SlurmNode"

	// SlurmNodeDrainingCondition and SlurmNodeDrainedCondition split Slurm's DRAIN flag as
	// sinfo does: draining while jobs still hold the node, drained once none does.
	SlurmNodeDrainingCondition = SlurmNodeConditionPrefix + "Draining"
	SlurmNodeDrainedCondition  = SlurmNodeConditionPrefix + "Drained"
)

// Node event reasons, one per change the node controller makes (named unlike the
// conditions, so `kubectl describe node` never shows the same word for both).
const (
	EventDrainedInSlurm    = "DrainedInSlurm"
	EventUndrainedInSlurm  = "UndrainedInSlurm"
	EventSlurmTaintAdded   = "SlurmTaintAdded"
	EventSlurmTaintRemoved = "SlurmTaintRemoved"
	EventRemovedFromSlurm  = "RemovedFromSlurm"
	// EventSlurmNodeUpdateFailed: Slurm refused a drain or undrain; its words are kept.
	EventSlurmNodeUpdateFailed = "SlurmNodeUpdateFailed"
)
