package slurmcluster

import (
	"context"
	"fmt"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	slurmv1 "github.com/kubeslurm/kubeslurm/api/v1alpha1"
	"github.com/kubeslurm/kubeslurm/pkg/computedomain"
	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

// computeDomainPoll: how often the ComputeDomain is read again while spec.computeDomain is
// enabled. It is not watched: a watch on a kind the API server may not serve (no NVIDIA
// driver) would hold up the manager's start; one GET per cluster is cheap.
const computeDomainPoll = 10 * time.Second

// Reasons of ComputeDomainReady.
const (
	ReasonComputeDomainReady       = "ComputeDomainReady"
	ReasonComputeDomainNotReady    = "ComputeDomainNotReady"
	ReasonComputeDomainCRDMissing  = "ComputeDomainCRDMissing"
	ReasonComputeDomainNotOurs     = "ComputeDomainNotOurs"
	ReasonComputeDomainSpecDiffers = "ComputeDomainSpecDiffers"
	ReasonComputeDomainUnreadable  = "ComputeDomainUnreadable"
	ReasonComputeDomainDeleting    = "ComputeDomainDeleting"
	computeDomainSuffix            = "-compute-domain"
	computeDomainChannelSuffix     = "-compute-domain-channel"
)

// ComputeDomainName is the name of the cluster's ComputeDomain: the spec's, or
// <cluster>-compute-domain.
func ComputeDomainName(c *slurmv1.SlurmCluster) string {
	if cd := c.Spec.ComputeDomain; cd != nil && cd.Name != "" {
		return cd.Name
	}
	return c.Name + computeDomainSuffix
}

// ComputeDomainSpec is the ComputeDomain's spec as the SlurmCluster asks for it: numNodes 0,
// the channel template of the spec or <cluster>-compute-domain-channel.
func ComputeDomainSpec(c *slurmv1.SlurmCluster) computedomain.Spec {
	s := computedomain.Spec{NumNodes: 0, ResourceClaimTemplateName: c.Name + computeDomainChannelSuffix}
	if cd := c.Spec.ComputeDomain; cd != nil {
		if cd.ResourceClaimTemplateName != "" {
			s.ResourceClaimTemplateName = cd.ResourceClaimTemplateName
		}
		s.AllocationMode = string(cd.AllocationMode)
	}
	return s
}

// ensureComputeDomain keeps the one ComputeDomain of spec.computeDomain: created with
// numNodes 0 and owned by the cluster, never rewritten (its spec is immutable), its
// membership (written by NVIDIA's driver) copied into status.computeDomain, and
// ComputeDomainReady set. It reports whether to look again later. An API server without
// the ComputeDomain kind is a condition, not an error: the rest of the cluster reconciles.
// Any other read error is returned: an unreadable ComputeDomain is not taken for absent.
func (r *Reconciler) ensureComputeDomain(ctx context.Context, c *slurmv1.SlurmCluster, status *slurmv1.SlurmClusterStatus) (bool, error) {
	if !c.ComputeDomainEnabled() {
		// Not deleted when disabled: pods may still hold its channel (docs/topology.md).
		meta.RemoveStatusCondition(&status.Conditions, slurmv1.ConditionComputeDomainReady)
		status.ComputeDomain = nil
		return false, nil
	}
	name, want := ComputeDomainName(c), ComputeDomainSpec(c)
	cd := computedomain.Empty()
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: name}, cd)
	switch {
	case meta.IsNoMatchError(err):
		r.computeDomainCRDMissing(c, status)
		return true, nil
	case apierrors.IsNotFound(err):
		cd = computedomain.New(c.Namespace, name, want)
		cd.SetLabels(map[string]string{wellknown.SlurmClusterLabel: c.Name})
		if err := controllerutil.SetControllerReference(c, cd, r.Client.Scheme()); err != nil {
			return false, err
		}
		err := r.Client.Create(ctx, cd)
		switch {
		// NotFound on create: the kind went away after the client learnt its mapping
		// (the namespace exists: the SlurmCluster is in it).
		case meta.IsNoMatchError(err) || apierrors.IsNotFound(err):
			r.computeDomainCRDMissing(c, status)
			return true, nil
		case err != nil:
			return false, fmt.Errorf("creating ComputeDomain %s: %w", name, err)
		}
		r.Recorder.Eventf(c, cd, v1.EventTypeNormal, wellknown.EventComputeDomainCreated, "CreateComputeDomain",
			"Created ComputeDomain %s (%s)", name, want)
	case err != nil:
		return false, fmt.Errorf("reading ComputeDomain %s: %w", name, err)
	}

	if !metav1.IsControlledBy(cd, c) {
		status.ComputeDomain = nil
		r.computeDomainProblem(c, cd, status, ReasonComputeDomainNotOurs,
			fmt.Sprintf("ComputeDomain %s exists and is not this SlurmCluster's; it is left as it is", name))
		return true, nil
	}
	if cd.GetDeletionTimestamp() != nil {
		// NVIDIA's driver holds a domain with a finalizer until its pods are gone.
		status.ComputeDomain = nil
		setCondition(status, c.Generation, slurmv1.ConditionComputeDomainReady, metav1.ConditionFalse, ReasonComputeDomainDeleting,
			fmt.Sprintf("ComputeDomain %s is being deleted; it is created anew once it is gone", name))
		return true, nil
	}
	st, stErr := computedomain.ReadStatus(cd)
	status.ComputeDomain = &slurmv1.ComputeDomainStatus{
		Name: name, ResourceClaimTemplateName: want.ResourceClaimTemplateName,
		Status: st.Status, NodeCount: int32(len(st.Nodes)), Nodes: st.Nodes,
	}
	got, err := computedomain.ReadSpec(cd)
	switch {
	case err != nil:
		r.computeDomainProblem(c, cd, status, ReasonComputeDomainSpecDiffers,
			fmt.Sprintf("ComputeDomain %s has a spec kubeslurm cannot read (%v); it is left as it is", name, err))
		return true, nil
	case !got.Equal(want):
		// The spec is immutable: replacing the object would pull the channel from under the
		// running workers, so that is the user's call.
		status.ComputeDomain.ResourceClaimTemplateName = got.ResourceClaimTemplateName
		r.computeDomainProblem(c, cd, status, ReasonComputeDomainSpecDiffers,
			fmt.Sprintf("ComputeDomain %s has %s, spec.computeDomain asks for %s; its spec is immutable: delete it, once no pod uses its channel, to have it created anew", name, got, want))
		return true, nil
	case stErr != nil:
		setCondition(status, c.Generation, slurmv1.ConditionComputeDomainReady, metav1.ConditionFalse, ReasonComputeDomainUnreadable,
			fmt.Sprintf("ComputeDomain %s: its status cannot be read: %v", name, stErr))
		return true, nil
	}
	nodes := fmt.Sprintf("%d node(s)", len(st.Nodes))
	if len(st.Nodes) > 0 {
		nodes += ": " + strings.Join(st.Nodes, ",")
	}
	switch st.Status {
	case computedomain.StatusReady:
		setCondition(status, c.Generation, slurmv1.ConditionComputeDomainReady, metav1.ConditionTrue, ReasonComputeDomainReady,
			fmt.Sprintf("ComputeDomain %s is Ready with %s", name, nodes))
	case "":
		setCondition(status, c.Generation, slurmv1.ConditionComputeDomainReady, metav1.ConditionFalse, ReasonComputeDomainNotReady,
			fmt.Sprintf("ComputeDomain %s has no status yet: NVIDIA's DRA driver for GPUs has not reported on it (is it installed?)", name))
	default:
		setCondition(status, c.Generation, slurmv1.ConditionComputeDomainReady, metav1.ConditionFalse, ReasonComputeDomainNotReady,
			fmt.Sprintf("ComputeDomain %s is %s with %s", name, st.Status, nodes))
	}
	return true, nil
}

// computeDomainCRDMissing reports an API server without NVIDIA's ComputeDomain kind.
// The message is the same every time, so the event is recorded once.
func (r *Reconciler) computeDomainCRDMissing(c *slurmv1.SlurmCluster, status *slurmv1.SlurmClusterStatus) {
	status.ComputeDomain = nil
	msg := fmt.Sprintf("the API server does not serve %s (%s): install NVIDIA's DRA driver for GPUs, or disable spec.computeDomain; looked for again every %s",
		computedomain.Resource, computedomain.GVK.GroupVersion(), computeDomainPoll)
	if setCondition(status, c.Generation, slurmv1.ConditionComputeDomainReady, metav1.ConditionFalse, ReasonComputeDomainCRDMissing, msg) {
		r.Recorder.Eventf(c, nil, v1.EventTypeWarning, wellknown.EventComputeDomainCRDMissing, "EnsureComputeDomain", "%s", msg)
	}
}

// computeDomainProblem sets ComputeDomainReady False with a warning event on a change.
func (r *Reconciler) computeDomainProblem(c *slurmv1.SlurmCluster, cd *unstructured.Unstructured, status *slurmv1.SlurmClusterStatus, reason, msg string) {
	if setCondition(status, c.Generation, slurmv1.ConditionComputeDomainReady, metav1.ConditionFalse, reason, msg) {
		r.Recorder.Eventf(c, cd, v1.EventTypeWarning, wellknown.EventComputeDomainMismatch, "EnsureComputeDomain", "%s", msg)
	}
}
