package slurmcluster

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"

	slurmv1 "github.com/kubeslurm/kubeslurm/api/v1alpha1"
	"github.com/kubeslurm/kubeslurm/pkg/slurm"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

// tellWorkers has slurmctld send the configuration it now runs to every slurmd (scontrol
// reconfigure, through slurmrestd), once per applied configuration. Configless workers
// fetch their configuration when they start or when told to: slurmctld's start on a new
// configuration tells them nothing, so without this a worker keeps what it fetched (its
// gres.conf, cgroup.conf, timeouts) until its pod is replaced. slurmctld's script reads a
// new configuration in place by a reconfigure, which tells them already; this one covers a
// slurmctld that started on it (a new pod). The configuration is the one slurmctld runs, so
// its reconfigure (a re-exec of itself) has nothing to refuse. The first applied
// configuration is the one the workers fetched: nothing to send.
func (r *Reconciler) tellWorkers(ctx context.Context, c *slurmv1.SlurmCluster, sc slurm.Client, status *slurmv1.SlurmClusterStatus) error {
	applied := status.AppliedConfigHash
	switch {
	case applied == "" || status.WorkersConfigHash == applied:
		return nil
	case status.WorkersConfigHash == "":
		status.WorkersConfigHash = applied
		return nil
	}
	if err := sc.Reconfigure(ctx); err != nil {
		return fmt.Errorf("reconfigure for configuration %s: %w", applied, err)
	}
	r.Recorder.Eventf(c, nil, v1.EventTypeNormal, wellknown.EventSlurmWorkersReconfigured, "Reconfigure",
		"slurmctld sent configuration %s to every slurmd (was %s)", applied, status.WorkersConfigHash)
	status.WorkersConfigHash = applied
	return nil
}
