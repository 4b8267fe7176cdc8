package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

var secretKey = types.NamespacedName{Namespace: "kubeslurm-system", Name: "webhook-cert"}

type certFixture struct {
	t   *testing.T
	c   client.Client
	m   *CertManager
	now time.Time
}

func newCertFixture(t *testing.T, withMutating bool, hosts ...string) *certFixture {
	objs := []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: secretKey.Namespace, Name: secretKey.Name}},
		&admissionregistrationv1.ValidatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: "kubeslurm"},
			Webhooks:   []admissionregistrationv1.ValidatingWebhook{{Name: "pods.kubeslurm.io"}, {Name: "jobs.kubeslurm.io"}},
		},
	}
	if withMutating {
		objs = append(objs, &admissionregistrationv1.MutatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: "kubeslurm"},
			Webhooks:   []admissionregistrationv1.MutatingWebhook{{Name: "scheduler.kubeslurm.io"}},
		})
	}
	f := &certFixture{t: t, c: fake.NewClientBuilder().WithObjects(objs...).Build(), now: time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)}
	f.m = &CertManager{Reader: f.c, Writer: f.c, Secret: secretKey, Hosts: hosts, ConfigurationName: "kubeslurm", now: func() time.Time { return f.now }}
	return f
}

func (f *certFixture) secret() *corev1.Secret {
	var s corev1.Secret
	require.NoError(f.t, f.c.Get(context.Background(), secretKey, &s))
	return &s
}

// bundles returns the caBundle of every webhook of both configurations.
func (f *certFixture) bundles() [][]byte {
	var out [][]byte
	var v admissionregistrationv1.ValidatingWebhookConfiguration
	require.NoError(f.t, f.c.Get(context.Background(), types.NamespacedName{Name: "kubeslurm"}, &v))
	for _, w := range v.Webhooks {
		out = append(out, w.ClientConfig.CABundle)
	}
	var m admissionregistrationv1.MutatingWebhookConfiguration
	if err := f.c.Get(context.Background(), types.NamespacedName{Name: "kubeslurm"}, &m); err == nil {
		for _, w := range m.Webhooks {
			out = append(out, w.ClientConfig.CABundle)
		}
	}
	return out
}

// served is the certificate the server hands out now.
func (f *certFixture) served() *x509.Certificate {
	c, err := f.m.GetCertificate(nil)
	require.NoError(f.t, err)
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	require.NoError(f.t, err)
	return leaf
}

// handshake is what the API server does: TLS to host with the caBundle as the only roots.
func (f *certFixture) handshake(host string, bundle []byte) error {
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{GetCertificate: f.m.GetCertificate})
	require.NoError(f.t, err)
	defer func() { _ = ln.Close() }()
	go func() {
		if c, err := ln.Accept(); err == nil {
			_ = c.(*tls.Conn).Handshake()
			_ = c.Close()
		}
	}()
	roots := x509.NewCertPool()
	require.True(f.t, roots.AppendCertsFromPEM(bundle))
	// The certificates are dated by the fixture's clock; check them at that time.
	conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: roots, ServerName: host, Time: func() time.Time { return f.now }})
	if err == nil {
		_ = conn.Close()
	}
	return err
}

func TestCertManagerIssuesStoresAndInjects(t *testing.T) {
	f := newCertFixture(t, true, "kubeslurm-webhook.kubeslurm-system.svc", "127.0.0.1")
	_, err := f.m.GetCertificate(nil)
	require.Error(t, err, "nothing served before the first pass")

	require.NoError(t, f.m.Ensure(context.Background()))
	s := f.secret()
	for _, k := range []string{"ca.crt", "ca.key", "tls.crt", "tls.key"} {
		assert.NotEmpty(t, s.Data[k], k)
	}
	assert.NotContains(t, s.Data, "ca-previous.crt")
	bundles := f.bundles()
	require.Len(t, bundles, 3)
	for _, b := range bundles {
		assert.Equal(t, s.Data["ca.crt"], b, "every webhook trusts the CA")
	}
	leaf := f.served()
	assert.Equal(t, []string{"kubeslurm-webhook.kubeslurm-system.svc"}, leaf.DNSNames)
	require.Len(t, leaf.IPAddresses, 1)
	assert.Equal(t, "127.0.0.1", leaf.IPAddresses[0].String())
	assert.NoError(t, f.handshake("kubeslurm-webhook.kubeslurm-system.svc", bundles[0]))
	assert.NoError(t, f.handshake("127.0.0.1", bundles[0]))
	assert.Error(t, f.handshake("other.example", bundles[0]), "a name not asked for")

	// A second pass (another replica, or the next check) changes nothing.
	rv := s.ResourceVersion
	require.NoError(t, f.m.Ensure(context.Background()))
	assert.Equal(t, rv, f.secret().ResourceVersion)
	assert.Equal(t, leaf.SerialNumber, f.served().SerialNumber)
}

func TestCertManagerRenewsBeforeExpiry(t *testing.T) {
	f := newCertFixture(t, true, "127.0.0.1")
	require.NoError(t, f.m.Ensure(context.Background()))
	first := f.secret()
	firstLeaf := f.served()

	// Past two thirds of the serving certificate's year: a new one, same CA.
	f.now = f.now.Add(250 * 24 * time.Hour)
	require.NoError(t, f.m.Ensure(context.Background()))
	second := f.secret()
	assert.Equal(t, first.Data["ca.crt"], second.Data["ca.crt"])
	assert.NotEqual(t, first.Data["tls.crt"], second.Data["tls.crt"])
	assert.NotEqual(t, firstLeaf.SerialNumber, f.served().SerialNumber)
	assert.True(t, f.served().NotAfter.After(f.now.Add(300*24*time.Hour)))

	// Past two thirds of the CA's five years: a new CA, and the old one kept in the bundle
	// while it is valid, so the certificate served until now is still trusted.
	f.now = time.Date(2029, 12, 1, 0, 0, 0, 0, time.UTC)
	require.NoError(t, f.m.Ensure(context.Background()))
	third := f.secret()
	assert.NotEqual(t, second.Data["ca.crt"], third.Data["ca.crt"])
	assert.Equal(t, second.Data["ca.crt"], third.Data["ca-previous.crt"])
	bundle := f.bundles()[0]
	assert.Equal(t, 2, bytes.Count(bundle, []byte("BEGIN CERTIFICATE")))
	assert.NoError(t, f.handshake("127.0.0.1", bundle))
	assert.NoError(t, f.handshake("127.0.0.1", third.Data["ca.crt"]), "the new certificate is signed by the new CA")

	// Once the old CA has expired it leaves the bundle.
	f.now = time.Date(2031, 6, 1, 0, 0, 0, 0, time.UTC)
	require.NoError(t, f.m.Ensure(context.Background()))
	fourth := f.secret()
	assert.NotContains(t, fourth.Data, "ca-previous.crt")
	assert.Equal(t, fourth.Data["ca.crt"], f.bundles()[0])
}

func TestCertManagerReissuesForNewHosts(t *testing.T) {
	f := newCertFixture(t, true, "127.0.0.1")
	require.NoError(t, f.m.Ensure(context.Background()))
	before := f.secret()
	f.m.Hosts = []string{"kubeslurm-webhook.kubeslurm-system.svc"}
	require.NoError(t, f.m.Ensure(context.Background()))
	after := f.secret()
	assert.Equal(t, before.Data["ca.crt"], after.Data["ca.crt"])
	assert.NotEqual(t, before.Data["tls.crt"], after.Data["tls.crt"])
	assert.NoError(t, f.handshake("kubeslurm-webhook.kubeslurm-system.svc", after.Data["ca.crt"]))
}

func TestCertManagerReplacesGarbage(t *testing.T) {
	f := newCertFixture(t, false, "127.0.0.1")
	s := f.secret()
	s.Data = map[string][]byte{"ca.crt": []byte("junk"), "ca.key": []byte("junk"), "tls.crt": []byte("junk"), "tls.key": []byte("junk")}
	require.NoError(t, f.c.Update(context.Background(), s))
	require.NoError(t, f.m.Ensure(context.Background()), "no mutating configuration is fine")
	s = f.secret()
	assert.NotEqual(t, []byte("junk"), s.Data["ca.crt"])
	assert.NoError(t, f.handshake("127.0.0.1", f.bundles()[0]))
}

func TestCertManagerNeedsItsSecret(t *testing.T) {
	f := newCertFixture(t, true, "127.0.0.1")
	require.NoError(t, f.c.Delete(context.Background(), f.secret()))
	err := f.m.Ensure(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), secretKey.String())
	_, err = f.m.GetCertificate(nil)
	assert.Error(t, err)
}

func TestCertManagerStartServesAndStops(t *testing.T) {
	f := newCertFixture(t, true, "127.0.0.1")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- f.m.Start(ctx) }()
	require.Eventually(t, func() bool { _, err := f.m.GetCertificate(nil); return err == nil }, 10*time.Second, 20*time.Millisecond)
	cancel()
	select {
	case err := <-done:
		assert.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Start did not return after its context ended")
	}
	assert.False(t, f.m.NeedLeaderElection(), "every replica serves")
}
