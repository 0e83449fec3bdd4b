{{/* The release's base name: the release name when it already says "muster". */}}
{{- define "muster.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "muster.evictorName" -}}
{{- printf "%s-evictor" (include "muster.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels on every object; "component" tells Muster from its evictor. */}}
{{- define "muster.labels" -}}
app.kubernetes.io/part-of: muster
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "muster.selectorLabels" -}}
app.kubernetes.io/name: {{ include "muster.fullname" . }}
{{- end -}}

{{- define "muster.evictorSelectorLabels" -}}
app.kubernetes.io/name: {{ include "muster.evictorName" . }}
{{- end -}}

{{- define "muster.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* Where kube-scheduler reaches Muster: schedulerConfig.urlPrefix, else the Service. */}}
{{- define "muster.url" -}}
{{- if .Values.schedulerConfig.urlPrefix -}}
{{ .Values.schedulerConfig.urlPrefix }}
{{- else -}}
{{ ternary "https" "http" .Values.tls.enabled }}://{{ include "muster.fullname" . }}.{{ .Release.Namespace }}.svc:{{ .Values.service.port }}
{{- end -}}
{{- end -}}
