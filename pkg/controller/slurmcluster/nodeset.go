package slurmcluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	slurmv1 "github.com/kubeslurm/kubeslurm/api/v1alpha1"
	"github.com/kubeslurm/kubeslurm/pkg/computedomain"
	"github.com/kubeslurm/kubeslurm/pkg/slurmconf"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

const (
	// DefaultWorkerImage runs slurmd: deploy/images/Dockerfile.slurmd.
	DefaultWorkerImage = "kubeslurm/slurmd:26.05"
	// SlurmdPort is slurmd's port in its pod.
	SlurmdPort = 6818

	componentSlurmd = "slurmd"
	// Labels and annotations of a worker pod.
	nodeSetLabel = "slurm.kubeslurm.io/nodeset"
	// BusyLabel marks a worker whose Slurm node runs jobs (observe.go); a PodDisruptionBudget
	// keeps the workers so labelled.
	BusyLabel            = "slurm.kubeslurm.io/busy"
	slurmNodeAnnotation  = "slurm.kubeslurm.io/node-name"
	workerSpecAnnotation = "slurm.kubeslurm.io/worker-spec-hash"
)

// worker is one slurmd pod a NodeSet asks for: its Slurm node name and, in DaemonSet mode,
// the Kubernetes node it runs on (the same name).
type worker struct {
	set      *slurmv1.NodeSetSpec
	slurm    string
	kubeNode string
	// gpus is the node's count of the set's GPU resource (nodeSets[].gpus).
	gpus int64
	// nodeLabels and nodeAnnotations are the Kubernetes node's (DaemonSet mode): they
	// name its Slurm block.
	nodeLabels, nodeAnnotations map[string]string
}

// desiredWorkerList lists the workers of every NodeSet: DaemonSet mode one per Kubernetes
// node its selector matches (named after it), Replicas mode <cluster>-<set>-<ordinal>.
func (r *Reconciler) desiredWorkerList(ctx context.Context, c *slurmv1.SlurmCluster) ([]worker, error) {
	var out []worker
	for i := range c.Spec.NodeSets {
		set := &c.Spec.NodeSets[i]
		if set.Mode == slurmv1.NodeSetReplicas {
			n := int32(0)
			if set.Replicas != nil {
				n = *set.Replicas
			}
			for o := int32(0); o < n; o++ {
				out = append(out, worker{set: set, slurm: fmt.Sprintf("%s-%s-%d", c.Name, set.Name, o)})
			}
			continue
		}
		nodes := &v1.NodeList{}
		if err := r.Client.List(ctx, nodes, client.MatchingLabels(set.NodeSelector)); err != nil {
			return nil, fmt.Errorf("listing the nodes of NodeSet %s: %w", set.Name, err)
		}
		for _, n := range nodes.Items {
			if n.DeletionTimestamp == nil {
				out = append(out, worker{set: set, slurm: n.Name, kubeNode: n.Name, gpus: nodeGPUs(set, &n),
					nodeLabels: n.Labels, nodeAnnotations: n.Annotations})
			}
		}
	}
	return out, nil
}

// workerPodName is the pod of a worker: <cluster>-<set>-<slurm node>, shortened with a
// hash when longer than a pod name may be.
func workerPodName(c *slurmv1.SlurmCluster, w worker) string {
	name := c.Name + "-" + w.set.Name + "-" + w.slurm
	if w.set.Mode == slurmv1.NodeSetReplicas {
		name = w.slurm
	}
	if len(name) <= 63 {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return strings.TrimRight(name[:52], "-.") + "-" + hex.EncodeToString(sum[:])[:10]
}

// DefaultDrainSeconds is a worker's grace period to drain (NodeSetSpec.DrainSeconds).
const DefaultDrainSeconds = 3600

// unregisteredExit is workerScript's exit code for a slurmd Slurm has no node of.
const unregisteredExit = 3

// workerScript runs slurmd under two guards, in the worker's container:
//
//   - When the pod is deleted (SIGTERM to the container's main process) it drains its Slurm
//     node, waits until no job runs there, stops slurmd and removes the node from Slurm: a
//     scale-in or a node's departure never kills a running job within the pod's grace
//     period. Slurm's commands authenticate through slurmd's own sack socket, as root; the
//     node's removal, once slurmd (and its socket) is gone, with a JWT asked for before. An
//     unreachable slurmctld keeps it waiting (fail closed: jobs may still run), and the
//     drain is asked again until slurmctld takes it; the grace period bounds the wait. A
//     node Slurm does not have, or no longer has (squeue -w then fails for ever), is not
//     waited for. What it waits for goes to the container's log as it changes.
//   - When the key files change (keyreload.go) it sends slurmd SIGHUP: slurmd re-executes
//     itself and reads them again; its jobs keep running. A slurmd ended by a SIGHUP during
//     its re-execution is started again (reloadRaced).
//   - While it runs, it checks every 5 s that Slurm has the node. slurmd running while Slurm
//     has no node of its name (it never registered within 2 min, or its record was deleted)
//     ends the container with exit code 3, and the controller recreates the pod. Only
//     "not found" counts: an unreachable slurmctld is no reason.
var workerScript = "KEY_DIR=" + slurmconf.ConfigDir + "\n" + keyWatchShell + `nodeGone() { scontrol show node "$SLURM_NODE" 2>&1 | grep -q "not found"; }
stopSlurmd() { kill -TERM "$pid"; wait "$pid"; }
say() { echo "kubeslurm: $*" >&2; }
drain() {
  trap '' TERM # a second SIGTERM (the kubelet's, say) must not start the drain over
  say "worker pod $POD_NAME deleted: draining Slurm node $SLURM_NODE"
  drained=0 said=
  while :; do
    if nodeGone; then
      say "Slurm has no node $SLURM_NODE: stopping slurmd"
      stopSlurmd; exit 0
    fi
    if [ $drained = 0 ]; then
      scontrol update nodename="$SLURM_NODE" state=DRAIN reason="kubeslurm: worker pod $POD_NAME deleted" && drained=1
    fi
    if [ $drained = 0 ]; then
      wait_for="slurmctld to take the drain"
    elif out=$(squeue -h -w "$SLURM_NODE" -o %i 2>&1); then
      [ -z "$out" ] && break
      wait_for="job(s) $(echo $out) on $SLURM_NODE to end"
    else
      wait_for="squeue: $out"
    fi
    [ "$wait_for" != "$said" ] && say "waiting for $wait_for"
    said=$wait_for
    sleep "${DRAIN_POLL_SECONDS:-2}"
  done
  token=$(scontrol token lifespan=600)
  stopSlurmd
  env "$token" scontrol delete nodename="$SLURM_NODE"
  exit 0
}
startDaemon /usr/sbin/slurmd "$@"
trap drain TERM
registered=0 missing=0 checks=0
while :; do
  while kill -0 "$pid" 2>/dev/null; do
    sleep "${KEY_WATCH_SECONDS:-5}" & wait $!
    if keysChanged slurmd hup; then
      kill -HUP "$pid"
    fi
    checks=$((checks + 1))
    case $(scontrol show node "$SLURM_NODE" 2>&1) in
    *"not found"*) missing=$((missing + 1)) ;;
    *NodeName=*) registered=1 missing=0 ;;
    esac
    if { [ $registered = 1 ] && [ $missing -ge 3 ]; } || { [ $registered = 0 ] && [ $checks -ge 24 ]; }; then
      say "slurmd runs but Slurm has no node $SLURM_NODE"
      stopSlurmd
      exit 3
    fi
  done
  wait "$pid"; code=$?
  reloadRaced "$code" slurmd || exit "$code"
  startDaemon /usr/sbin/slurmd "$@"
done
`

// slurmdArgs registers the worker as a dynamic node (-Z) with configless slurmctld, with
// its NodeSet's name (which slurm.conf's NodeSet of that name selects) and extra features,
// its node's GPUs as GRES, and the NodeSet's node options.
func slurmdArgs(c *slurmv1.SlurmCluster, w worker) ([]string, error) {
	_, addr := slurmconf.ControllerHost(c)
	features := append([]string{w.set.Name}, w.set.Features...)
	conf := "Features=" + strings.Join(features, ",")
	if w.set.Port != nil {
		conf += fmt.Sprintf(" Port=%d", *w.set.Port)
	}
	if g := gresOf(w); g != "" {
		conf += " Gres=" + g
	}
	opts, err := slurmconf.NodeOptions(w.set.NodeOptions)
	if err != nil {
		return nil, fmt.Errorf("nodeOptions: %w", err)
	}
	if len(opts) > 0 {
		conf += " " + strings.Join(opts, " ")
	}
	return []string{"-D", "-Z", "-N", w.slurm,
		"--conf-server", fmt.Sprintf("%s:%d", addr, controllerPort(c)),
		"--conf", conf}, nil
}

// slurmdPort is the port of the set's slurmd.
func slurmdPort(set *slurmv1.NodeSetSpec) int32 {
	if set.Port != nil {
		return *set.Port
	}
	return SlurmdPort
}

// nodeGPUs is node's allocatable count of set's GPU resource; 0 without nodeSets[].gpus.
func nodeGPUs(set *slurmv1.NodeSetSpec, node *v1.Node) int64 {
	if set.GPUs == nil {
		return 0
	}
	q, ok := node.Status.Allocatable[v1.ResourceName(set.GPUs.GPUResourceName())]
	if !ok {
		return 0
	}
	return q.Value()
}

// gresOf is the worker's GRES: gpu[:type]:count, or "" without GPUs.
func gresOf(w worker) string {
	if w.gpus <= 0 || w.set.GPUs == nil {
		return ""
	}
	if t := w.set.GPUs.Type; t != "" {
		return fmt.Sprintf("gpu:%s:%d", t, w.gpus)
	}
	return fmt.Sprintf("gpu:%d", w.gpus)
}

// workerPod is the desired pod of a worker. slurmd runs as root (SlurmdUser): it starts
// jobs as their users. Its /etc/slurm holds the auth/slurm key alone; the configuration
// comes from slurmctld. With spec.computeDomain, slurmd claims the domain's IMEX channel,
// which makes NVIDIA's driver add the worker's node to the domain. With GPUs and
// spec.dcgmJobMapping, it mounts the node's DCGM job mapping directory.
func workerPod(c *slurmv1.SlurmCluster, w worker) (*v1.Pod, error) {
	image := w.set.Image
	if image == "" {
		image = DefaultWorkerImage
	}
	args, err := slurmdArgs(c, w)
	if err != nil {
		return nil, err
	}
	labels := componentLabels(c, componentSlurmd)
	labels[nodeSetLabel] = w.set.Name
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: c.Namespace, Name: workerPodName(c, w), Labels: labels,
			Annotations: map[string]string{slurmNodeAnnotation: w.slurm},
		},
		Spec: v1.PodSpec{
			NodeName: w.kubeNode,
			Hostname: trimHostname(w.slurm),
			// A worker stays on its node as a DaemonSet's pod does.
			Tolerations:                   []v1.Toleration{{Operator: v1.TolerationOpExists}},
			SecurityContext:               &v1.PodSecurityContext{RunAsUser: ptr[int64](0), RunAsGroup: ptr[int64](0)},
			TerminationGracePeriodSeconds: drainSeconds(w.set),
			Containers: []v1.Container{{
				Name:    componentSlurmd,
				Image:   image,
				Command: []string{"/bin/sh", "-c", workerScript, "slurmd"},
				Args:    args,
				Env: []v1.EnvVar{
					{Name: "SLURM_NODE", Value: w.slurm},
					{Name: "POD_NAME", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
				},
				Ports: []v1.ContainerPort{{Name: componentSlurmd, ContainerPort: slurmdPort(w.set)}},
				ReadinessProbe: &v1.Probe{
					ProbeHandler:  v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(slurmdPort(w.set))}},
					PeriodSeconds: 2,
				},
				VolumeMounts: []v1.VolumeMount{
					{Name: "key", MountPath: slurmconf.ConfigDir, ReadOnly: true},
					{Name: "spool", MountPath: "/var/spool/slurmd"},
					{Name: "run", MountPath: "/run/slurmd"},
				},
			}},
			Volumes: []v1.Volume{
				slurmKeyVolume(c, "key"),
				{Name: "spool", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
				{Name: "run", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
			},
		},
	}
	if w.gpus > 0 {
		// slurmd must see every GPU device of its node without holding them: requesting the
		// device plugin's resource would take them from the pods Slurm places there. NVIDIA's
		// container runtime mounts them all for this variable (as for its own monitoring pods).
		pod.Spec.Containers[0].Env = append(pod.Spec.Containers[0].Env, v1.EnvVar{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"})
		if dir := slurmconf.DCGMJobMappingDir(c); dir != "" {
			// The node's DCGM job mapping, where the prolog and epilog write and the node's
			// DCGM exporter reads.
			pod.Spec.Volumes = append(pod.Spec.Volumes, v1.Volume{Name: "dcgm-job-mapping", VolumeSource: v1.VolumeSource{
				HostPath: &v1.HostPathVolumeSource{Path: dir, Type: ptr(v1.HostPathDirectoryOrCreate)}}})
			pod.Spec.Containers[0].VolumeMounts = append(pod.Spec.Containers[0].VolumeMounts, v1.VolumeMount{Name: "dcgm-job-mapping", MountPath: dir})
		}
	}
	if c.ComputeDomainEnabled() {
		if err := computedomain.AddChannelClaim(&pod.Spec, ComputeDomainSpec(c).ResourceClaimTemplateName, componentSlurmd); err != nil {
			return nil, err
		}
	}
	if err := addStorage(&pod.Spec, w.set.PodStorage, 0); err != nil {
		return nil, err
	}
	pod.Annotations[workerSpecAnnotation] = specHash(pod.Spec)
	return pod, nil
}

func drainSeconds(set *slurmv1.NodeSetSpec) *int64 {
	if set.DrainSeconds != nil {
		return set.DrainSeconds
	}
	return ptr[int64](DefaultDrainSeconds)
}

// trimHostname keeps a hostname within the 63 characters a pod's may have.
func trimHostname(s string) string {
	if len(s) > 63 {
		return strings.TrimRight(s[:63], "-.")
	}
	return s
}

func specHash(spec v1.PodSpec) string {
	b, _ := json.Marshal(spec)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:16]
}

// ensureWorkers makes the worker pods match the NodeSets: missing ones created, those no
// set asks for any more deleted, and one whose spec changed replaced; replacements go one
// at a time, and only while every other worker is ready, so an update never takes more
// than one node out of Slurm. Removals and replacements also wait until slurmctld runs the
// rendered configuration (ConfigApplied): a going worker drains through slurmctld, which a
// change of both restarts at the same time, and its replacement (new GRES, say) must
// register with the configuration made for it. It returns the ready workers.
func (r *Reconciler) ensureWorkers(ctx context.Context, c *slurmv1.SlurmCluster, status *slurmv1.SlurmClusterStatus, want []worker) (int32, error) {
	pods, err := r.listWorkerPods(ctx, c)
	if err != nil {
		return 0, err
	}
	existing := map[string]*v1.Pod{}
	for i := range pods.Items {
		if p := &pods.Items[i]; metav1.IsControlledBy(p, c) {
			existing[p.Name] = p
		}
	}
	if !meta.IsStatusConditionTrue(status.Conditions, slurmv1.ConditionControllerReady) {
		// Workers register with slurmctld: none starts before it runs.
		return countReady(existing), nil
	}
	desired := map[string]*v1.Pod{}
	for _, w := range want {
		p, err := workerPod(c, w)
		if err != nil {
			return 0, fmt.Errorf("worker pod of %s: %w", w.slurm, err)
		}
		desired[p.Name] = p
	}
	settled := meta.IsStatusConditionTrue(status.Conditions, slurmv1.ConditionConfigApplied)
	// Workers out of Slurm now: missing, going or not ready.
	unavailable := 0
	for name := range desired {
		if p, ok := existing[name]; !ok || p.DeletionTimestamp != nil || !isReady(p) {
			unavailable++
		}
	}
	for _, name := range sortedKeys(existing) {
		p := existing[name]
		d, ok := desired[name]
		switch {
		case p.DeletionTimestamp != nil:
		case unregistered(p):
			if err := r.deleteWorker(ctx, c, p, wellknown.EventSlurmWorkerNotRegistered,
				"its slurmd ran but Slurm had no node of its name; recreating it"); err != nil {
				return 0, err
			}
		case !settled:
		case !ok:
			if err := r.deleteWorker(ctx, c, p, wellknown.EventSlurmWorkerRemoved, "its NodeSet no longer asks for it"); err != nil {
				return 0, err
			}
		case p.Annotations[workerSpecAnnotation] != d.Annotations[workerSpecAnnotation] && (unavailable == 0 || !isReady(p)):
			if err := r.deleteWorker(ctx, c, p, wellknown.EventSlurmWorkerRemoved, "its spec changed"); err != nil {
				return 0, err
			}
			if isReady(p) {
				unavailable++
			}
		}
	}
	for _, name := range sortedKeys(desired) {
		if _, ok := existing[name]; ok {
			continue
		}
		p := desired[name]
		if err := controllerutil.SetControllerReference(c, p, r.Client.Scheme()); err != nil {
			return 0, err
		}
		if err := r.Client.Create(ctx, p); err != nil && !apierrors.IsAlreadyExists(err) {
			return 0, fmt.Errorf("creating worker pod %s: %w", p.Name, err)
		}
	}
	return countReady(existing), nil
}

// WorkersFinalizer holds a deleted SlurmCluster until its workers are gone: they drain
// their Slurm nodes as they go, which needs slurmctld, which the garbage collector would
// otherwise delete at the same time.
const WorkersFinalizer = "slurm.kubeslurm.io/workers"

// teardown deletes a deleted cluster's worker pods first and lets the rest go (the
// finalizer off; owner references do the rest) once none is left.
func (r *Reconciler) teardown(ctx context.Context, c *slurmv1.SlurmCluster) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(c, WorkersFinalizer) {
		return ctrl.Result{}, nil
	}
	ns, err := r.terminatingNamespace(ctx, c.Namespace)
	if err != nil {
		return ctrl.Result{}, err
	}
	var grace *int64
	if ns != nil {
		grace = ptr[int64](drainlessGrace)
	}
	left, err := r.stopWorkers(ctx, c, grace)
	if err != nil || left > 0 {
		// Pods are watched; this is in case a drain takes long.
		return ctrl.Result{RequeueAfter: 10 * time.Second}, err
	}
	controllerutil.RemoveFinalizer(c, WorkersFinalizer)
	return ctrl.Result{}, r.Client.Update(ctx, c)
}

// stopWorkers deletes the cluster's worker pods, with grace as their grace period (nil:
// their own, drainSeconds), also over a deletion already asked with a longer one, and
// returns how many are left.
func (r *Reconciler) stopWorkers(ctx context.Context, c *slurmv1.SlurmCluster, grace *int64) (int, error) {
	pods, err := r.listWorkerPods(ctx, c)
	if err != nil {
		return 0, err
	}
	left := 0
	for i := range pods.Items {
		p := &pods.Items[i]
		if !metav1.IsControlledBy(p, c) {
			continue
		}
		left++
		opts := []client.DeleteOption{client.Preconditions{UID: &p.UID}}
		switch {
		case grace != nil && (p.DeletionGracePeriodSeconds == nil || *p.DeletionGracePeriodSeconds > *grace):
			opts = append(opts, client.GracePeriodSeconds(*grace))
		case p.DeletionTimestamp != nil:
			continue
		}
		if err := r.Client.Delete(ctx, p, opts...); client.IgnoreNotFound(err) != nil {
			return left, fmt.Errorf("deleting worker pod %s: %w", p.Name, err)
		}
	}
	return left, nil
}

// drainlessGrace is a worker's grace period when its namespace is being deleted: long
// enough for slurmd to stop on SIGTERM, with no drain to wait for.
const drainlessGrace = 5

// terminatingNamespace is namespace name while it is being deleted, else nil. A namespace
// that cannot be read is not taken as going (fail closed: the workers keep their grace to
// drain).
func (r *Reconciler) terminatingNamespace(ctx context.Context, name string) (*v1.Namespace, error) {
	ns := &v1.Namespace{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: name}, ns); err != nil || ns.DeletionTimestamp == nil {
		return nil, client.IgnoreNotFound(err)
	}
	return ns, nil
}

// stopForNamespace handles a cluster whose namespace is being deleted. Kubernetes deletes a
// namespace's pods first, each with its grace period, and the rest once they are gone; but
// slurmctld's pod goes at once, so the workers could never drain and each would wait out
// its drainSeconds. So they are stopped within drainlessGrace, jobs and all (the whole
// cluster is going), and nothing is made anew. The namespace controller, having seen those
// pods' long grace periods, would only look again after half of it (30 min by default): the
// annotation written once they are gone (its change wakes the namespace controller) tells
// it to look now.
func (r *Reconciler) stopForNamespace(ctx context.Context, c *slurmv1.SlurmCluster, ns *v1.Namespace) (ctrl.Result, error) {
	left, err := r.stopWorkers(ctx, c, ptr[int64](drainlessGrace))
	if err != nil || left > 0 {
		return ctrl.Result{RequeueAfter: 2 * time.Second}, err
	}
	key := wellknown.WorkersStoppedAnnotationPrefix + c.Name
	if _, done := ns.Annotations[key]; done {
		return ctrl.Result{}, nil
	}
	patch := client.MergeFrom(ns.DeepCopy())
	metav1.SetMetaDataAnnotation(&ns.ObjectMeta, key, time.Now().UTC().Format(time.RFC3339))
	return ctrl.Result{}, client.IgnoreNotFound(r.Client.Patch(ctx, ns, patch))
}

// BusyWorkersPDB names the cluster's PodDisruptionBudget of busy workers.
func BusyWorkersPDB(c *slurmv1.SlurmCluster) string { return c.Name + "-busy-workers" }

// ensureBusyWorkersPDB keeps the PodDisruptionBudget that lets no busy worker be evicted:
// it selects the workers labelled busy and asks that all of them stay (minAvailable = their
// number; maxUnavailable would need a scale subresource on the pods' owner, which a
// SlurmCluster has not). `kubectl drain` of a Kubernetes node waits until its worker's Slurm
// jobs are done. An idle worker may go; its wrapper drains it anyway. Deleting a pod is no
// eviction: scale-in is not held up, it drains.
func (r *Reconciler) ensureBusyWorkersPDB(ctx context.Context, c *slurmv1.SlurmCluster) error {
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: BusyWorkersPDB(c)}}
	if len(c.Spec.NodeSets) == 0 {
		return r.deleteOwned(ctx, c, pdb)
	}
	selector := componentLabels(c, componentSlurmd)
	selector[BusyLabel] = "true"
	busy := &v1.PodList{}
	if err := r.Client.List(ctx, busy, client.InNamespace(c.Namespace), client.MatchingLabels(selector)); err != nil {
		return fmt.Errorf("listing busy workers: %w", err)
	}
	_, err := controllerutil.CreateOrUpdate(ctx, r.Client, pdb, func() error {
		pdb.Labels = componentLabels(c, componentSlurmd)
		pdb.Spec.Selector = &metav1.LabelSelector{MatchLabels: selector}
		pdb.Spec.MinAvailable = ptr(intstr.FromInt32(int32(len(busy.Items))))
		pdb.Spec.MaxUnavailable = nil
		return controllerutil.SetControllerReference(c, pdb, r.Client.Scheme())
	})
	if err != nil {
		return fmt.Errorf("PodDisruptionBudget %s: %w", pdb.Name, err)
	}
	return nil
}

func (r *Reconciler) deleteWorker(ctx context.Context, c *slurmv1.SlurmCluster, p *v1.Pod, reason, why string) error {
	if err := r.Client.Delete(ctx, p, client.Preconditions{UID: &p.UID}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting worker pod %s: %w", p.Name, err)
	}
	typ := v1.EventTypeNormal
	if reason == wellknown.EventSlurmWorkerNotRegistered {
		typ = v1.EventTypeWarning
	}
	r.Recorder.Eventf(c, p, typ, reason, "RemoveWorker",
		"Deleted worker pod %s (Slurm node %s): %s", p.Name, p.Annotations[slurmNodeAnnotation], why)
	return nil
}

// unregistered: the worker's slurmd container ended because Slurm had no node of its name.
func unregistered(p *v1.Pod) bool {
	for _, cs := range p.Status.ContainerStatuses {
		for _, t := range []*v1.ContainerStateTerminated{cs.State.Terminated, cs.LastTerminationState.Terminated} {
			if t != nil && t.ExitCode == unregisteredExit {
				return true
			}
		}
	}
	return false
}

func isReady(p *v1.Pod) bool {
	for _, cond := range p.Status.Conditions {
		if cond.Type == v1.PodReady {
			return cond.Status == v1.ConditionTrue
		}
	}
	return false
}

func countReady(pods map[string]*v1.Pod) int32 {
	var n int32
	for _, p := range pods {
		if p.DeletionTimestamp == nil && isReady(p) {
			n++
		}
	}
	return n
}

func sortedKeys(m map[string]*v1.Pod) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
