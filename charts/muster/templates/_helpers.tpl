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

{{/*
Where Muster's TLS material comes from: "" (tls.enabled false), "secret" (your
tls.secretName), "cert-manager" (Issuers and Certificates) or "chart" (made here, kept
across upgrades with lookup).
*/}}
{{- define "muster.tlsSource" -}}
{{- if .Values.tls.enabled -}}
{{- if .Values.tls.secretName -}}
secret
{{- else -}}
{{- $certManager := toString .Values.tls.certManager.enabled -}}
{{- if or (eq $certManager "true") (and (eq $certManager "auto") (.Capabilities.APIVersions.Has "cert-manager.io/v1")) -}}
cert-manager
{{- else -}}
chart
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The Secret holding Muster's serving certificate (tls.crt, tls.key; ca.crt when made here). */}}
{{- define "muster.tlsSecretName" -}}
{{- .Values.tls.secretName | default (printf "%s-tls" (include "muster.fullname" .)) -}}
{{- end -}}

{{/* Where Muster reads the CA that signs kube-scheduler's client certificate; empty: no mTLS. */}}
{{- define "muster.clientCAPath" -}}
{{- $source := include "muster.tlsSource" . -}}
{{- if or (eq $source "chart") (eq $source "cert-manager") -}}
/etc/muster/tls/ca.crt
{{- else if and (eq $source "secret") .Values.tls.clientCASecretName -}}
{{- if eq .Values.tls.clientCASecretName .Values.tls.secretName -}}
/etc/muster/tls/ca.crt
{{- else -}}
/etc/muster/client-ca/ca.crt
{{- end -}}
{{- end -}}
{{- end -}}

{{/* "true" when kube-scheduler's configuration carries the CA and client certificate inline. */}}
{{- define "muster.schedulerConfigInline" -}}
{{- $files := .Values.schedulerConfig.tls -}}
{{- if and (eq (include "muster.tlsSource" .) "chart") (not (or $files.caFile $files.certFile $files.keyFile)) -}}
true
{{- end -}}
{{- end -}}

{{/* The DNS names of Muster's serving certificate. */}}
{{- define "muster.dnsNames" -}}
{{- $name := include "muster.fullname" . -}}
{{- list (printf "%s.%s.svc" $name .Release.Namespace) (printf "%s.%s.svc.cluster.local" $name .Release.Namespace) $name | toJson -}}
{{- end -}}

{{/*
The certificates the chart makes (tls source "chart"), as a dict of base64 PEM: caCert,
caKey, tlsCert, tlsKey, clientCert, clientKey. Made once per rendering (every template
that includes this sees the same ones: they are kept in .Values._musterGenerated) and,
on upgrade, the ones in the cluster's Secrets (lookup): an upgrade does not rotate them.
With the CA in the cluster but a leaf Secret gone, the leaves are signed again by it.
*/}}
{{- define "muster.generatedCerts" -}}
{{- if not (hasKey .Values "_musterGenerated") -}}
{{- $name := include "muster.fullname" . -}}
{{- $ns := .Release.Namespace -}}
{{- $days := int .Values.tls.validityDays -}}
{{- $caSecret := lookup "v1" "Secret" $ns (printf "%s-ca" $name) -}}
{{- $tlsSecret := lookup "v1" "Secret" $ns (printf "%s-tls" $name) -}}
{{- $clientSecret := lookup "v1" "Secret" $ns (printf "%s-scheduler-client" $name) -}}
{{- $caData := dig "data" dict $caSecret -}}
{{- $tlsData := dig "data" dict $tlsSecret -}}
{{- $clientData := dig "data" dict $clientSecret -}}
{{- $certs := dict -}}
{{- $ca := dict -}}
{{- if and (hasKey $caData "tls.crt") (hasKey $caData "tls.key") -}}
{{- $ca = buildCustomCert (index $caData "tls.crt") (index $caData "tls.key") -}}
{{- $_ := set $certs "caCert" (index $caData "tls.crt") -}}
{{- $_ := set $certs "caKey" (index $caData "tls.key") -}}
{{- else -}}
{{- $ca = genCA (printf "%s-ca" $name) $days -}}
{{- $_ := set $certs "caCert" ($ca.Cert | b64enc) -}}
{{- $_ := set $certs "caKey" ($ca.Key | b64enc) -}}
{{- $tlsData = dict -}}
{{- $clientData = dict -}}
{{- end -}}
{{- if and (hasKey $tlsData "tls.crt") (hasKey $tlsData "tls.key") -}}
{{- $_ := set $certs "tlsCert" (index $tlsData "tls.crt") -}}
{{- $_ := set $certs "tlsKey" (index $tlsData "tls.key") -}}
{{- else -}}
{{- $dnsNames := include "muster.dnsNames" . | fromJsonArray -}}
{{- $serving := genSignedCert (first $dnsNames) nil $dnsNames $days $ca -}}
{{- $_ := set $certs "tlsCert" ($serving.Cert | b64enc) -}}
{{- $_ := set $certs "tlsKey" ($serving.Key | b64enc) -}}
{{- end -}}
{{- if and (hasKey $clientData "tls.crt") (hasKey $clientData "tls.key") -}}
{{- $_ := set $certs "clientCert" (index $clientData "tls.crt") -}}
{{- $_ := set $certs "clientKey" (index $clientData "tls.key") -}}
{{- else -}}
{{- $client := genSignedCert "kube-scheduler" nil nil $days $ca -}}
{{- $_ := set $certs "clientCert" ($client.Cert | b64enc) -}}
{{- $_ := set $certs "clientKey" ($client.Key | b64enc) -}}
{{- end -}}
{{- $_ := set .Values "_musterGenerated" $certs -}}
{{- end -}}
{{- end -}}

{{/* The records key Secret's name. */}}
{{- define "muster.recordsKeySecretName" -}}
{{- .Values.records.existingSecret | default (printf "%s-records-key" (include "muster.fullname" .)) -}}
{{- end -}}

{{/* Muster's records key volume and its mount (Muster and the evictor). */}}
{{- define "muster.recordsKeyDir" -}}
/etc/muster/records-key
{{- end -}}

{{/* NetworkPolicyPeers from a networkPolicy.* block: its ipBlocks, then its from. */}}
{{- define "muster.peers" -}}
{{- $peers := list -}}
{{- range .ipBlocks -}}
{{- $peers = append $peers (dict "ipBlock" (dict "cidr" .)) -}}
{{- end -}}
{{- range .from -}}
{{- $peers = append $peers . -}}
{{- end -}}
{{- toJson $peers -}}
{{- end -}}
