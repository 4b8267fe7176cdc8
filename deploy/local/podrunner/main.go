// Command kubeslurm-podrunner plays kubelet, on the local cluster, for the pods whose images
// are kubeslurm's own (images.go): the local cluster's nodes are kwok fakes that run no
// containers, so the pods `helm install charts/kubeslurm` makes would never run. It
// registers one node of its own (kwok manages only nodes annotated kwok.x-k8s.io/node=fake,
// which it is not), binds to it the unscheduled pods of those images that ask for the
// default scheduler (the local cluster runs none), and runs each container of the pods
// bound to it as a host process: the image's program from bin/ with the container's args
// and env, its volumes (ConfigMap, Secret, projected service-account token, emptyDir)
// bind-mounted where the container mounts them in a private mount namespace, as the pod's
// user. It reports the pods' status (Running, readiness from the readiness probes, exits),
// restarts exited containers by the restart policy, and stops the processes of deleted
// pods. It is no kubelet: no images, no network namespace (pods share the host's network,
// so two replicas of one port clash), no resource limits, no logs API (each container logs
// to <state-dir>/logs/), no token refresh. With --adopt-node it runs instead, on a kwok node
// that exists, the pods of images under localhost/ bound there, which kwok's stages leave
// alone (AdoptedRegistry).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// NodeLabel marks the runner's node.
const NodeLabel = "kubeslurm.io/pod-runner"

// stopPoll: how often a stopping pod is looked at until its processes have ended.
const stopPoll = time.Second

type runner struct {
	kube     kubernetes.Interface
	node     string
	binDir   string
	stateDir string
	// The Slurm root filesystem the Slurm images' containers run in.
	slurmRoot string
	self      string
	// Where the processes reach the API server (KUBERNETES_SERVICE_HOST/PORT).
	apiHost, apiPort string
	// bindUnscheduled: the runner binds unscheduled pods of its images to its node.
	bindUnscheduled bool
	// adopted: the node is kwok's (it keeps the node's status and fakes its other pods);
	// the runner runs only the pods kwok leaves to it (runsAdopted) and never registers,
	// deletes or binds.
	adopted bool

	lister cache.Indexer
	queue  workqueue.TypedRateLimitingInterface[string]

	mu   sync.Mutex
	pods map[string]*podRun // by namespace/name
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "exec" {
		err := execMain(os.Args[2:])
		fmt.Fprintln(os.Stderr, "kubeslurm-podrunner exec:", err)
		os.Exit(127)
	}
	klog.InitFlags(nil)
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of a user that may bind, update pod status, request tokens and register nodes")
	node := flag.String("node-name", "podrunner", "name of the node the runner registers and runs pods on")
	binDir := flag.String("bin-dir", "", "directory with the programs of the image table (default: this binary's directory)")
	stateDir := flag.String("state-dir", "", "directory for the pods' volumes and logs (required)")
	apiHost := flag.String("apiserver-host", "127.0.0.1", "KUBERNETES_SERVICE_HOST given to the processes")
	apiPort := flag.String("apiserver-port", "6443", "KUBERNETES_SERVICE_PORT given to the processes")
	slurmRoot := flag.String("slurm-root", "", "root filesystem the containers of the Slurm images run in (chrooted); empty: those pods are not run")
	bindUnscheduled := flag.Bool("bind-unscheduled", true,
		"bind unscheduled pods of the table's images that ask for the default scheduler to this node (false: only run pods bound here, e.g. by a DaemonSet-like controller; for a second runner beside the first)")
	adopt := flag.Bool("adopt-node", false,
		"run pods on an existing kwok node instead of a node of its own: only the pods whose images are all under "+AdoptedRegistry+" (kwok leaves those alone); the node is neither registered nor deleted, and nothing is bound")
	flag.Parse()
	r := &runner{node: *node, binDir: *binDir, stateDir: *stateDir, slurmRoot: *slurmRoot, apiHost: *apiHost, apiPort: *apiPort,
		bindUnscheduled: *bindUnscheduled && !*adopt, adopted: *adopt}
	if err := run(r, *kubeconfig); err != nil {
		klog.ErrorS(err, "pod runner failed")
		os.Exit(1)
	}
}

// run plays kubelet for r.node until SIGTERM or SIGINT.
func run(r *runner, kubeconfig string) error {
	if r.stateDir == "" {
		return fmt.Errorf("--state-dir is required")
	}
	var err error
	if r.self, err = os.Executable(); err != nil {
		return err
	}
	if r.binDir == "" {
		r.binDir = filepath.Dir(r.self)
	}
	if r.stateDir, err = filepath.Abs(r.stateDir); err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	// A kubelet's defaults (kubeAPIQPS 50, kubeAPIBurst 100): client-go's own (5, 10) held
	// each pod's start back by seconds once a few pods refresh their volumes.
	cfg.QPS, cfg.Burst = 50, 100
	r.kube = kubernetes.NewForConfigOrDie(cfg)
	r.pods = map[string]*podRun{}
	r.queue = workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// Containers start with every signal at its default, as under a container runtime: a
	// runner started under nohup would otherwise pass SIGHUP on ignored, and a container's
	// shell could not trap it. Handled (and dropped) here, it is reset to the default in
	// each process the runner starts.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGHUP)
	// Whatever ends the runner, its processes stop and its node goes.
	defer r.shutdown()
	if r.adopted {
		if _, err := r.kube.CoreV1().Nodes().Get(ctx, r.node, metav1.GetOptions{}); err != nil {
			return fmt.Errorf("node %s to adopt: %w", r.node, err)
		}
	} else if err := r.registerNode(ctx); err != nil {
		return fmt.Errorf("registering node %s: %w", r.node, err)
	}
	factory := informers.NewSharedInformerFactory(r.kube, 0)
	inf := factory.Core().V1().Pods().Informer()
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			r.queue.Add(key)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, o any) { enqueue(o) }, DeleteFunc: enqueue,
	}); err != nil {
		return err
	}
	r.lister = inf.GetIndexer()
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return fmt.Errorf("pod informer did not sync")
	}
	klog.InfoS("pod runner ready", "node", r.node, "adopted", r.adopted, "binDir", r.binDir, "stateDir", r.stateDir)
	workerDone := make(chan struct{})
	go func() {
		defer close(workerDone)
		wait.UntilWithContext(ctx, r.worker, time.Second)
	}()
	<-ctx.Done()
	r.queue.ShutDown()
	<-workerDone // no pod starts after this; shutdown stops those that did
	return nil
}

func (r *runner) worker(ctx context.Context) {
	for {
		key, quit := r.queue.Get()
		if quit {
			return
		}
		if err := r.sync(ctx, key); err != nil {
			klog.ErrorS(err, "sync failed", "pod", key)
			r.queue.AddRateLimited(key)
		} else {
			r.queue.Forget(key)
		}
		r.queue.Done(key)
	}
}

// sync is level-based: the pod as it is now decides what runs.
func (r *runner) sync(ctx context.Context, key string) error {
	obj, exists, err := r.lister.GetByKey(key)
	if err != nil {
		return err
	}
	r.mu.Lock()
	pr := r.pods[key]
	r.mu.Unlock()
	var pod *v1.Pod
	if exists {
		pod = obj.(*v1.Pod)
	}
	// Gone, or another pod of that name now: stop what ran, and look again until it has.
	if pr != nil && (pod == nil || pod.UID != pr.uid || pod.Spec.NodeName != r.node) {
		if !pr.stop() {
			r.queue.AddAfter(key, stopPoll)
			return nil
		}
		r.forget(key, pr)
		pr = nil
	}
	switch {
	case pod == nil:
		return nil
	case pod.Spec.NodeName == "":
		return r.bindIfOurs(ctx, pod)
	case pod.Spec.NodeName != r.node:
		return nil
	case r.adopted && !runsAdopted(pod):
		return nil // kwok's
	case pod.DeletionTimestamp != nil:
		if pr != nil {
			pr.deleted(pod)
			if !pr.stop() {
				r.queue.AddAfter(key, stopPoll)
				return nil
			}
			r.forget(key, pr)
		}
		// As a kubelet: the final delete once the processes are gone.
		err := r.kube.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
			GracePeriodSeconds: ptr[int64](0), Preconditions: &metav1.Preconditions{UID: &pod.UID},
		})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil
		}
		return err
	case pr == nil && (pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed):
		return nil // ran to its end (before a restart of the runner too)
	case pr == nil:
		r.mu.Lock()
		r.pods[key] = startPodRun(ctx, r, pod)
		r.mu.Unlock()
	}
	return nil
}

func (r *runner) forget(key string, pr *podRun) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pods[key] == pr {
		delete(r.pods, key)
	}
	_ = os.RemoveAll(pr.dir)
}

// bindIfOurs binds an unscheduled pod of the table's images that asks for the default
// scheduler to the runner's node (with --bind-unscheduled): the local cluster has no default
// scheduler.
func (r *runner) bindIfOurs(ctx context.Context, pod *v1.Pod) error {
	if !r.bindUnscheduled || pod.DeletionTimestamp != nil || !ours(pod) ||
		(pod.Spec.SchedulerName != "" && pod.Spec.SchedulerName != v1.DefaultSchedulerName) {
		return nil
	}
	err := r.kube.CoreV1().Pods(pod.Namespace).Bind(ctx, &v1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
		Target:     v1.ObjectReference{Kind: "Node", Name: r.node},
	}, metav1.CreateOptions{})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil
	}
	if err == nil {
		klog.InfoS("bound", "pod", klog.KObj(pod), "node", r.node)
	}
	return err
}

// registerNode creates (or takes over) the runner's node, Ready, with the host's loopback
// as its address.
func (r *runner) registerNode(ctx context.Context) error {
	capacity := v1.ResourceList{
		v1.ResourceCPU: resource.MustParse("8"), v1.ResourceMemory: resource.MustParse("16Gi"),
		v1.ResourcePods: resource.MustParse("110"),
	}
	want := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: r.node, Labels: map[string]string{
		NodeLabel: "true", v1.LabelHostname: r.node, v1.LabelOSStable: "linux",
	}}}
	if _, err := r.kube.CoreV1().Nodes().Create(ctx, want, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	// The node's controllers write to it as soon as it exists: read it again on a conflict.
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := r.kube.CoreV1().Nodes().Get(ctx, r.node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		node.Status = v1.NodeStatus{
			Capacity: capacity, Allocatable: capacity,
			Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "127.0.0.1"}, {Type: v1.NodeHostName, Address: r.node}},
			Conditions: []v1.NodeCondition{{
				Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "PodRunnerReady",
				Message: "kubeslurm-podrunner runs this node's pods as host processes", LastHeartbeatTime: now, LastTransitionTime: now,
			}},
			NodeInfo: v1.NodeSystemInfo{OperatingSystem: "linux", Architecture: "amd64", KubeletVersion: "kubeslurm-podrunner"},
		}
		_, err = r.kube.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
		return err
	})
}

// shutdown stops every process and removes the node unless adopted (its pods are then
// orphans, which the pod garbage collector deletes). A SIGTERM or SIGINT meanwhile (the
// second one, when a signal began the shutdown) cuts every grace period short: a worker
// draining its Slurm node may wait an hour for a job, and a runner killed instead would
// leave its containers' processes running.
func (r *runner) shutdown() {
	r.mu.Lock()
	runs := make([]*podRun, 0, len(r.pods))
	for _, pr := range r.pods {
		runs = append(runs, pr)
	}
	r.mu.Unlock()
	force := make(chan os.Signal, 1)
	signal.Notify(force, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(force)
	stopped := make(chan struct{})
	defer close(stopped)
	go func() {
		select {
		case <-force:
			klog.InfoS("signalled again while stopping: every container is killed now")
			for _, pr := range runs {
				pr.grace.Store(0)
			}
		case <-stopped:
		}
	}()
	// Every pod's grace period at once, as a node shutting down.
	for _, pr := range runs {
		pr.stop()
	}
	for _, pr := range runs {
		<-pr.done
		_ = os.RemoveAll(pr.dir)
	}
	if r.adopted {
		klog.InfoS("pod runner stopped; the adopted node stays", "node", r.node)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.kube.CoreV1().Nodes().Delete(ctx, r.node, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		klog.ErrorS(err, "deleting node", "node", r.node)
	}
	klog.InfoS("pod runner stopped", "node", r.node)
}

func ptr[T any](v T) *T { return &v }
