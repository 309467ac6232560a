{{/* Names: <fullname>-extender, <fullname>-scheduler, ...; a release named topogang gives topogang-*. */}}
{{- define "topogang.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "topogang.namespace" -}}
{{- .Values.namespace | default .Release.Namespace -}}
{{- end -}}

{{- define "topogang.extender" -}}{{ include "topogang.fullname" . }}-extender{{- end -}}
{{- define "topogang.scheduler" -}}{{ include "topogang.fullname" . }}-scheduler{{- end -}}
{{- define "topogang.extenderLease" -}}
{{- .Values.extender.leaderElection.leaseName | default (include "topogang.extender" .) -}}
{{- end -}}

{{/* The ConfigMap holding the cluster config: an existing one, or the chart's. */}}
{{- define "topogang.configMap" -}}
{{- .Values.existingConfigMap | default (printf "%s-config" (include "topogang.fullname" .)) -}}
{{- end -}}

{{/* The Secret holding the extender's bind signing key: an existing one, or the chart's. */}}
{{- define "topogang.bindSigningSecret" -}}
{{- .Values.extender.bindSigning.existingSecret | default (printf "%s-bind-signing-key" (include "topogang.fullname" .)) -}}
{{- end -}}

{{/* Labels of every object; `component` is extender or scheduler (selector: name + instance). */}}
{{- define "topogang.labels" -}}
app.kubernetes.io/name: {{ .name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/part-of: topogang
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
{{- end -}}
{{- define "topogang.selector" -}}
app.kubernetes.io/name: {{ .name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- end -}}

{{/* The extender's Service in cluster DNS, and the URL kube-scheduler calls. */}}
{{- define "topogang.extenderHost" -}}
{{ include "topogang.extender" . }}.{{ include "topogang.namespace" . }}.svc
{{- end -}}
{{- define "topogang.extenderUrl" -}}
{{- $tls := .Values.extender.tls -}}
{{- $port := ternary $tls.verbsPort .Values.extender.port $tls.clientCA.enabled -}}
{{ ternary "https" "http" $tls.enabled }}://{{ include "topogang.extenderHost" . }}:{{ $port }}/v1/extender
{{- end -}}

{{/* Refuse values that would install something broken, each with the value to change. */}}
{{- define "topogang.validate" -}}
{{- if and (not .Values.existingConfigMap) (not .Values.config) -}}
{{- fail "topogang: no cluster config: pass `--set-file config=my-cluster.yaml` (HiveD's physicalCluster/virtualClusters YAML) or `--set existingConfigMap=NAME`" -}}
{{- end -}}
{{- if and (gt (int .Values.extender.replicas) 1) (not .Values.extender.leaderElection.enabled) -}}
{{- fail "topogang: extender.replicas > 1 needs extender.leaderElection.enabled=true (unsynchronised replicas would both bind GPUs)" -}}
{{- end -}}
{{- if and .Values.extender.tls.enabled (not .Values.extender.tls.secretName) -}}
{{- fail "topogang: extender.tls.enabled needs extender.tls.secretName (a kubernetes.io/tls Secret)" -}}
{{- end -}}
{{- if and .Values.extender.tls.clientCA.enabled (not .Values.extender.tls.enabled) -}}
{{- fail "topogang: extender.tls.clientCA.enabled needs extender.tls.enabled (the verbs listener speaks TLS)" -}}
{{- end -}}
{{- if and .Values.extender.tls.clientCA.enabled (not .Values.extender.tls.clientCA.secretName) -}}
{{- fail "topogang: extender.tls.clientCA.enabled needs extender.tls.clientCA.secretName (the Secret with the client CA)" -}}
{{- end -}}
{{- if and .Values.extender.tls.enabled (not .Values.scheduler.tls.secretName) -}}
{{- fail "topogang: extender.tls.enabled needs scheduler.tls.secretName (ca.crt to verify the extender; tls.crt/tls.key with client-CA verbs)" -}}
{{- end -}}
{{- end -}}
