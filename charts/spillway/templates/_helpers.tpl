{{/* The chart's name. */}}
{{- define "spillway.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The prefix of every object's name. */}}
{{- define "spillway.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "spillway.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "spillway.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "spillway.selectorLabels" -}}
app.kubernetes.io/name: {{ include "spillway.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "spillway.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "spillway.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "spillway.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "spillway.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The identity issuer URL. */}}
{{- define "spillway.issuer" -}}
{{- default (printf "https://%s-identity.%s.svc" (include "spillway.fullname" .) .Release.Namespace) .Values.identity.issuer -}}
{{- end -}}

{{/* Settings that cannot work together, refused at render time. */}}
{{- define "spillway.check" -}}
{{- $le := .Values.leaderElection -}}
{{- if and (gt (int .Values.replicas) 1) (not $le.enabled) -}}
{{- fail "replicas > 1 needs leaderElection.enabled: only one replica may act" -}}
{{- end -}}
{{- if not (lt (int $le.renewDeadline) (int $le.leaseDuration)) -}}
{{- fail "leaderElection.renewDeadline must be shorter than leaderElection.leaseDuration" -}}
{{- end -}}
{{- if not (lt (int $le.retryPeriod) (int $le.renewDeadline)) -}}
{{- fail "leaderElection.retryPeriod must be shorter than leaderElection.renewDeadline" -}}
{{- end -}}
{{- $ports := dict (toString .Values.metrics.port) "metrics.port" -}}
{{- if .Values.identity.enabled -}}
{{- if hasKey $ports (toString .Values.identity.port) -}}
{{- fail (printf "identity.port %v is also %s: give each its own port" .Values.identity.port (get $ports (toString .Values.identity.port))) -}}
{{- end -}}
{{- $_ := set $ports (toString .Values.identity.port) "identity.port" -}}
{{- end -}}
{{- if .Values.webhook.enabled -}}
{{- if hasKey $ports (toString .Values.webhook.port) -}}
{{- fail (printf "webhook.port %v is also %s: give each its own port" .Values.webhook.port (get $ports (toString .Values.webhook.port))) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
The integrations the release manages, comma-separated: those of .Values.integrations whose API
the cluster serves (a batch Job and plain pods always; a JobSet, TrainJob or RayJob once its CRD is installed, so the
RBAC and webhook rules of a kind not installed are not rendered). An unknown name fails the render.
*/}}
{{- define "spillway.integrations" -}}
{{- $out := list -}}
{{- range .Values.integrations -}}
{{- if or (eq . "batch/job") (eq . "pod") -}}
{{- $out = append $out . -}}
{{- else if eq . "jobset.x-k8s.io/jobset" -}}
{{- if $.Capabilities.APIVersions.Has "jobset.x-k8s.io/v1alpha2/JobSet" -}}
{{- $out = append $out . -}}
{{- end -}}
{{- else if eq . "trainer.kubeflow.org/trainjob" -}}
{{- if $.Capabilities.APIVersions.Has "trainer.kubeflow.org/v1alpha1/TrainJob" -}}
{{- $out = append $out . -}}
{{- end -}}
{{- else if eq . "ray.io/rayjob" -}}
{{- if $.Capabilities.APIVersions.Has "ray.io/v1/RayJob" -}}
{{- $out = append $out . -}}
{{- end -}}
{{- else -}}
{{- fail (printf "integrations: unknown kind %q (known: batch/job, pod, jobset.x-k8s.io/jobset, trainer.kubeflow.org/trainjob, ray.io/rayjob)" .) -}}
{{- end -}}
{{- end -}}
{{- join "," $out -}}
{{- end -}}

{{/* Non-empty when there are BurstPolicy files to mount (the policies/ directory or value). */}}
{{- define "spillway.hasPolicies" -}}
{{- if or .Values.policies (.Files.Glob "policies/*.{yaml,yml}") -}}true{{- end -}}
{{- end -}}

{{/* The sixteen tokens Secrets of a job namespace (the operator's identity::tokens_secret_names). */}}
{{- define "spillway.tokensSecrets" -}}
spillway-tokens{{ range $k := untilStep 1 16 1 }}, spillway-tokens-{{ $k }}{{ end }}
{{- end -}}
