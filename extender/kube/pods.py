"""Facts about a pod object that the edge needs: identity, phase, binding."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def meta(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    m = pod.get("metadata")
    return m if isinstance(m, dict) else {}


def uid(pod: Mapping[str, Any]) -> str:
    v = meta(pod).get("uid")
    return v if isinstance(v, str) else ""


def namespace(pod: Mapping[str, Any]) -> str:
    v = meta(pod).get("namespace")
    return v if isinstance(v, str) and v else "default"


def name(pod: Mapping[str, Any]) -> str:
    v = meta(pod).get("name")
    return v if isinstance(v, str) else ""


def node_name(pod: Mapping[str, Any]) -> str | None:
    spec = pod.get("spec")
    v = spec.get("nodeName") if isinstance(spec, dict) else None
    return v if isinstance(v, str) and v else None


def phase(pod: Mapping[str, Any]) -> str:
    status = pod.get("status")
    v = status.get("phase") if isinstance(status, dict) else None
    return v if isinstance(v, str) else ""


def finished(pod: Mapping[str, Any]) -> bool:
    """Succeeded or Failed: the pod's containers will not run again."""
    return phase(pod) in ("Succeeded", "Failed")


def deleting(pod: Mapping[str, Any]) -> bool:
    """Its deletion has begun (it may still run out its grace period)."""
    return meta(pod).get("deletionTimestamp") is not None


def succeeded(pod: Mapping[str, Any]) -> bool:
    return phase(pod) == "Succeeded"


def pod_annotations(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    a = meta(pod).get("annotations")
    return a if isinstance(a, dict) else {}


def resource_version(obj: Mapping[str, Any]) -> str | None:
    v = meta(obj).get("resourceVersion")
    return v if isinstance(v, str) and v else None


def kept(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    """The pod as the extender keeps it (`ClusterSync.pods`): without `metadata.managedFields`, often
    the largest part of a pod and read by nothing here."""
    m = meta(pod)
    if "managedFields" not in m:
        return pod
    return {**pod, "metadata": {k: v for k, v in m.items() if k != "managedFields"}}


DISRUPTION_TARGET = "DisruptionTarget"


def disrupted(pod: Mapping[str, Any]) -> bool:
    """It carries a true `DisruptionTarget` condition (topogang's, kube-scheduler's, or the API
    server's for an eviction)."""
    return any(c.get("type") == DISRUPTION_TARGET and c.get("status") == "True" for c in _conditions(pod))


def disruption_patch(pod: Mapping[str, Any], reason: str, message: str, stamp: str) -> dict[str, Any]:
    """The JSON merge patch of the pod's status that adds a true `DisruptionTarget` condition, the
    mark kube-scheduler gives its preemption victims. A merge patch replaces the whole list, so the
    pod's other conditions go with it, and its resourceVersion makes the write fail (409) rather
    than drop a condition the kubelet wrote since the copy was read."""
    mark: dict[str, Any] = {
        "type": DISRUPTION_TARGET,
        "status": "True",
        "reason": reason,
        "message": message,
        "lastTransitionTime": stamp,
    }
    generation = meta(pod).get("generation")
    if isinstance(generation, int):  # which spec the condition speaks of, as kube-scheduler says it
        mark["observedGeneration"] = generation
    kept = [c for c in _conditions(pod) if c.get("type") != DISRUPTION_TARGET]
    body: dict[str, Any] = {"status": {"conditions": [*kept, mark]}}
    rv = resource_version(pod)
    if rv is not None:
        body["metadata"] = {"resourceVersion": rv}
    return body


def disruption_mark(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The pod's first `DisruptionTarget` condition (the one Kubernetes' own readers take), or None."""
    return next((c for c in _conditions(pod) if c.get("type") == DISRUPTION_TARGET), None)


def _conditions(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    status = pod.get("status")
    got = status.get("conditions") if isinstance(status, dict) else None
    return [c for c in got if isinstance(c, dict)] if isinstance(got, list) else []
