{{/* The profile of deploy/local/scheduler-config.yaml.tmpl, in-cluster: no
clientConnection.kubeconfig (the ServiceAccount's token is used). */}}
{{- define "kubeslurm.schedulerConfig" -}}
{{- $s := .Values.scheduler -}}
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
# A pod group binds all its members at once (a bind and an event each).
clientConnection:
  qps: {{ $s.clientQPS }}
  burst: {{ $s.clientBurst }}
leaderElection:
  leaderElect: {{ $s.leaderElect }}
  resourceNamespace: {{ .Release.Namespace }}
  resourceName: {{ include "kubeslurm.name" (dict "root" . "suffix" "scheduler") }}
profiles:
- schedulerName: {{ .Values.schedulerName }}
  plugins:
    multiPoint:
      enabled:
      - name: KubeSlurm
    # Slurm decides preemption; Kubernetes must never evict a pod to make room.
    postFilter:
      disabled:
      - name: DefaultPreemption
  pluginConfig:
  - name: KubeSlurm
    args:
      slurmrestdURL: {{ .Values.slurm.restdURL }}
      # A Slurm operator: placeholder jobs carry an admin_comment.
      slurmUser: {{ .Values.slurm.user }}
      jwtKeyFile: /etc/slurm-jwt/jwt_hs256.key
{{- end -}}
