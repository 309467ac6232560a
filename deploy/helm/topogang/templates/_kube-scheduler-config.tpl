{{/*
The KubeSchedulerConfiguration of the second kube-scheduler, a template of the file
deploy/kube-scheduler-config.yaml is rendered from (`make manifests`); the ConfigMap in
scheduler-config.yaml holds it.
*/}}
{{- define "topogang.schedulerConfig" -}}
{{- $m := .Values.extender.verbs.mtls -}}
# The second kube-scheduler that sends GPU gang pods to topogang (the `extenders` of KubeSchedulerConfiguration:
# https://kubernetes.io/docs/reference/config-api/kube-scheduler-config.v1/#kubescheduler-config-k8s-io-v1-Extender).
#
# Pods opt in with `spec.schedulerName: {{ .Values.scheduler.name }}` and a limit `topogang.io/pod-scheduling-enable: 1`
# (HiveD's `hivedscheduler.microsoft.com/pod-scheduling-enable` works too).
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: {{ .Values.scheduler.leaderElection }}                   # a distinct Lease: never fights the default scheduler's
  resourceLock: leases
  resourceNamespace: {{ include "topogang.namespace" . }}
  resourceName: {{ include "topogang.scheduler" . }}
percentageOfNodesToScore: 100         # the extender must see every feasible node to choose a topology
podInitialBackoffSeconds: 1
podMaxBackoffSeconds: 10
profiles:
- schedulerName: {{ .Values.scheduler.name }}
  # One owner per gang: topogang. kube-scheduler's own gang and topology plugins (Kubernetes 1.35+,
  # with the GenericWorkload / TopologyAwareWorkloadScheduling gates) simulate placements and revert
  # them, but an extender's filter reserves for real, so both deciding would book a gang twice. Off
  # in this profile only (names a version does not know are ignored); PodGroup pods still reach the
  # extender's filter, prioritize and bind, and topogang reads their PodGroups (README: Kubernetes'
  # own gangs).
  plugins:
    multiPoint:
      disabled:
      - name: GangScheduling
      - name: TopologyPlacementGenerator
      - name: PodGroupPodsCount
      {{- if .Values.extender.dra.enabled }}
      # DRA mode: topogang allocates this profile's ResourceClaims (the devices of the slot it chose);
      # the plugin would allocate them first, in PreBind, on devices of its own choosing
      - name: DynamicResources
      {{- end }}
extenders:
- urlPrefix: {{ include "topogang.extenderUrl" . | quote }}
  filterVerb: filter
  prioritizeVerb: prioritize
  preemptVerb: preempt
  bindVerb: bind                      # topogang writes the Binding (with the GPU-index annotations)
  weight: {{ .Values.scheduler.extenderWeight }}                          # score 10 on the pod's own slot adds 1000 to the in-tree scores
  enableHTTPS: {{ $m.enabled }}
  {{- if $m.enabled }}
  tlsConfig:                          # mutual TLS with the extender's verbs listener (docs/security.md)
    serverName: {{ include "topogang.extenderHost" . }}
    caFile: /etc/topogang-scheduler-tls/ca.crt     # verifies the extender
    certFile: /etc/topogang-scheduler-tls/tls.crt  # its client certificate: a name the extender allows
    keyFile: /etc/topogang-scheduler-tls/tls.key
  {{- end }}
  httpTimeout: {{ .Values.scheduler.httpTimeout }}
  nodeCacheCapable: true              # node names only; topogang keeps its own node view
  ignorable: false                    # a skipped extender would break the all-or-nothing guarantee
  managedResources:                   # only pods asking for these reach the extender
  {{- range .Values.managedResources }}
  - name: {{ .name }}
    ignoredByScheduler: {{ .ignoredByScheduler }}
  {{- end }}
{{- end -}}
