"""The annotations a Binding writes into the pod: the decision, durable where Kubernetes keeps it.

kube-apiserver merges a Binding's annotations into the pod atomically with `spec.nodeName`, so they
are the commit record (HiveD's trick: its `pod-bind-info` annotation, doc/user-manual.md in
github.com/microsoft/hivedscheduler):

- `…/pod-leaf-cell-isolation: "4,5,6,7"`: the GPU indices, for `NVIDIA_VISIBLE_DEVICES` through the
  downward API (written under topogang's key, HiveD's, and HiveD's older `pod-gpu-isolation`);
- `…/pod-bind-info`: YAML in HiveD's `PodBindInfo` shape, holding the whole gang's placement, plus
  topogang's keys (gang, virtualCluster, priority, slot, slotKey) that HiveD ignores.

After a restart the extender rebuilds every gang from these (`extender.kube.recovery`). `priority` is
the gang's requested one, which its pods' specs carry, even while it runs downgraded to opportunistic
by a lazy preemption: the rebuilt request must be the one its pending members are filtered with.
That it held no quota cell is what `preassignedCellTypes` says, per GPU (HiveD's meaning: the type of
the gang's own VC cell holding it, "" when opportunistic), and a gang whose cells are all "" comes back
opportunistic.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from config.untrusted import ANNOTATION_LIMITS, UntrustedError, check_size, check_yaml, whole_number
from extender.gangs.plainyaml import read_plain
from topology.decisions import Bind, GangPlacement

ISOLATION_ANNOTATIONS = (
    "topogang.io/pod-leaf-cell-isolation",
    "hivedscheduler.microsoft.com/pod-leaf-cell-isolation",
    "hivedscheduler.microsoft.com/pod-gpu-isolation",  # read by pre-v0.3 FrameworkController examples
)
BIND_INFO_ANNOTATIONS = ("topogang.io/pod-bind-info", "hivedscheduler.microsoft.com/pod-bind-info")

_Dumper: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True, slots=True)
class PlacedPod:
    """One pod slot of a gang as written in the bind info."""

    node: str
    gpus: tuple[int, ...]
    preassigned_cell_types: tuple[str, ...] = ()
    slot: int | None = None
    slot_key: str | None = None


@dataclass(frozen=True, slots=True)
class BindInfo:
    """A decoded `pod-bind-info`: this pod's node and GPUs, and every slot of its gang."""

    node: str
    gpus: tuple[int, ...]
    chain: str
    placements: tuple[PlacedPod, ...]
    gang: str | None = None
    vc: str | None = None
    priority: int | None = None
    slot: int | None = None
    slot_key: str | None = None


def isolation(gpus: tuple[int, ...]) -> str:
    return ",".join(str(g) for g in gpus)


def bind_annotations(bind: Bind, slot_key: str | None = None) -> dict[str, str]:
    """Every annotation the Binding carries for this decision."""
    info = encode_bind_info(bind.placement, bind.node, bind.gpu_indices, bind.slot, slot_key)
    gpus = isolation(bind.gpu_indices)
    out = dict.fromkeys(ISOLATION_ANNOTATIONS, gpus)
    out.update(dict.fromkeys(BIND_INFO_ANNOTATIONS, info))
    return out


def encode_bind_info(
    placement: GangPlacement,
    node: str,
    gpus: tuple[int, ...],
    slot: int | None = None,
    slot_key: str | None = None,
) -> str:
    """HiveD's PodBindInfo YAML (block style, as yaml.v2 writes it), with topogang's extra keys.

    A block mapping's entries are emitted independently, so the document is written in parts that
    concatenate to exactly what one `yaml.dump` of the whole document writes, and each part is cached
    (the gang's `affinityGroupBindInfo` is the same for every member: PyYAML's representer costs
    ~1 ms a gang)."""
    pods = tuple(
        (
            p.node,
            tuple(p.gpu_indices),
            p.cell_types if len(p.cell_types) == len(p.gpu_indices) else ("",) * len(p.gpu_indices),
            p.slot,
            p.key,
        )
        for p in placement.pods
    )
    return (
        _head_yaml(node, tuple(gpus), placement.chain)
        + _group_yaml(pods)
        + _gang_yaml(placement.gang, placement.vc, placement.requested_priority)
        + _slot_yaml(slot, slot_key)
    )


def _yaml(doc: dict[str, Any]) -> str:
    return str(yaml.dump(doc, Dumper=_Dumper, default_flow_style=False, sort_keys=False))


# Each part is cached on its own (~0.1 ms a yaml.dump even with libyaml's emitter): the node's part
# repeats for every pod placed on the same GPUs of a node, the gang's for every member, the slot's
# for every gang of the same shape; so a gang member's bind usually dumps nothing.
@functools.lru_cache(maxsize=16384)
def _head_yaml(node: str, gpus: tuple[int, ...], chain: str) -> str:
    return _yaml({"node": node, "leafCellIsolation": list(gpus), "cellChain": chain})


@functools.lru_cache(maxsize=1024)
def _gang_yaml(gang: str, vc: str, priority: int) -> str:
    return _yaml({"gang": gang, "virtualCluster": vc, "priority": priority})


@functools.lru_cache(maxsize=4096)
def _slot_yaml(slot: int | None, slot_key: str | None) -> str:
    doc: dict[str, Any] = {}
    if slot is not None:
        doc["slot"] = slot
    if slot_key is not None:
        doc["slotKey"] = slot_key
    return _yaml(doc) if doc else ""


_PodKey = tuple[str, tuple[int, ...], tuple[str, ...], int, "str | None"]


@functools.lru_cache(maxsize=1024)
def _group_yaml(pods: tuple[_PodKey, ...]) -> str:
    groups: dict[int, list[dict[str, Any]]] = {}
    for node, indices, types, slot, key in pods:
        entry: dict[str, Any] = {
            "physicalNode": node,
            "physicalLeafCellIndices": list(indices),
            "preassignedCellTypes": list(types),
            "slot": slot,
        }
        if key is not None:
            entry["slotKey"] = key
        groups.setdefault(len(indices), []).append(entry)
    return _yaml({"affinityGroupBindInfo": [{"podPlacements": entries} for entries in groups.values()]})


def _ints(value: object, path: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise ValueError(f"{path}: expected a list of GPU indices")
    return tuple(value)


def _opt_str(doc: Mapping[str, Any], key: str) -> str | None:
    v = doc.get(key)
    return str(v) if v is not None and not isinstance(v, dict | list) else None


def _opt_int(doc: Mapping[str, Any], key: str) -> int | None:
    v = doc.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _renamed(doc: Mapping[str, Any], key: str, old: str) -> Any:
    return doc[key] if key in doc else doc.get(old)


def decode_bind_info(text: str) -> BindInfo:
    """Parse a `pod-bind-info` annotation (topogang's or HiveD's); `ValueError` names what is wrong."""
    try:
        check_size(text, ANNOTATION_LIMITS)  # a tenant can edit its pod's annotations, bound or not
        doc = read_plain(text)  # what topogang writes, without a YAML parser (~20x faster)
        if doc is None:
            check_yaml(text, ANNOTATION_LIMITS)
            doc = yaml.load(text, Loader=_Loader)
    except UntrustedError as exc:
        raise ValueError(str(exc)) from None
    except yaml.YAMLError as exc:
        raise ValueError(f"not YAML: {exc}") from None
    if not isinstance(doc, dict):
        raise ValueError("expected a mapping")
    node = doc.get("node")
    if not isinstance(node, str) or not node:
        raise ValueError("node: missing")
    # HiveD before v0.3 wrote gpuIsolation / physicalGpuIndices (its own reader renames them too)
    gpus = _ints(_renamed(doc, "leafCellIsolation", "gpuIsolation"), "leafCellIsolation")
    groups = doc.get("affinityGroupBindInfo")
    if not isinstance(groups, list):
        raise ValueError("affinityGroupBindInfo: expected a list")
    placements: list[PlacedPod] = []
    for i, g in enumerate(groups):
        pods = g.get("podPlacements") if isinstance(g, dict) else None
        if not isinstance(pods, list):
            raise ValueError(f"affinityGroupBindInfo[{i}].podPlacements: expected a list")
        for j, p in enumerate(pods):
            path = f"affinityGroupBindInfo[{i}].podPlacements[{j}]"
            if not isinstance(p, dict) or not isinstance(p.get("physicalNode"), str):
                raise ValueError(f"{path}.physicalNode: missing")
            types = p.get("preassignedCellTypes")
            placements.append(
                PlacedPod(
                    node=p["physicalNode"],
                    gpus=_ints(
                        _renamed(p, "physicalLeafCellIndices", "physicalGpuIndices"),
                        f"{path}.physicalLeafCellIndices",
                    ),
                    preassigned_cell_types=tuple(str(t) for t in types) if isinstance(types, list) else (),
                    slot=_opt_int(p, "slot"),
                    slot_key=_opt_str(p, "slotKey"),
                )
            )
    if all(p.slot is not None for p in placements):
        placements.sort(key=lambda p: p.slot if p.slot is not None else 0)
    chain = doc.get("cellChain")
    return BindInfo(
        node=node,
        gpus=gpus,
        chain=str(chain) if chain is not None else "",
        placements=tuple(placements),
        gang=_opt_str(doc, "gang"),
        vc=_opt_str(doc, "virtualCluster"),
        priority=_opt_int(doc, "priority"),
        slot=_opt_int(doc, "slot"),
        slot_key=_opt_str(doc, "slotKey"),
    )


def decode_isolation(text: str) -> tuple[int, ...]:
    """`"4,5,6,7"` -> (4, 5, 6, 7); `ValueError` on anything else."""
    numbers = [whole_number(p.strip(), 9) for p in text.split(",") if p.strip()]
    if not numbers or None in numbers:
        raise ValueError(f"not a comma-separated list of GPU indices: {text[:200]!r}")
    return tuple(n for n in numbers if n is not None)


def pod_bind_info(annotations: Mapping[str, Any]) -> BindInfo | None:
    """The bind info a bound pod carries (topogang's key first), or None when it has none.

    HiveD pods without bind info but with an isolation annotation still give node-less GPU indices;
    the caller supplies the node from `spec.nodeName`."""
    for key in BIND_INFO_ANNOTATIONS:
        text = annotations.get(key)
        if isinstance(text, str) and text.strip():
            return decode_bind_info(text)
    return None
