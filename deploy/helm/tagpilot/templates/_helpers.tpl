{{/* The name every resource of the release carries. */}}
{{- define "tagpilot.fullname" -}}
{{- if contains "tagpilot" .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-tagpilot" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "tagpilot.selectorLabels" -}}
app.kubernetes.io/name: tagpilot
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "tagpilot.labels" -}}
{{ include "tagpilot.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "tagpilot.leaseName" -}}
{{- .Values.leaderElection.leaseName | default (include "tagpilot.fullname" .) -}}
{{- end -}}

{{/* tagpilot.yaml: the user's config plus what the chart wires up. */}}
{{- define "tagpilot.config" -}}
{{- $config := deepCopy (.Values.config | default dict) -}}
{{- $_ := set $config "policies" "/etc/tagpilot/policies" -}}
{{- if .Values.secrets.webhook.name -}}
{{- $_ := set $config "webhooks" (dict "secretEnv" "TAGPILOT_WEBHOOK_SECRET") -}}
{{- end -}}
{{- $fc := .Values.applications.fromCluster -}}
{{- if $fc.enabled -}}
{{- $apps := get $config "applications" | default dict -}}
{{- $from := dict "argocdNamespace" $fc.argocdNamespace -}}
{{- if $fc.namespaces }}{{ $_ := set $from "namespaces" $fc.namespaces }}{{ end -}}
{{- if $fc.selector }}{{ $_ := set $from "selector" $fc.selector }}{{ end -}}
{{- $_ := set $apps "fromCluster" $from -}}
{{- $_ := set $config "applications" $apps -}}
{{- end -}}
{{- toYaml $config -}}
{{- end -}}
