"""Checks of the virtual side: VC names, their cell paths, pinned cells, and the namespace mapping.

They also turn each well-formed quota entry into a `Demand` for the quota count; an entry with any
problem is left out of the count, so one typo yields one error, not a cascade of shortages.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import pairwise

from config.check_cluster import TypeCheck
from config.names import dns1123_label_error, vc_name_error
from config.problems import ConfigWarning, did_you_mean
from config.quota import Demand
from topology.layout import ExpandedCell, Problem, TypeInfo
from topology.spec import ClusterSpec, VirtualCellSpec

VCS = "virtualClusters"


@dataclass
class VcCheck:
    problems: list[Problem] = field(default_factory=list)
    demands: list[Demand] = field(default_factory=list)  # VC cells and pinned cells, config order


@dataclass(frozen=True)
class _Known:
    """What a VC path is checked against."""

    types: dict[str, TypeInfo]
    defined: set[str]  # every cellTypes key, including ones on a cycle
    chains: list[str]
    unknown_tops: set[str]  # top-level cell types already reported as unknown (or cyclic)


def check_vcs(spec: ClusterSpec, tc: TypeCheck, chains: list[str], pins: dict[str, ExpandedCell]) -> VcCheck:
    out = VcCheck()
    tops = {c.cell_type for c in spec.physical_cells if c.cell_type is not None}
    known = _Known(tc.types, tc.defined, chains, tops - set(chains))
    owner: dict[str, str] = {}  # pinned id -> VC that lists it
    seen: set[str] = set()
    for vc in spec.virtual_clusters:
        base = f"{VCS}.{vc.name}"
        if vc.name in seen:
            out.problems.append(Problem(base, f"VC {vc.name!r} is defined twice"))
            continue
        seen.add(vc.name)
        err = vc_name_error(vc.name)
        if err:
            out.problems.append(Problem(base, f"invalid VC name: {err}"))
        if not vc.virtual_cells and not vc.pinned_cell_ids:
            out.problems.append(
                ConfigWarning(
                    base,
                    f"VC {vc.name!r} has no virtualCells and no pinnedCells: it can only run "
                    "opportunistic (priority -1) pods",
                )
            )
        for i, cell in enumerate(vc.virtual_cells):
            where = f"{base}.virtualCells[{i}]"
            demand = _check_virtual_cell(vc.name, cell, where, known, out.problems)
            if demand is not None:
                out.demands.append(demand)
        for j, pid in enumerate(vc.pinned_cell_ids):
            where = f"{base}.pinnedCells[{j}].pinnedCellId"
            pinned = pins.get(pid)
            if pinned is None:
                out.problems.append(
                    Problem(
                        where,
                        f"pinned cell not found in physicalCells: VC: {vc.name}, ID: {pid}"
                        + did_you_mean(pid, pins),
                    )
                )
            elif pid in owner:
                again = "listed twice by" if owner[pid] == vc.name else "already assigned to"
                out.problems.append(Problem(where, f"pinned cell {pid!r} is {again} VC {owner[pid]!r}"))
            else:
                owner[pid] = vc.name
                out.demands.append(
                    Demand(
                        vc.name,
                        pinned.chain,
                        pinned.cell_type,
                        pinned.level,
                        1,
                        pinned_id=pid,
                        cell_index=pinned.index,
                    )
                )
    for pid, pcell in pins.items():
        if pid not in owner:
            out.problems.append(
                ConfigWarning(
                    f"{pcell.config_path}.pinnedCellId",
                    f"pinned cell {pid!r} is not listed in any VC's pinnedCells, so it is scheduled as an "
                    "ordinary cell",
                )
            )
    for ns, vc_name in spec.namespace_vcs:
        where = f"topogang.namespaceVirtualClusters.{ns}"
        err = dns1123_label_error(ns)
        if err:
            out.problems.append(Problem(where, f"invalid namespace name: {err}"))
        if vc_name not in seen:
            out.problems.append(
                Problem(
                    where, f"VC {vc_name!r} is not defined in virtualClusters" + did_you_mean(vc_name, seen)
                )
            )
    return out


def _check_virtual_cell(
    vc: str,
    cell: VirtualCellSpec,
    where: str,
    k: _Known,
    problems: list[Problem],
) -> Demand | None:
    """One `virtualCells[i]` entry: its path segment by segment, then its count.

    A path on a top type already reported unknown gets no second error for the same typo."""
    before = len(problems)
    types, chains = k.types, k.chains
    if cell.number < 1:
        problems.append(Problem(f"{where}.cellNumber", f"cellNumber must be at least 1, got {cell.number}"))
    dotted = ".".join(cell.path)
    at = f"{where}.cellType"
    if not all(cell.path):
        problems.append(Problem(at, f"cellType {dotted!r} has an empty segment"))
        return None
    last, first = cell.cell_type, cell.chain
    known = set(types) | k.defined
    if last not in known:
        problems.append(
            Problem(
                at,
                f"cellType {last} in VirtualCells is not found in cell types definition"
                + did_you_mean(last, known),
            )
        )
    if first not in chains and first not in k.unknown_tops:
        problems.append(
            Problem(
                at,
                f"Illegal initial VC assignment: Chain {first} does not exists in physical cluster"
                + (did_you_mean(first, chains) or _path_hint(first, cell.path, k)),
            )
        )
    if first in types:
        for prev, cur in pairwise(cell.path):
            if cur == last and last not in known:
                break
            child = types[prev].child_type if prev in types else None
            if child != cur:
                has = f"its child type is {child!r}" if child else f"{prev!r} is a leaf type"
                problems.append(Problem(at, f"segment {cur!r} is not a child type of {prev!r} ({has})"))
                break
    ti = types.get(last)
    if len(problems) > before or ti is None or first not in chains:
        return None
    return Demand(vc, first, last, ti.level, cell.number)


def _path_hint(first: str, path: tuple[str, ...], k: _Known) -> str:
    """For a path that starts below a chain's top: the full path from the chain, when there is one."""
    for chain in k.chains:
        down = [chain]
        while down[-1] != first and down[-1] in k.types and k.types[down[-1]].child_type:
            down.append(k.types[down[-1]].child_type or "")
        if down[-1] == first:
            full = ".".join([*down, *path[1:]])
            return f" (a path starts at a top cell's type, the chain: did you mean {full!r}?)"
    return ""
