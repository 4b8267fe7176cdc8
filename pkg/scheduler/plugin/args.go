package plugin

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubeslurm/kubeslurm/pkg/slurm"
)

// Args are the plugin's pluginConfig args in the KubeSchedulerConfiguration.
type Args struct {
	// SlurmrestdURL is slurmrestd's base URL, e.g. http://slurmrestd:6820.
	SlurmrestdURL string `json:"slurmrestdURL"`
	// SlurmUser is the Slurm user the placeholder jobs are submitted as; it must be a
	// Slurm operator (admin_comment is an operator field).
	SlurmUser string `json:"slurmUser"`
	// JWTKeyFile is Slurm's auth/jwt key, from which the plugin mints its own tokens.
	JWTKeyFile string `json:"jwtKeyFile"`
	// PollInterval is how often the shared watcher reads Slurm's jobs and nodes (default 1s).
	PollInterval metav1.Duration `json:"pollInterval"`
	// ResyncPeriod re-activates every waiting pod as a safety net (default 30s).
	ResyncPeriod metav1.Duration `json:"resyncPeriod"`
	// FullListPeriod is how often every Slurm job is listed in full, to find placeholder
	// jobs this replica did not submit (default 5m). Between listings a poll reads only
	// the state of our own jobs.
	FullListPeriod metav1.Duration `json:"fullListPeriod"`
	// RequestTimeout bounds one slurmrestd request (default 15s).
	RequestTimeout metav1.Duration `json:"requestTimeout"`
	// ListTimeout bounds a listing of every Slurm job instead (default 3m): at 10,000
	// queued jobs it takes longer than RequestTimeout.
	ListTimeout metav1.Duration `json:"listTimeout"`
	// GroupPermitTimeout bounds how long a pod group's member, on its allocated node,
	// waits for the other members before all go back to the queue (default 60s).
	GroupPermitTimeout metav1.Duration `json:"groupPermitTimeout"`
	// GPUResourceNames are the extended resources (device plugins') whose requests become
	// the job's gres/gpu (default [nvidia.com/gpu]; an empty list set explicitly: none).
	GPUResourceNames []string `json:"gpuResourceNames"`
	// GPUDeviceClasses are the DRA DeviceClasses of GPUs: a pod requesting one's extended
	// resource (spec.extendedResourceName, or deviceclass.resource.kubernetes.io/<class>)
	// gets that many gres/gpu too (default [gpu.nvidia.com]; an empty list: none).
	GPUDeviceClasses []string `json:"gpuDeviceClasses"`
}

func (a *Args) setDefaults() {
	if a.PollInterval.Duration == 0 {
		a.PollInterval.Duration = time.Second
	}
	if a.ResyncPeriod.Duration == 0 {
		a.ResyncPeriod.Duration = 30 * time.Second
	}
	if a.FullListPeriod.Duration == 0 {
		a.FullListPeriod.Duration = slurm.DefaultFullListPeriod
	}
	if a.RequestTimeout.Duration == 0 {
		a.RequestTimeout.Duration = 15 * time.Second
	}
	if a.ListTimeout.Duration == 0 {
		a.ListTimeout.Duration = slurm.DefaultListTimeout
	}
	if a.GroupPermitTimeout.Duration == 0 {
		a.GroupPermitTimeout.Duration = defaultGroupPermitTimeout
	}
	if a.GPUResourceNames == nil {
		a.GPUResourceNames = defaultGPUResourceNames
	}
	if a.GPUDeviceClasses == nil {
		a.GPUDeviceClasses = defaultGPUDeviceClasses
	}
}

func (a *Args) validate() error {
	switch {
	case a.SlurmrestdURL == "":
		return fmt.Errorf("pluginConfig args: slurmrestdURL is required")
	case a.SlurmUser == "":
		return fmt.Errorf("pluginConfig args: slurmUser is required")
	case a.JWTKeyFile == "":
		return fmt.Errorf("pluginConfig args: jwtKeyFile is required")
	}
	return validateGPUArgs(a.GPUResourceNames, a.GPUDeviceClasses)
}
