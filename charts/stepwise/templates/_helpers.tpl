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

{{/* Labels of one component's objects other than the operator's. */}}
{{- define "stepwise.componentLabels" -}}
{{- $labels := include "stepwise.labels" .root | fromYaml }}
{{- $_ := set $labels "app.kubernetes.io/component" .component }}
{{- toYaml $labels }}
{{- end }}

{{/* Labels that select one component's pods. */}}
{{- define "stepwise.componentSelectorLabels" -}}
app.kubernetes.io/name: {{ include "stepwise.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* The gateway image: <registry>/gateway:<gateway.image.tag or appVersion>. */}}
{{- define "stepwise.gatewayImage" -}}
{{- printf "%s/gateway:%s" .Values.image.registry (default .Chart.AppVersion .Values.gateway.image.tag) }}
{{- end }}

{{/* The event hub's Service name and the URL workers and gateways reach it at. */}}
{{- define "stepwise.eventHubName" -}}
{{- printf "%s-event-hub" (include "stepwise.fullname" .) }}
{{- end }}
{{- define "stepwise.eventHubURL" -}}
{{- default (printf "http://%s.%s.svc:%v" (include "stepwise.eventHubName" .) .Release.Namespace .Values.eventHub.port) .Values.eventHub.url }}
{{- end }}

{{/*
The event hub's two credentials, apart so each pod mounts only its own: the
publish keys (key `keys`), which sign the workers' tokens, for the operator
and the hub; the read tokens (key `tokens`), for the gateway and the hub.
*/}}
{{- define "stepwise.eventHubPublishKeysSecret" -}}
{{- default (printf "%s-event-hub-publish-keys" (include "stepwise.fullname" .)) .Values.eventHub.publishKeysSecret }}
{{- end }}
{{- define "stepwise.eventHubReadTokensSecret" -}}
{{- default (printf "%s-event-hub-read-tokens" (include "stepwise.fullname" .)) .Values.eventHub.readTokensSecret }}
{{- end }}

{{/* Where pods mount the event hub's publish keys and read tokens. */}}
{{- define "stepwise.eventHubPublishKeysDir" -}}
/etc/stepwise/event-hub-publish-keys
{{- end }}
{{- define "stepwise.eventHubReadTokensDir" -}}
/etc/stepwise/event-hub-read-tokens
{{- end }}

{{/*
The default engine's flags, shared by the operator and the gateway, which
finds the engine of Agents without spec.engine the same way.
*/}}
{{- define "stepwise.engineArgs" -}}
- {{ printf "--operator-namespace=%s" .Release.Namespace | quote }}
{{- with .Values.engine.name }}
- {{ printf "--default-engine=%s" . | quote }}
{{- end }}
- --allow-namespace-engines={{ .Values.tenancy.namespaceEngines }}
{{- end }}

{{/* The pod and container security settings every pod of the chart runs with. */}}
{{- define "stepwise.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end }}
{{- define "stepwise.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: [ALL]
{{- end }}
