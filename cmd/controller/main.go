// Command kubeslurm-controller keeps Kubernetes pods and their Slurm placeholder jobs in
// step (see pkg/controller/pod), and Kubernetes nodes and Slurm nodes (pkg/controller/node).
package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	slurmv1 "github.com/kubeslurm/kubeslurm/api/v1alpha1"
	nodecontroller "github.com/kubeslurm/kubeslurm/pkg/controller/node"
	podcontroller "github.com/kubeslurm/kubeslurm/pkg/controller/pod"
	slurmclustercontroller "github.com/kubeslurm/kubeslurm/pkg/controller/slurmcluster"
	topologycontroller "github.com/kubeslurm/kubeslurm/pkg/controller/topology"
	"github.com/kubeslurm/kubeslurm/pkg/dcgmjobmap"
	"github.com/kubeslurm/kubeslurm/pkg/metrics"
	"github.com/kubeslurm/kubeslurm/pkg/slurm"
	"github.com/kubeslurm/kubeslurm/pkg/topology"
	"github.com/kubeslurm/kubeslurm/pkg/webhook"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

// options are every setting of the controller, read once at start-up.
type options struct {
	kubeconfig      string
	slurmrestdURL   string
	slurmUser       string
	jwtKeyFile      string
	pollInterval    time.Duration
	resyncPeriod    time.Duration
	fullListPeriod  time.Duration
	listTimeout     time.Duration
	requestTimeout  time.Duration
	schedulerName   string
	metricsAddr     string
	probeAddr       string
	leaderElect     bool
	leaderNamespace string
	notReadyGrace   time.Duration
	evictionGuard   bool
	// Nodes (pkg/controller/node).
	syncNodes         bool
	drainOnConditions []string
	drainTaintEffect  string
	// Admission webhook (pkg/webhook).
	webhook           bool
	webhookHost       string
	webhookPort       int
	webhookCertDir    string
	webhookCertSecret string
	webhookCertHosts  []string
	// Slurm block topology from node labels (pkg/controller/topology); off without a file.
	topologyFile      string
	topology          topology.Config
	webhookConfigName string
	// DCGM exporter job mapping (pkg/dcgmjobmap).
	dcgmJobMappingConfigMap string
	dcgmJobMappingDir       string
	// SlurmClusters (pkg/controller/slurmcluster).
	slurmClusters bool
	// namespace/name of the controller's own Slurm signing key Secret.
	slurmClusterSigningKey string
}

func main() {
	if err := newCommand().Execute(); err != nil {
		os.Exit(1)
	}
}

func newCommand() *cobra.Command {
	o := options{}
	cmd := &cobra.Command{
		Use:           "kubeslurm-controller",
		Short:         "Keeps Kubernetes pods and nodes in step with their Slurm jobs and nodes",
		SilenceUsage:  true,
		SilenceErrors: false,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return run(ctrl.SetupSignalHandler(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file (default: in-cluster config)")
	f.StringVar(&o.slurmrestdURL, "slurmrestd-url", "", "slurmrestd base URL, e.g. http://slurmrestd:6820")
	f.StringVar(&o.slurmUser, "slurm-user", "slurm", "Slurm user (an operator) the controller acts as")
	f.StringVar(&o.jwtKeyFile, "slurm-jwt-key-file", "", "Slurm's auth/jwt key, used to mint the controller's tokens")
	f.DurationVar(&o.pollInterval, "slurm-poll-interval", time.Second, "how often Slurm's jobs and nodes are read")
	f.DurationVar(&o.resyncPeriod, "resync-period", 30*time.Second, "full reconcile of every placeholder job, as a safety net")
	f.DurationVar(&o.listTimeout, "slurm-list-timeout", slurm.DefaultListTimeout,
		"bound of a listing of every Slurm job (at 10,000 queued jobs it takes longer than one request may)")
	f.DurationVar(&o.fullListPeriod, "slurm-full-list-period", slurm.DefaultFullListPeriod,
		"how often every Slurm job is listed in full, to find placeholder jobs by their pods; between listings only our jobs' states are read")
	f.DurationVar(&o.requestTimeout, "slurm-request-timeout", 15*time.Second, "timeout of one slurmrestd request")
	f.StringVar(&o.schedulerName, "scheduler-name", wellknown.SchedulerName, "schedulerName of the pods kubeslurm owns")
	f.StringVar(&o.metricsAddr, "metrics-bind-address", ":8080", "metrics endpoint address (0 disables)")
	f.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "health probe address")
	f.BoolVar(&o.leaderElect, "leader-elect", false, "elect a leader so that only one replica acts")
	f.StringVar(&o.leaderNamespace, "leader-election-namespace", "kubeslurm-system", "namespace of the leader election lease")
	f.DurationVar(&o.notReadyGrace, "not-ready-grace-period", 5*time.Minute,
		"how long a pod's node may be NotReady before its Slurm job is cancelled and the pod force-removed (0 disables)")
	f.BoolVar(&o.evictionGuard, "eviction-guard", true,
		"keep a PodDisruptionBudget over each running placeholder job, so drains wait for Slurm to end it")
	f.BoolVar(&o.syncNodes, "sync-nodes", true, "keep Kubernetes nodes and Slurm nodes of the same name in step (drains, conditions, taint, removal)")
	f.StringSliceVar(&o.drainOnConditions, "drain-on-node-conditions", nil,
		"node condition types that mean unhealthy when True (e.g. KernelDeadlock,GPUUnhealthy): the Slurm node is drained while one holds")
	f.StringVar(&o.drainTaintEffect, "slurm-drain-taint-effect", string(v1.TaintEffectNoSchedule),
		"effect of the "+wellknown.SlurmDrainTaint+" taint on nodes Slurm drained or marked down: NoSchedule, PreferNoSchedule, NoExecute (evicts every pod without a toleration, DaemonSets' too) or none")
	f.BoolVar(&o.webhook, "enable-webhook", true, "serve the admission webhook (validation of slurmjob annotations, schedulerName in opted-in namespaces)")
	f.StringVar(&o.webhookHost, "webhook-host", "", "address the webhook listens on (empty: every interface)")
	f.IntVar(&o.webhookPort, "webhook-port", 9443, "port the webhook listens on")
	f.StringVar(&o.webhookCertDir, "webhook-cert-dir", "",
		"directory with the webhook's tls.crt and tls.key, kept by someone else; empty: the controller keeps its own in --webhook-cert-secret")
	f.StringVar(&o.webhookCertSecret, "webhook-cert-secret", "kubeslurm-system/"+wellknown.WebhookCertSecret,
		"namespace/name of the Secret holding the webhook's CA and certificate (it must exist)")
	f.StringSliceVar(&o.webhookCertHosts, "webhook-cert-hosts", []string{"kubeslurm-webhook.kubeslurm-system.svc"},
		"DNS names or IP addresses the API server calls the webhook at")
	f.StringVar(&o.topologyFile, "topology-file", "",
		"topology.yaml in slurmctld's configuration directory: when set, the controller writes Slurm's block topology there from node labels and has slurmctld re-read it (empty: off)")
	f.StringSliceVar(&o.topology.LabelKeys, "topology-label-keys", []string{"nvidia.com/gpu.clique"},
		"node labels whose value names the node's Slurm block, the first present wins")
	f.StringVar(&o.topology.Annotation, "topology-annotation", wellknown.TopologyBlockAnnotation,
		"node annotation naming the node's Slurm block explicitly (wins over the labels)")
	f.StringVar(&o.topology.Name, "topology-name", "kubeslurm", "name of the block topology in topology.yaml")
	f.StringVar(&o.topology.DefaultBlock, "topology-default-block", "unlabelled",
		"block of the nodes no label or annotation places (a node outside every block can run no job)")
	f.IntSliceVar(&o.topology.BlockSizes, "topology-block-sizes", nil,
		"Slurm's block_sizes, base block size first (each next one a power-of-two multiple); empty: Slurm's default")
	f.StringVar(&o.webhookConfigName, "webhook-configuration-name", wellknown.WebhookConfigurationName,
		"name of the Validating- and MutatingWebhookConfiguration whose caBundle the controller keeps")
	f.StringVar(&o.dcgmJobMappingConfigMap, "dcgm-job-mapping-configmap", "",
		"namespace/name of a ConfigMap the controller keeps the Slurm prolog/epilog scripts of the DCGM exporter's HPC job mapping in (empty: none)")
	f.StringVar(&o.dcgmJobMappingDir, "dcgm-job-mapping-dir", dcgmjobmap.DefaultDir,
		"directory on the GPU nodes the job mapping scripts write to (dcgm-exporter's --hpc-job-mapping-dir)")
	f.BoolVar(&o.slurmClusters, "enable-slurmcluster", false,
		"reconcile SlurmCluster objects: generate their key Secrets, render their slurm.conf into a ConfigMap, run their slurmctld, slurmrestd, slurmd and login pods, and keep their NVIDIA ComputeDomain")
	f.StringVar(&o.slurmClusterSigningKey, "slurmcluster-signing-key-secret", "kubeslurm-system/kubeslurm-slurm-signing-key",
		"namespace/name of the Secret with the controller's RSA key for SlurmClusters' Slurm (made when missing; its public half goes into each cluster's configuration); empty: their Slurm is not read")
	for _, name := range []string{"slurmrestd-url", "slurm-jwt-key-file"} {
		_ = cmd.MarkFlagRequired(name)
	}
	addKlogFlags(cmd)
	cmd.AddCommand(newAgentCommand(), newTokenCommand())
	return cmd
}

func run(ctx context.Context, o options) error {
	taintEffect, err := nodecontroller.ParseTaintEffect(o.drainTaintEffect)
	if err != nil {
		return fmt.Errorf("--slurm-drain-taint-effect: %w", err)
	}
	if err := nodecontroller.ValidateDrainConditions(o.drainOnConditions); err != nil {
		return fmt.Errorf("--drain-on-node-conditions: %w", err)
	}
	// Served by the manager's metrics server (--metrics-bind-address).
	if err := metrics.Register(ctrlmetrics.Registry); err != nil {
		return fmt.Errorf("registering metrics: %w", err)
	}
	var topo *topology.Config
	if o.topologyFile != "" {
		if err := o.topology.Validate(); err != nil {
			return fmt.Errorf("--topology-*: %w", err)
		}
		topo = &o.topology
	}
	mgrOpts := ctrl.Options{
		Metrics:                 metricsserver.Options{BindAddress: o.metricsAddr},
		HealthProbeBindAddress:  o.probeAddr,
		LeaderElection:          o.leaderElect,
		LeaderElectionID:        "kubeslurm-controller",
		LeaderElectionNamespace: o.leaderNamespace,
	}
	if o.slurmClusters {
		mgrOpts.Cache.ByObject = slurmclustercontroller.CacheByObject()
	}
	mgr, err := newManager(o.kubeconfig, mgrOpts, slurmv1.AddToScheme)
	if err != nil {
		return err
	}
	slurmClient, err := slurm.NewClient(slurm.Config{
		URL: o.slurmrestdURL, User: o.slurmUser, JWTKeyFile: o.jwtKeyFile, Timeout: o.requestTimeout, ListTimeout: o.listTimeout,
	})
	if err != nil {
		return err
	}
	watcher := slurm.NewWatcher(slurmClient, o.pollInterval, o.resyncPeriod)
	watcher.FullListPeriod = o.fullListPeriod
	// The watcher runs under leader election with the controllers it feeds: a replica
	// that is not the leader never reads Slurm.
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		watcher.Run(ctx)
		return nil
	})); err != nil {
		return err
	}
	if err := (&podcontroller.Reconciler{
		Client:        mgr.GetClient(),
		APIReader:     mgr.GetAPIReader(),
		Slurm:         slurmClient,
		Watcher:       watcher,
		Recorder:      mgr.GetEventRecorder("kubeslurm-controller"),
		SchedulerName: o.schedulerName,
		NotReadyGrace: o.notReadyGrace,
		EvictionGuard: o.evictionGuard,
		Topology:      topo,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up pod controller: %w", err)
	}
	if topo != nil {
		if err := (&topologycontroller.Reconciler{
			Client:   mgr.GetClient(),
			Slurm:    slurmClient,
			Nodes:    watcher,
			Recorder: mgr.GetEventRecorder("kubeslurm-controller"),
			Config:   *topo,
			File:     o.topologyFile,
		}).SetupWithManager(mgr, watcher); err != nil {
			return fmt.Errorf("setting up topology controller: %w", err)
		}
	}
	if o.syncNodes {
		if err := (&nodecontroller.Reconciler{
			Client:            mgr.GetClient(),
			APIReader:         mgr.GetAPIReader(),
			Slurm:             slurmClient,
			Watcher:           watcher,
			Recorder:          mgr.GetEventRecorder("kubeslurm-controller"),
			DrainOnConditions: o.drainOnConditions,
			TaintEffect:       taintEffect,
		}).SetupWithManager(mgr); err != nil {
			return fmt.Errorf("setting up node controller: %w", err)
		}
	}
	if o.slurmClusters {
		var identity *slurmclustercontroller.Identity
		if ns, name, ok := strings.Cut(o.slurmClusterSigningKey, "/"); ok && ns != "" && name != "" {
			id, err := slurmclustercontroller.LoadIdentity(context.Background(), mgr.GetAPIReader(), mgr.GetClient(), ns, name)
			if err != nil {
				// The clusters still run; only their status lacks Slurm's node states.
				klog.ErrorS(err, "no Slurm signing key: SlurmClusters' node states will not be read")
			}
			identity = id
		} else if o.slurmClusterSigningKey != "" {
			return fmt.Errorf("--slurmcluster-signing-key-secret: want namespace/name, not %q", o.slurmClusterSigningKey)
		}
		if err := (&slurmclustercontroller.Reconciler{
			Client:   mgr.GetClient(),
			Recorder: mgr.GetEventRecorder("kubeslurm-controller"),
			Identity: identity,
		}).SetupWithManager(mgr); err != nil {
			return fmt.Errorf("setting up the SlurmCluster controller: %w", err)
		}
	}
	if o.webhook {
		if err := webhook.Setup(mgr, webhook.Config{
			SchedulerName: o.schedulerName, Host: o.webhookHost, Port: o.webhookPort, CertDir: o.webhookCertDir,
			CertSecret: o.webhookCertSecret, CertHosts: o.webhookCertHosts, ConfigurationName: o.webhookConfigName,
		}); err != nil {
			return fmt.Errorf("setting up the webhook: %w", err)
		}
	}
	if o.dcgmJobMappingConfigMap != "" {
		if err := addJobMappingScripts(mgr, o.dcgmJobMappingConfigMap, o.dcgmJobMappingDir); err != nil {
			return fmt.Errorf("--dcgm-job-mapping-configmap: %w", err)
		}
	}
	if err := mgr.AddReadyzCheck("slurm", func(_ *http.Request) error {
		if !watcher.Synced() {
			return fmt.Errorf("slurm not read yet: %v", watcher.LastError())
		}
		return nil
	}); err != nil {
		return err
	}
	klog.InfoS("Starting kubeslurm-controller", "slurmrestd", o.slurmrestdURL, "scheduler", o.schedulerName)
	return mgr.Start(ctx)
}

// addJobMappingScripts writes the DCGM job mapping scripts into the ConfigMap ns/name once
// the manager starts (as the leader), through an uncached client: the controller watches
// no ConfigMaps.
func addJobMappingScripts(mgr manager.Manager, ref, dir string) error {
	ns, name, ok := strings.Cut(ref, "/")
	if !ok || ns == "" || name == "" {
		return fmt.Errorf("want namespace/name, not %q", ref)
	}
	if _, err := dcgmjobmap.Scripts(dir); err != nil {
		return err
	}
	c, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme()})
	if err != nil {
		return err
	}
	return mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		// Retried (RBAC or the namespace may come later), logged, never fatal.
		_ = wait.PollUntilContextCancel(ctx, 10*time.Second, true, func(ctx context.Context) (bool, error) {
			if err := dcgmjobmap.Ensure(ctx, c, ns, name, dir); err != nil {
				ctrl.Log.Error(err, "DCGM job mapping scripts not written; retrying")
				return false, nil
			}
			ctrl.Log.Info("DCGM job mapping scripts written", "configmap", ref, "dir", dir)
			return true, nil
		})
		<-ctx.Done()
		return nil
	}))
}
