"""`topogang diff OLD NEW`: what an edit changes, before it is applied.

A config edit is reviewed as text, but what matters is its effect: GPUs and nodes gained or lost,
cells per level, each VC's quota, the namespace mapping. `config_diff` compares the summaries of two
valid configs (`config.summary.summary_data`) as plain data (the `--json` output); `format_diff`
renders it as text. A loss of GPUs or nodes is put first, since that is the edit to double-check.
"""

from __future__ import annotations

from typing import Any

from config.load import LoadedConfig
from config.summary import summary_data


def _nodes(loaded: LoadedConfig) -> set[str]:
    a = loaded.analysis
    if a is None:
        return set()
    return {c.node for c in a.layout.cells if c.node is not None and a.types[c.cell_type].is_node_level}


def _cells(summary: dict[str, Any]) -> dict[str, int]:
    return {f"{ch['chain']}/{lv['cellType']}": lv["cells"] for ch in summary["chains"] for lv in ch["levels"]}


def _quota(vc: dict[str, Any]) -> dict[str, int]:
    out = {f"{c['chain']}/{c['cellType']}": c["cells"] for c in vc["cells"]}
    out.update({f"pinned {p['pinnedCellId']}": 1 for p in vc["pinnedCells"]})
    return out


def _changed(old: dict[str, Any], new: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"name": k, "old": old.get(k, 0), "new": new.get(k, 0)}
        for k in [*old, *(k for k in new if k not in old)]
        if old.get(k, 0) != new.get(k, 0)
    ]


def config_diff(old: LoadedConfig, new: LoadedConfig) -> dict[str, Any]:
    """The differences between two valid configs as JSON-ready data; `changed` is False when none."""
    a, b = summary_data(old.spec, old.analysis), summary_data(new.spec, new.analysis)
    old_gpus, new_gpus = sum(a["gpus"].values()), sum(b["gpus"].values())
    old_nodes, new_nodes = _nodes(old), _nodes(new)
    vcs_a = {vc["name"]: vc for vc in a["virtualClusters"]}
    vcs_b = {vc["name"]: vc for vc in b["virtualClusters"]}
    vcs: dict[str, list[dict[str, Any]]] = {
        "added": [
            {"name": n, "gpus": vcs_b[n]["gpus"], "cells": _quota(vcs_b[n])} for n in vcs_b if n not in vcs_a
        ],
        "removed": [
            {"name": n, "gpus": vcs_a[n]["gpus"], "cells": _quota(vcs_a[n])} for n in vcs_a if n not in vcs_b
        ],
        "changed": [
            {
                "name": n,
                "oldGpus": vcs_a[n]["gpus"],
                "newGpus": vcs_b[n]["gpus"],
                "cells": _changed(_quota(vcs_a[n]), _quota(vcs_b[n])),
            }
            for n in vcs_a
            if n in vcs_b and _quota(vcs_a[n]) != _quota(vcs_b[n])
        ],
    }
    ns_a, ns_b = a["namespaceVirtualClusters"], b["namespaceVirtualClusters"]
    namespaces = [
        {"namespace": ns, "old": ns_a.get(ns), "new": ns_b.get(ns)}
        for ns in sorted(set(ns_a) | set(ns_b))
        if ns_a.get(ns) != ns_b.get(ns)
    ]
    out: dict[str, Any] = {
        "old": old.file,
        "new": new.file,
        "gpus": {"old": old_gpus, "new": new_gpus, "byType": _changed(a["gpus"], b["gpus"])},
        "nodes": {
            "old": len(old_nodes),
            "new": len(new_nodes),
            "added": sorted(new_nodes - old_nodes),
            "removed": sorted(old_nodes - new_nodes),
        },
        "cells": _changed(_cells(a), _cells(b)),
        "virtualClusters": vcs,
        "namespaceVirtualClusters": namespaces,
    }
    out["changed"] = bool(
        old_gpus != new_gpus
        or out["gpus"]["byType"]
        or old_nodes != new_nodes
        or out["cells"]
        or any(vcs.values())
        or namespaces
    )
    return out


def _delta(old: int, new: int) -> str:
    return f"{old} -> {new} ({new - old:+d})" if old != new else f"{old} (unchanged)"


def _cells_text(cells: dict[str, int]) -> str:
    return ", ".join(f"{k} x{n}" for k, n in cells.items()) or "no cells"


def format_diff(d: dict[str, Any]) -> str:
    """The diff as text: totals first (a loss flagged), then cells, VCs and namespaces."""
    if not d["changed"]:
        return f"{d['old']} -> {d['new']}: no change in GPUs, nodes, cells, quotas or namespaces"
    g, n = d["gpus"], d["nodes"]
    lines = [f"{d['old']} -> {d['new']}"]
    if g["new"] < g["old"]:
        lines.append(f"WARNING: the cluster loses {g['old'] - g['new']} of its {g['old']} GPUs")
    if n["removed"]:
        k = len(n["removed"])
        verb = "nodes leave" if k > 1 else "node leaves"
        lines.append(f"WARNING: {k} {verb} the cluster: {' '.join(n['removed'])}")
    by_type = ", ".join(f"{t['name']} {t['old']} -> {t['new']}" for t in g["byType"])
    lines.append(f"GPUs:  {_delta(g['old'], g['new'])}" + (f"  [{by_type}]" if by_type else ""))
    lines.append(f"Nodes: {_delta(n['old'], n['new'])}")
    for key, sign in (("added", "+"), ("removed", "-")):
        if n[key]:
            lines.append(f"  {sign} {' '.join(n[key])}")
    if d["cells"]:
        lines.append("Cells (chain/type):")
        lines += [f"  {c['name']}: {_delta(c['old'], c['new'])}" for c in d["cells"]]
    vcs = d["virtualClusters"]
    if any(vcs.values()):
        lines.append("Virtual clusters:")
        lines += [f"  + {v['name']}: {v['gpus']} GPUs ({_cells_text(v['cells'])})" for v in vcs["added"]]
        lines += [f"  - {v['name']}: {v['gpus']} GPUs ({_cells_text(v['cells'])})" for v in vcs["removed"]]
        for v in vcs["changed"]:
            cells = ", ".join(f"{c['name']} {c['old']} -> {c['new']}" for c in v["cells"])
            lines.append(f"  ~ {v['name']}: {_delta(v['oldGpus'], v['newGpus'])} GPUs [{cells}]")
    if d["namespaceVirtualClusters"]:
        lines.append("Namespaces -> VCs:")
        for m in d["namespaceVirtualClusters"]:
            sign = "+" if m["old"] is None else "-" if m["new"] is None else "~"
            lines.append(f"  {sign} {m['namespace']}: {m['old'] or '(none)'} -> {m['new'] or '(none)'}")
    return "\n".join(lines)
