package wellknown

// SlurmCluster objects (pkg/controller/slurmcluster).
const (
	// SlurmClusterLabel names the SlurmCluster on the Secrets and ConfigMap made for it.
	SlurmClusterLabel = "slurm.kubeslurm.io/cluster"
	// SlurmComponentLabel names the Slurm daemon of a pod (slurmctld, slurmd, ...).
	SlurmComponentLabel = "app.kubernetes.io/component"
	// SlurmConfigHashAnnotation on the rendered ConfigMap is the hash of its files: pods
	// that mount it will carry it too, so a change reaches them.
	SlurmConfigHashAnnotation = "slurm.kubeslurm.io/config-hash"
	// On slurmctld's pod, written by its container's script: the configuration hash
	// slurmctld runs, and the last one it refused with its error and fatal lines.
	SlurmctldConfigAnnotation        = "slurm.kubeslurm.io/slurmctld-config-hash"
	SlurmctldRefusedConfigAnnotation = "slurm.kubeslurm.io/slurmctld-refused-config-hash"
	SlurmctldRefusedReasonAnnotation = "slurm.kubeslurm.io/slurmctld-refused-reason"
	// WorkersStoppedAnnotationPrefix + a SlurmCluster's name: on a namespace being
	// deleted, when kubeslurm stopped that cluster's workers (their pods are gone).
	WorkersStoppedAnnotationPrefix = "workers-stopped.slurm.kubeslurm.io/"

	// Events on a SlurmCluster.
	EventSlurmConfigUpdated = "SlurmConfigUpdated"
	// EventSlurmConfigRefused: the spec did not render; the old ConfigMap stays.
	EventSlurmConfigRefused = "SlurmConfigRefused"
	EventSlurmKeyGenerated  = "SlurmKeyGenerated"
	// EventSlurmKeyRegenerated: a generated key Secret was deleted and a new key made.
	EventSlurmKeyRegenerated = "SlurmKeyRegenerated"
	EventSlurmKeyMissing     = "SlurmKeyMissing"
	// EventSlurmControllerReady and EventSlurmControllerNotReady: the slurmctld pod
	// became ready, or stopped being so.
	EventSlurmControllerReady    = "SlurmControllerReady"
	EventSlurmControllerNotReady = "SlurmControllerNotReady"
	// EventSlurmAccountingReady and EventSlurmAccountingNotReady (warning): slurmdbd
	// became ready, stopped being so, or cannot start (its password Secret is missing or
	// holds what slurmdbd.conf cannot).
	EventSlurmAccountingReady    = "SlurmAccountingReady"
	EventSlurmAccountingNotReady = "SlurmAccountingNotReady"
	// EventSlurmLoginNotReady (warning): a LoginSet's pods cannot start (the Secret of its
	// sssd.conf is missing).
	EventSlurmLoginNotReady = "SlurmLoginNotReady"
	// EventSlurmConfigApplied: slurmctld runs a new configuration.
	EventSlurmConfigApplied = "SlurmConfigApplied"
	// EventSlurmConfigRejected (warning): slurmctld refused a new configuration; it runs
	// the last applied one.
	EventSlurmConfigRejected = "SlurmConfigRejected"
	// EventSlurmWorkerRemoved: a slurmd worker pod was deleted (scale-in, node gone, update).
	EventSlurmWorkerRemoved = "SlurmWorkerRemoved"
	// EventSlurmWorkerNotRegistered (warning): a worker's slurmd ran while Slurm had no node
	// of its name; its pod was recreated.
	EventSlurmWorkerNotRegistered = "SlurmWorkerNotRegistered"
	// EventSlurmNodePruned: the Slurm node record of a worker lost without draining (DOWN,
	// not responding, no pod, no job, past its NodeSet's pruneDownAfterSeconds) was deleted.
	EventSlurmNodePruned = "SlurmNodePruned"
	// EventComputeDomainCreated: the ComputeDomain of spec.computeDomain was created.
	EventComputeDomainCreated = "ComputeDomainCreated"
	// EventComputeDomainCRDMissing: the API server does not serve NVIDIA's ComputeDomain.
	EventComputeDomainCRDMissing = "ComputeDomainCRDMissing"
	// EventComputeDomainMismatch: a ComputeDomain of that name is not ours, or its
	// (immutable) spec differs from spec.computeDomain; it is left as it is.
	EventComputeDomainMismatch = "ComputeDomainMismatch"
)
