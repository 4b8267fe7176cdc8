package slurmcluster

import (
	"errors"
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"

	slurmv1 "github.com/kubeslurm/kubeslurm/api/v1alpha1"
)

// addStorage adds the user's volumes to a daemon's pod and their mounts to the given
// containers. A volume name or a mount path the pod already has (kubeslurm's own) is
// refused, and so is a mount of a volume the user did not give.
func addStorage(spec *v1.PodSpec, s slurmv1.PodStorage, containers ...int) error {
	for _, vol := range s.Volumes {
		if slices.ContainsFunc(spec.Volumes, func(o v1.Volume) bool { return o.Name == vol.Name }) {
			return fmt.Errorf("volume %q: the name is kubeslurm's own", vol.Name)
		}
	}
	for _, m := range s.VolumeMounts {
		if !slices.ContainsFunc(s.Volumes, func(v v1.Volume) bool { return v.Name == m.Name }) {
			return fmt.Errorf("volumeMount %s: no volume %q among the volumes", m.MountPath, m.Name)
		}
		for _, i := range containers {
			if slices.ContainsFunc(spec.Containers[i].VolumeMounts, func(o v1.VolumeMount) bool { return o.MountPath == m.MountPath }) {
				return fmt.Errorf("volumeMount %s: kubeslurm mounts its own volume there", m.MountPath)
			}
		}
	}
	spec.Volumes = append(spec.Volumes, s.Volumes...)
	for _, i := range containers {
		spec.Containers[i].VolumeMounts = append(spec.Containers[i].VolumeMounts, s.VolumeMounts...)
	}
	return nil
}

// validatePods says why a NodeSet's or LoginSet's pods cannot be made as the spec asks
// (storage that cannot be added, a worker's node options): it builds each set's pod as the
// controller would.
func validatePods(c *slurmv1.SlurmCluster) error {
	var errs []error
	for i := range c.Spec.NodeSets {
		set := &c.Spec.NodeSets[i]
		if _, err := workerPod(c, worker{set: set, slurm: "probe", kubeNode: "probe"}); err != nil {
			errs = append(errs, fmt.Errorf("nodeSets[%s]: %w", set.Name, err))
		}
	}
	for i := range c.Spec.LoginSets {
		set := &c.Spec.LoginSets[i]
		if err := loginDeployment(c, set, &appsv1.Deployment{}); err != nil {
			errs = append(errs, fmt.Errorf("loginSets[%s]: %w", set.Name, err))
		}
	}
	return errors.Join(errs...)
}
