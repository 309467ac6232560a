"""A starting config from a cluster's real nodes (`topogang generate --from-cluster`), without I/O.

Input: Node objects as the API server returns them (plain dicts). Output: the config as YAML-ready
data (HiveD's keys) plus notes for the admin. The caller reads the nodes and writes the file.

- A GPU node is one with `nvidia.com/gpu` in its capacity (else allocatable) above zero: one
  node-level cell of that many GPUs, its leaf type the `nvidia.com/gpu.product` label. The count is the
  hardware's (capacity): a GPU the device plugin reports unhealthy right now is still in the node, and
  topogang marks it bad at run time from allocatable (extender/kube/nodes.py); the notes name such nodes.
- Racks and zones come from node labels the admin names (the first of the rack labels a node carries
  is its rack; the same for zones). The tree is zone -> rack -> node; a node without a rack label is
  a cell of its own under its zone (or at the top), and so on.
- A cell holds children of one type, so a rack whose nodes differ (in GPU count or product) becomes
  one cell per kind of node, and a zone whose racks differ one cell per kind of rack. A note says so.
- Cell types are named from the product and the level (`<product>-NODE`, `-RACK`, `-ZONE`); where one
  product has several shapes at a level, the count is added (`A100-4GPU-NODE`, `A100-3NODE-RACK`).
- One VC, `all`, owns every top cell: a layout to split among teams by hand.
"""

from __future__ import annotations

import re
import textwrap
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from config.untrusted import whole_number

GPU_RESOURCE = "nvidia.com/gpu"
PRODUCT_LABEL = "nvidia.com/gpu.product"
CLIQUE_LABEL = "nvidia.com/gpu.clique"  # NVIDIA's NVLink domain (an NVL72 rack) of a node
ZONE_LABEL = "topology.kubernetes.io/zone"
DEFAULT_RACK_LABELS = (CLIQUE_LABEL,)
DEFAULT_ZONE_LABELS = (ZONE_LABEL,)
DEFAULT_PRODUCT = "GPU"
VC_NAME = "all"
_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]+")
_INT = re.compile(r"^\s*(\d+)\s*$")


class FromNodesError(ValueError):
    """The nodes describe no cluster (no GPU node at all); says why."""


@dataclass(frozen=True, slots=True)
class GpuNode:
    """What the config needs of one GPU node."""

    name: str
    gpus: int
    product: str
    labels: Mapping[str, str]
    allocatable: int | None


@dataclass(frozen=True, slots=True)
class Level:
    """A grouping level above the node: its name in cell types and the labels that give a node's group."""

    name: str  # RACK, ZONE
    labels: tuple[str, ...]


@dataclass
class _Cell:
    level: str  # NODE, RACK, ZONE
    key: tuple[Any, ...]  # the cell's shape: equal keys share a cell type
    product: str
    count: int  # children (GPUs for a node)
    node: str | None = None
    group: str = ""  # the label value that formed it (for the comment)
    children: list[_Cell] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class FromNodes:
    """The config as data, a comment line per top cell (same order), and the notes for the admin."""

    data: dict[str, Any]
    top_comments: tuple[str, ...]
    notes: tuple[str, ...]


def natural_key(text: str) -> tuple[tuple[int, int | str], ...]:
    """`r2` before `r10`: digit runs compare as numbers."""
    runs = re.findall(r"[0-9]+|[^0-9]+", text)
    return tuple((0, n) if (n := whole_number(p)) is not None else (1, p) for p in runs)


def type_safe(text: str) -> str:
    """A cell type name part from a label value: '.' separates path segments in a VC's cellType."""
    return _NAME_CHARS.sub("-", text).strip("-") or DEFAULT_PRODUCT


def _count(value: object) -> int | None:
    """An integer resource quantity (`8`, `"8"`), or None."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    m = _INT.match(value) if isinstance(value, str) else None
    return int(m.group(1)) if m else None


def _labels(node: Mapping[str, Any]) -> dict[str, str]:
    meta = node.get("metadata")
    raw = meta.get("labels") if isinstance(meta, dict) else None
    return {str(k): str(v) for k, v in raw.items()} if isinstance(raw, dict) else {}


def _resource(node: Mapping[str, Any], kind: str, resource: str) -> int | None:
    status = node.get("status")
    values = status.get(kind) if isinstance(status, dict) else None
    return _count(values.get(resource)) if isinstance(values, dict) else None


def gpu_node(node: Mapping[str, Any], gpu_resource: str, default_product: str) -> GpuNode | None:
    """The node's GPU facts, or None when it has no GPUs (or no name)."""
    meta = node.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    capacity = _resource(node, "capacity", gpu_resource)
    allocatable = _resource(node, "allocatable", gpu_resource)
    gpus = capacity if capacity is not None else allocatable
    if not isinstance(name, str) or not name or not gpus:
        return None
    labels = _labels(node)
    product = labels.get(PRODUCT_LABEL) or default_product
    return GpuNode(name, gpus, product, labels, allocatable)


def _group(node: GpuNode, level: Level) -> str | None:
    for label in level.labels:
        value = node.labels.get(label)
        if value:
            return f"{label}={value}"
    return None


def _build(nodes: list[GpuNode], levels: Sequence[Level], notes: list[str]) -> list[_Cell]:
    """The cells for `nodes` under the outermost of `levels` (recursively inward), in natural order."""
    if not levels:
        return [
            _Cell("NODE", ("NODE", n.product, n.gpus), n.product, n.gpus, node=n.name)
            for n in sorted(nodes, key=lambda n: natural_key(n.name))
        ]
    level, inner = levels[0], levels[1:]
    groups: dict[str, list[GpuNode]] = defaultdict(list)
    loose: list[GpuNode] = []
    for n in nodes:
        g = _group(n, level)
        (groups[g] if g is not None else loose).append(n)
    cells: list[_Cell] = []
    # groups in the order of their first node's name (a clique label's value is a UUID: no order)
    for g in sorted(groups, key=lambda g: min(natural_key(n.name) for n in groups[g])):
        kids = _build(groups[g], inner, notes)
        kinds: dict[tuple[Any, ...], list[_Cell]] = defaultdict(list)
        for k in kids:
            kinds[k.key].append(k)
        if len(kinds) > 1:
            shapes = ", ".join(f"{len(v)} x {_describe(key)}" for key, v in kinds.items())
            notes.append(
                f"{level.name.lower()} {g} holds different kinds of cells ({shapes}); a cell holds one "
                f"kind, so it is written as {len(kinds)} {level.name.lower()} cells"
            )
        for key, members in kinds.items():
            cells.append(
                _Cell(
                    level.name,
                    (level.name, key, len(members)),
                    members[0].product,
                    len(members),
                    group=g,
                    children=members,
                )
            )
    if loose and groups:
        names = ", ".join(n.name for n in sorted(loose, key=lambda n: natural_key(n.name))[:5])
        more = f" and {len(loose) - 5} more" if len(loose) > 5 else ""
        notes.append(
            f"{len(loose)} GPU node(s) carry none of the {level.name.lower()} labels "
            f"({', '.join(level.labels)}): {names}{more}; each is written outside any "
            f"{level.name.lower()} (label them and generate again, or move them by hand)"
        )
    cells += _build(loose, inner, notes)
    return cells


def _describe(key: tuple[Any, ...]) -> str:
    if key[0] == "NODE":
        return f"{key[1]} node of {key[2]} GPUs"
    return f"{key[0].lower()} of {key[2]} x ({_describe(key[1])})"


def _all_cells(cells: list[_Cell]) -> list[_Cell]:
    out: list[_Cell] = []
    for c in cells:
        out.append(c)
        out += _all_cells(c.children)
    return out


def _type_names(cells: list[_Cell]) -> dict[tuple[Any, ...], str]:
    """A name per distinct cell shape: `<product>-<LEVEL>`, with the count added where one product has
    several shapes at one level (inner levels first, since an outer name builds on its child's)."""
    keys: dict[tuple[Any, ...], _Cell] = {}
    for c in _all_cells(cells):
        keys.setdefault(c.key, c)
    names: dict[tuple[Any, ...], str] = {}
    for level in ("NODE", "RACK", "ZONE"):
        mine = [k for k in keys if k[0] == level]
        by_base: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
        for k in mine:
            by_base[f"{type_safe(keys[k].product)}-{level}"].append(k)
        for base, ks in by_base.items():
            for k in ks:
                if len(ks) == 1:
                    names[k] = base
                elif level == "NODE":
                    names[k] = f"{type_safe(keys[k].product)}-{k[2]}GPU-NODE"
                else:
                    child = keys[k].children[0]
                    stem = names[child.key].removesuffix(f"-{child.level}")
                    names[k] = f"{stem}-{k[2]}{child.level}-{level}"
    products: dict[str, set[str]] = defaultdict(set)  # leaf type -> the products it stands for
    for c in keys.values():
        products[type_safe(c.product)].add(c.product)
    clash = [sorted(p) for p in products.values() if len(p) > 1]
    by_name: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
    for k, n in names.items():
        by_name[n].append(k)
    if clash or any(len(ks) > 1 for ks in by_name.values()):
        which = clash[0] if clash else sorted({keys[k].product for ks in by_name.values() for k in ks[:2]})
        raise FromNodesError(
            f"products {', '.join(which)} give the same cell type names once made valid ('.' -> '-'); "
            "relabel the nodes' nvidia.com/gpu.product or edit the config by hand"
        )
    return names


def _physical(cell: _Cell, names: dict[tuple[Any, ...], str], top: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"cellType": names[cell.key]} if top else {}
    if cell.node is not None:
        out["cellAddress"] = cell.node
    else:
        out["cellChildren"] = [_physical(k, names, False) for k in cell.children]
    return out


def _comment(cell: _Cell) -> str:
    if cell.node is not None:
        return f"node {cell.node}: {cell.count} x {cell.product}"
    nodes = [c for c in _all_cells([cell]) if c.node is not None]
    gpus = sum(c.count for c in nodes)
    plural = "s" if len(nodes) != 1 else ""
    return f"{cell.level.lower()} {cell.group}: {len(nodes)} node{plural}, {gpus} x {cell.product}"


def from_nodes(
    nodes: Sequence[Mapping[str, Any]],
    *,
    rack_labels: Sequence[str] = DEFAULT_RACK_LABELS,
    zone_labels: Sequence[str] = DEFAULT_ZONE_LABELS,
    gpu_resource: str = GPU_RESOURCE,
    default_product: str = DEFAULT_PRODUCT,
) -> FromNodes:
    """The starting config for these Node objects; `FromNodesError` when none has a GPU."""
    notes: list[str] = []
    gpu_nodes = [g for n in nodes if (g := gpu_node(n, gpu_resource, default_product)) is not None]
    if not gpu_nodes:
        raise FromNodesError(
            f"none of the {len(nodes)} nodes has {gpu_resource} in its capacity or allocatable "
            "(is the NVIDIA device plugin running?)"
        )
    skipped = len(nodes) - len(gpu_nodes)
    if skipped:
        notes.append(f"{skipped} node(s) without {gpu_resource} are left out")
    unnamed = sorted(g.name for g in gpu_nodes if PRODUCT_LABEL not in g.labels)
    if unnamed:
        notes.append(
            f"{len(unnamed)} GPU node(s) have no {PRODUCT_LABEL} label (GPU feature discovery not "
            f"running?); their GPUs are typed {default_product!r}: {', '.join(unnamed[:5])}"
        )
    odd = [p for p in sorted({g.product for g in gpu_nodes}) if type_safe(p) != p]
    if odd:
        notes.append(
            f"product names {', '.join(odd)} hold characters a cell type cannot ('.' separates a "
            "VC's cellType path); their types use '-' instead"
        )
    low = sorted(g.name for g in gpu_nodes if g.allocatable is not None and g.allocatable < g.gpus)
    if low:
        notes.append(
            f"{len(low)} node(s) have fewer allocatable GPUs than installed ({', '.join(low[:5])}); "
            "written with every installed GPU (topogang marks the missing ones bad while they are)"
        )
    levels = [Level(name, tuple(labels)) for name, labels in (("ZONE", zone_labels), ("RACK", rack_labels))]
    tops = _build(gpu_nodes, [lv for lv in levels if lv.labels], notes)
    names = _type_names(tops)
    _note_uneven(tops, names, notes)
    cell_types: dict[str, Any] = {}
    for c in sorted(_all_cells(tops), key=lambda c: ("NODE", "RACK", "ZONE").index(c.level)):
        name = names[c.key]
        if name in cell_types:
            continue
        child = type_safe(c.product) if c.node is not None else names[c.children[0].key]
        cell_types[name] = {"childCellType": child, "childCellNumber": c.count}
        if c.node is not None:
            cell_types[name]["isNodeLevel"] = True
    physical = [_physical(c, names, True) for c in tops]
    quota: dict[str, int] = defaultdict(int)
    for c in tops:
        quota[names[c.key]] += 1
    data = {
        "physicalCluster": {"cellTypes": cell_types, "physicalCells": physical},
        "virtualClusters": {
            VC_NAME: {"virtualCells": [{"cellType": t, "cellNumber": n} for t, n in quota.items()]}
        },
    }
    return FromNodes(data, tuple(_comment(c) for c in tops), tuple(notes))


def _note_uneven(tops: list[_Cell], names: dict[tuple[Any, ...], str], notes: list[str]) -> None:
    """Racks (zones) of one product with different node (rack) counts get their own types; say so,
    since a missing node (a tray out for repair) is the common cause."""
    shapes: dict[tuple[str, str], set[str]] = defaultdict(set)
    for c in _all_cells(tops):
        if c.level != "NODE":
            shapes[(c.level, c.product)].add(names[c.key])
    for (level, product), types in sorted(shapes.items()):
        if len(types) > 1:
            notes.append(
                f"{product} {level.lower()}s differ in size ({', '.join(sorted(types))}); each size is its "
                "own cell type, and VCs ask for each separately. If a node is only missing for now, add "
                "it by hand so all share one type"
            )


def _dump(data: Any, indent: int) -> str:
    text = yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=120)
    pad = " " * indent
    return "".join(pad + line if line.strip() else line for line in text.splitlines(keepends=True))


def render_yaml(result: FromNodes, command: str) -> str:
    """The config as commented YAML: how it was made, the notes, a comment per top cell, and the VC
    section with how to split it."""
    data = result.data
    lines = [
        f"# Generated by: {command}",
        "# A starting point read from the cluster's nodes: one node cell per GPU node (its GPUs, typed by",
        f"# {PRODUCT_LABEL}), grouped by the rack and zone labels named on the command line.",
        "# Inside a node the GPUs hang straight under it: add levels (CPU sockets, PCIe switches)",
        "# where your hardware has them, so 2- and 4-GPU jobs get GPUs that are close.",
        "# Check every edit with `topogang validate`.",
    ]
    if result.notes:
        lines.append("#")
        lines.append("# Notes:")
        for note in result.notes:
            wrapped = textwrap.wrap(note, width=96)
            lines += [f"#  - {wrapped[0]}", *(f"#    {w}" for w in wrapped[1:])]
    lines.append("")
    lines.append("physicalCluster:")
    lines.append("  cellTypes:")
    lines.append(_dump(data["physicalCluster"]["cellTypes"], 4).rstrip("\n"))
    lines.append("  physicalCells:")
    for comment, cell in zip(result.top_comments, data["physicalCluster"]["physicalCells"], strict=True):
        lines.append(f"  # {comment}")
        lines.append(_dump([cell], 2).rstrip("\n"))
    lines += [
        "",
        f"# One VC, {VC_NAME!r}, owns every top cell above. Split it among teams: give each VC some of",
        "# these cells (or cells of a lower level, e.g. `<RACK type>.<NODE type>`), keep the sums within",
        "# what exists, and map namespaces to VCs under `topogang:` (see config/examples/).",
        "virtualClusters:",
        _dump(data["virtualClusters"], 2).rstrip("\n"),
        "",
        "# topogang:",
        "#   namespaceVirtualClusters:     # a namespace's pods use this VC unless their spec names one",
        f"#     my-team: {VC_NAME}",
        "",
    ]
    return "\n".join(lines)
