{{/* The release's full name: the release name, with the chart's prepended unless it holds it. */}}
{{- define "pyclassify.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "pyclassify.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "pyclassify.labels" -}}
{{ include "pyclassify.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "pyclassify.serviceAccountName" -}}
{{- default (include "pyclassify.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{/* The probes' address: the metrics' host, or the loopback when they listen on every address. */}}
{{- define "pyclassify.probeHost" -}}
{{- if has .Values.metrics.host (list "0.0.0.0" "::" "[::]") -}}
127.0.0.1
{{- else -}}
{{- .Values.metrics.host | trimPrefix "[" | trimSuffix "]" -}}
{{- end -}}
{{- end -}}

{{/* The admission webhook's objects: the release's full name and "-webhook" (pyclassify-webhook
     for a release named pyclassify, as deploy/webhook/ names them). */}}
{{- define "pyclassify.webhook.name" -}}
{{- printf "%s-webhook" (include "pyclassify.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "pyclassify.webhook.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}-webhook
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "pyclassify.webhook.labels" -}}
{{ include "pyclassify.webhook.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "pyclassify.webhook.selfSigned" -}}
{{- if eq .Values.webhook.certificates.mode "self-signed" -}}true{{- end -}}
{{- end -}}
