"""Which pods the conventions make ours, and how many GPUs a pod asks for.

No import from `extender.gangs.podspec`: `podspec.is_enabled` imports this module (the opt-in by a GPU
request), so this module stays at the bottom of the import graph.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

GPU_RESOURCE = "nvidia.com/gpu"
# pods of these kube-scheduler profiles that request GPUs are topogang's even without the opt-in limit
SCHEDULER_NAMES = frozenset({"topogang"})

_INT = re.compile(r"^\s*\+?(\d{1,6})\s*$")


def gpu_count(value: object) -> int | None:
    """A GPU quantity as a whole number (`2`, `"2"`); None when absent or not a whole number."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, float):
        return int(value) if value.is_integer() and value >= 0 else None
    if isinstance(value, str):
        m = _INT.match(value)
        return int(m.group(1)) if m else None
    return None


def _container_gpus(c: object) -> int:
    res = c.get("resources") if isinstance(c, dict) else None
    if not isinstance(res, dict):
        return 0
    best = 0
    for part in ("limits", "requests"):  # extended resources: request == limit when both are set
        values = res.get(part)
        if isinstance(values, dict):
            best = max(best, gpu_count(values.get(GPU_RESOURCE)) or 0)
    return best


def pod_gpus(pod: Mapping[str, Any]) -> int:
    """The pod's effective `nvidia.com/gpu` request, as kube-scheduler counts it: the sum over
    containers, or the largest init container when that is more."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return 0
    containers = spec.get("containers")
    inits = spec.get("initContainers")
    total = sum(_container_gpus(c) for c in containers) if isinstance(containers, list) else 0
    init = max((_container_gpus(c) for c in inits), default=0) if isinstance(inits, list) else 0
    return max(total, init)


def scheduler_name(pod: Mapping[str, Any]) -> str:
    spec = pod.get("spec")
    name = spec.get("schedulerName") if isinstance(spec, dict) else None
    return name if isinstance(name, str) else ""


def gpu_opt_in(pod: Mapping[str, Any]) -> bool:
    """A pod of topogang's kube-scheduler profile (`schedulerName: topogang`) that requests GPUs."""
    return scheduler_name(pod) in SCHEDULER_NAMES and pod_gpus(pod) > 0
