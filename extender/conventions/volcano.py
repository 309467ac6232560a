"""Volcano: annotation `scheduling.k8s.io/group-name: <PodGroup>` (Volcano's controllers also set the
label `volcano.sh/...` keys, which are not needed here), PodGroup `scheduling.volcano.sh/v1beta1` with
`spec.minMember` and `spec.minResources`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from extender.conventions.common import (
    MIN_MEMBER,
    Claim,
    Objects,
    ObjRef,
    annotations_of,
    count,
    pod_min_member,
    spec,
    text,
)
from extender.conventions.coscheduling import gpu_pods
from topology.decisions import UserError

ANNOTATION = "scheduling.k8s.io/group-name"
GROUP_VERSION = "scheduling.volcano.sh/v1beta1"


def refs(pod: Mapping[str, Any], namespace: str) -> list[ObjRef]:
    name = text(annotations_of(pod).get(ANNOTATION))
    return [ObjRef("volcano", namespace, name)] if name is not None else []


def claim(pod: Mapping[str, Any], namespace: str, gpus: int, objects: Objects) -> Claim | None:
    name = text(annotations_of(pod).get(ANNOTATION))
    if name is None:
        return None
    gang = f"{namespace}/{name}"
    key = f"annotation {ANNOTATION}"
    pg = objects.get(ObjRef("volcano", namespace, name))
    if pg is not None:
        what = f"PodGroup {GROUP_VERSION} {namespace}/{name}"
        s = spec(pg)
        least = count(s.get("minMember"), f"{what}.spec.minMember") or 1
        return Claim("volcano", key, name, gang, gpu_pods(s, least, gpus, what))
    n = pod_min_member(pod)
    if n is None and ObjRef("volcano", namespace, name) in objects:
        raise UserError(
            key,
            f"PodGroup {GROUP_VERSION} {namespace}/{name} cannot be read, and the pod has no {MIN_MEMBER} "
            "annotation giving the group's size",
        )
    return Claim("volcano", key, name, gang, n)
