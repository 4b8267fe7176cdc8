package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/kubeslurm/kubeslurm/pkg/controller/jobmapping"
	"github.com/kubeslurm/kubeslurm/pkg/dcgmjobmap"
)

type agentOptions struct {
	kubeconfig  string
	nodeName    string
	dir         string
	resync      time.Duration
	metricsAddr string
	probeAddr   string
}

// newAgentCommand is `kubeslurm-controller job-mapping-agent`: the DCGM job mapping agent
// of one node (pkg/controller/jobmapping), run by a DaemonSet on the GPU nodes.
func newAgentCommand() *cobra.Command {
	o := agentOptions{}
	cmd := &cobra.Command{
		Use:   "job-mapping-agent",
		Short: "Writes the DCGM exporter's HPC job mapping files of one node for the Slurm jobs of the pods bound to it",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runAgent(ctrl.SetupSignalHandler(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file (default: in-cluster config)")
	f.StringVar(&o.nodeName, "node-name", "", "the node this agent runs on (the pod's spec.nodeName)")
	f.StringVar(&o.dir, "dir", dcgmjobmap.DefaultDir, "the job mapping directory (dcgm-exporter's --hpc-job-mapping-dir)")
	f.DurationVar(&o.resync, "resync-period", time.Minute, "rewrite the directory this often even without a pod change")
	f.StringVar(&o.metricsAddr, "metrics-bind-address", "0", "metrics endpoint address (0 disables)")
	f.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "health probe address (0 disables)")
	_ = cmd.MarkFlagRequired("node-name")
	addKlogFlags(cmd)
	return cmd
}

func runAgent(ctx context.Context, o agentOptions) error {
	if _, err := dcgmjobmap.Scripts(o.dir); err != nil { // the same directories the scripts take
		return fmt.Errorf("--dir: %w", err)
	}
	mgr, err := newManager(o.kubeconfig, ctrl.Options{
		Metrics:                metricsserver.Options{BindAddress: o.metricsAddr},
		HealthProbeBindAddress: o.probeAddr,
		// The node's pods only, and nothing else is read.
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&v1.Pod{}: {Field: fields.OneTermEqualSelector("spec.nodeName", o.nodeName)},
		}},
	})
	if err != nil {
		return err
	}
	if err := (&jobmapping.Reconciler{
		Client: mgr.GetClient(), Node: o.nodeName, Dir: o.dir, Resync: o.resync,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the job mapping agent: %w", err)
	}
	klog.InfoS("Starting the DCGM job mapping agent", "node", o.nodeName, "dir", o.dir)
	return mgr.Start(ctx)
}
