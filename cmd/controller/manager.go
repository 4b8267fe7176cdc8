package main

import (
	"flag"
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// addKlogFlags adds klog's flags (-v, --vmodule, ...) to the command's.
func addKlogFlags(cmd *cobra.Command) {
	klogFlags := flag.NewFlagSet("klog", flag.ExitOnError)
	klog.InitFlags(klogFlags)
	cmd.Flags().AddGoFlagSet(klogFlags)
}

// newManager is the set-up both commands share: klog as the logger, the kubeconfig
// (empty: in-cluster), a scheme of client-go's types and the extra ones given, and the
// healthz ping. opts.Scheme is set here.
func newManager(kubeconfig string, opts ctrl.Options, addToScheme ...func(*runtime.Scheme) error) (manager.Manager, error) {
	ctrl.SetLogger(klog.NewKlogr())
	restConfig, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig: %w", err)
	}
	opts.Scheme = runtime.NewScheme()
	for _, add := range append([]func(*runtime.Scheme) error{clientgoscheme.AddToScheme}, addToScheme...) {
		if err := add(opts.Scheme); err != nil {
			return nil, err
		}
	}
	mgr, err := ctrl.NewManager(restConfig, opts)
	if err != nil {
		return nil, fmt.Errorf("creating manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return nil, err
	}
	return mgr, nil
}
