"""Node health from a Node object: what the core's `set_node_health` needs.

A node is healthy iff it is not `spec.unschedulable` and its `Ready` condition is `True` (HiveD's
rule). On a healthy node, device-plugin allocatable below capacity for `nvidia.com/gpu` marks that
many GPUs bad (the core picks the highest-numbered ones).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

GPU_RESOURCE = "nvidia.com/gpu"
_INT = re.compile(r"^\s*(\d+)\s*$")


@dataclass(frozen=True, slots=True)
class NodeHealth:
    name: str
    healthy: bool
    missing_gpus: int  # capacity - allocatable of the GPU resource (0 when not advertised)
    reason: str

    def healthy_gpus(self, configured: int) -> int | None:
        """GPUs the core may use out of the `configured` ones (None: all of them)."""
        if not self.missing_gpus:
            return None
        return max(0, configured - self.missing_gpus)


def count(value: object) -> int | None:
    """An integer resource quantity (`8`, `"8"`), or None."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        m = _INT.match(value)
        if m:
            return int(m.group(1))
    return None


def node_name(node: Mapping[str, Any]) -> str:
    meta = node.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    return name if isinstance(name, str) else ""


def node_health(node: Mapping[str, Any], gpu_resource: str = GPU_RESOURCE) -> NodeHealth:
    name = node_name(node)
    spec = node.get("spec") if isinstance(node.get("spec"), dict) else {}
    status = node.get("status") if isinstance(node.get("status"), dict) else {}
    assert isinstance(spec, dict) and isinstance(status, dict)
    conditions = status.get("conditions") if isinstance(status.get("conditions"), list) else []
    ready = None
    for c in conditions or []:
        if isinstance(c, dict) and c.get("type") == "Ready":
            ready = c.get("status")
    capacity = status.get("capacity") if isinstance(status.get("capacity"), dict) else {}
    allocatable = status.get("allocatable") if isinstance(status.get("allocatable"), dict) else {}
    cap = count((capacity or {}).get(gpu_resource))
    alloc = count((allocatable or {}).get(gpu_resource))
    missing = max(0, cap - alloc) if cap is not None and alloc is not None else 0
    if spec.get("unschedulable") is True:
        return NodeHealth(name, False, missing, "node is cordoned (spec.unschedulable)")
    if ready != "True":
        return NodeHealth(name, False, missing, f"node condition Ready is {ready or 'missing'}")
    reason = f"{missing} of {cap} {gpu_resource} not allocatable" if missing else "Ready"
    return NodeHealth(name, True, missing, reason)
