package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

func (pr *podRun) volumeDir(name string) string { return filepath.Join(pr.dir, "volumes", name) }

// prepareVolumes writes every volume of the pod into its directory, as a kubelet would:
// ConfigMap, Secret and projected (service-account token, ConfigMap, Secret, downward API)
// volumes as files, emptyDir as an empty directory, hostPath as the path itself, and a
// PersistentVolumeClaim as a directory of the runner's that outlives the pod (the local
// cluster has no storage provisioner: the claim stays Pending, its data is here). A missing
// ConfigMap or Secret fails it (the pod waits in ContainerCreating and it is tried again).
func (pr *podRun) prepareVolumes(ctx context.Context) error {
	pr.files = map[string]map[string]bool{}
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
		case s.ConfigMap != nil || s.Secret != nil || s.Projected != nil:
			var files map[string]volumeFile
			if files, err = pr.volumeFiles(ctx, s, true); err == nil {
				err = pr.syncFiles(vol.Name, files)
			}
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

// refreshVolumes brings the running pod's ConfigMap, Secret and projected volumes up to
// date with their objects, as a kubelet does: a changed file is replaced by a rename (a
// process sees the old or the new content, never half), a key gone is removed. Mounts by
// subPath keep the file they were started with (they are bound to it), as under a kubelet.
// Tokens are not refreshed. An object that cannot be read leaves the files as they are.
func (pr *podRun) refreshVolumes(ctx context.Context) {
	for _, vol := range pr.pod.Spec.Volumes {
		if s := vol.VolumeSource; s.ConfigMap != nil || s.Secret != nil || s.Projected != nil {
			files, err := pr.volumeFiles(ctx, s, false)
			if err == nil {
				pr.keepTokens(vol.Name, s, files)
				err = pr.syncFiles(vol.Name, files)
			}
			if err != nil {
				klog.V(2).InfoS("volume not refreshed", "pod", klog.KObj(pr.pod), "volume", vol.Name, "err", err)
			}
		}
	}
}

// keepTokens adds the service-account tokens volume vol has on disk to files, as they are:
// a refresh asks for no new token, and a token left out would be removed as a file gone
// (a client that reads its token again, or a restarted container, would find none).
func (pr *podRun) keepTokens(vol string, s v1.VolumeSource, files map[string]volumeFile) {
	if s.Projected == nil {
		return
	}
	for _, src := range s.Projected.Sources {
		if t := src.ServiceAccountToken; t != nil {
			if data, err := os.ReadFile(filepath.Join(pr.volumeDir(vol), t.Path)); err == nil {
				files[t.Path] = volumeFile{data: data} // unchanged, so not written again
			}
		}
	}
}

// volumeFile is one file of a ConfigMap, Secret or projected volume.
type volumeFile struct {
	data []byte
	mode os.FileMode
}

// volumeFiles reads the files of a ConfigMap, Secret or projected volume from their
// objects; service-account tokens are asked for only withTokens.
func (pr *podRun) volumeFiles(ctx context.Context, s v1.VolumeSource, withTokens bool) (map[string]volumeFile, error) {
	files := map[string]volumeFile{}
	switch {
	case s.ConfigMap != nil:
		return files, pr.configMapFiles(ctx, files, s.ConfigMap.Name, s.ConfigMap.Items, s.ConfigMap.DefaultMode, s.ConfigMap.Optional)
	case s.Secret != nil:
		return files, pr.secretFiles(ctx, files, s.Secret.SecretName, s.Secret.Items, s.Secret.DefaultMode, s.Secret.Optional)
	}
	p := s.Projected
	for _, src := range p.Sources {
		var err error
		switch {
		case src.ServiceAccountToken != nil:
			if withTokens {
				err = pr.tokenFiles(ctx, files, src.ServiceAccountToken, p.DefaultMode)
			}
		case src.ConfigMap != nil:
			err = pr.configMapFiles(ctx, files, src.ConfigMap.Name, src.ConfigMap.Items, p.DefaultMode, src.ConfigMap.Optional)
		case src.Secret != nil:
			err = pr.secretFiles(ctx, files, src.Secret.Name, src.Secret.Items, p.DefaultMode, src.Secret.Optional)
		case src.DownwardAPI != nil:
			data := map[string][]byte{}
			var items []v1.KeyToPath
			for _, f := range src.DownwardAPI.Items {
				if f.FieldRef == nil {
					return nil, fmt.Errorf("downwardAPI %s: only fieldRef is supported", f.Path)
				}
				v, ferr := pr.field(f.FieldRef.FieldPath)
				if ferr != nil {
					return nil, ferr
				}
				data[f.Path] = []byte(v)
				items = append(items, v1.KeyToPath{Key: f.Path, Path: f.Path, Mode: f.Mode})
			}
			err = addItems(files, data, items, p.DefaultMode, false)
		default:
			err = fmt.Errorf("unsupported projected source")
		}
		if err != nil {
			return nil, err
		}
	}
	return files, nil
}

func (pr *podRun) configMapFiles(ctx context.Context, files map[string]volumeFile, name string, items []v1.KeyToPath, mode *int32, optional *bool) error {
	cm, err := pr.r.kube.CoreV1().ConfigMaps(pr.pod.Namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && isTrue(optional) {
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
	return addItems(files, data, items, mode, isTrue(optional))
}

func (pr *podRun) secretFiles(ctx context.Context, files map[string]volumeFile, name string, items []v1.KeyToPath, mode *int32, optional *bool) error {
	s, err := pr.r.kube.CoreV1().Secrets(pr.pod.Namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && isTrue(optional) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("secret %s: %w", name, err)
	}
	return addItems(files, s.Data, items, mode, isTrue(optional))
}

func isTrue(b *bool) bool { return b != nil && *b }

// writeToken asks the API server for a token of the pod's ServiceAccount, bound to the pod
// (TokenRequest, as a kubelet does). It is not refreshed.
func (pr *podRun) tokenFiles(ctx context.Context, files map[string]volumeFile, t *v1.ServiceAccountTokenProjection, mode *int32) error {
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
	return addItems(files, map[string][]byte{t.Path: []byte(tok.Status.Token)}, nil, mode, false)
}

// addItems adds data (only items, under their paths, when given) to files with the items'
// or the default mode (0644). An item whose key is missing is an error, unless optional.
func addItems(files map[string]volumeFile, data map[string][]byte, items []v1.KeyToPath, defMode *int32, optional bool) error {
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
		switch {
		case !ok && optional:
			continue
		case !ok:
			return fmt.Errorf("no key %s", it.Key)
		}
		m := mode
		if it.Mode != nil {
			m = os.FileMode(*it.Mode)
		}
		files[it.Path] = volumeFile{data: v, mode: m}
	}
	return nil
}

// syncFiles makes volume vol's directory hold files, group-owned by the pod's fsGroup: a
// new or changed file is written beside and renamed over, a file it wrote before that is
// no longer among files is removed; others (a token) are left alone.
func (pr *podRun) syncFiles(vol string, files map[string]volumeFile) error {
	dir := pr.volumeDir(vol)
	for path := range pr.files[vol] {
		if _, ok := files[path]; !ok {
			if err := os.Remove(filepath.Join(dir, path)); err != nil && !os.IsNotExist(err) {
				return err
			}
		}
	}
	written := map[string]bool{}
	for path, f := range files {
		written[path] = true
		dst := filepath.Join(dir, path)
		if old, err := os.ReadFile(dst); err == nil && bytes.Equal(old, f.data) {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		tmp := filepath.Join(filepath.Dir(dst), ".."+filepath.Base(dst)+".tmp")
		if err := os.WriteFile(tmp, f.data, f.mode); err != nil {
			return err
		}
		if err := pr.own(tmp, f.mode); err != nil {
			return err
		}
		if err := os.Rename(tmp, dst); err != nil {
			return err
		}
	}
	pr.files[vol] = written
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
