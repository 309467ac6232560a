"""Gangs from the conventions users already have.

A pod without a topogang/HiveD scheduling spec still forms a gang when it follows one of these
conventions; the first that applies wins, in this order:

1. an explicit `topogang.io/pod-scheduling-spec` (or HiveD's key) — `extender.gangs.podspec`;
2. FrameworkController identity (`FC_FRAMEWORK_*` annotations) — `extender.gangs.podspec`;
3. the Kubernetes Workload API: `spec.workloadRef` + Workload `podGroups[].policy.gang.minCount`
   (or `spec.schedulingGroup` + PodGroup) — `workload`;
4. scheduler-plugins coscheduling: label `scheduling.x-k8s.io/pod-group` + PodGroup
   `scheduling.x-k8s.io/v1alpha1` (`minMember`, `minResources`, `scheduleTimeoutSeconds`) — `coscheduling`;
5. Volcano: annotation `scheduling.k8s.io/group-name` + PodGroup `scheduling.volcano.sh/v1beta1`
   (`minMember`, `minResources`) — `volcano`;
6. YuniKorn: annotations `yunikorn.apache.org/task-group-name`, `…/task-groups`,
   `…/schedulingPolicyParameters` (`placeholderTimeoutInSeconds`, `gangSchedulingStyle`) — `yunikorn`;
7. Spark on Kubernetes: labels `spark-app-selector` + `spark-role`, executors from the driver's
   `spark.executor.instances` (or `spark.dynamicAllocation.minExecutors`) — `spark`;
8. a plain pod: a one-pod gang `pod:<pod>` (`extender.gangs.identity`: every gang name is the pod's
   namespace's).

Two conventions on one pod that name different groups (or sizes) are a `UserError` naming both.
GPUs per member come from the pod's `nvidia.com/gpu`; the VC from the label or annotation
`topogang.io/virtual-cluster`, else `topogang.namespaceVirtualClusters`. Without an API server
(standalone mode) a PodGroup's size is the pod annotation `topogang.io/min-member`; timeouts can be
given as `topogang.io/gang-timeout-seconds` and `topogang.io/gang-scheduling-style: Hard|Soft`.
A group's minMember is the core gang, placed all-or-nothing; members beyond it join as extras in
the core's topology domain (`edge`). Pods opt in as before (the `…/pod-scheduling-enable` limit), or
with `schedulerName: topogang` and an `nvidia.com/gpu` request (`optin`).

This package's `__init__` imports nothing: `extender.gangs.podspec` imports `optin` from it.
"""
