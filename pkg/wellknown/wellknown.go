// Package wellknown declares, once, every name kubeslurm writes onto Kubernetes or Slurm
// objects: labels, annotations, condition types, event reasons and prefixes. The README's
// "Names on objects" table documents each of them.
package wellknown

const (
	// Domain is the API/annotation domain of the project.
	Domain = "kubeslurm.io"

	// SchedulerName is the schedulerName that hands a pod to kubeslurm.
	SchedulerName = "kubeslurm-scheduler"

	// PluginName is the scheduler framework plugin's registered name.
	PluginName = "KubeSlurm"

	// JobIDLabel carries the Slurm job id on the pod (label and annotation of the same key):
	// the label lets tools select pods by job, the annotation shows in `kubectl describe`.
	JobIDLabel = Domain + "/job-id"

	// Job state annotations, written by the controller from what Slurm reports.
	JobStateAnnotation  = Domain + "/job-state"
	JobReasonAnnotation = Domain + "/job-reason"
	JobNodesAnnotation  = Domain + "/job-nodes"

	// SlurmJobAnnotationPrefix prefixes the annotations users set to shape the Slurm job
	// (partition, account, qos, time-limit, job-name, priority, exclusive, ...).
	SlurmJobAnnotationPrefix = "slurmjob." + Domain + "/"

	// SlurmJobCondition is the pod condition type mirroring the Slurm job's state.
	SlurmJobCondition = "SlurmJob"

	// AdminCommentKey names our identity record inside a Slurm job's admin_comment, so a
	// job we submitted can be told from any other even if its user-set name changes.
	AdminCommentKey = Domain

	// ReasonPrefix starts every reason we write into Slurm, so we only undo what we did.
	ReasonPrefix = "kubeslurm: "
)

// Event reasons (CamelCase, as Kubernetes shows them).
const (
	EventSlurmJobSubmitted       = "SlurmJobSubmitted"
	EventSlurmJobSubmitFailed    = "SlurmJobSubmitFailed"
	EventInvalidSlurmJobSpec     = "InvalidSlurmJobSpec"
	EventSlurmJobAllocated       = "SlurmJobAllocated"
	EventSlurmJobPending         = "SlurmJobPending"
	EventSlurmJobEnded           = "SlurmJobEnded"
	EventSlurmJobCancelled       = "SlurmJobCancelled"
	EventSlurmAllocationUnusable = "SlurmAllocationUnusable"
)
