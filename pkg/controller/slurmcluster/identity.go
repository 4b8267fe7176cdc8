package slurmcluster

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// signingKeyName is the data key of the controller's signing key Secret.
const signingKeyName = "key.pem"

// Identity is how the controller authenticates to the Slurm clusters it runs: an RSA key of
// its own, whose public half every SlurmCluster's slurmctld trusts through the JWKS file in
// its ConfigMap. The controller may not read the clusters' key Secrets, so it cannot mint
// HS256 tokens as the scheduler does; this key lives in one Secret of its own namespace,
// the only one it may read.
type Identity struct {
	Key   *rsa.PrivateKey
	KeyID string
	jwks  []byte
}

// JWKS is the public key as a JSON Web Key Set (what slurmctld's jwks= file holds).
func (id *Identity) JWKS() []byte { return id.jwks }

// LoadIdentity reads the signing key from the Secret namespace/name, creating the Secret
// with a new key the first time. reader must read the API server directly (the manager's
// cache would watch every Secret).
func LoadIdentity(ctx context.Context, reader client.Reader, writer client.Client, namespace, name string) (*Identity, error) {
	key := client.ObjectKey{Namespace: namespace, Name: name}
	s := &v1.Secret{}
	err := reader.Get(ctx, key, s)
	if apierrors.IsNotFound(err) {
		k, gerr := rsa.GenerateKey(rand.Reader, 2048)
		if gerr != nil {
			return nil, gerr
		}
		s = &v1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
			Type:       v1.SecretTypeOpaque,
			Data: map[string][]byte{signingKeyName: pem.EncodeToMemory(&pem.Block{
				Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)})},
		}
		err = writer.Create(ctx, s)
		if apierrors.IsAlreadyExists(err) {
			// Another replica made it first: use theirs.
			err = reader.Get(ctx, key, s)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("signing key Secret %s/%s: %w", namespace, name, err)
	}
	return identityFromPEM(s.Data[signingKeyName])
}

func identityFromPEM(data []byte) (*Identity, error) {
	blk, _ := pem.Decode(data)
	if blk == nil {
		return nil, fmt.Errorf("signing key: no PEM block in %s", signingKeyName)
	}
	k, err := x509.ParsePKCS1PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("signing key: %w", err)
	}
	n := k.N.Bytes()
	sum := sha256.Sum256(n)
	id := &Identity{Key: k, KeyID: "kubeslurm-" + hex.EncodeToString(sum[:8])}
	id.jwks, err = json.Marshal(map[string]any{"keys": []map[string]string{{
		"kty": "RSA", "alg": "RS256", "use": "sig", "kid": id.KeyID,
		"n": base64.RawURLEncoding.EncodeToString(n),
		"e": base64.RawURLEncoding.EncodeToString(big.NewInt(int64(k.E)).Bytes()),
	}}})
	return id, err
}
