package webhook

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"math/big"
	"net"
	"sync/atomic"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// The certificates' lifetimes; each is renewed once less than a third of it is left.
const (
	caValidity   = 5 * 365 * 24 * time.Hour
	certValidity = 365 * 24 * time.Hour
	// How often the Secret and the caBundles are checked, and how soon after a failure.
	checkInterval = 30 * time.Second
	retryInterval = 5 * time.Second
)

// Keys of the certificate Secret.
const (
	secretCACert = "ca.crt"
	secretCAKey  = "ca.key"
	// secretPreviousCA keeps the CA a renewal replaced, while it is valid, in the caBundle:
	// the API server then trusts both the serving certificate it replaced and the new one.
	secretPreviousCA = "ca-previous.crt"
)

// CertManager keeps the webhook's serving certificate: a CA and a certificate for Hosts
// signed by it, both in one Secret (so every replica serves the same), and the CA in the
// caBundle of the Validating- and MutatingWebhookConfiguration named ConfigurationName. It
// renews each before it expires, and hands the certificate to the server in memory
// (GetCertificate), so a controller in a pod and one running as a host process (the local
// cluster) take the same path.
//
// Hand-written with crypto/x509 rather than taken from open-policy-agent/cert-controller
// (v0.16.0): that library hands the certificate to the server only as files of a mounted
// Secret volume, which a host process does not have, and its caches need list and watch on
// every Secret of the namespace and on every webhook configuration. This needs get and
// update on one Secret and on two configurations, by name.
type CertManager struct {
	// Reader must not be a cache (mgr.GetAPIReader()): it reads just the three objects.
	Reader client.Reader
	Writer client.Writer
	// Secret must exist (the manifests create it empty); its data is ours.
	Secret types.NamespacedName
	// Hosts are the DNS names or IP addresses the API server calls the webhook at.
	Hosts             []string
	ConfigurationName string

	now     func() time.Time // for tests
	serving atomic.Pointer[servingCert]
}

type servingCert struct {
	pem  []byte
	cert *tls.Certificate
}

// NeedLeaderElection is false: every replica serves the webhook.
func (m *CertManager) NeedLeaderElection() bool { return false }

// Start keeps the certificate until ctx ends.
func (m *CertManager) Start(ctx context.Context) error {
	logger := log.FromContext(ctx).WithName("webhook-cert").WithValues("secret", m.Secret)
	for {
		wait := checkInterval
		if err := m.Ensure(ctx); err != nil {
			logger.Error(err, "Keeping the webhook certificate")
			wait = retryInterval
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// GetCertificate serves the current certificate (tls.Config.GetCertificate).
func (m *CertManager) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if s := m.serving.Load(); s != nil {
		return s.cert, nil
	}
	return nil, errors.New("no webhook certificate yet")
}

// Ensure makes one pass: renews what is due in the Secret, then puts the CA into the
// caBundles, then serves the Secret's certificate (in that order, so the API server trusts
// a certificate before it is served).
func (m *CertManager) Ensure(ctx context.Context) error {
	now := time.Now()
	if m.now != nil {
		now = m.now()
	}
	var s corev1.Secret
	if err := m.Reader.Get(ctx, m.Secret, &s); err != nil {
		return fmt.Errorf("reading Secret %s (the install manifests create it): %w", m.Secret, err)
	}
	data := maps.Clone(s.Data)
	if data == nil {
		data = map[string][]byte{}
	}
	changed, err := renew(data, m.Hosts, now)
	if err != nil {
		return err
	}
	if changed {
		s.Data = data
		if err := m.Writer.Update(ctx, &s); err != nil {
			return fmt.Errorf("storing the webhook certificate in Secret %s: %w", m.Secret, err)
		}
		log.FromContext(ctx).Info("Renewed the webhook certificate", "secret", m.Secret, "hosts", m.Hosts)
	}
	if err := m.injectCABundle(ctx, append(bytes.Clone(data[secretCACert]), data[secretPreviousCA]...)); err != nil {
		return err
	}
	if cur := m.serving.Load(); cur != nil && bytes.Equal(cur.pem, data[corev1.TLSCertKey]) {
		return nil
	}
	cert, err := tls.X509KeyPair(data[corev1.TLSCertKey], data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return fmt.Errorf("loading the webhook certificate: %w", err)
	}
	m.serving.Store(&servingCert{pem: data[corev1.TLSCertKey], cert: &cert})
	return nil
}

// injectCABundle sets bundle as the caBundle of every webhook of our two configurations.
// A configuration that does not exist is skipped: an operator may leave one out.
func (m *CertManager) injectCABundle(ctx context.Context, bundle []byte) error {
	var v admissionregistrationv1.ValidatingWebhookConfiguration
	var mu admissionregistrationv1.MutatingWebhookConfiguration
	configs := []struct {
		obj     client.Object
		clients func() []*admissionregistrationv1.WebhookClientConfig
	}{
		{&v, func() (out []*admissionregistrationv1.WebhookClientConfig) {
			for i := range v.Webhooks {
				out = append(out, &v.Webhooks[i].ClientConfig)
			}
			return out
		}},
		{&mu, func() (out []*admissionregistrationv1.WebhookClientConfig) {
			for i := range mu.Webhooks {
				out = append(out, &mu.Webhooks[i].ClientConfig)
			}
			return out
		}},
	}
	for _, c := range configs {
		if err := m.Reader.Get(ctx, types.NamespacedName{Name: m.ConfigurationName}, c.obj); err != nil {
			if apierrors.IsNotFound(err) {
				log.FromContext(ctx).V(1).Info("No webhook configuration to put the CA into", "kind", fmt.Sprintf("%T", c.obj), "name", m.ConfigurationName)
				continue
			}
			return fmt.Errorf("reading webhook configuration %s: %w", m.ConfigurationName, err)
		}
		changed := false
		for _, cc := range c.clients() {
			if !bytes.Equal(cc.CABundle, bundle) {
				cc.CABundle, changed = bundle, true
			}
		}
		if changed {
			if err := m.Writer.Update(ctx, c.obj); err != nil {
				return fmt.Errorf("putting the CA into webhook configuration %s: %w", m.ConfigurationName, err)
			}
		}
	}
	return nil
}

// renew brings data (the Secret's) up to date: a CA, a serving certificate for hosts signed
// by it, and the previous CA while it is valid. It reports whether anything changed.
func renew(data map[string][]byte, hosts []string, now time.Time) (bool, error) {
	changed := false
	ca, caKey, err := parseCA(data)
	if err != nil || renewalDue(ca, now) {
		if err == nil {
			data[secretPreviousCA] = data[secretCACert]
		}
		if ca, caKey, err = newCA(data, now); err != nil {
			return false, err
		}
		changed = true
	}
	if prev, err := parseCert(data[secretPreviousCA]); data[secretPreviousCA] != nil && (err != nil || !now.Before(prev.NotAfter)) {
		delete(data, secretPreviousCA)
		changed = true
	}
	if changed || !servingValid(data, ca, hosts, now) {
		if err := newServing(data, ca, caKey, hosts, now); err != nil {
			return false, err
		}
		changed = true
	}
	return changed, nil
}

// renewalDue: less than a third of the certificate's lifetime is left.
func renewalDue(c *x509.Certificate, now time.Time) bool {
	return now.After(c.NotAfter.Add(-c.NotAfter.Sub(c.NotBefore) / 3))
}

func servingValid(data map[string][]byte, ca *x509.Certificate, hosts []string, now time.Time) bool {
	if _, err := tls.X509KeyPair(data[corev1.TLSCertKey], data[corev1.TLSPrivateKeyKey]); err != nil {
		return false
	}
	cert, err := parseCert(data[corev1.TLSCertKey])
	if err != nil || renewalDue(cert, now) {
		return false
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	for _, h := range hosts {
		if _, err := cert.Verify(x509.VerifyOptions{DNSName: h, Roots: roots, CurrentTime: now,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			return false
		}
	}
	return len(hosts) > 0
}

func parseCert(p []byte) (*x509.Certificate, error) {
	b, _ := pem.Decode(p)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM certificate")
	}
	return x509.ParseCertificate(b.Bytes)
}

func parseCA(data map[string][]byte) (*x509.Certificate, crypto.Signer, error) {
	ca, err := parseCert(data[secretCACert])
	if err != nil {
		return nil, nil, err
	}
	b, _ := pem.Decode(data[secretCAKey])
	if b == nil {
		return nil, nil, errors.New("no PEM CA key")
	}
	k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		return nil, nil, err
	}
	key, ok := k.(crypto.Signer)
	if !ok || !ca.IsCA {
		return nil, nil, errors.New("not a CA")
	}
	return ca, key, nil
}

func newCA(data map[string][]byte, now time.Time) (*x509.Certificate, crypto.Signer, error) {
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "kubeslurm-webhook-ca"},
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	certPEM, keyPEM, key, err := issue(tmpl, nil, nil, now, caValidity)
	if err != nil {
		return nil, nil, err
	}
	data[secretCACert], data[secretCAKey] = certPEM, keyPEM
	ca, err := parseCert(certPEM)
	return ca, key, err
}

func newServing(data map[string][]byte, ca *x509.Certificate, caKey crypto.Signer, hosts []string, now time.Time) error {
	if len(hosts) == 0 {
		return errors.New("no host names for the webhook certificate")
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: hosts[0]},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	certPEM, keyPEM, _, err := issue(tmpl, ca, caKey, now, min(certValidity, ca.NotAfter.Sub(now)))
	if err != nil {
		return err
	}
	data[corev1.TLSCertKey], data[corev1.TLSPrivateKeyKey] = certPEM, keyPEM
	return nil
}

// issue makes a P-256 key and a certificate for it from tmpl, signed by parent (self-signed
// when nil), valid from an hour ago (clock skew) for validity.
func issue(tmpl, parent *x509.Certificate, parentKey crypto.Signer, now time.Time, validity time.Duration) (certPEM, keyPEM []byte, key crypto.Signer, err error) {
	key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	if tmpl.SerialNumber, err = rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128)); err != nil {
		return nil, nil, nil, err
	}
	tmpl.NotBefore, tmpl.NotAfter = now.Add(-time.Hour), now.Add(validity)
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), parentKey)
	if err != nil {
		return nil, nil, nil, err
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}), key, nil
}
