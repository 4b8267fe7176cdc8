package wellknown

// Names the pod controller writes onto pods (see the README's "Names kubeslurm writes").
const (
	// Job times, RFC 3339, as Slurm reports them.
	JobStartTimeAnnotation = Domain + "/job-start-time"
	JobEndTimeAnnotation   = Domain + "/job-end-time"

	// JobRankAnnotation is a group member's rank in its job: member i runs on node i of
	// the allocation (kubeslurm.io/job-nodes).
	JobRankAnnotation = Domain + "/job-rank"

	// GPUIndicesAnnotation lists the GPU indices Slurm allocated the pod's job on the pod's
	// node ("0,1"), from the job's gres_detail: the GPUs Slurm (and the DCGM exporter's job
	// mapping) count as the pod's.
	GPUIndicesAnnotation = Domain + "/gpu-indices"

	// AllowEvictionAnnotation set to "true" on a pod opts it out of the eviction guard: a
	// drain may then evict it while its Slurm job runs.
	AllowEvictionAnnotation = Domain + "/allow-eviction"

	// DisruptionTargetReason is the reason of the DisruptionTarget condition set on a pod
	// just before the controller deletes it because its Slurm job ended, so that a Job's
	// podFailurePolicy can tell that apart from an application failure.
	DisruptionTargetReason = "TerminationBySlurm"
)

// Pod event reasons for a job that ended in Slurm, by cause.
const (
	EventSlurmJobTimeLimit = "SlurmJobTimeLimit"
	EventSlurmJobPreempted = "SlurmJobPreempted"
	EventSlurmJobNodeFail  = "SlurmJobNodeFail"
	EventSlurmJobRequeued  = "SlurmJobRequeued"
	// EventSlurmJobReleased: the pod ended, so its job was cancelled to free its nodes.
	EventSlurmJobReleased = "SlurmJobReleased"
	// EventNodeNotReady: the pod's node stayed NotReady past the grace period.
	EventNodeNotReady = "SlurmJobNodeNotReady"
	// EventSlurmJobGroupMemberEnded: another member of the pod's group failed or was
	// deleted after the group's job started, so the whole group ends.
	EventSlurmJobGroupMemberEnded = "SlurmJobGroupMemberEnded"
	// EventSlurmGPUIndicesMissing: the job holds gres/gpu on the pod's node but Slurm names
	// no device index for it (count-only GRES), so the pod cannot be told its GPUs.
	EventSlurmGPUIndicesMissing = "SlurmGPUIndicesMissing"
)
