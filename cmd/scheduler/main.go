// Command kubeslurm-scheduler is kube-scheduler with the KubeSlurm plugin compiled in.
// Every kube-scheduler flag works; the plugin is enabled by a profile in --config
// (see manifests/scheduler-config.yaml).
package main

import (
	"fmt"
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	"k8s.io/component-base/metrics/legacyregistry"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	"github.com/kubeslurm/kubeslurm/pkg/metrics"
	"github.com/kubeslurm/kubeslurm/pkg/scheduler/plugin"
)

func main() {
	// kube-scheduler serves this registry at /metrics on its secure port (docs/metrics.md).
	if err := metrics.Register(legacyregistry.Registerer()); err != nil {
		fmt.Fprintln(os.Stderr, "registering kubeslurm metrics:", err)
		os.Exit(1)
	}
	cmd := app.NewSchedulerCommand(app.WithPlugin(plugin.Name, plugin.New))
	cmd.Use = "kubeslurm-scheduler"
	os.Exit(cli.Run(cmd))
}
