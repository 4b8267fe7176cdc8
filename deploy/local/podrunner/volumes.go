package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func (pr *podRun) volumeDir(name string) string { return filepath.Join(pr.dir, "volumes", name) }

// prepareVolumes writes every volume of the pod into its directory, as a kubelet would:
// ConfigMap, Secret and projected (service-account token, ConfigMap, Secret, downward API)
// volumes as files, emptyDir as an empty directory, hostPath as the path itself, and a
// PersistentVolumeClaim as a directory of the runner's that outlives the pod (the local
// cluster has no storage provisioner: the claim stays Pending, its data is here). A missing
// ConfigMap or Secret fails it (the pod waits in ContainerCreating and it is tried again).
func (pr *podRun) prepareVolumes(ctx context.Context) error {
	for _, vol := range pr.pod.Spec.Volumes {
		dir := pr.volumeDir(vol.Name)
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		var err error
		switch s := vol.VolumeSource; {
		case s.ConfigMap != nil:
			err = pr.writeConfigMap(ctx, dir, s.ConfigMap.Name, s.ConfigMap.Items, s.ConfigMap.DefaultMode, s.ConfigMap.Optional)
		case s.Secret != nil:
			err = pr.writeSecret(ctx, dir, s.Secret.SecretName, s.Secret.Items, s.Secret.DefaultMode, s.Secret.Optional)
		case s.Projected != nil:
			err = pr.writeProjected(ctx, dir, s.Projected)
		case s.EmptyDir != nil:
			err = pr.own(dir, 0o777)
		case s.HostPath != nil:
			err = os.Remove(dir)
			if err == nil {
				err = os.Symlink(s.HostPath.Path, dir)
			}
		case s.PersistentVolumeClaim != nil:
			claim := filepath.Join(pr.r.stateDir, "claims", pr.pod.Namespace, s.PersistentVolumeClaim.ClaimName)
			if _, serr := os.Stat(claim); os.IsNotExist(serr) {
				if err = os.MkdirAll(claim, 0o755); err == nil {
					err = pr.own(claim, 0o770)
				}
			}
			if err == nil {
				if err = os.Remove(dir); err == nil {
					err = os.Symlink(claim, dir)
				}
			}
		default:
			err = fmt.Errorf("volume %s: only configMap, secret, projected, emptyDir, hostPath and persistentVolumeClaim volumes are supported", vol.Name)
		}
		if err != nil {
			return fmt.Errorf("volume %s: %w", vol.Name, err)
		}
	}
	return nil
}

func (pr *podRun) writeConfigMap(ctx context.Context, dir, name string, items []v1.KeyToPath, mode *int32, optional *bool) error {
	cm, err := pr.r.kube.CoreV1().ConfigMaps(pr.pod.Namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && optional != nil && *optional {
		return nil
	}
	if err != nil {
		return fmt.Errorf("configmap %s: %w", name, err)
	}
	data := map[string][]byte{}
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		data[k] = v
	}
	return pr.writeItems(dir, data, items, mode)
}

func (pr *podRun) writeSecret(ctx context.Context, dir, name string, items []v1.KeyToPath, mode *int32, optional *bool) error {
	s, err := pr.r.kube.CoreV1().Secrets(pr.pod.Namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && optional != nil && *optional {
		return nil
	}
	if err != nil {
		return fmt.Errorf("secret %s: %w", name, err)
	}
	return pr.writeItems(dir, s.Data, items, mode)
}

func (pr *podRun) writeProjected(ctx context.Context, dir string, p *v1.ProjectedVolumeSource) error {
	for _, src := range p.Sources {
		var err error
		switch {
		case src.ServiceAccountToken != nil:
			err = pr.writeToken(ctx, dir, src.ServiceAccountToken, p.DefaultMode)
		case src.ConfigMap != nil:
			err = pr.writeConfigMap(ctx, dir, src.ConfigMap.Name, src.ConfigMap.Items, p.DefaultMode, src.ConfigMap.Optional)
		case src.Secret != nil:
			err = pr.writeSecret(ctx, dir, src.Secret.Name, src.Secret.Items, p.DefaultMode, src.Secret.Optional)
		case src.DownwardAPI != nil:
			data := map[string][]byte{}
			var items []v1.KeyToPath
			for _, f := range src.DownwardAPI.Items {
				if f.FieldRef == nil {
					return fmt.Errorf("downwardAPI %s: only fieldRef is supported", f.Path)
				}
				v, ferr := pr.field(f.FieldRef.FieldPath)
				if ferr != nil {
					return ferr
				}
				data[f.Path] = []byte(v)
				items = append(items, v1.KeyToPath{Key: f.Path, Path: f.Path, Mode: f.Mode})
			}
			err = pr.writeItems(dir, data, items, p.DefaultMode)
		default:
			err = fmt.Errorf("unsupported projected source")
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// writeToken asks the API server for a token of the pod's ServiceAccount, bound to the pod
// (TokenRequest, as a kubelet does). It is not refreshed.
func (pr *podRun) writeToken(ctx context.Context, dir string, t *v1.ServiceAccountTokenProjection, mode *int32) error {
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: t.ExpirationSeconds,
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pr.pod.Name, UID: pr.pod.UID},
	}}
	if t.Audience != "" {
		req.Spec.Audiences = []string{t.Audience}
	}
	sa := pr.pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	tok, err := pr.r.kube.CoreV1().ServiceAccounts(pr.pod.Namespace).CreateToken(ctx, sa, req, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("token of serviceaccount %s: %w", sa, err)
	}
	return pr.writeItems(dir, map[string][]byte{t.Path: []byte(tok.Status.Token)}, nil, mode)
}

// writeItems writes data (only items, under their paths, when given) with the items' or
// the default mode (0644), group-owned by the pod's fsGroup.
func (pr *podRun) writeItems(dir string, data map[string][]byte, items []v1.KeyToPath, defMode *int32) error {
	mode := os.FileMode(0o644)
	if defMode != nil {
		mode = os.FileMode(*defMode)
	}
	if len(items) == 0 {
		for k := range data {
			items = append(items, v1.KeyToPath{Key: k, Path: k})
		}
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			return fmt.Errorf("no key %s", it.Key)
		}
		m := mode
		if it.Mode != nil {
			m = os.FileMode(*it.Mode)
		}
		f := filepath.Join(dir, it.Path)
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(f, v, m); err != nil {
			return err
		}
		if err := pr.own(f, m); err != nil {
			return err
		}
	}
	return nil
}

// own gives path to the pod's fsGroup (if any), with mode.
func (pr *podRun) own(path string, mode os.FileMode) error {
	if sc := pr.pod.Spec.SecurityContext; sc != nil && sc.FSGroup != nil {
		if err := os.Chown(path, 0, int(*sc.FSGroup)); err != nil {
			return err
		}
	}
	return os.Chmod(path, mode)
}
