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
{{- $v := .Values.extender.verbs -}}
{{ ternary "https" "http" $v.mtls.enabled }}://{{ include "topogang.extenderHost" . }}:{{ $v.port }}/v1/extender
{{- end -}}

{{/* The verbs' mutual TLS: the two Secrets, the names allowed through, and the certificates. */}}
{{- define "topogang.verbsServerSecret" -}}
{{- .Values.extender.verbs.mtls.serverSecretName | default (printf "%s-verbs-server" (include "topogang.fullname" .)) -}}
{{- end -}}
{{- define "topogang.verbsClientSecret" -}}
{{- .Values.extender.verbs.mtls.clientSecretName | default (printf "%s-verbs-client" (include "topogang.fullname" .)) -}}
{{- end -}}
{{- define "topogang.readTlsSecret" -}}
{{- .Values.extender.tls.secretName | default (printf "%s-read-tls" (include "topogang.fullname" .)) -}}
{{- end -}}
{{/* Whether the chart makes the read listener's certificate with helm (else cert-manager or the admin). */}}
{{- define "topogang.readTlsByHelm" -}}
{{- $m := .Values.extender.verbs.mtls -}}
{{- if and .Values.extender.tls.enabled (not .Values.extender.tls.secretName) (not (and $m.enabled (eq $m.certificates "cert-manager"))) -}}true{{- end -}}
{{- end -}}
{{/* The names the read listener's certificate carries: the Service's, and localhost for a port-forward. */}}
{{- define "topogang.readTlsNames" -}}
{{- $ext := include "topogang.extender" . -}}
{{- $host := include "topogang.extenderHost" . -}}
{{- list $host $ext (printf "%s.%s" $ext (include "topogang.namespace" .)) (printf "%s.cluster.local" $host) "localhost" | toJson -}}
{{- end -}}
{{- define "topogang.verbsAllowedNames" -}}
{{- .Values.extender.verbs.mtls.allowedNames | default (list (include "topogang.scheduler" .)) | join "," -}}
{{- end -}}
{{/*
The helm-made certificates, computed once per render and shared by every template (the Secrets and the
pods' checksum annotations): the Secrets already in the cluster when both exist (`lookup`: an upgrade
keeps them), else a new CA with the extender's serving certificate (its Service's DNS names),
kube-scheduler's client certificate (CN <fullname>-scheduler) and the read listener's serving certificate
(`topogang.readTlsNames`, 127.0.0.1). Sets .Values._verbsCerts {server, client, read}. An install from
before the read certificate existed gets all three anew on its next upgrade (helm keeps no CA key).
*/}}
{{- define "topogang.verbsCerts" -}}
{{- if not (hasKey .Values "_verbsCerts") -}}
{{- $ns := include "topogang.namespace" . -}}
{{- $server := lookup "v1" "Secret" $ns (include "topogang.verbsServerSecret" .) -}}
{{- $client := lookup "v1" "Secret" $ns (include "topogang.verbsClientSecret" .) -}}
{{- $read := lookup "v1" "Secret" $ns (include "topogang.readTlsSecret" .) -}}
{{- $m := .Values.extender.verbs.mtls -}}
{{- $needVerbs := and $m.enabled (eq $m.certificates "helm") -}}
{{- $needRead := include "topogang.readTlsByHelm" . -}}
{{- $haveVerbs := and $server $client (get ($server.data | default dict) "tls.crt") (get ($client.data | default dict) "tls.crt") -}}
{{- $haveRead := and $read (get ($read.data | default dict) "tls.crt") -}}
{{- $certs := dict -}}
{{- if and (or (not $needVerbs) $haveVerbs) (or (not $needRead) $haveRead) -}}
{{- $certs = dict "server" (ternary $server.data dict $needVerbs) "client" (ternary $client.data dict $needVerbs) "read" (ternary $read.data dict (not (empty $needRead))) -}}
{{- else -}}
{{- $days := int .Values.extender.verbs.mtls.validityDays -}}
{{- $ext := include "topogang.extender" . -}}
{{- $host := include "topogang.extenderHost" . -}}
{{- $ca := genCA (printf "%s-verbs-ca" (include "topogang.fullname" .)) $days -}}
{{- $srv := genSignedCert $host nil (list $host $ext (printf "%s.%s" $ext $ns) (printf "%s.cluster.local" $host)) $days $ca -}}
{{- $cli := genSignedCert (include "topogang.scheduler" .) nil nil $days $ca -}}
{{- $rd := genSignedCert $host (list "127.0.0.1") (include "topogang.readTlsNames" . | fromJsonArray) $days $ca -}}
{{- $caCrt := $ca.Cert | b64enc -}}
{{- $certs = dict "server" (dict "tls.crt" ($srv.Cert | b64enc) "tls.key" ($srv.Key | b64enc) "ca.crt" $caCrt) "client" (dict "tls.crt" ($cli.Cert | b64enc) "tls.key" ($cli.Key | b64enc) "ca.crt" $caCrt) "read" (dict "tls.crt" ($rd.Cert | b64enc) "tls.key" ($rd.Key | b64enc) "ca.crt" $caCrt) -}}
{{- end -}}
{{- $_ := set .Values "_verbsCerts" $certs -}}
{{- end -}}
{{- end -}}
{{/* A pod annotation that changes when the helm-made certificates do, so both Deployments roll. */}}
{{- define "topogang.verbsChecksum" -}}
{{- if or (and .Values.extender.verbs.mtls.enabled (eq .Values.extender.verbs.mtls.certificates "helm")) (include "topogang.readTlsByHelm" .) -}}
{{- include "topogang.verbsCerts" . -}}
checksum/verbs-tls: {{ get .Values._verbsCerts.server "ca.crt" | default (get .Values._verbsCerts.read "ca.crt") | sha256sum | trunc 16 | quote }}
{{- end -}}
{{- end -}}

{{/* Refuse values that would install something broken, each with the value to change. */}}
{{- define "topogang.validate" -}}
{{- if and (not .Values.existingConfigMap) (not .Values.config) -}}
{{- fail "topogang: no cluster config: pass `--set-file config=my-cluster.yaml` (HiveD's physicalCluster/virtualClusters YAML) or `--set existingConfigMap=NAME`" -}}
{{- end -}}
{{- if and (gt (int .Values.extender.replicas) 1) (not .Values.extender.leaderElection.enabled) -}}
{{- fail "topogang: extender.replicas > 1 needs extender.leaderElection.enabled=true (unsynchronised replicas would both bind GPUs)" -}}
{{- end -}}
{{- $m := .Values.extender.verbs.mtls -}}
{{- if and .Values.extender.tls.enabled (not .Values.extender.tls.secretName) $m.enabled (eq $m.certificates "secrets") -}}
{{- fail "topogang: extender.tls.enabled with extender.verbs.mtls.certificates=secrets needs extender.tls.secretName (a kubernetes.io/tls Secret for the read listener)" -}}
{{- end -}}
{{- if and (not $m.enabled) .Values.extender.tls.enabled -}}
{{- fail "topogang: extender.verbs.mtls.enabled=false with extender.tls.enabled=true: the verbs listener would serve HTTPS with the read port's certificate while kube-scheduler calls it over plain HTTP; keep extender.verbs.mtls.enabled=true (or turn extender.tls off too)" -}}
{{- end -}}
{{- if not (has $m.certificates (list "helm" "cert-manager" "secrets")) -}}
{{- fail (printf "topogang: extender.verbs.mtls.certificates is %q: expected helm, cert-manager or secrets" $m.certificates) -}}
{{- end -}}
{{- if and $m.enabled (eq $m.certificates "cert-manager") (not $m.certManager.issuerRef.name) -}}
{{- fail "topogang: extender.verbs.mtls.certificates=cert-manager needs extender.verbs.mtls.certManager.issuerRef.name (a CA issuer)" -}}
{{- end -}}
{{- if eq (int .Values.extender.verbs.port) (int .Values.extender.port) -}}
{{- fail "topogang: extender.verbs.port must differ from extender.port (the verbs have a listener of their own)" -}}
{{- end -}}
{{- $admin := int (.Values.extender.readers.adminPort | default 0) -}}
{{- if and $admin (has $admin (list (int .Values.extender.port) (int .Values.extender.verbs.port))) -}}
{{- fail (printf "topogang: extender.readers.adminPort %d is extender.port or extender.verbs.port: the admin listener needs a port of its own (the extender could not listen and would not start)" $admin) -}}
{{- end -}}
{{- end -}}
