"""Which DRA device is which GPU of the cell tree: a node's ResourceSlice devices onto its leaf cells.

Pure: ResourceSlice and DeviceTaintRule objects (`resource.k8s.io/v1`, as JSON) in, a `DeviceMap`
or a `Mismatch` out. The devices of the admin's driver on a node are sorted by the attribute the
admin names (PCI bus id by default: `nvidia-smi` numbers GPUs in that order, so GPU index i of the
config is the i-th device) and given the node's GPU indices in ascending order. Nothing is guessed:
a node whose devices do not match its cells (another count, an attribute missing or repeated, the
GPUs of one PCIe root split over two halves of the cell tree) maps to a `Mismatch` with the reason,
and its GPUs are not given out through DRA until its slices or the config are fixed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

NVIDIA_DRIVER = "gpu.nvidia.com"
PCI_BUS_ID = "resource.kubernetes.io/pciBusID"
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
BAD_EFFECTS = frozenset({"NoSchedule", "NoExecute"})  # "None" only informs

AttrValue = str | int | bool


@dataclass(frozen=True, slots=True)
class DraSettings:
    """The admin's DRA choices (`topogang serve --dra-*`, chart `extender.dra`)."""

    driver: str = NVIDIA_DRIVER
    device_class: str = NVIDIA_DRIVER
    order_by: str = PCI_BUS_ID
    pcie_root: str = PCIE_ROOT


@dataclass(frozen=True, slots=True)
class Device:
    """One published device: its pool (for the allocation result) and attributes, names qualified."""

    name: str
    pool: str
    attributes: Mapping[str, AttrValue] = field(default_factory=dict)
    bad_taints: tuple[str, ...] = ()  # "key=value:Effect" of the slice's own NoSchedule/NoExecute taints


@dataclass(frozen=True, slots=True)
class DeviceMap:
    """A node whose devices match its cells: GPU index <-> device."""

    node: str
    driver: str
    by_gpu: Mapping[int, Device]

    def device_of(self, gpu: int) -> Device | None:
        return self.by_gpu.get(gpu)

    def gpu_of(self, pool: str, device: str) -> int | None:
        for gpu, d in self.by_gpu.items():
            if d.pool == pool and d.name == device:
                return gpu
        return None


@dataclass(frozen=True, slots=True)
class Mismatch:
    """A node whose slices contradict the config: reported (log, metric, Event), never guessed."""

    node: str
    reason: str


def _attr_value(v: object) -> AttrValue | None:
    if not isinstance(v, dict):
        return None
    for key in ("string", "version", "int", "bool"):
        got = v.get(key)
        if isinstance(got, str | int | bool):
            return got
    return None


def qualified(driver: str, name: str) -> str:
    """An attribute's full name: a name without a domain is in the driver's (the API's rule)."""
    return name if "/" in name else f"{driver}/{name}"


@dataclass(frozen=True, slots=True)
class Slice:
    """What one ResourceSlice says about one node."""

    name: str
    node: str
    driver: str
    pool: str
    generation: int
    slice_count: int
    devices: tuple[Device, ...]


def parse_slice(obj: Mapping[str, Any]) -> Slice | None:
    """A ResourceSlice of one node (`spec.nodeName`), or None for any other (shared, node selectors)."""
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    spec = obj.get("spec")
    if not isinstance(spec, dict) or not isinstance(meta, dict):
        return None
    node, driver, pool = spec.get("nodeName"), spec.get("driver"), spec.get("pool")
    if not isinstance(node, str) or not node or not isinstance(driver, str) or not isinstance(pool, dict):
        return None
    pool_name = pool.get("name")
    gen, count = pool.get("generation", 0), pool.get("resourceSliceCount", 1)
    if not isinstance(pool_name, str) or not isinstance(gen, int) or not isinstance(count, int):
        return None
    devices = []
    for d in spec.get("devices") or []:
        if not isinstance(d, dict) or not isinstance(d.get("name"), str):
            continue
        attrs: dict[str, AttrValue] = {}
        raw = d.get("attributes")
        for k, v in raw.items() if isinstance(raw, dict) else ():
            val = _attr_value(v)
            if isinstance(k, str) and val is not None:
                attrs[qualified(driver, k)] = val
        devices.append(Device(d["name"], pool_name, attrs, _bad_taints(d.get("taints"))))
    name = meta.get("name")
    return Slice(name if isinstance(name, str) else "", node, driver, pool_name, gen, count, tuple(devices))


def _bad_taints(taints: object) -> tuple[str, ...]:
    out = []
    for t in taints if isinstance(taints, list) else ():
        if isinstance(t, dict) and t.get("effect") in BAD_EFFECTS:
            out.append(f"{t.get('key', '')}={t.get('value', '')}:{t.get('effect')}")
    return tuple(out)


def node_devices(slices: Iterable[Slice], driver: str, node: str) -> tuple[Device, ...] | Mismatch:
    """The driver's devices on the node: each pool's newest generation, whole (every one of its
    `resourceSliceCount` slices seen), or why not."""
    pools: dict[str, list[Slice]] = {}
    for s in slices:
        if s.node == node and s.driver == driver:
            pools.setdefault(s.pool, []).append(s)
    out: list[Device] = []
    for pool, got in sorted(pools.items()):
        newest = max(s.generation for s in got)
        current = [s for s in got if s.generation == newest]
        want = max(s.slice_count for s in current)
        if len(current) < want:
            return Mismatch(node, f"pool {pool} generation {newest}: {len(current)} of {want} slices seen")
        devices = [d for s in sorted(current, key=lambda s: s.name) for d in s.devices]
        names = [d.name for d in devices]
        if len(set(names)) != len(names):
            twice = sorted({n for n in names if names.count(n) > 1})
            return Mismatch(node, f"pool {pool} generation {newest}: device {twice[0]} published twice")
        out.extend(devices)
    return tuple(out)


def _sort_key(v: AttrValue) -> tuple[int, int, str]:
    if isinstance(v, bool):
        return (0, int(v), "")
    if isinstance(v, int):
        return (1, v, "")
    return (2, 0, v.lower())


def map_node(
    node: str, halves: Mapping[int, str], devices: tuple[Device, ...] | Mismatch, settings: DraSettings
) -> DeviceMap | Mismatch:
    """Match the node's devices to its GPUs (`halves`: GPU index -> its half, `node_layout`)."""
    if isinstance(devices, Mismatch):
        return devices
    if not devices:
        return Mismatch(node, f"no {settings.driver} devices published")
    gpus = sorted(halves)
    if len(devices) != len(gpus):
        return Mismatch(
            node, f"{len(devices)} {settings.driver} devices published, the config has {len(gpus)} GPUs"
        )
    order = qualified(settings.driver, settings.order_by)
    keyed: list[tuple[AttrValue, Device]] = []
    for d in devices:
        v = d.attributes.get(order)
        if v is None:
            return Mismatch(node, f"device {d.name} has no attribute {order}")
        keyed.append((v, d))
    values = [_sort_key(v) for v, _ in keyed]
    if len(set(values)) != len(values):
        return Mismatch(node, f"two devices have the same {order}")
    keyed.sort(key=lambda kd: _sort_key(kd[0]))
    by_gpu = {gpu: d for gpu, (_, d) in zip(gpus, keyed, strict=True)}
    why = _roots_cross_halves(by_gpu, halves, qualified(settings.driver, settings.pcie_root))
    if why:
        return Mismatch(node, why)
    return DeviceMap(node, settings.driver, by_gpu)


def _roots_cross_halves(by_gpu: Mapping[int, Device], halves: Mapping[int, str], root_attr: str) -> str:
    """Why the PCIe roots contradict the halves ("" when they agree, or no device publishes one)."""
    roots = {gpu: d.attributes.get(root_attr) for gpu, d in by_gpu.items()}
    if all(r is None for r in roots.values()):
        return ""
    missing = sorted(by_gpu[g].name for g, r in roots.items() if r is None)
    if missing:
        return f"devices {', '.join(missing)} have no {root_attr} while others do"
    seen: dict[AttrValue, tuple[int, str]] = {}
    for gpu in sorted(roots):
        r = roots[gpu]
        assert r is not None
        first = seen.setdefault(r, (gpu, halves[gpu]))
        if first[1] != halves[gpu]:
            return (
                f"{root_attr} {r} holds GPU {first[0]} (device {by_gpu[first[0]].name}, cell "
                f"{first[1]}) and GPU {gpu} (device {by_gpu[gpu].name}, cell {halves[gpu]}): one PCIe "
                "root across two halves of the cell tree"
            )
    return ""


# ------------------------------------------------------------------------------ device taints
@dataclass(frozen=True, slots=True)
class TaintRule:
    """A DeviceTaintRule: which devices (driver, pool, device; empty matches all) get which taint."""

    name: str
    driver: str
    pool: str
    device: str
    taint: str


def parse_taint_rule(obj: Mapping[str, Any]) -> TaintRule | None:
    """A DeviceTaintRule with a NoSchedule/NoExecute taint (a CEL selector is not evaluated here:
    such a rule is skipped, never widened to every device)."""
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    spec = obj.get("spec")
    if not isinstance(spec, dict) or not isinstance(meta, dict):
        return None
    taint = spec.get("taint")
    sel = spec.get("deviceSelector")  # none matches no device (the API's rule); {} matches all
    if not isinstance(taint, dict) or taint.get("effect") not in BAD_EFFECTS or not isinstance(sel, dict):
        return None
    if sel.get("selectors") or sel.get("deviceClassName"):
        return None

    def s(k: str) -> str:
        v = sel.get(k)
        return v if isinstance(v, str) else ""

    name = meta.get("name") if isinstance(meta.get("name"), str) else ""
    text = f"{taint.get('key', '')}={taint.get('value', '')}:{taint.get('effect')}"
    return TaintRule(str(name), s("driver"), s("pool"), s("device"), text)


def tainted_gpus(dm: DeviceMap, rules: Iterable[TaintRule]) -> dict[int, str]:
    """GPU index -> why it is bad: its slice taints it, or a DeviceTaintRule matches it."""
    out: dict[int, str] = {}
    rules = list(rules)
    for gpu, d in dm.by_gpu.items():
        if d.bad_taints:
            out[gpu] = f"device {d.name} taint {d.bad_taints[0]}"
            continue
        for r in rules:
            if (r.driver in ("", dm.driver)) and (r.pool in ("", d.pool)) and (r.device in ("", d.name)):
                out[gpu] = f"DeviceTaintRule {r.name} taint {r.taint} on device {d.name}"
                break
    return out
