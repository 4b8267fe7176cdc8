package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SlurmClusterSpec is one Slurm cluster: the daemons' sections and the configuration they
// share. One object, not one kind per daemon, because slurm.conf, the auth keys and the
// partitions are one thing every daemon reads (docs/slurm-cluster.md, "API shape").
type SlurmClusterSpec struct {
	// ClusterName is slurm.conf's ClusterName (also the accounting cluster name).
	// Empty: the object's name.
	// +kubebuilder:validation:MaxLength=40
	// +kubebuilder:validation:Pattern=`^[a-z0-9][a-z0-9_-]*$`
	// +optional
	ClusterName string `json:"clusterName,omitempty"`

	// Auth names the keys of auth/slurm and auth/jwt. A key without a reference is
	// generated once into a Secret owned by this object, and never rotated.
	// +optional
	Auth AuthSpec `json:"auth,omitempty"`

	// Controller is slurmctld.
	// +optional
	Controller ControllerSpec `json:"controller,omitempty"`

	// NodeSets are groups of slurmd workers, each registering as dynamic nodes with the
	// feature of its name (a Slurm NodeSet of that name holds them).
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	// +optional
	NodeSets []NodeSetSpec `json:"nodeSets,omitempty"`

	// Partitions of slurm.conf. None: one default partition `main` over all nodes.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	// +optional
	Partitions []PartitionSpec `json:"partitions,omitempty"`

	// Accounting is slurmdbd; absent: no accounting storage.
	// +optional
	Accounting *AccountingSpec `json:"accounting,omitempty"`

	// RestAPI is slurmrestd; absent: none.
	// +optional
	RestAPI *RestAPISpec `json:"restApi,omitempty"`

	// LoginSets are pods where users run sbatch and squeue.
	// +listType=map
	// +listMapKey=name
	// +optional
	LoginSets []LoginSetSpec `json:"loginSets,omitempty"`

	// ProcessTracking is how slurmd tracks and confines job processes: Cgroup (default:
	// proctrack/cgroup, task/cgroup and task/affinity, cgroup.conf's CgroupPlugin
	// autodetected) or LinuxProc (proctrack/linuxproc, task/affinity, CgroupPlugin=disabled:
	// for workers whose pods get no writable cgroup filesystem; nothing confines a job's
	// memory or devices then).
	// +kubebuilder:validation:Enum=Cgroup;LinuxProc
	// +kubebuilder:default=Cgroup
	// +optional
	ProcessTracking ProcessTracking `json:"processTracking,omitempty"`

	// DefMemPerCPU is slurm.conf's DefMemPerCPU, in MiB: the memory a job that asks for
	// none gets per CPU it is allocated (a pod with no memory request, an sbatch job without
	// --mem). Slurm (SelectTypeParameters=CR_Core_Memory) would otherwise give such a job all
	// of each node's memory, so no other job could share its nodes. 0 leaves it out; so does
	// a DefMemPerCPU, DefMemPerNode or DefMemPerGPU line of extraConfig, which replaces it.
	// +kubebuilder:default=1024
	// +kubebuilder:validation:Minimum=0
	// +optional
	DefMemPerCPU *int64 `json:"defMemPerCPU,omitempty"`

	// ExtraConfig is appended to slurm.conf: one `Key=Value [Key=Value...]` line per line.
	// Each line is validated (docs/slurm-cluster.md, "Extra configuration"): keys kubeslurm
	// owns are refused, and no value can start another line or key.
	// +kubebuilder:validation:MaxLength=65536
	// +optional
	ExtraConfig string `json:"extraConfig,omitempty"`

	// ExtraConfigFrom names a key of a ConfigMap in the cluster's namespace whose text is
	// appended to slurm.conf after extraConfig, validated the same way: a site's slurm.conf
	// lines kept apart from the SlurmCluster (another team's, or another tool's). A change
	// of that text is a change of the configuration, taken in place like a spec change. A
	// missing ConfigMap or key (unless optional) is refused like an invalid spec: the last
	// valid configuration stays.
	// +optional
	ExtraConfigFrom *corev1.ConfigMapKeySelector `json:"extraConfigFrom,omitempty"`

	// CgroupExtraConfig is appended to cgroup.conf, validated like ExtraConfig.
	// +kubebuilder:validation:MaxLength=16384
	// +optional
	CgroupExtraConfig string `json:"cgroupExtraConfig,omitempty"`

	// Topology places the workers in Slurm blocks (topology/block) by their Kubernetes
	// nodes' labels: the ConfigMap gets a topology.yaml. docs/topology.md, "In a
	// SlurmCluster".
	// +optional
	Topology *TopologySpec `json:"topology,omitempty"`

	// ComputeDomain is one NVIDIA NVLink ComputeDomain (resource.nvidia.com, NVIDIA's DRA
	// driver for GPUs) for the cluster's workers, and Slurm's switch/nvidia_imex plugin.
	// docs/topology.md, "ComputeDomains".
	// +optional
	ComputeDomain *ComputeDomainSpec `json:"computeDomain,omitempty"`

	// DCGMJobMapping has the workers' Slurm prolog and epilog keep NVIDIA DCGM exporter's
	// HPC job mapping on the GPU nodes: which Slurm job holds which GPU, so the exporter
	// labels each GPU's metrics with its job. Needs a NodeSet with gpus. docs/gpus.md.
	// +optional
	DCGMJobMapping *DCGMJobMappingSpec `json:"dcgmJobMapping,omitempty"`
}

// DCGMJobMappingSpec: slurm.conf gets Prolog, Epilog and PrologFlags=Alloc for kubeslurm's
// scripts (shipped to the workers by slurmctld with the configuration), and the workers of
// the NodeSets with gpus mount the node's mapping directory.
type DCGMJobMappingSpec struct {
	// Dir is the mapping directory on the nodes: the DCGM exporter's
	// --hpc-job-mapping-dir (the GPU operator's dcgmExporter.hpcJobMapping.directory).
	// +kubebuilder:default="/var/lib/dcgm-exporter/job-mapping"
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:Pattern=`^/[A-Za-z0-9._/-]*$`
	// +optional
	Dir string `json:"dir,omitempty"`
}

// ComputeDomainAllocationMode is how many IMEX channels a worker's claim gets.
// +kubebuilder:validation:Enum=Single;All
type ComputeDomainAllocationMode string

const (
	ComputeDomainSingleChannel ComputeDomainAllocationMode = "Single"
	ComputeDomainAllChannels   ComputeDomainAllocationMode = "All"
)

// ComputeDomainSpec is the ComputeDomain kubeslurm keeps in the cluster's namespace, with
// numNodes 0: NVIDIA's driver adds a node when a pod claiming the domain's channel runs
// there and removes it when the last such pod is gone. The ComputeDomain's spec is
// immutable, so a later change of name, template or mode here is reported, not applied.
type ComputeDomainSpec struct {
	// Enabled makes the controller keep the ComputeDomain and renders
	// SwitchType=switch/nvidia_imex into slurm.conf.
	Enabled bool `json:"enabled"`
	// Name of the ComputeDomain. Empty: <cluster>-compute-domain.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`
	// +optional
	Name string `json:"name,omitempty"`
	// ResourceClaimTemplateName is the channel's ResourceClaimTemplate, which NVIDIA's
	// driver creates and the workers' pods claim. Empty: <cluster>-compute-domain-channel.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$`
	// +optional
	ResourceClaimTemplateName string `json:"resourceClaimTemplateName,omitempty"`
	// AllocationMode: Single (default) IMEX channel per claim, or All.
	// +kubebuilder:default=Single
	// +optional
	AllocationMode ComputeDomainAllocationMode `json:"allocationMode,omitempty"`
}

// AuthSpec references the keys of auth/slurm and auth/jwt.
type AuthSpec struct {
	// SlurmKeyRef is the auth/slurm key (slurm.key). Absent: generated.
	// +optional
	SlurmKeyRef *corev1.SecretKeySelector `json:"slurmKeyRef,omitempty"`
	// JWTKeyRef is the auth/jwt HS256 key. Absent: generated.
	// +optional
	JWTKeyRef *corev1.SecretKeySelector `json:"jwtKeyRef,omitempty"`
}

// ControllerSpec is slurmctld: one pod with its state on a volume claim.
type ControllerSpec struct {
	// Image of slurmctld.
	// +optional
	Image string `json:"image,omitempty"`
	// Port slurmctld listens on (SlurmctldPort).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +kubebuilder:default=6817
	// +optional
	Port int32 `json:"port,omitempty"`
	// MaxNodeCount bounds the dynamic nodes slurmctld keeps room for.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65536
	// +kubebuilder:default=1024
	// +optional
	MaxNodeCount int32 `json:"maxNodeCount,omitempty"`
	// StateStorage is the claim that holds StateSaveLocation across pod restarts.
	// +optional
	StateStorage StorageSpec `json:"stateStorage,omitempty"`
	// ReconfigureTimeoutSeconds bounds a reconfigure: a new slurmctld process that has
	// not taken over by then (one hung on the new configuration, while the running one
	// answers no request) is killed, and slurmctld goes on with the configuration before,
	// which is reported as refused. It bounds a start too: a slurmctld that has not
	// answered a ping by then is killed, and started on the configuration before. A change
	// restarts slurmctld's pod (jobs kept).
	// +kubebuilder:validation:Minimum=10
	// +kubebuilder:validation:Maximum=3600
	// +kubebuilder:default=120
	// +optional
	ReconfigureTimeoutSeconds int32 `json:"reconfigureTimeoutSeconds,omitempty"`
	// Resources of the slurmctld container.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`
}

// StorageSpec is a persistent volume claim's size and class.
type StorageSpec struct {
	// +optional
	StorageClassName *string `json:"storageClassName,omitempty"`
	// +optional
	Size string `json:"size,omitempty"`
}

// ProcessTracking is how slurmd tracks job processes.
type ProcessTracking string

const (
	ProcessTrackingCgroup    ProcessTracking = "Cgroup"
	ProcessTrackingLinuxProc ProcessTracking = "LinuxProc"
)

// NodeSetMode is how a NodeSet places its workers.
// +kubebuilder:validation:Enum=DaemonSet;Replicas
type NodeSetMode string

const (
	// NodeSetDaemonSet runs one worker per matching Kubernetes node, named after it.
	NodeSetDaemonSet NodeSetMode = "DaemonSet"
	// NodeSetReplicas runs a number of workers with ordinal names.
	NodeSetReplicas NodeSetMode = "Replicas"
)

// NodeSetGPUs gives a NodeSet's workers the GPUs of their Kubernetes nodes as Slurm GRES.
type NodeSetGPUs struct {
	// ResourceName is the node resource counted as its GPUs (the device plugin's, in the
	// node's allocatable): each worker registers Gres=gpu:<count>, and none when the count
	// is 0.
	// +kubebuilder:default="nvidia.com/gpu"
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`
	// +optional
	ResourceName string `json:"resourceName,omitempty"`
	// Type is the GRES type (Gres=gpu:<type>:<count>); it must be the type slurmd detects
	// (e.g. h100). Empty: untyped.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_.-]+$`
	// +optional
	Type string `json:"type,omitempty"`
}

// NodeSetSpec is a group of slurmd workers.
// +kubebuilder:validation:XValidation:rule="!has(self.gpus) || !has(self.mode) || self.mode == 'DaemonSet'",message="gpus needs mode DaemonSet: a Replicas worker has no node to count GPUs on"
type NodeSetSpec struct {
	// Name of the set; also the Slurm feature and NodeSet name of its nodes.
	// +kubebuilder:validation:MaxLength=40
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`
	Name string `json:"name"`
	// Mode: DaemonSet (default) or Replicas.
	// +kubebuilder:default=DaemonSet
	// +optional
	Mode NodeSetMode `json:"mode,omitempty"`
	// Replicas in Replicas mode.
	// +kubebuilder:validation:Minimum=0
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`
	// NodeSelector picks the Kubernetes nodes of the workers.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// Features are extra Slurm features of the nodes.
	// +optional
	Features []string `json:"features,omitempty"`
	// Image of slurmd.
	// +optional
	Image string `json:"image,omitempty"`
	// DrainSeconds bounds how long a worker pod being deleted keeps its Slurm node drained
	// and waits for its jobs to end before slurmd stops (the pod's
	// terminationGracePeriodSeconds).
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:default=3600
	// +optional
	DrainSeconds *int64 `json:"drainSeconds,omitempty"`
	// PruneDownAfterSeconds: how long a Slurm node of this set may stay DOWN and not
	// responding, with no worker pod and no job, before the controller deletes its record
	// (a worker lost without draining: pod force-deleted, Kubernetes node gone, slurmd
	// killed). Counted from the time Slurm last set the node's reason. 0 never prunes.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:default=600
	// +optional
	PruneDownAfterSeconds *int64 `json:"pruneDownAfterSeconds,omitempty"`
	// Port slurmd listens on. Another than 6818 where the workers share their node's
	// network with another slurmd (host network).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +optional
	Port *int32 `json:"port,omitempty"`
	// GPUs: the workers register their node's GPUs as GRES (gres.conf AutoDetect=nvidia
	// finds the devices). DaemonSet mode only. Absent: no GRES.
	// +optional
	GPUs *NodeSetGPUs `json:"gpus,omitempty"`
	// NodeOptions are node parameters the workers register with (slurmd -Z --conf), over
	// what slurmd detects: the hardware Slurm may hand out (CPUs, Boards, SocketsPerBoard,
	// Sockets, CoresPerSocket, ThreadsPerCore, RealMemory, TmpDisk), what it keeps for the
	// node's own daemons, such as the kubelet (CoreSpecCount, CpuSpecList, MemSpecLimit),
	// and Weight. Keys as in slurm.conf's node lines, case-insensitive; other keys are
	// refused (features, GRES, port and topology come from their own fields). Declaring more
	// than the hardware has drains the node unless SlurmdParameters=config_overrides.
	// +optional
	NodeOptions map[string]string `json:"nodeOptions,omitempty"`
	// Storage the workers' jobs see (shared home and project filesystems: NFS, a
	// ReadWriteMany claim, ...), mounted into the slurmd container, where jobs run.
	PodStorage `json:",inline"`
}

// PodStorage is volumes of the user's, and where the daemon's container mounts them.
// Names and paths kubeslurm uses for its own volumes are refused (ConfigValid=False).
type PodStorage struct {
	// Volumes as in a pod's spec. Not checked field by field here (a Volume's full schema,
	// once per section, would take the CRD past what `kubectl apply` can store); the API
	// server checks them in the pods kubeslurm makes.
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:pruning:PreserveUnknownFields
	// +optional
	Volumes []corev1.Volume `json:"volumes,omitempty"`
	// +listType=map
	// +listMapKey=mountPath
	// +optional
	VolumeMounts []corev1.VolumeMount `json:"volumeMounts,omitempty"`
}

// GPUResourceName is the node resource counted as the set's GPUs.
func (g *NodeSetGPUs) GPUResourceName() string {
	if g.ResourceName == "" {
		return "nvidia.com/gpu"
	}
	return g.ResourceName
}

// PartitionSpec is one PartitionName line.
type PartitionSpec struct {
	// Name of the partition.
	// +kubebuilder:validation:MaxLength=40
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_-]+$`
	Name string `json:"name"`
	// NodeSets whose nodes the partition holds; empty: all nodes.
	// +optional
	NodeSets []string `json:"nodeSets,omitempty"`
	// Default marks the default partition (at most one).
	// +optional
	Default bool `json:"default,omitempty"`
	// MaxTime of jobs: UNLIMITED or a Slurm time (e.g. 1-00:00:00). Empty: UNLIMITED.
	// +optional
	MaxTime string `json:"maxTime,omitempty"`
	// State: UP (default), DOWN, DRAIN or INACTIVE.
	// +kubebuilder:validation:Enum=UP;DOWN;DRAIN;INACTIVE
	// +optional
	State string `json:"state,omitempty"`
	// PriorityTier of the partition's jobs.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=65533
	// +optional
	PriorityTier *int32 `json:"priorityTier,omitempty"`
	// Options are further partition parameters (e.g. DefMemPerCPU: "512"), validated like
	// ExtraConfig values.
	// +optional
	Options map[string]string `json:"options,omitempty"`
}

// AccountingSpec is slurmdbd and the database it stores into. kubeslurm runs slurmdbd (a
// Deployment of one pod and the Service <name>-accounting); the database is the user's.
// The controller never reads the password: slurmdbd's pod adds it to slurmdbd.conf when it
// starts (docs/slurm-cluster.md, "Accounting").
type AccountingSpec struct {
	// Image of slurmdbd.
	// +optional
	Image string `json:"image,omitempty"`
	// Port slurmdbd listens on.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +kubebuilder:default=6819
	// +optional
	Port int32 `json:"port,omitempty"`
	// Database slurmdbd stores into (MySQL or MariaDB).
	Database DatabaseSpec `json:"database"`
	// ExtraConfig is appended to slurmdbd.conf, validated like spec.extraConfig; the keys
	// kubeslurm sets (authentication, DbdHost/DbdPort, SlurmUser, PidFile, PluginDir and the
	// Storage* keys of spec.accounting.database) are refused.
	// +kubebuilder:validation:MaxLength=16384
	// +optional
	ExtraConfig string `json:"extraConfig,omitempty"`
	// Resources of the slurmdbd container.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`
}

// DatabaseSpec is a MySQL/MariaDB server.
type DatabaseSpec struct {
	// Host of the database server: a name or an IP address. "localhost" would make the
	// MySQL client use a Unix socket in slurmdbd's pod; give 127.0.0.1 for a server on the
	// pod's own host network.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Host string `json:"host"`
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +kubebuilder:default=3306
	// +optional
	Port int32 `json:"port,omitempty"`
	// Name of the database. Empty: slurm_acct_db.
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_$]+$`
	// +optional
	Name string `json:"name,omitempty"`
	// User slurmdbd logs in as.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=80
	User string `json:"user"`
	// PasswordRef is the user's password: a Secret's key, mounted into slurmdbd's pod
	// alone. Printable ASCII without space, '#', '"' or '\' (what slurmdbd.conf can hold
	// unquoted); trailing newlines are dropped.
	PasswordRef corev1.SecretKeySelector `json:"passwordRef"`
}

// RestAPISpec is slurmrestd, a Deployment and a Service, authenticating with JWT.
type RestAPISpec struct {
	// +optional
	Image string `json:"image,omitempty"`
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:default=1
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +kubebuilder:default=6820
	// +optional
	Port int32 `json:"port,omitempty"`
}

// TopologySpec derives Slurm's block topology from the workers' nodes.
type TopologySpec struct {
	// LabelKeys are node labels whose value names a worker's block, the first present wins;
	// the node annotation kubeslurm.io/topology-block, when set, wins over them.
	// Default: nvidia.com/gpu.clique (the NVLink domain, set by NVIDIA's GPU operator).
	// +kubebuilder:validation:MaxItems=8
	// +optional
	LabelKeys []string `json:"labelKeys,omitempty"`
	// DefaultBlock holds the workers whose node has none of the labels, and Replicas-mode
	// workers (under topology/block a node outside every block runs no job). Default:
	// unlabelled.
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`
	// +optional
	DefaultBlock string `json:"defaultBlock,omitempty"`
	// BlockSizes are Slurm's block_sizes, the base block size first (e.g. the nodes of one
	// NVLink domain), each the previous one times a power of two. Required: slurmctld
	// refuses to start on blocks none of whose nodes has registered yet (workers are
	// dynamic nodes) unless they are set.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	BlockSizes []int32 `json:"blockSizes"`
}

// LoginSetSpec is a set of login pods (sackd, configless).
// +kubebuilder:validation:XValidation:rule="!has(self.ssh) || has(self.sssdConfRef)",message="ssh needs sssdConfRef: the login image has no users of its own to log in as"
type LoginSetSpec struct {
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`
	Name string `json:"name"`
	// +optional
	Image string `json:"image,omitempty"`
	// +kubebuilder:validation:Minimum=0
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`
	// SSSDConfRef is the users' sssd.conf, if identities come from a directory: each login
	// pod then runs sssd with it beside sackd, and the cluster trusts the user names and
	// groups the login pods send (AuthInfo=use_client_ids), so slurmctld and the workers
	// need no directory.
	// +optional
	SSSDConfRef *corev1.SecretKeySelector `json:"sssdConfRef,omitempty"`
	// SSH runs OpenSSH's sshd in each login pod, so the directory's users log in with ssh
	// (passwords through PAM and sssd, or public keys the directory holds) behind a Service
	// of the LoginSet. Needs sssdConfRef: the image has no users of its own to log in as.
	// +optional
	SSH *LoginSSHSpec `json:"ssh,omitempty"`
	// Storage the users see in the login pods (their homes, the filesystems the workers
	// mount), mounted into the login and sshd containers.
	PodStorage `json:",inline"`
}

// LoginSSHSpec is a LoginSet's ssh access.
type LoginSSHSpec struct {
	// Port sshd listens on in the login pods, and the Service's port. Default 22.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +optional
	Port int32 `json:"port,omitempty"`
	// ServiceType of the LoginSet's Service <cluster>-login-<set>. Default ClusterIP.
	// +kubebuilder:validation:Enum=ClusterIP;NodePort;LoadBalancer
	// +optional
	ServiceType corev1.ServiceType `json:"serviceType,omitempty"`
}

// Condition types of a SlurmCluster.
const (
	// ConditionConfigValid: the spec renders to a configuration kubeslurm accepts. False keeps
	// the last valid configuration in place.
	ConditionConfigValid = "ConfigValid"
	// ConditionKeysReady: the auth/slurm and auth/jwt keys exist.
	ConditionKeysReady = "KeysReady"
	// ConditionControllerReady: the slurmctld pod is running and accepts connections.
	ConditionControllerReady = "ControllerReady"
	// ConditionConfigApplied: slurmctld runs the configuration in the ConfigMap. False while
	// it is told to read a new one, or cannot (reason RejectedBySlurmctld: slurmctld refused
	// it and runs on with the last applied one; the message says why).
	ConditionConfigApplied = "ConfigApplied"
	// ConditionComputeDomainReady: the ComputeDomain exists as the spec asks and NVIDIA's
	// driver reports it Ready. Absent while spec.computeDomain is not enabled.
	ConditionComputeDomainReady = "ComputeDomainReady"
	// ConditionAccountingReady: slurmdbd runs and accepts connections. Absent while
	// spec.accounting is not set.
	ConditionAccountingReady = "AccountingReady"
	// ConditionLoginsReady: every login pod of every LoginSet is ready (reason
	// SSSDConfigMissing: a LoginSet's sssd.conf Secret does not exist). Absent without
	// LoginSets.
	ConditionLoginsReady = "LoginsReady"
)

// ComputeDomainStatus is the cluster's ComputeDomain as NVIDIA's driver reports it.
type ComputeDomainStatus struct {
	// Name of the ComputeDomain.
	Name string `json:"name"`
	// ResourceClaimTemplateName is the channel template the workers' pods claim.
	ResourceClaimTemplateName string `json:"resourceClaimTemplateName"`
	// Status is the ComputeDomain's status.status (Ready, NotReady; empty before the
	// driver wrote it).
	// +optional
	Status string `json:"status,omitempty"`
	// NodeCount is the number of nodes in the domain.
	NodeCount int32 `json:"nodeCount"`
	// Nodes in the domain (its status.nodes), sorted.
	// +optional
	Nodes []string `json:"nodes,omitempty"`
}

// NodeStateSummary counts the cluster's Slurm nodes by state.
type NodeStateSummary struct {
	Idle      int32 `json:"idle"`
	Allocated int32 `json:"allocated"`
	Mixed     int32 `json:"mixed"`
	Drained   int32 `json:"drained"`
	Down      int32 `json:"down"`
}

// SlurmClusterStatus is what the controller observed and did.
type SlurmClusterStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: ConfigValid, KeysReady, ControllerReady, ConfigApplied, ComputeDomainReady,
	// AccountingReady.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// ConfigMap holding the rendered configuration.
	// +optional
	ConfigMap string `json:"configMap,omitempty"`
	// ConfigHash is the hash of the configuration in ConfigMap.
	// +optional
	ConfigHash string `json:"configHash,omitempty"`
	// ConfigUpdateTime is when ConfigMap last changed.
	// +optional
	ConfigUpdateTime *metav1.Time `json:"configUpdateTime,omitempty"`
	// AppliedConfigHash is the configuration slurmctld last ran ready (as its pod's script
	// reported); ConfigMap <name>-slurm-config-applied keeps its files.
	// +optional
	AppliedConfigHash string `json:"appliedConfigHash,omitempty"`
	// RejectedConfigHash is a configuration slurmctld refused to read: while it is
	// ConfigHash, slurmctld runs on with AppliedConfigHash and the rejected one is not retried.
	// Cleared once slurmctld runs ConfigHash.
	// +optional
	RejectedConfigHash string `json:"rejectedConfigHash,omitempty"`
	// LastReconfigureTime is when slurmctld last took a new configuration.
	// +optional
	LastReconfigureTime *metav1.Time `json:"lastReconfigureTime,omitempty"`
	// DesiredWorkers is the number of slurmd workers the NodeSets ask for (Replicas mode;
	// DaemonSet-mode sets count the matching nodes).
	// +optional
	DesiredWorkers int32 `json:"desiredWorkers"`
	// ReadyWorkers is the number of worker pods whose slurmd is ready (accepts
	// connections on its port). Whether it registered is Slurm's to say (sinfo).
	// +optional
	ReadyWorkers int32 `json:"readyWorkers"`
	// Nodes counts Slurm nodes by state.
	// +optional
	Nodes NodeStateSummary `json:"nodes,omitempty"`
	// NodeSummary is Nodes in one line for kubectl get (e.g. "idle=3 alloc=1").
	// +optional
	NodeSummary string `json:"nodeSummary,omitempty"`
	// ComputeDomain is the ComputeDomain of spec.computeDomain as last read.
	// +optional
	ComputeDomain *ComputeDomainStatus `json:"computeDomain,omitempty"`
}

// SlurmCluster is a Slurm cluster run by kubeslurm.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=slurm
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.clusterName`,priority=1
// +kubebuilder:printcolumn:name="Controller",type=string,JSONPath=`.status.conditions[?(@.type=="ControllerReady")].status`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyWorkers`
// +kubebuilder:printcolumn:name="Workers",type=integer,JSONPath=`.status.desiredWorkers`
// +kubebuilder:printcolumn:name="Nodes",type=string,JSONPath=`.status.nodeSummary`
// +kubebuilder:printcolumn:name="Config",type=string,JSONPath=`.status.conditions[?(@.type=="ConfigValid")].status`
// +kubebuilder:printcolumn:name="Keys",type=string,JSONPath=`.status.conditions[?(@.type=="KeysReady")].status`
// +kubebuilder:printcolumn:name="Accounting",type=string,JSONPath=`.status.conditions[?(@.type=="AccountingReady")].status`,priority=1
// +kubebuilder:printcolumn:name="Logins",type=string,JSONPath=`.status.conditions[?(@.type=="LoginsReady")].status`,priority=1
// +kubebuilder:printcolumn:name="Domain",type=integer,JSONPath=`.status.computeDomain.nodeCount`
// +kubebuilder:printcolumn:name="Reconfigured",type=date,JSONPath=`.status.lastReconfigureTime`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type SlurmCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   SlurmClusterSpec   `json:"spec,omitempty"`
	Status SlurmClusterStatus `json:"status,omitempty"`
}

// SlurmClusterList is a list of SlurmClusters.
// +kubebuilder:object:root=true
type SlurmClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SlurmCluster `json:"items"`
}

func init() {
	SchemeBuilder.Register(&SlurmCluster{}, &SlurmClusterList{})
}

// SlurmClusterName is ClusterName, defaulted to the object's name.
func (c *SlurmCluster) SlurmClusterName() string {
	if c.Spec.ClusterName != "" {
		return c.Spec.ClusterName
	}
	return c.Name
}

// ComputeDomainEnabled says whether spec.computeDomain asks for a ComputeDomain.
func (c *SlurmCluster) ComputeDomainEnabled() bool {
	return c.Spec.ComputeDomain != nil && c.Spec.ComputeDomain.Enabled
}
