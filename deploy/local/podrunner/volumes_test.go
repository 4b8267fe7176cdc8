package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
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

// The service-account token of a projected volume (the API server's kube-api-access) is
// asked for once, at the pod's start, and stays through the refreshes of the volume's
// other files.
func TestRefreshKeepsTheServiceAccountToken(t *testing.T) {
	ctx := context.Background()
	ca := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "kube-root-ca.crt"}, Data: map[string]string{"ca.crt": "ca"}}
	kube := fake.NewClientset(ca)
	tokens := 0
	kube.PrependReactor("create", "serviceaccounts", func(a k8stesting.Action) (bool, runtime.Object, error) {
		tokens++
		return true, &authenticationv1.TokenRequest{Status: authenticationv1.TokenRequestStatus{Token: "token-1"}}, nil
	})
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}, Spec: v1.PodSpec{Volumes: []v1.Volume{{
		Name: "kube-api-access", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
			{ServiceAccountToken: &v1.ServiceAccountTokenProjection{Path: "token"}},
			{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: "kube-root-ca.crt"},
				Items: []v1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
		}}},
	}}}}
	pr := &podRun{r: &runner{kube: kube}, pod: pod, dir: t.TempDir()}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(pr.volumeDir("kube-api-access"), name))
		require.NoError(t, err, name)
		return string(b)
	}
	require.NoError(t, pr.prepareVolumes(ctx))
	assert.Equal(t, "token-1", read("token"))

	ca.Data["ca.crt"] = "ca-2"
	_, err := kube.CoreV1().ConfigMaps("ns").Update(ctx, ca, metav1.UpdateOptions{})
	require.NoError(t, err)
	pr.refreshVolumes(ctx)
	pr.refreshVolumes(ctx)
	assert.Equal(t, "ca-2", read("ca.crt"))
	assert.Equal(t, "token-1", read("token"), "the token stays")
	assert.Equal(t, 1, tokens, "asked for once")
}
