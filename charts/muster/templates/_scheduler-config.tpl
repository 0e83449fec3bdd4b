{{/*
The KubeSchedulerConfiguration for kube-scheduler, with Muster as its extender: the
scheduler-config.yaml of <fullname>-scheduler-config (templates/scheduler-config.yaml).
*/}}
{{- define "muster.schedulerConfig" -}}
{{- $source := include "muster.tlsSource" . }}
{{- $inline := include "muster.schedulerConfigInline" . }}
{{- $files := .Values.schedulerConfig.tls }}
{{- if eq $source "cert-manager" }}
{{- $files = dict "caFile" ($files.caFile | default "/etc/kubernetes/pki/muster/ca.crt") "certFile" ($files.certFile | default "/etc/kubernetes/pki/muster/client.crt") "keyFile" ($files.keyFile | default "/etc/kubernetes/pki/muster/client.key") "serverName" $files.serverName }}
{{- end }}
{{- $mtls := include "muster.clientCAPath" . }}
{{- $serverName := $files.serverName }}
{{- if and (not $serverName) (or (eq $source "chart") (eq $source "cert-manager")) }}
{{- $serverName = printf "%s.%s.svc" (include "muster.fullname" .) .Release.Namespace }}
{{- end }}
{{- if $inline }}
{{- include "muster.generatedCerts" . }}
{{- end }}
{{- $certs := .Values._musterGenerated | default dict }}
# kube-scheduler configuration with Muster as its extender.
# Pass it with `kube-scheduler --config scheduler-config.yaml`.
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: {{ .Values.schedulerConfig.kubeconfig }}
leaderElection:
  leaderElect: {{ .Values.schedulerConfig.leaderElect }}
profiles:
  - schedulerName: {{ .Values.schedulerConfig.schedulerName }}
    plugins:
      multiPoint:
        disabled:
          # Muster is the gang authority.  With Kubernetes' GenericWorkload gate on
          # (1.36+), this in-tree plugin would hold a pod group's pods at Permit and let
          # kube-scheduler's group preemption evict for them without Muster; off, the
          # group cycle asks Muster's filter for each pod, and Muster places and preempts
          # for the whole gang.  Harmless where the gate is off.
          - name: GangScheduling
      {{- if .Values.schedulerConfig.genericWorkload }}
      # kube-scheduler 1.37+ with GenericWorkload on: its group preemption evicts for
      # a pod group without calling Muster's preempt verb; Muster preempts for gangs.
      podGroupPostFilter:
        disabled:
          - name: DefaultPreemption
      {{- end }}
    pluginConfig:
      # Bin packing is kube-scheduler's own: fill GPU nodes one at a time, so whole nodes
      # stay free for gangs.  (Muster's prioritize verb can do the same, at the cost of a
      # second HTTP call per pod; see below.)
      - name: NodeResourcesFit
        args:
          scoringStrategy:
            type: MostAllocated
            resources:
              - name: nvidia.com/gpu
                weight: 5
              - name: cpu
                weight: 1
              - name: memory
                weight: 1
extenders:
  - urlPrefix: "{{ include "muster.url" . }}"
    filterVerb: filter
    # Required: with it, kube-scheduler's own preemption never evicts a pod Muster governs
    # (Muster preempts for those itself and marks its victims for soft eviction); without
    # it, kube-scheduler deletes them unmarked.  `muster check-scheduler-config` checks this.
    preemptVerb: preempt
    {{- if .Values.schedulerConfig.prioritize }}
    # Muster's packing score, counting reserved room as used and keeping borrowed pods
    # apart from guaranteed ones (borrowedApart).
    prioritizeVerb: prioritize
    weight: 1
    {{- else }}
    # prioritizeVerb: prioritize   # Muster's packing score, counting reserved room as
    # weight: 1                      # used, borrowed pods kept apart from guaranteed
    #                                # ones; costs a second call on every scheduling cycle
    {{- end }}
    {{- if .Values.schedulerConfig.bind }}
    # Muster binds, checking each bind against its reservations.
    bindVerb: bind
    {{- else }}
    # bindVerb: bind   # Muster binds, checking each bind against its reservations
    {{- end }}
    # Muster keeps its own cache of nodes: send node names, not whole Node objects.
    nodeCacheCapable: true
    httpTimeout: {{ .Values.schedulerConfig.httpTimeout }}
    # Quotas are enforced only while Muster answers: with ignorable false, pods wait
    # during a Muster outage instead of being scheduled past their quota.
    ignorable: false
    # No managedResources: Muster must see every pod, not only those asking for GPUs.
    {{- if .Values.tls.enabled }}
    enableHTTPS: true
    tlsConfig:
      {{- with $serverName }}
      # The name Muster's certificate carries, whatever host urlPrefix names.
      serverName: {{ . }}
      {{- end }}
      {{- if $inline }}
      # The chart's CA, and kube-scheduler's client certificate and key (mTLS), base64.
      caData: {{ $certs.caCert }}
      certData: {{ $certs.clientCert }}
      keyData: {{ $certs.clientKey }}
      {{- else }}
      caFile: {{ required "schedulerConfig.tls.caFile is required with tls.secretName: kube-scheduler must trust Muster's certificate" $files.caFile }}
      {{- if $mtls }}
      certFile: {{ required "schedulerConfig.tls.certFile is required with mTLS (tls.clientCASecretName, or the chart's certificates named by files)" $files.certFile }}
      keyFile: {{ required "schedulerConfig.tls.keyFile is required with mTLS (tls.clientCASecretName, or the chart's certificates named by files)" $files.keyFile }}
      {{- end }}
      {{- end }}
    {{- end }}
{{- end -}}
