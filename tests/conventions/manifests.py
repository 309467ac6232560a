"""Pods and PodGroups as users write them for each convention (plain dicts)."""

from __future__ import annotations

import json
from typing import Any


def pod(
    name: str,
    ns: str = "vision",
    *,
    gpus: int = 0,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    spec: dict[str, Any] | None = None,
    uid: str | None = None,
    enable: bool = False,
    scheduler: str = "topogang",
    env: list[dict[str, str]] | None = None,
    args: list[str] | None = None,
) -> dict[str, Any]:
    limits: dict[str, str] = {}
    if gpus:
        limits["nvidia.com/gpu"] = str(gpus)
    if enable:
        limits["topogang.io/pod-scheduling-enable"] = "1"
    container: dict[str, Any] = {"name": "main", "image": "trainer", "resources": {"limits": limits}}
    if env:
        container["env"] = env
    if args:
        container["args"] = args
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "uid": uid or f"uid-{ns}-{name}",
            "name": name,
            "namespace": ns,
            "labels": dict(labels or {}),
            "annotations": dict(annotations or {}),
        },
        "spec": {"schedulerName": scheduler, "containers": [container], **(spec or {})},
        "status": {"phase": "Pending"},
    }


def coscheduling_podgroup(name: str, ns: str, min_member: int, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"minMember": min_member, **spec},
    }


def volcano_podgroup(name: str, ns: str, min_member: int, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"minMember": min_member, "queue": "default", **spec},
    }


def workload(name: str, ns: str, group: str, min_count: int | None) -> dict[str, Any]:
    """A 1.35 Workload with one pod group: a gang policy with minCount (None: the basic policy)."""
    policy: dict[str, Any] = {"basic": {}} if min_count is None else {"gang": {"minCount": min_count}}
    return {
        "apiVersion": "scheduling.k8s.io/v1alpha1",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"podGroups": [{"name": group, "policy": policy}]},
    }


def task_groups(*groups: tuple[str, int, int]) -> str:
    return json.dumps(
        [{"name": n, "minMember": m, "minResource": {"cpu": "1", "nvidia.com/gpu": g}} for n, m, g in groups]
    )


def podgroup(
    name: str,
    ns: str,
    min_count: int | None,
    *,
    version: str = "scheduling.k8s.io/v1beta1",
    topology: list[str] | None = None,
    priority: int | None = None,
) -> dict[str, Any]:
    """A PodGroup as Kubernetes 1.37 serves it (`scheduling.k8s.io/v1beta1`; 1.36's v1alpha2 has the
    same fields): a gang policy with minCount (None: the basic policy), KEP-5732's topology keys, and
    the priority admission sets from the group's PriorityClass."""
    policy: dict[str, Any] = {"basic": {}} if min_count is None else {"gang": {"minCount": min_count}}
    spec: dict[str, Any] = {
        "workloadRef": {"workloadName": name.rsplit("-", 1)[0], "templateName": "workers"},
        "schedulingPolicy": policy,
        "disruptionMode": {"single": {}},
    }
    if topology is not None:
        spec["schedulingConstraints"] = {"topology": [{"key": k} for k in topology]}
    if priority is not None:
        spec["priorityClassName"] = "gang-priority"
        spec["priority"] = priority
    return {
        "apiVersion": version,
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    }
