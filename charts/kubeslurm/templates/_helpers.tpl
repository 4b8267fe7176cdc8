{{/* Object names: <namePrefix>-<suffix>. */}}
{{- define "kubeslurm.name" -}}
{{- $p := required "namePrefix must be set" .root.Values.namePrefix -}}
{{- if .suffix }}{{ printf "%s-%s" $p .suffix | trunc 63 | trimSuffix "-" }}{{ else }}{{ $p | trunc 63 | trimSuffix "-" }}{{ end -}}
{{- end -}}

{{/* Labels of every object of a component. */}}
{{- define "kubeslurm.labels" -}}
{{ include "kubeslurm.selector" . }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- with .root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Selector labels of a component's pods. */}}
{{- define "kubeslurm.selector" -}}
app.kubernetes.io/name: {{ .root.Values.namePrefix }}
{{- if .component }}
app.kubernetes.io/component: {{ .component }}
{{- end }}
{{- end -}}

{{- define "kubeslurm.image" -}}
{{ .image.repository }}:{{ .image.tag | default .root.Chart.AppVersion }}
{{- end -}}

{{/* The Slurm JWT key volume, mounted at /etc/slurm-jwt. */}}
{{- define "kubeslurm.jwtVolume" -}}
- name: slurm-jwt-key
  secret:
    secretName: {{ .Values.slurm.jwtKeySecret.name }}
    defaultMode: 0440
    items:
    - key: {{ .Values.slurm.jwtKeySecret.key }}
      path: jwt_hs256.key
{{- end -}}

{{/* Namespaces the webhooks never look at. */}}
{{- define "kubeslurm.webhookNamespaceSelector" -}}
matchExpressions:
- {key: kubernetes.io/metadata.name, operator: NotIn, values: {{ concat (list "kube-system" .Release.Namespace) .Values.webhook.excludeNamespaces | uniq | toJson }}}
- {key: kubeslurm.io/admission, operator: NotIn, values: [ignore]}
{{- end -}}

{{/* clientConfig of a webhook; .path is the handler's path. */}}
{{- define "kubeslurm.webhookClient" -}}
{{- if .root.Values.webhook.url -}}
url: {{ printf "%s%s" .root.Values.webhook.url .path }}
{{- else -}}
service: {namespace: {{ .root.Release.Namespace }}, name: {{ include "kubeslurm.name" (dict "root" .root "suffix" "webhook") }}, path: {{ .path }}}
{{- end -}}
{{- end -}}

{{/* The webhook certificate's names: webhook.certHosts, else the Service's DNS name. */}}
{{- define "kubeslurm.webhookCertHosts" -}}
{{- if .Values.webhook.certHosts -}}
{{ join "," .Values.webhook.certHosts }}
{{- else -}}
{{ include "kubeslurm.name" (dict "root" . "suffix" "webhook") }}.{{ .Release.Namespace }}.svc
{{- end -}}
{{- end -}}
