package slurmcluster

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	slurmv1 "github.com/kubeslurm/kubeslurm/api/v1alpha1"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

// A configuration reaches slurmctld in place: its container's script has it re-read the
// rendered files and writes the outcome onto its pod (slurmctldscript.go). slurmctld may
// refuse one that kubeslurm's validation let through (an unknown key, a plugin it cannot
// load); it then runs on with the one before. The configuration slurmctld last ran is kept
// in a second ConfigMap, mounted beside the rendered one: a slurmctld that starts again
// (its pod replaced) while the rendered one is refused starts from the kept one. slurmrestd,
// which reads slurm.conf only at its start, is given the kept one meanwhile (servedConfig).

const (
	ReasonRejectedBySlurmctld = "RejectedBySlurmctld"
	// failureMessageMax bounds the part of slurmctld's log put in a condition.
	failureMessageMax = 512
)

// AppliedConfigMapName is the ConfigMap that keeps the files of status.appliedConfigHash.
func AppliedConfigMapName(c *slurmv1.SlurmCluster) string { return c.Name + "-slurm-config-applied" }

// controllerPod is slurmctld's pod, nil while there is none.
func (r *Reconciler) controllerPod(ctx context.Context, c *slurmv1.SlurmCluster) (*v1.Pod, error) {
	p := &v1.Pod{}
	name := controllerPodName(c)
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: name}, p)
	if apierrors.IsNotFound(err) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("reading slurmctld pod %s: %w", name, err)
	}
	return p, nil
}

// servedConfig is the ConfigMap and hash slurmrestd is to read (the slurm.conf slurmctld
// runs): the rendered one, or the kept one while slurmctld rejects the rendered one.
func (r *Reconciler) servedConfig(ctx context.Context, c *slurmv1.SlurmCluster, status *slurmv1.SlurmClusterStatus) (string, string, error) {
	if !rejected(status) {
		return ConfigMapName(c), status.ConfigHash, nil
	}
	kept, err := r.appliedConfigKept(ctx, c, status)
	if err != nil || !kept {
		return ConfigMapName(c), status.ConfigHash, err
	}
	return AppliedConfigMapName(c), status.AppliedConfigHash, nil
}

// rejected: slurmctld refused the configuration the spec renders to, and it is not the one
// slurmctld ran before.
func rejected(status *slurmv1.SlurmClusterStatus) bool {
	return status.RejectedConfigHash != "" && status.RejectedConfigHash == status.ConfigHash &&
		status.AppliedConfigHash != status.ConfigHash
}

// appliedConfigKept: the kept ConfigMap holds the applied configuration's files.
func (r *Reconciler) appliedConfigKept(ctx context.Context, c *slurmv1.SlurmCluster, status *slurmv1.SlurmClusterStatus) (bool, error) {
	if status.AppliedConfigHash == "" {
		return false, nil
	}
	cm := &v1.ConfigMap{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: AppliedConfigMapName(c)}, cm)
	if apierrors.IsNotFound(err) {
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf("reading ConfigMap %s: %w", AppliedConfigMapName(c), err)
	}
	return metav1.IsControlledBy(cm, c) && cm.Annotations[wellknown.SlurmConfigHashAnnotation] == status.AppliedConfigHash, nil
}

// keepAppliedConfig copies the rendered ConfigMap, which holds hash, into the kept one. It
// reports false when the rendered ConfigMap does not hold hash (yet, in the cache).
func (r *Reconciler) keepAppliedConfig(ctx context.Context, c *slurmv1.SlurmCluster, hash string) (bool, error) {
	src := &v1.ConfigMap{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: ConfigMapName(c)}, src); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	if src.Annotations[wellknown.SlurmConfigHashAnnotation] != hash {
		return false, nil
	}
	dst := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: AppliedConfigMapName(c)}}
	if _, err := controllerutil.CreateOrUpdate(ctx, r.Client, dst, func() error {
		if !dst.CreationTimestamp.IsZero() && !metav1.IsControlledBy(dst, c) {
			return fmt.Errorf("ConfigMap %s exists and is not this SlurmCluster's", dst.Name)
		}
		fillConfigMap(dst, c, src.Data, hash)
		return controllerutil.SetControllerReference(c, dst, r.Client.Scheme())
	}); err != nil {
		return false, fmt.Errorf("keeping the applied configuration in ConfigMap %s: %w", dst.Name, err)
	}
	return true, nil
}

// slurmctldFailed: the slurmctld container of p is not running, was restarted at least
// once and its last run exited non-zero; why is that exit and the end of slurmctld's log
// (its termination message).
func slurmctldFailed(p *v1.Pod) (bool, string) {
	if isReady(p) {
		return false, ""
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name != componentSlurmctld {
			continue
		}
		term := cs.State.Terminated
		if term == nil {
			term = cs.LastTerminationState.Terminated
		}
		if cs.State.Running != nil || cs.RestartCount < 1 || term == nil || term.ExitCode == 0 {
			return false, ""
		}
		why := fmt.Sprintf("exit code %d", term.ExitCode)
		if log := failureLines(term.Message); log != "" {
			why += ": " + log
		}
		return true, why
	}
	return false, ""
}

var logPrefix = regexp.MustCompile(`^(\[[^\]]*\]\s*)?(slurmctld:\s*)?`)

// failureLines picks what says why from the end of slurmctld's log: the last fatal line
// (else the last line) with up to two error lines just before it; without timestamps,
// joined by "; " and bounded.
func failureLines(log string) string {
	var lines []string
	for _, l := range strings.Split(log, "\n") {
		if l = strings.TrimSpace(logPrefix.ReplaceAllString(strings.TrimSpace(l), "")); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		return ""
	}
	end := len(lines) - 1
	for i := end; i >= 0; i-- {
		if strings.HasPrefix(lines[i], "fatal:") {
			end = i
			break
		}
	}
	start := end
	for start > 0 && end-start < 2 && strings.HasPrefix(lines[start-1], "error:") {
		start--
	}
	out := strings.Join(lines[start:end+1], "; ")
	if len(out) > failureMessageMax {
		out = out[:failureMessageMax] + "..."
	}
	return out
}

// configApplied sets ConfigApplied from what slurmctld's script wrote on its ready pod:
// the configuration slurmctld runs (kept once it is the rendered one) and the last one it
// refused. It reports whether to look again soon.
func (r *Reconciler) configApplied(ctx context.Context, c *slurmv1.SlurmCluster, status *slurmv1.SlurmClusterStatus, p *v1.Pod) (bool, error) {
	name := controllerPodName(c)
	live := p != nil && p.DeletionTimestamp == nil
	ready := live && isReady(p)
	running, refused, reason := "", "", ""
	if live {
		refused, reason = p.Annotations[wellknown.SlurmctldRefusedConfigAnnotation], p.Annotations[wellknown.SlurmctldRefusedReasonAnnotation]
	}
	if ready {
		running = p.Annotations[wellknown.SlurmctldConfigAnnotation]
	}
	switch {
	case running != "" && running == status.ConfigHash:
		if ok, err := r.keepAppliedConfig(ctx, c, running); err != nil || !ok {
			// The rendered ConfigMap is newer in the API than in the cache: again soon.
			return !ok, err
		}
		status.RejectedConfigHash = ""
		if status.AppliedConfigHash != running {
			now := metav1.Now()
			if status.AppliedConfigHash != "" {
				status.LastReconfigureTime = &now
			}
			r.Recorder.Eventf(c, nil, v1.EventTypeNormal, wellknown.EventSlurmConfigApplied, "ApplyConfig",
				"slurmctld (pod %s) runs configuration %s (was %q)", name, running, status.AppliedConfigHash)
			status.AppliedConfigHash = running
		}
		setCondition(status, c.Generation, slurmv1.ConditionConfigApplied, metav1.ConditionTrue, ReasonControllerRunning,
			fmt.Sprintf("slurmctld runs configuration %s", running))
	case refused != "" && refused == status.ConfigHash && refused != status.AppliedConfigHash:
		msg := fmt.Sprintf("slurmctld refused configuration %s", refused)
		if why := failureLines(reason); why != "" {
			msg += ": " + why
		}
		if running != "" {
			msg += fmt.Sprintf("; it runs configuration %s until the spec changes", running)
		} else {
			msg += "; it is not running: it starts on the spec's next configuration at once, and tries this one again every minute"
		}
		setCondition(status, c.Generation, slurmv1.ConditionConfigApplied, metav1.ConditionFalse, ReasonRejectedBySlurmctld, msg)
		if status.RejectedConfigHash != refused {
			status.RejectedConfigHash = refused
			r.Recorder.Eventf(c, nil, v1.EventTypeWarning, wellknown.EventSlurmConfigRejected, "ApplyConfig", "%s", msg)
		}
	case running != "":
		setCondition(status, c.Generation, slurmv1.ConditionConfigApplied, metav1.ConditionFalse, ReasonControllerWaiting,
			fmt.Sprintf("slurmctld runs configuration %s; it is told to read %s", running, status.ConfigHash))
		// No poll: the script's report changes the pod, whose watch queues the cluster.
	case ready:
		setCondition(status, c.Generation, slurmv1.ConditionConfigApplied, metav1.ConditionFalse, ReasonControllerWaiting,
			fmt.Sprintf("slurmctld pod %s has not said which configuration slurmctld runs yet (its annotation %s)",
				name, wellknown.SlurmctldConfigAnnotation))
	default:
		setCondition(status, c.Generation, slurmv1.ConditionConfigApplied, metav1.ConditionFalse, ReasonControllerWaiting,
			fmt.Sprintf("slurmctld pod %s is not ready; it will run configuration %s", name, status.ConfigHash))
	}
	return false, nil
}

// controllerPodCluster queues the cluster of a slurmctld pod: its container's exits
// (a rejected configuration) change no object the reconciler owns.
func controllerPodCluster(_ context.Context, o client.Object) []reconcile.Request {
	l := o.GetLabels()
	if l[wellknown.SlurmComponentLabel] != componentSlurmctld || l[wellknown.SlurmClusterLabel] == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: l[wellknown.SlurmClusterLabel]}}}
}
