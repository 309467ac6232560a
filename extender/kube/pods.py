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
