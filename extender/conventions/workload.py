"""Kubernetes' own gangs, in each shape the API has had:

- 1.35 (alpha): `spec.workloadRef {name, podGroup, podGroupReplicaKey}` on the pod and a
  `scheduling.k8s.io/v1alpha1` Workload whose `spec.podGroups[]` have `policy.gang.minCount`. Each
  pod group replica is its own gang.
- 1.36 (alpha) and 1.37 (beta): `spec.schedulingGroup.podGroupName` on the pod and a PodGroup object
  (`scheduling.k8s.io/v1alpha2`, then `v1beta1`) with `spec.schedulingPolicy.gang.minCount`. A PodGroup
  is one runtime instance (replica) of a Workload's template, so each PodGroup is one gang.

A PodGroup also gives the gang's priority (`spec.priority`, which admission fills from its
`priorityClassName`; else the pod's own) and, behind `TopologyAwareWorkloadScheduling` (KEP-5732),
`spec.schedulingConstraints.topology[].key`: a node label whose every value is one domain, all pods
in one domain. topogang reads that key as a required level of its cell hierarchy (`level_of_key`),
and the core rejects a level the cluster does not have.

A `basic` policy (no `gang`) is upstream's pod-by-pod scheduling: the group only names its pods. So
each pod is its own one-pod gang (`Claim.independent`), placed wherever it fits, never held to where
another pod of the group went; a shared gang would make every later pod an elastic extra narrowed to
the first pod's domain, waiting there while the rest of the cluster is free. With a topology
constraint upstream keeps the pods of even a basic group in one domain of the key (later pods go
where the first went, or stay pending), so such a group stays one gang of one pod whose later pods
are extras in its domain."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from extender.conventions.common import (
    MIN_MEMBER,
    Claim,
    Objects,
    ObjRef,
    count,
    pod_min_member,
    spec,
    text,
)
from topology.decisions import MAX_PRIORITY, MIN_GUARANTEED_PRIORITY, UserError

WORKLOAD_VERSION = "scheduling.k8s.io/v1alpha1"
PODGROUP_VERSIONS = ("scheduling.k8s.io/v1beta1", "scheduling.k8s.io/v1alpha2")  # newest first
TOPOLOGY_FIELD = "spec.schedulingConstraints.topology"
HOSTNAME = "kubernetes.io/hostname"


def _ref(pod: Mapping[str, Any]) -> tuple[str, str, str, str | None] | None:
    """(field, workload or podgroup name, pod group, replica key)."""
    s = spec(pod)
    ref = s.get("workloadRef")
    if isinstance(ref, dict):
        name, group = text(ref.get("name")), text(ref.get("podGroup"))
        if name is not None and group is not None:
            return "spec.workloadRef", name, group, text(ref.get("podGroupReplicaKey"))
    sg = s.get("schedulingGroup")
    if isinstance(sg, dict):
        group = text(sg.get("podGroupName"))
        if group is not None:
            return "spec.schedulingGroup", "", group, None
    return None


def refs(pod: Mapping[str, Any], namespace: str) -> list[ObjRef]:
    r = _ref(pod)
    if r is None:
        return []
    _, name, group, _ = r
    return [ObjRef("workload", namespace, name) if name else ObjRef("podgroup", namespace, group)]


def _min_count(policy: object, field: str) -> int | None:
    gang = policy.get("gang") if isinstance(policy, dict) else None
    return count(gang.get("minCount"), f"{field}.gang.minCount") if isinstance(gang, dict) else None


def level_of_key(key: str) -> str:
    """The topogang level a node-label topology key names: `kubernetes.io/hostname` is the node;
    otherwise the key's name part (`topology.kubernetes.io/rack` -> `rack`, `topogang.io/A100-RACK`
    -> `A100-RACK`), which the core matches against the cell types' names or their last words."""
    return "hostname" if key == HOSTNAME else key.rsplit("/", 1)[-1]


def topology_key(podgroup: Mapping[str, Any], where: str) -> str | None:
    """The one topology key of a PodGroup's scheduling constraints (None: no constraint)."""
    constraints = spec(podgroup).get("schedulingConstraints")
    if constraints is None:
        return None
    items = constraints.get("topology") if isinstance(constraints, dict) else constraints
    if items is None or items == []:
        return None
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise UserError(f"{where} {TOPOLOGY_FIELD}", f"expected a list of {{key: ...}}, got {items!r}")
    if len(items) > 1:
        raise UserError(
            f"{where} {TOPOLOGY_FIELD}",
            f"{len(items)} topology constraints; a gang can have one required level (the API allows one)",
        )
    key = text(items[0].get("key"))
    if key is None or len(key) > 317:
        raise UserError(f"{where} {TOPOLOGY_FIELD}[0].key", f"expected a node label key, got {items[0]!r}")
    return key


def _priority(pod: Mapping[str, Any], podgroup: Mapping[str, Any] | None) -> int:
    """The gang's priority: the PodGroup's, else the pod's (both set by admission from their
    PriorityClass), brought into topogang's guaranteed range: below 0 counts as 0, above 1000 as
    1000 (so a gang never becomes opportunistic by its Kubernetes priority alone)."""
    value = spec(podgroup).get("priority") if podgroup is not None else None
    if value is None:
        value = spec(pod).get("priority")
    if not isinstance(value, int) or isinstance(value, bool):
        return MIN_GUARANTEED_PRIORITY
    return max(MIN_GUARANTEED_PRIORITY, min(MAX_PRIORITY, value))


def claim(pod: Mapping[str, Any], namespace: str, objects: Objects) -> Claim | None:
    r = _ref(pod)
    if r is None:
        return None
    field, name, group, replica = r
    label = f"{name}/{group}" if name else group
    gang = f"{namespace}/{label}" + (f"/{replica}" if replica else "")
    ref = ObjRef("workload", namespace, name) if name else ObjRef("podgroup", namespace, group)
    obj = objects.get(ref)
    n: int | None = None
    key: str | None = None
    basic = False  # the object read has no gang policy: its pods are scheduled one by one
    if obj is not None and name:
        groups = spec(obj).get("podGroups")
        entry = (
            next(
                (g for g in groups if isinstance(g, dict) and g.get("name") == group),
                None,
            )
            if isinstance(groups, list)
            else None
        )
        if entry is None:
            raise UserError(field, f"Workload {namespace}/{name} has no pod group {group}")
        n = _min_count(entry.get("policy"), "policy")
        basic = n is None
    elif obj is not None:
        s = spec(obj)
        where = f"PodGroup {namespace}/{group}"
        n = _min_count(s.get("schedulingPolicy"), f"{where} spec.schedulingPolicy") or _min_count(
            s.get("policy"), f"{where} spec.policy"
        )
        basic = n is None
        key = topology_key(obj, where)
    else:
        n = pod_min_member(pod)
        if n is None and ref in objects:
            what = f"Workload {WORKLOAD_VERSION}" if name else f"PodGroup ({' or '.join(PODGROUP_VERSIONS)})"
            raise UserError(
                field,
                f"{what} {namespace}/{name or group} cannot be read, and the pod has no {MIN_MEMBER} "
                "annotation giving the group's size",
            )
    if basic:
        n = 1
    return Claim(
        "workload",
        field,
        label,
        gang,
        n,
        priority=_priority(pod, obj),
        topology_key=key,
        independent=basic and key is None,
    )
