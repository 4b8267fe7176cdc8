package wellknown

// Names of the admission webhook (pkg/webhook) that the manifests share with the code.
const (
	// ManagedNamespaceLabel set to ManagedNamespaceValue on a namespace opts it in: new pods
	// there that ask for the default scheduler are handed to kubeslurm instead.
	ManagedNamespaceLabel = Domain + "/scheduling"
	ManagedNamespaceValue = "enabled"

	// AdmissionIgnoreLabel set to AdmissionIgnoreValue on a namespace keeps both webhooks
	// out of it (kube-system and kubeslurm-system are always out): the scheduler still
	// checks annotations when it submits the job.
	AdmissionIgnoreLabel = Domain + "/admission"
	AdmissionIgnoreValue = "ignore"

	// WebhookConfigurationName names both the ValidatingWebhookConfiguration and the
	// MutatingWebhookConfiguration; the controller patches their caBundle, and nothing else.
	WebhookConfigurationName = "kubeslurm"

	// WebhookCertSecret holds the webhook's CA and serving certificate (in the controller's
	// namespace), kept by the controller itself.
	WebhookCertSecret = "kubeslurm-webhook-cert"

	// ValidatePath, KeySetPath and MutatePath are the webhook server's paths.
	ValidatePath = "/validate-slurmjob-annotations"
	KeySetPath   = "/validate-slurm-key-set"
	MutatePath   = "/mutate-pod-scheduler"
)
