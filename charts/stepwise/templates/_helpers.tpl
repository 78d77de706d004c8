{{/* The chart's name, or nameOverride. */}}
{{- define "stepwise.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The name of the release's objects: fullnameOverride, or the release's name
when it already holds the chart's name, or <release>-<chart>. Kept to 52
characters so suffixed names stay within 63.
*/}}
{{- define "stepwise.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "stepwise.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "stepwise.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Labels that select the operator's pods. */}}
{{- define "stepwise.selectorLabels" -}}
app.kubernetes.io/name: {{ include "stepwise.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{/* The operator image: <registry>/operator:<tag or appVersion>. */}}
{{- define "stepwise.image" -}}
{{- printf "%s/operator:%s" .Values.image.registry (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* The stock worker image: workerImage, or <registry>/agent-worker:<appVersion>. */}}
{{- define "stepwise.workerImage" -}}
{{- default (printf "%s/agent-worker:%s" .Values.image.registry .Chart.AppVersion) .Values.workerImage }}
{{- end }}
