// Package slurmcluster reconciles a SlurmCluster's configuration: the auth/slurm and
// auth/jwt key Secrets (generated once when the spec names none, never rotated) and the
// ConfigMap with slurm.conf and cgroup.conf rendered from the spec (pkg/slurmconf), and the
// NVIDIA ComputeDomain of spec.computeDomain (computedomain.go). A spec that does not render
// (refused user config) sets ConfigValid False with the reason and leaves the last good
// ConfigMap in place. It runs slurmctld as a StatefulSet of one pod behind a headless
// Service (slurmctld.go), slurmdbd (accounting.go), slurmrestd (restapi.go) and the
// NodeSets' slurmd pods (nodeset.go).
package slurmcluster

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	slurmv1 "github.com/kubeslurm/kubeslurm/api/v1alpha1"
	"github.com/kubeslurm/kubeslurm/pkg/slurmconf"
	"github.com/kubeslurm/kubeslurm/pkg/topology"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

const (
	// SlurmKeyName and JWTKeyName are the data keys of the generated Secrets.
	SlurmKeyName = "slurm.key"
	JWTKeyName   = "jwt_hs256.key"
	// Sizes of generated keys: auth/slurm's key as Slurm's docs make it (1 KiB from
	// /dev/random); the HS256 key 64 bytes, more than the 32 HS256 needs.
	slurmKeyBytes = 1024
	jwtKeyBytes   = 64
	// keyRetry: how soon a missing referenced Secret is looked for again.
	keyRetry = 10 * time.Second
	// configPoll: how soon the applied configuration is kept again when the cache did not
	// yet hold the rendered ConfigMap.
	configPoll = 2 * time.Second

	// Condition reasons.
	ReasonRendered        = "Rendered"
	ReasonInvalidConfig   = "InvalidConfig"
	ReasonConfigMapOwned  = "ConfigMapNotOurs"
	ReasonKeysPresent     = "KeysPresent"
	ReasonKeySecretAbsent = "KeySecretMissing"
)

// ConfigMapName is the name of the cluster's rendered configuration.
func ConfigMapName(c *slurmv1.SlurmCluster) string { return c.Name + "-slurm-config" }

// SlurmKeySecret and JWTKeySecret are the Secret and data key of each key: the spec's
// reference, or the one generated for the cluster.
func SlurmKeySecret(c *slurmv1.SlurmCluster) (name, key string) {
	if r := c.Spec.Auth.SlurmKeyRef; r != nil {
		return r.Name, r.Key
	}
	return c.Name + "-slurm-key", SlurmKeyName
}

func JWTKeySecret(c *slurmv1.SlurmCluster) (name, key string) {
	if r := c.Spec.Auth.JWTKeyRef; r != nil {
		return r.Name, r.Key
	}
	return c.Name + "-jwt-key", JWTKeyName
}

// Reconciler reconciles one SlurmCluster's keys and configuration.
type Reconciler struct {
	// Client is the manager's cached client (SlurmClusters, ConfigMaps, Nodes). Secrets
	// are only ever created through it, never read.
	Client   client.Client
	Recorder events.EventRecorder
	// Identity signs the controller's tokens to each cluster's Slurm (its JWKS goes into
	// their configuration); nil: the controller does not talk to their Slurm.
	Identity *Identity

	slurm slurmClients
}

// allClusters queues every SlurmCluster: a node's change may add or remove a worker of any.
func (r *Reconciler) allClusters(ctx context.Context, _ client.Object) []reconcile.Request {
	list := &slurmv1.SlurmClusterList{}
	if err := r.Client.List(ctx, list); err != nil {
		log.FromContext(ctx).Error(err, "Listing SlurmClusters after a node change; their workers follow at the next resync")
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, c := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&c)})
	}
	return reqs
}

// SetupWithManager registers the reconciler; a change to a ConfigMap it made queues its cluster.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &slurmv1.SlurmCluster{}, extraConfigFromField, extraConfigFromName); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("slurmcluster").
		For(&slurmv1.SlurmCluster{}).
		Owns(&v1.ConfigMap{}).
		// The ConfigMap a cluster's spec.extraConfigFrom names.
		Watches(&v1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(r.clustersReferencing)).
		Owns(&v1.Service{}).
		Owns(&appsv1.StatefulSet{}).
		Owns(&appsv1.Deployment{}).
		Owns(&policyv1.PodDisruptionBudget{}).
		Owns(&v1.Pod{}).
		Owns(&v1.ServiceAccount{}).
		Owns(&rbacv1.Role{}).
		Owns(&rbacv1.RoleBinding{}).
		// slurmctld's pod (the StatefulSet's): its readiness, and the outcome of each
		// configuration its script writes on it.
		Watches(&v1.Pod{}, handler.EnqueueRequestsFromMapFunc(controllerPodCluster)).
		// DaemonSet-mode NodeSets follow the nodes their selectors match.
		// Their GPU counts (nodeSets[].gpus) come from the nodes' allocatable resources,
		// their topology blocks from the nodes' labels and block annotation.
		Watches(&v1.Node{}, handler.EnqueueRequestsFromMapFunc(r.allClusters), builder.WithPredicates(
			predicate.Or[client.Object](predicate.LabelChangedPredicate{}, allocatableChanged, blockAnnotationChanged))).
		Complete(r)
}

// Reconcile brings the keys, the ConfigMap and the status in line with the spec.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	c := &slurmv1.SlurmCluster{}
	if err := r.Client.Get(ctx, req.NamespacedName, c); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if c.DeletionTimestamp != nil {
		return r.teardown(ctx, c)
	}
	if ns, err := r.terminatingNamespace(ctx, c.Namespace); err != nil {
		return ctrl.Result{}, err
	} else if ns != nil {
		return r.stopForNamespace(ctx, c, ns)
	}
	if controllerutil.AddFinalizer(c, WorkersFinalizer) {
		if err := r.Client.Update(ctx, c); err != nil {
			return ctrl.Result{}, err
		}
	}
	status := c.Status.DeepCopy()
	var result ctrl.Result
	if err := r.ensureKeys(ctx, c, status); isKeyProblem(err) {
		// Secrets are not watched: look for a missing one again.
		result.RequeueAfter = keyRetry
	} else if err != nil {
		return ctrl.Result{}, err
	}
	// The workers the NodeSets ask for: their nodes place them in topology.yaml too.
	want, err := r.desiredWorkerList(ctx, c)
	if err != nil {
		return ctrl.Result{}, err
	}
	// Pods that cannot be made (storage they cannot take, bad node options) are refused
	// with the configuration (ConfigValid).
	podsErr := validatePods(c)
	if err := r.ensureConfig(ctx, c, status, want, podsErr); err != nil {
		return ctrl.Result{}, err
	}
	// After the configuration: a ComputeDomain problem must not hold slurm.conf back.
	if poll, err := r.ensureComputeDomain(ctx, c, status); err != nil {
		return ctrl.Result{}, err
	} else if poll {
		requeueWithin(&result, computeDomainPoll)
	}
	// Before slurmctld: a new slurmctld registers the cluster with slurmdbd.
	if poll, err := r.ensureAccounting(ctx, c, status); err != nil {
		return ctrl.Result{}, err
	} else if poll {
		requeueWithin(&result, keyRetry)
	}
	if poll, err := r.ensureController(ctx, c, status); err != nil {
		return ctrl.Result{}, err
	} else if poll {
		requeueWithin(&result, configPoll)
	}
	if err := r.ensureRestAPI(ctx, c, status); err != nil {
		return ctrl.Result{}, err
	}
	// Pods that cannot be made (ConfigValid says why) leave the login and worker pods as
	// they are, as an invalid configuration leaves the running one.
	if podsErr == nil {
		if poll, err := r.ensureLogins(ctx, c, status); err != nil {
			return ctrl.Result{}, err
		} else if poll {
			requeueWithin(&result, keyRetry)
		}
		ready, err := r.ensureWorkers(ctx, c, status, want)
		if err != nil {
			return ctrl.Result{}, err
		}
		status.DesiredWorkers, status.ReadyWorkers = int32(len(want)), ready
	}
	if r.observeSlurm(ctx, c, status, want) {
		requeueWithin(&result, observePoll)
	}
	// After the busy labels: the budget counts them.
	if err := r.ensureBusyWorkersPDB(ctx, c); err != nil {
		return ctrl.Result{}, err
	}
	status.ObservedGeneration = c.Generation
	if !equality.Semantic.DeepEqual(&c.Status, status) {
		c.Status = *status
		if err := r.Client.Status().Update(ctx, c); err != nil {
			return ctrl.Result{}, err
		}
	}
	return result, nil
}

// keyProblem is a key the spec names that cannot be used: the user must act, retrying
// will not help (a later change of the cluster reconciles again).
type keyProblem struct{ msg string }

func (e keyProblem) Error() string { return e.msg }

func isKeyProblem(err error) bool { _, ok := err.(keyProblem); return ok }

// ensureKeys sets KeysReady: both key Secrets exist, a missing one the spec does not name
// generated. The controller may create Secrets but not read them (it must not see every
// Secret of the cluster), so existence is learnt from create itself: AlreadyExists means
// the Secret is there and it is left as it is; a referenced Secret is probed with a
// dry-run create, which never writes. Its content is checked by the daemons that mount it.
func (r *Reconciler) ensureKeys(ctx context.Context, c *slurmv1.SlurmCluster, status *slurmv1.SlurmClusterStatus) error {
	wasReady := meta.IsStatusConditionTrue(status.Conditions, slurmv1.ConditionKeysReady)
	var problems []string
	for _, k := range []struct {
		what string
		ref  *v1.SecretKeySelector
		name func(*slurmv1.SlurmCluster) (string, string)
		size int
	}{
		{"auth/slurm key", c.Spec.Auth.SlurmKeyRef, SlurmKeySecret, slurmKeyBytes},
		{"auth/jwt key", c.Spec.Auth.JWTKeyRef, JWTKeySecret, jwtKeyBytes},
	} {
		name, key := k.name(c)
		if k.ref != nil {
			exists, err := r.secretExists(ctx, c.Namespace, name)
			if err != nil {
				return err
			}
			if !exists {
				problems = append(problems, fmt.Sprintf("Secret %s of the %s (spec.auth) does not exist", name, k.what))
			}
			continue
		}
		// Each event names its Secret as the related object: the events of one pass
		// would otherwise share one series (same object version, reason and action),
		// which shows only the first note.
		created, err := r.generateKey(ctx, c, name, key, k.size)
		switch {
		case err != nil:
			return err
		case created != nil && wasReady:
			// The generated Secret was deleted: the new key differs from the one every
			// daemon holds. Say so loudly; it is not a silent rotation.
			r.Recorder.Eventf(c, created, v1.EventTypeWarning, wellknown.EventSlurmKeyRegenerated, "GenerateKey",
				"Secret %s of the %s was deleted; generated a new key: every Slurm daemon must restart with it", name, k.what)
		case created != nil:
			r.Recorder.Eventf(c, created, v1.EventTypeNormal, wellknown.EventSlurmKeyGenerated, "GenerateKey",
				"Generated the %s into Secret %s", k.what, name)
		}
	}
	if len(problems) > 0 {
		msg := strings.Join(problems, "; ")
		if setCondition(status, c.Generation, slurmv1.ConditionKeysReady, metav1.ConditionFalse, ReasonKeySecretAbsent, msg) {
			r.Recorder.Eventf(c, nil, v1.EventTypeWarning, wellknown.EventSlurmKeyMissing, "CheckKeys", "%s", msg)
		}
		return keyProblem{msg}
	}
	slurmName, _ := SlurmKeySecret(c)
	jwtName, _ := JWTKeySecret(c)
	setCondition(status, c.Generation, slurmv1.ConditionKeysReady, metav1.ConditionTrue, ReasonKeysPresent,
		fmt.Sprintf("Secrets %s and %s exist", slurmName, jwtName))
	return nil
}

// secretExists probes a Secret with a dry-run create of an empty one: AlreadyExists says
// it is there, without the right to read it.
func (r *Reconciler) secretExists(ctx context.Context, ns, name string) (bool, error) {
	probe := &v1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	err := r.Client.Create(ctx, probe, client.DryRunAll)
	switch {
	case apierrors.IsAlreadyExists(err):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("probing Secret %s: %w", name, err)
	}
	return false, nil
}

// generateKey creates the Secret with a new random key and returns it, unless it exists
// (then nil: an existing Secret is never written to).
func (r *Reconciler) generateKey(ctx context.Context, c *slurmv1.SlurmCluster, name, key string, size int) (*v1.Secret, error) {
	b := make([]byte, size)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	return r.createSecret(ctx, c, name, key, b)
}

// createSecret creates the cluster's Secret name with data under key and returns it,
// unless it exists (then nil: an existing Secret is never written to).
func (r *Reconciler) createSecret(ctx context.Context, c *slurmv1.SlurmCluster, name, key string, b []byte) (*v1.Secret, error) {
	s := &v1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: name, Labels: map[string]string{wellknown.SlurmClusterLabel: c.Name}},
		Type:       v1.SecretTypeOpaque,
		Data:       map[string][]byte{key: b},
	}
	if err := controllerutil.SetControllerReference(c, s, r.Client.Scheme()); err != nil {
		return nil, err
	}
	err := r.Client.Create(ctx, s)
	switch {
	case apierrors.IsAlreadyExists(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("creating Secret %s: %w", name, err)
	}
	return s, nil
}

// ensureConfig renders the spec into the ConfigMap and sets ConfigValid. A spec that does
// not render leaves the ConfigMap as it is.
func (r *Reconciler) ensureConfig(ctx context.Context, c *slurmv1.SlurmCluster, status *slurmv1.SlurmClusterStatus, want []worker, podsErr error) error {
	var opts []slurmconf.Option
	if r.Identity != nil {
		opts = append(opts, slurmconf.WithJWKS(r.Identity.JWKS()))
	}
	var badBlocks []topology.NodeError
	if c.Spec.Topology != nil {
		t, bad, err := renderTopology(c, want)
		if err != nil {
			return err
		}
		opts, badBlocks = append(opts, slurmconf.WithTopology(t)), bad
	}
	// spec.extraConfigFrom's text: unreadable is an error (nothing changes), missing is a
	// refusal like an invalid spec.
	extra, err := r.extraConfigFrom(ctx, c)
	if err != nil && !errors.As(err, new(refusedSource)) {
		return err
	}
	var files slurmconf.Files
	if err == nil {
		if extra != nil {
			opts = append(opts, extra)
		}
		files, err = slurmconf.Render(c, opts...)
	}
	if err == nil {
		err = podsErr
	}
	if err != nil {
		msg := err.Error() + "; the last valid configuration stays in place"
		if setCondition(status, c.Generation, slurmv1.ConditionConfigValid, metav1.ConditionFalse, ReasonInvalidConfig, msg) {
			r.Recorder.Eventf(c, nil, v1.EventTypeWarning, wellknown.EventSlurmConfigRefused, "RenderConfig", "%s", msg)
		}
		return nil
	}
	hash := files.Hash()
	cm := &v1.ConfigMap{}
	key := client.ObjectKey{Namespace: c.Namespace, Name: ConfigMapName(c)}
	err = r.Client.Get(ctx, key, cm)
	switch {
	case apierrors.IsNotFound(err):
		cm = &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
		fillConfigMap(cm, c, files, hash)
		if err := controllerutil.SetControllerReference(c, cm, r.Client.Scheme()); err != nil {
			return err
		}
		if err := r.Client.Create(ctx, cm); err != nil {
			return fmt.Errorf("creating ConfigMap %s: %w", key.Name, err)
		}
		r.configChanged(c, status, hash, "Created")
		r.tellInvalidBlocks(c, badBlocks)
	case err != nil:
		return err
	case !metav1.IsControlledBy(cm, c):
		msg := fmt.Sprintf("ConfigMap %s exists and is not this SlurmCluster's", key.Name)
		if setCondition(status, c.Generation, slurmv1.ConditionConfigValid, metav1.ConditionFalse, ReasonConfigMapOwned, msg) {
			r.Recorder.Eventf(c, nil, v1.EventTypeWarning, wellknown.EventSlurmConfigRefused, "RenderConfig", "%s", msg)
		}
		return nil
	default:
		before := cm.DeepCopy()
		fillConfigMap(cm, c, files, hash)
		if !equality.Semantic.DeepEqual(before, cm) {
			if err := r.Client.Update(ctx, cm); err != nil {
				return fmt.Errorf("updating ConfigMap %s: %w", key.Name, err)
			}
			r.configChanged(c, status, hash, "Updated")
			r.tellInvalidBlocks(c, badBlocks)
		}
	}
	status.ConfigMap, status.ConfigHash = key.Name, hash
	setCondition(status, c.Generation, slurmv1.ConditionConfigValid, metav1.ConditionTrue, ReasonRendered,
		fmt.Sprintf("ConfigMap %s holds configuration %s", key.Name, hash))
	return nil
}

func (r *Reconciler) configChanged(c *slurmv1.SlurmCluster, status *slurmv1.SlurmClusterStatus, hash, verb string) {
	now := metav1.Now()
	status.ConfigUpdateTime = &now
	r.Recorder.Eventf(c, nil, v1.EventTypeNormal, wellknown.EventSlurmConfigUpdated, "RenderConfig",
		"%s ConfigMap %s with configuration %s (was %q)", verb, ConfigMapName(c), hash, c.Status.ConfigHash)
}

// fillConfigMap sets what kubeslurm owns of the ConfigMap, leaving other labels and
// annotations alone.
func fillConfigMap(cm *v1.ConfigMap, c *slurmv1.SlurmCluster, files slurmconf.Files, hash string) {
	if cm.Labels == nil {
		cm.Labels = map[string]string{}
	}
	cm.Labels[wellknown.SlurmClusterLabel] = c.Name
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	cm.Annotations[wellknown.SlurmConfigHashAnnotation] = hash
	cm.Data = maps.Clone(files)
	cm.Data[ConfigHashFile] = hash
	cm.BinaryData = nil
}

// setCondition sets a condition and reports whether its status, reason or message changed
// (events are recorded on changes only, not on every reconcile).
func setCondition(status *slurmv1.SlurmClusterStatus, gen int64, typ string, s metav1.ConditionStatus, reason, msg string) bool {
	old := meta.FindStatusCondition(status.Conditions, typ)
	changed := old == nil || old.Status != s || old.Reason != reason || old.Message != msg
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{
		Type: typ, Status: s, Reason: reason, Message: msg, ObservedGeneration: gen,
	})
	return changed
}

// requeueWithin has the result requeue after d at the latest (the soonest of its polls wins).
func requeueWithin(result *ctrl.Result, d time.Duration) {
	if result.RequeueAfter == 0 || d < result.RequeueAfter {
		result.RequeueAfter = d
	}
}

// blockAnnotationChanged passes node updates that change the node's topology block
// annotation: other annotations change more often and place nothing.
var blockAnnotationChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		oldBlock, oldSet := e.ObjectOld.GetAnnotations()[wellknown.TopologyBlockAnnotation]
		newBlock, newSet := e.ObjectNew.GetAnnotations()[wellknown.TopologyBlockAnnotation]
		return oldBlock != newBlock || oldSet != newSet // set empty is an invalid name, told
	},
}

// allocatableChanged passes node updates that change the node's allocatable resources.
var allocatableChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, okOld := e.ObjectOld.(*v1.Node)
		n, okNew := e.ObjectNew.(*v1.Node)
		return okOld && okNew && !equality.Semantic.DeepEqual(o.Status.Allocatable, n.Status.Allocatable)
	},
}
