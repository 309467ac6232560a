"""scheduler-plugins Coscheduling: label `scheduling.x-k8s.io/pod-group: <PodGroup>` (legacy:
`pod-group.scheduling.sigs.k8s.io/name` + `…/min-available`), PodGroup `scheduling.x-k8s.io/v1alpha1`
with `spec.minMember`, `spec.minResources`, `spec.scheduleTimeoutSeconds`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from extender.conventions.common import (
    MIN_MEMBER,
    Claim,
    Objects,
    ObjRef,
    count,
    gpu_resource,
    labels,
    pod_min_member,
    seconds,
    spec,
    text,
)
from topology.decisions import UserError

LABEL = "scheduling.x-k8s.io/pod-group"
LEGACY_LABEL = "pod-group.scheduling.sigs.k8s.io/name"
LEGACY_MIN = "pod-group.scheduling.sigs.k8s.io/min-available"
GROUP_VERSION = "scheduling.x-k8s.io/v1alpha1"


def group_of(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    lb = labels(pod)
    for key in (LABEL, LEGACY_LABEL):
        name = text(lb.get(key))
        if name is not None:
            return key, name
    return None


def refs(pod: Mapping[str, Any], namespace: str) -> list[ObjRef]:
    g = group_of(pod)
    return [ObjRef("coscheduling", namespace, g[1])] if g is not None and g[0] == LABEL else []


def gpu_pods(pg_spec: Mapping[str, Any], min_member: int, gpus: int, what: str) -> int:
    """How many of a PodGroup's minMember pods are GPU pods: `minResources` `nvidia.com/gpu` divided
    by this pod's GPUs when the PodGroup states it (a launcher without GPUs is not topogang's)."""
    total = gpu_resource(pg_spec.get("minResources"))
    if total is None or gpus <= 0:
        return min_member
    if total % gpus or total // gpus > min_member or total == 0:
        raise UserError(
            f"{what}.spec.minResources",
            f"nvidia.com/gpu {total} is not a multiple of this pod's {gpus} GPUs for at most minMember "
            f"{min_member} pods",
        )
    return total // gpus


def claim(pod: Mapping[str, Any], namespace: str, gpus: int, objects: Objects) -> Claim | None:
    g = group_of(pod)
    if g is None:
        return None
    key, name = g
    gang = f"{namespace}/{name}"
    if key == LEGACY_LABEL:
        n = count(labels(pod).get(LEGACY_MIN), LEGACY_MIN) or pod_min_member(pod)
        return Claim("coscheduling", f"label {key}", name, gang, n)
    pg = objects.get(ObjRef("coscheduling", namespace, name))
    if pg is not None:
        what = f"PodGroup {GROUP_VERSION} {namespace}/{name}"
        s = spec(pg)
        least = count(s.get("minMember"), f"{what}.spec.minMember") or 1
        return Claim(
            "coscheduling",
            f"label {key}",
            name,
            gang,
            gpu_pods(s, least, gpus, what),
            ttl_seconds=seconds(s.get("scheduleTimeoutSeconds"), f"{what}.spec.scheduleTimeoutSeconds"),
        )
    n = pod_min_member(pod)
    if n is None and ObjRef("coscheduling", namespace, name) in objects:
        raise UserError(
            f"label {key}",
            f"PodGroup {GROUP_VERSION} {namespace}/{name} cannot be read, and the pod has no {MIN_MEMBER} "
            "annotation giving the group's size",
        )
    return Claim("coscheduling", f"label {key}", name, gang, n)
