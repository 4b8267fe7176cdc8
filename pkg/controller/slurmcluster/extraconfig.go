package slurmcluster

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	slurmv1 "github.com/kubeslurm/kubeslurm/api/v1alpha1"
	"github.com/kubeslurm/kubeslurm/pkg/slurmconf"
)

// refusedSource is a spec.extraConfigFrom the user must fix (its ConfigMap or key is
// missing): refused like an invalid spec, not retried as an error.
type refusedSource struct{ msg string }

func (e refusedSource) Error() string { return e.msg }

// extraConfigFrom is the render option of spec.extraConfigFrom (nil without it). A missing
// ConfigMap or key, unless optional, is a refusedSource; any other read error is returned
// as it is, so nothing is rendered from a ConfigMap that could not be read (fail closed).
func (r *Reconciler) extraConfigFrom(ctx context.Context, c *slurmv1.SlurmCluster) (slurmconf.Option, error) {
	ref := c.Spec.ExtraConfigFrom
	if ref == nil {
		return nil, nil
	}
	from := fmt.Sprintf("ConfigMap %s, key %s", ref.Name, ref.Key)
	optional := ref.Optional != nil && *ref.Optional
	cm := &v1.ConfigMap{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: ref.Name}, cm)
	switch {
	case apierrors.IsNotFound(err) && optional:
		return slurmconf.WithExtraConfigFrom(from, ""), nil
	case apierrors.IsNotFound(err):
		return nil, refusedSource{fmt.Sprintf("extraConfigFrom: ConfigMap %s does not exist", ref.Name)}
	case err != nil:
		return nil, fmt.Errorf("reading ConfigMap %s of spec.extraConfigFrom: %w", ref.Name, err)
	}
	text, ok := cm.Data[ref.Key]
	if !ok && !optional {
		return nil, refusedSource{fmt.Sprintf("extraConfigFrom: ConfigMap %s has no key %s", ref.Name, ref.Key)}
	}
	return slurmconf.WithExtraConfigFrom(from, text), nil
}

// extraConfigFromField indexes SlurmClusters by the ConfigMap their spec.extraConfigFrom
// names, so that a ConfigMap's change finds its clusters without listing the namespace's.
const extraConfigFromField = "spec.extraConfigFrom.name"

// extraConfigFromName is the extraConfigFromField index of a SlurmCluster.
func extraConfigFromName(o client.Object) []string {
	if ref := o.(*slurmv1.SlurmCluster).Spec.ExtraConfigFrom; ref != nil {
		return []string{ref.Name}
	}
	return nil
}

// clustersReferencing queues the SlurmClusters of the ConfigMap's namespace whose
// spec.extraConfigFrom names it.
func (r *Reconciler) clustersReferencing(ctx context.Context, o client.Object) []reconcile.Request {
	list := &slurmv1.SlurmClusterList{}
	if err := r.Client.List(ctx, list, client.InNamespace(o.GetNamespace()), client.MatchingFields{extraConfigFromField: o.GetName()}); err != nil {
		log.FromContext(ctx).Error(err, "Listing SlurmClusters after a ConfigMap change; their configuration follows at the next resync",
			"configMap", client.ObjectKeyFromObject(o))
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, c := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&c)})
	}
	return reqs
}
