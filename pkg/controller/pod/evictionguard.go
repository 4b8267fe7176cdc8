package pod

import (
	"context"
	"fmt"
	"strconv"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubeslurm/kubeslurm/pkg/slurm"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

// guardEviction keeps a PodDisruptionBudget allowing no disruption over the pods of a
// running placeholder job, so `kubectl drain` (which evicts) waits until Slurm ends the
// job — the drain in Slurm lets no new job start there meanwhile. The budget is owned by
// the pod, so it goes when the pod goes. A pod with kubeslurm.io/allow-eviction=true, or
// one another budget already covers, is left to its own disruption policy: two budgets over
// one pod would make every eviction of it fail.
func (r *Reconciler) guardEviction(ctx context.Context, pod *v1.Pod, job *slurm.Job) error {
	if pod.Annotations[wellknown.AllowEvictionAnnotation] == "true" {
		return nil
	}
	name := guardName(job.ID)
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: name}, &policyv1.PodDisruptionBudget{})
	if err == nil || !apierrors.IsNotFound(err) {
		return err
	}
	budgets := &policyv1.PodDisruptionBudgetList{}
	if err := r.Client.List(ctx, budgets, client.InNamespace(pod.Namespace)); err != nil {
		return err
	}
	for i := range budgets.Items {
		sel, err := metav1.LabelSelectorAsSelector(budgets.Items[i].Spec.Selector)
		if err == nil && !sel.Empty() && sel.Matches(labels.Set(pod.Labels)) {
			return nil
		}
	}
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: pod.Namespace,
			Name:      name,
			Labels:    map[string]string{wellknown.JobIDLabel: strconv.Itoa(int(job.ID))},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID,
			}},
		},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: ptr.To(intstr.FromInt32(0)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{
				wellknown.JobIDLabel: strconv.Itoa(int(job.ID)),
			}},
		},
	}
	if err := r.Client.Create(ctx, pdb); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating eviction guard: %w", err)
	}
	return nil
}

func guardName(id int32) string { return "slurmjob-" + strconv.Itoa(int(id)) }
