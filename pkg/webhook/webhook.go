// Package webhook is kubeslurm's admission webhook, served by the controller: validating
// parts that reject slurmjob annotations the scheduler would refuse (Validator) and key sets
// in Secrets that Slurm would refuse (KeySetValidator), a mutating part that hands new pods
// of opted-in namespaces to kubeslurm (SchedulerDefaulter), and the serving certificate
// (CertManager). Which requests reach it, and what happens when it cannot
// be reached, is set by the webhook configurations in manifests/ (see docs/install.md).
package webhook

import (
	"crypto/tls"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	crwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/kubeslurm/kubeslurm/pkg/wellknown"
)

// Config is how the controller serves the webhook.
type Config struct {
	SchedulerName string
	// Host and Port the server listens on (Host empty: every interface).
	Host string
	Port int
	// CertDir, when set, holds tls.crt and tls.key kept by someone else (cert-manager, say,
	// who then also keeps the caBundle); they are reloaded when they change. Empty: the
	// controller keeps its own certificate in CertSecret, for CertHosts.
	CertDir string
	// CertSecret is the Secret's namespace/name.
	CertSecret string
	CertHosts  []string
	// ConfigurationName names both webhook configurations whose caBundle the CertManager
	// keeps (empty: wellknown.WebhookConfigurationName).
	ConfigurationName string
}

// Setup adds the webhook server (and, without CertDir, its CertManager) to mgr, and a
// readiness check "webhook" that passes once the server answers TLS.
func Setup(mgr manager.Manager, c Config) error {
	opts := crwebhook.Options{
		Host: c.Host, Port: c.Port, CertDir: c.CertDir,
		// HTTP/1.1 only: HTTP/2's stream resets have been a denial-of-service vector.
		TLSOpts: []func(*tls.Config){func(t *tls.Config) { t.NextProtos = []string{"http/1.1"} }},
	}
	if c.CertDir == "" {
		ns, name, _ := strings.Cut(c.CertSecret, "/")
		if ns == "" || name == "" || strings.Contains(name, "/") {
			return fmt.Errorf("the webhook certificate Secret must be namespace/name, not %q", c.CertSecret)
		}
		if len(c.CertHosts) == 0 {
			return fmt.Errorf("no host names for the webhook certificate")
		}
		configName := c.ConfigurationName
		if configName == "" {
			configName = wellknown.WebhookConfigurationName
		}
		certs := &CertManager{
			Reader: mgr.GetAPIReader(), Writer: mgr.GetClient(),
			Secret:            types.NamespacedName{Namespace: ns, Name: name},
			Hosts:             c.CertHosts,
			ConfigurationName: configName,
		}
		if err := mgr.Add(certs); err != nil {
			return err
		}
		opts.TLSOpts = append(opts.TLSOpts, func(t *tls.Config) { t.GetCertificate = certs.GetCertificate })
	}
	server := crwebhook.NewServer(opts)
	server.Register(wellknown.ValidatePath, &admission.Webhook{Handler: Validator{SchedulerName: c.SchedulerName}})
	server.Register(wellknown.KeySetPath, &admission.Webhook{Handler: KeySetValidator{}})
	server.Register(wellknown.MutatePath, &admission.Webhook{Handler: SchedulerDefaulter{SchedulerName: c.SchedulerName}})
	if err := mgr.Add(server); err != nil {
		return err
	}
	return mgr.AddReadyzCheck("webhook", server.StartedChecker())
}
