"""The Kubernetes Workload API (alpha): `spec.workloadRef {name, podGroup, podGroupReplicaKey}` on
the pod and a `scheduling.k8s.io/v1alpha1` Workload whose `spec.podGroups[]` have
`policy.gang.minCount` (1.35); or `spec.schedulingGroup.podGroupName` and a `scheduling.k8s.io/v1alpha2`
PodGroup with `…gang.minCount` (1.36). Each pod group replica is its own gang."""

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
from topology.decisions import UserError

WORKLOAD_VERSION = "scheduling.k8s.io/v1alpha1"
PODGROUP_VERSION = "scheduling.k8s.io/v1alpha2"


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


def _min_count(policy: object) -> int | None:
    gang = policy.get("gang") if isinstance(policy, dict) else None
    return count(gang.get("minCount"), "policy.gang.minCount") if isinstance(gang, dict) else None


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
        n = _min_count(entry.get("policy")) or 1  # a basic (non-gang) pod group: pods one by one
    elif obj is not None:
        s = spec(obj)
        n = _min_count(s.get("schedulingPolicy")) or _min_count(s.get("policy")) or 1
    else:
        n = pod_min_member(pod)
        if n is None and ref in objects:
            what = f"Workload {WORKLOAD_VERSION}" if name else f"PodGroup {PODGROUP_VERSION}"
            raise UserError(
                field,
                f"{what} {namespace}/{name or group} cannot be read, and the pod has no {MIN_MEMBER} "
                "annotation giving the group's size",
            )
    return Claim("workload", field, label, gang, n)
