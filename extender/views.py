"""Read-only views of the core's state: HiveD-shaped inspect documents, usage numbers, node fill.

This is the one module of the service that reads the core's cell arrays (`core.topo`, `core.state`)
instead of calling `Core` methods: inspection and metrics need every cell, and the core has no view
API for that yet. Nothing here mutates anything; callers hold the scheduler lock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from topology.core import Core
from topology.decisions import WaitReason
from topology.reservations import Gang, GangPhase

FREE_PRIORITY = -2  # HiveD's priority of a free cell


@dataclass(frozen=True, slots=True)
class Waiting:
    """A gang that has no reservation because its last filter or preempt said wait."""

    gang: str
    vc: str
    priority: int
    pods: int
    reason: WaitReason
    since: float
    last_seen: float


# ------------------------------------------------------------------------------------ small reads
def node_fill(core: Core, node: str) -> tuple[int, int]:
    """(free healthy GPUs, GPUs) of a node; (0, 0) for a node the config does not have."""
    ni = core.topo.node_index.get(node)
    if ni is None:
        return 0, 0
    cell = core.topo.node_cell[ni]
    return core.state.free[cell], core.topo.leaf_count[cell]


def has_node(core: Core, node: str) -> bool:
    return node in core.topo.node_index


def lca_type(core: Core, chain: str, level: int) -> str:
    ch = core.topo.chains[core.topo.chain_index[chain]]
    return ch.level_types[level] if level <= ch.top_level else "(several top cells)"


# ------------------------------------------------------------------------------------ usage
def vc_usage(core: Core) -> dict[str, dict[str, int]]:
    """Per VC: quota GPUs, guaranteed GPUs in use (held by gangs), opportunistic GPUs in use."""
    out = {
        vc: {"quota": core.vc_quota_leaves.get(vc, 0), "used": 0, "opportunistic": 0} for vc in core.vc_owner
    }
    for gang in core.gangs():
        row = out.setdefault(gang.request.vc, {"quota": 0, "used": 0, "opportunistic": 0})
        row["used" if gang.priority >= 0 else "opportunistic"] += len(gang.held_leaves())
    return out


def level_usage(core: Core) -> list[tuple[str, int, str, int, int]]:
    """(chain, level, cell type, cells wholly free, cells) for every chain and level."""
    topo, st = core.topo, core.state
    out = []
    for ch in topo.chains:
        for lvl in range(1, ch.top_level + 1):
            cells = ch.cells_by_level[lvl]
            free = sum(1 for c in cells if st.free[c] == topo.leaf_count[c])
            out.append((ch.name, lvl, ch.level_types[lvl], free, len(cells)))
    return out


def cluster_leaves(core: Core) -> tuple[int, int, int]:
    """(GPUs, free healthy GPUs, bad GPUs) of the whole cluster."""
    topo, st = core.topo, core.state
    tops = [c for c in range(topo.n_cells) if topo.parent[c] < 0]
    return (
        sum(topo.leaf_count[c] for c in tops),
        sum(st.free[c] for c in tops),
        sum(st.bad_count[c] for c in tops),
    )


# ------------------------------------------------------------------------------------ HiveD shapes
def _priorities(core: Core) -> list[int]:
    """Highest leaf priority in each cell's subtree (ids are in preorder: children after parents)."""
    topo, st = core.topo, core.state
    prio = [FREE_PRIORITY] * topo.n_cells
    for leaf in topo.leaves:
        prio[leaf] = st.leaf_priority[leaf] if st.leaf_gang[leaf] >= 0 else FREE_PRIORITY
    for c in range(topo.n_cells - 1, -1, -1):
        p = topo.parent[c]
        if p >= 0 and prio[c] > prio[p]:
            prio[p] = prio[c]
    return prio


def _vc_of(core: Core, c: int) -> str | None:
    root = core.state.binding_root(c)
    if root < 0:
        return None
    return core.owners[core.state.bound_owner[root]].vc


def _cell(core: Core, c: int, prio: list[int], *, deep: bool) -> dict[str, Any]:
    topo, st = core.topo, core.state
    total = topo.leaf_count[c]
    used = st.used_guaranteed[c] + st.used_opportunistic[c]
    bad = st.bad_count[c]
    out: dict[str, Any] = {}
    if topo.parent[c] < 0:
        out["leafCellType"] = topo.chains[topo.cell_chain[c]].leaf_type
    out["cellType"] = topo.cell_type[c]
    ni = topo.cell_node[c]
    if ni >= 0 and topo.node_cell[ni] == c:
        out["isNodeLevel"] = True
        out["nodeName"] = topo.node_names[ni]
    out["cellAddress"] = topo.address[c]
    out["cellState"] = "Used" if used else "Free"
    out["cellHealthiness"] = "Bad" if bad and bad >= total else "Healthy"
    out["cellPriority"] = prio[c]
    out["totalLeafCells"] = total
    out["usedLeafCells"] = used
    out["freeLeafCells"] = st.free[c]
    if bad:
        out["badLeafCells"] = bad
    vc = _vc_of(core, c)
    if vc is not None:
        out["vc"] = vc
    if topo.pinned_id[c] is not None:
        out["pinnedCellId"] = topo.pinned_id[c]
    if deep and topo.children[c]:
        out["cellChildren"] = [_cell(core, k, prio, deep=True) for k in topo.children[c]]
    return out


def physical_cluster(core: Core) -> list[dict[str, Any]]:
    """`[PhysicalCellStatus]`: every top-level cell with its subtree."""
    prio = _priorities(core)
    topo = core.topo
    return [_cell(core, c, prio, deep=True) for c in range(topo.n_cells) if topo.parent[c] < 0]


def virtual_clusters(core: Core, only: str | None = None) -> dict[str, list[dict[str, Any]]]:
    """`{vc: [VirtualCellStatus]}`: each VC's quota cells, bound (with their physical cell) or not."""
    topo, st = core.topo, core.state
    prio = _priorities(core)
    out: dict[str, list[dict[str, Any]]] = {}
    for owner in core.owners:
        if only is not None and owner.vc != only:
            continue
        cells = out.setdefault(owner.vc, [])
        for c in range(topo.n_cells):
            if st.bound_owner[c] != owner.index:
                continue
            phys = _cell(core, c, prio, deep=False)
            entry = {
                "cellType": topo.cell_type[c],
                "cellAddress": f"{owner.vc}/{len(cells)}",
                "cellState": phys["cellState"],
                "cellHealthiness": phys["cellHealthiness"],
                "cellPriority": phys["cellPriority"],
                "physicalCell": phys,
            }
            if owner.pinned_cell_id is not None:
                entry["pinnedCellId"] = owner.pinned_cell_id
            cells.append(entry)
        for ch, levels in sorted(st.unbound.get(owner.index, {}).items()):
            chain = topo.chains[ch]
            for lvl, k in enumerate(levels):
                for _ in range(k):
                    cells.append(
                        {
                            "cellType": chain.level_types[lvl],
                            "cellAddress": f"{owner.vc}/{len(cells)}",
                            "cellState": "Free",
                            "cellHealthiness": "Healthy",
                            "cellPriority": FREE_PRIORITY,
                            "physicalCell": None,
                        }
                    )
    return out


def affinity_group(core: Core, gang: Gang, now: float) -> dict[str, Any]:
    """HiveD's `AffinityGroup` for a gang with a reservation, plus topogang's slot detail."""
    placement = core.placement_of(gang)
    physical: dict[str, list[int]] = {}
    for p in placement.pods:
        physical.setdefault(p.node, []).extend(p.gpu_indices)
    state = {GangPhase.BOUND: "Allocated", GangPhase.PREEMPTING: "Preempting"}.get(gang.phase, "Reserved")
    slots = []
    for s, p in zip(gang.slots, placement.pods, strict=True):
        slot: dict[str, Any] = {"slot": s.index, "node": p.node, "leafCellIndices": list(p.gpu_indices)}
        if s.key is not None:
            slot["slotKey"] = s.key
        slot["podUID"] = s.pod_uid
        if s.pod_name is not None:
            slot["podName"] = s.pod_name
        if s.finished:
            slot["finished"] = True
        slots.append(slot)
    status: dict[str, Any] = {
        "vc": gang.request.vc,
        "priority": gang.priority,
        "state": state,
        "phase": gang.phase.value,
        "physicalPlacement": physical,
        "allocatedPods": [s.pod_uid for s in gang.slots if s.pod_uid is not None],
        "cellChain": placement.chain,
        "lcaLevel": placement.lca_level,
        "lcaCellType": lca_type(core, placement.chain, placement.lca_level),
        "slots": slots,
    }
    pending = getattr(gang, "pending", None)
    if pending:
        status["leafCellsAwaitingVictims"] = len(pending)
    if gang.deadline is not None:
        status["reservationExpiresInSeconds"] = round(max(0.0, gang.deadline - now), 3)
    if gang.history:
        status["history"] = list(gang.history)
    return {"metadata": {"name": gang.name}, "status": status}


def waiting_group(w: Waiting, now: float) -> dict[str, Any]:
    return {
        "metadata": {"name": w.gang},
        "status": {
            "vc": w.vc,
            "priority": w.priority,
            "state": "Waiting",
            "pods": w.pods,
            "waitReason": w.reason.to_dict(),
            "waitingSeconds": round(max(0.0, now - w.since), 3),
        },
    }


def waiting_gangs(scheduler: object) -> list[Waiting]:
    """The gangs the verbs last told to wait (filter or preempt said no), read-only: the scheduler's
    wait cache (`Scheduler._waiting`, kept until the gang is placed or its TTL passes unseen)."""
    table = getattr(scheduler, "_waiting", None)
    if not isinstance(table, dict):
        return []
    return [w for _, w in sorted(table.items()) if isinstance(w, Waiting)]
