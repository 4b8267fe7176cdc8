package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// A Secret's projected volume follows the Secret as a kubelet's does: a key that appears
// under an optional item is written, a changed one replaced, one gone removed; a required
// key missing fails the volume; a Secret that cannot be read leaves the files as they are.
func TestRefreshVolumes(t *testing.T) {
	ctx := context.Background()
	optional := true
	secret := &v1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "keys"},
		Data: map[string][]byte{"key": []byte("old")}}
	kube := fake.NewClientset(secret)
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}, Spec: v1.PodSpec{Volumes: []v1.Volume{{
		Name: "keys", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
			{Secret: &v1.SecretProjection{LocalObjectReference: v1.LocalObjectReference{Name: "keys"},
				Items: []v1.KeyToPath{{Key: "key", Path: "slurm.key"}}}},
			{Secret: &v1.SecretProjection{LocalObjectReference: v1.LocalObjectReference{Name: "keys"},
				Items: []v1.KeyToPath{{Key: "jwks", Path: "slurm.jwks"}}, Optional: &optional}},
		}}},
	}}}}
	pr := &podRun{r: &runner{kube: kube}, pod: pod, dir: t.TempDir()}
	dir := pr.volumeDir("keys")
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if os.IsNotExist(err) {
			return "<none>"
		}
		require.NoError(t, err)
		return string(b)
	}
	update := func(data map[string][]byte) {
		secret.Data = data
		_, err := kube.CoreV1().Secrets("ns").Update(ctx, secret, metav1.UpdateOptions{})
		require.NoError(t, err)
	}

	require.NoError(t, pr.prepareVolumes(ctx))
	assert.Equal(t, "old", read("slurm.key"))
	assert.Equal(t, "<none>", read("slurm.jwks"), "optional key absent: no file, no error")

	update(map[string][]byte{"key": []byte("old"), "jwks": []byte(`{"keys":[]}`)})
	pr.refreshVolumes(ctx)
	assert.Equal(t, `{"keys":[]}`, read("slurm.jwks"))

	update(map[string][]byte{"key": []byte("new")})
	pr.refreshVolumes(ctx)
	assert.Equal(t, "new", read("slurm.key"))
	assert.Equal(t, "<none>", read("slurm.jwks"), "a key gone is removed")

	// The required key gone: the refresh fails and the files stay.
	update(map[string][]byte{"other": []byte("x")})
	pr.refreshVolumes(ctx)
	assert.Equal(t, "new", read("slurm.key"))

	require.NoError(t, kube.CoreV1().Secrets("ns").Delete(ctx, "keys", metav1.DeleteOptions{}))
	pr.refreshVolumes(ctx)
	assert.Equal(t, "new", read("slurm.key"), "an unreadable Secret leaves the files")

	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no temporary file left behind")
}
