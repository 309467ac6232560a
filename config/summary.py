"""What a valid config describes, for `topogang validate`: chains, levels, VC quotas and headroom.

An admin editing quotas mostly wants one number per level: how many cells of it a new VC could
still be promised (`headroom`, found with the quota count that would refuse one more:
`config.quota.headroom`). Cells merely unpromised at a level are not that: a VC promised nodes
takes them out of racks too. The summary is built as plain data
first (`summary_data`, also the `--json` output) and then rendered as aligned text tables.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from config.quota import chain_types, headroom
from config.validate import Analysis, analyze
from topology.spec import ClusterSpec


def summary_data(spec: ClusterSpec, analysis: Analysis | None = None) -> dict[str, Any]:
    """The summary as JSON-ready data (camelCase keys, like the config)."""
    a = analysis or analyze(spec)
    cells = a.layout.cells
    gpus = Counter(a.types[c.cell_type].leaf_type for c in cells if c.level == 1)
    nodes = {c.node for c in cells if c.node is not None and a.types[c.cell_type].is_node_level}
    chains: list[dict[str, Any]] = []
    for chain in a.chains:
        path = chain_types(chain, a.types)
        fit = a.fits.get(chain)
        per_level = {lv.level: lv for lv in fit.levels} if fit else {}
        total = Counter(c.level for c in cells if c.chain == chain)
        levels = []
        for ti in path:
            lv = per_level.get(ti.level)
            free = headroom(chain, a.types, cells, a.demands, ti) if lv else None
            levels.append(
                {
                    "level": ti.level,
                    "cellType": ti.name,
                    "cells": total[ti.level],
                    "gpusPerCell": ti.leaf_count,
                    "vcCells": lv.vc_demand if lv else None,
                    "pinnedCells": lv.pinned if lv else None,
                    "headroom": free,
                }
            )
        chains.append(
            {
                "chain": chain,
                "topCells": total[path[0].level] if path else 0,
                "nodes": sum(1 for c in cells if c.chain == chain and a.types[c.cell_type].is_node_level),
                "gpus": total[1],
                "leafType": path[-1].name if path else None,
                "levels": levels,
            }
        )
    return {
        "nodes": len(nodes),
        "gpus": dict(sorted(gpus.items())),
        "chains": chains,
        "virtualClusters": _vc_data(a),
        "namespaceVirtualClusters": dict(spec.namespace_vcs),
    }


def _vc_data(a: Analysis) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for vc in a.spec.virtual_clusters:
        quota: Counter[tuple[str, str]] = Counter()
        pinned: list[dict[str, Any]] = []
        for d in a.demands:
            if d.vc != vc.name:
                continue
            leaf_count = a.types[d.cell_type].leaf_count
            if d.pinned_id is None:
                quota[(d.chain, d.cell_type)] += d.number
            else:
                cell = a.layout.cells[d.cell_index] if d.cell_index is not None else None
                pinned.append(
                    {
                        "pinnedCellId": d.pinned_id,
                        "chain": d.chain,
                        "cellType": d.cell_type,
                        "address": cell.address if cell else None,
                        "gpus": leaf_count,
                    }
                )
        cells: list[dict[str, Any]] = [
            {
                "chain": chain,
                "cellType": ct,
                "level": a.types[ct].level,
                "cells": n,
                "gpus": n * a.types[ct].leaf_count,
            }
            for (chain, ct), n in quota.items()
        ]
        total = sum(c["gpus"] for c in cells) + sum(p["gpus"] for p in pinned)
        out.append({"name": vc.name, "cells": cells, "pinnedCells": pinned, "gpus": total})
    return out


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], indent: str = "  ") -> list[str]:
    """Aligned plain-text columns: numbers right-aligned, text left-aligned, None shown as '-'."""
    text = [[("-" if v is None else str(v)) for v in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in text)]) for i, h in enumerate(headers)]
    numeric = [
        all(isinstance(r[i], int) or r[i] is None for r in rows) and bool(rows) for i in range(len(headers))
    ]

    def line(cols: Sequence[str]) -> str:
        parts = [c.rjust(w) if num else c.ljust(w) for c, w, num in zip(cols, widths, numeric, strict=True)]
        return (indent + "  ".join(parts)).rstrip()

    return [line(headers), *(line(r) for r in text)]


def format_summary(data: dict[str, Any]) -> str:
    """The text `topogang validate FILE` prints for a valid config."""
    out: list[str] = []
    total_gpus = sum(data["gpus"].values())
    by_type = ", ".join(f"{t} {n}" for t, n in data["gpus"].items())
    out.append(f"Nodes: {data['nodes']}    GPUs: {total_gpus} ({by_type})")
    out += ["", "Chains"]
    out += table(
        ["CHAIN", "TOP CELLS", "NODES", "GPUS", "LEAF TYPE"],
        [[c["chain"], c["topCells"], c["nodes"], c["gpus"], c["leafType"]] for c in data["chains"]],
    )
    for c in data["chains"]:
        out += ["", f"Chain {c['chain']} (headroom: cells of that level a new VC could still be promised)"]
        out += table(
            ["LEVEL", "CELL TYPE", "CELLS", "GPUS/CELL", "VC CELLS", "PINNED", "HEADROOM"],
            [
                [
                    lv["level"],
                    lv["cellType"],
                    lv["cells"],
                    lv["gpusPerCell"],
                    lv["vcCells"],
                    lv["pinnedCells"],
                    lv["headroom"],
                ]
                for lv in c["levels"]
            ],
        )
    vcs = data["virtualClusters"]
    out += ["", "Virtual clusters (quota)"]
    rows: list[list[object]] = [
        [vc["name"], q["chain"], q["cellType"], q["level"], q["cells"], q["gpus"]]
        for vc in vcs
        for q in vc["cells"]
    ]
    out += table(["VC", "CHAIN", "CELL TYPE", "LEVEL", "CELLS", "GPUS"], rows) if rows else ["  (none)"]
    pins = [
        [vc["name"], p["pinnedCellId"], p["chain"], p["cellType"], p["address"], p["gpus"]]
        for vc in vcs
        for p in vc["pinnedCells"]
    ]
    if pins:
        out += ["", "Pinned cells"]
        out += table(["VC", "PINNED CELL ID", "CHAIN", "CELL TYPE", "ADDRESS", "GPUS"], pins)
    promised = sum(vc["gpus"] for vc in vcs)
    out.append("")
    if vcs:
        out.append("GPUs per VC: " + ", ".join(f"{vc['name']} {vc['gpus']}" for vc in vcs))
    out.append(f"{promised} of {total_gpus} GPUs promised to VCs, {total_gpus - promised} unpromised")
    if data["namespaceVirtualClusters"]:
        out += ["", "Namespaces -> VCs"]
        out += table(["NAMESPACE", "VC"], sorted(data["namespaceVirtualClusters"].items()))
    ent = data.get("entitlement")
    if ent:
        mode = ent["defaultEntitlement"] or "unset (serve --default-entitlement; open by default)"
        out += ["", f"Entitlement (namespaces without an entry: {mode})"]
        rows = [
            [
                ns,
                ", ".join(t["virtualClusters"]) or "-",
                t["maxPriority"],
                _pins(t["pinnedCellIds"]),
                _bound(t.get("maxReservedGpus")),
            ]
            for ns, t in ent["tenants"].items()
        ]
        head = ["NAMESPACE", "VCS", "MAX PRIORITY", "PINNED CELLS", "MAX RESERVED GPUS"]
        out += table(head, rows) if rows else ["  (no tenants)"]
        if (default := ent.get("defaultMaxReservedGpus")) is not None:
            out.append(f"GPUs any other namespace may hold reserved, not yet bound: {default}")
        if ent["notice"]:
            out += ["", ent["notice"]]
    return "\n".join(out) + "\n"


def _bound(gpus: int | None) -> str:
    return "no bound" if gpus is None else str(gpus)


def _pins(ids: list[str] | None) -> str:
    return "all of its VCs'" if ids is None else ", ".join(ids) or "none"


def summarize(spec: ClusterSpec) -> str:
    """`format_summary(summary_data(spec))`."""
    return format_summary(summary_data(spec))
