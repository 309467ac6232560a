"""Inspection of every cell: HiveD-shaped cluster documents and usage numbers, read-only.

HiveD's inspect API shows the physical cluster as a tree of cells (type, address, state, health,
priority, leaf counts, the VC it is bound to) and each VC as its quota cells, bound or not; the
service's metrics want usage per VC, per level and for the whole cluster; the cluster map wants
each GPU's state and VC. These need every cell, so they are built here, inside the core's package,
rather than by the edge reaching into the cell arrays. Nothing here mutates anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import Any

from topology import node_layout
from topology.core import Core
from topology.health import doomed_of
from topology.reservations import Gang, GangPhase
from topology.state import FREE_PRIORITY, NO_GANG, NO_OWNER


def lca_type(core: Core, chain: str, level: int) -> str:
    """The cell type of a chain's level, for a gang's lowest common cell."""
    ch = core.topo.chains[core.topo.chain_index[chain]]
    return ch.level_types[level] if level <= ch.top_level else "(several top cells)"


# ------------------------------------------------------------------------------------ usage
def vc_usage(core: Core) -> dict[str, dict[str, int]]:
    """Per VC: quota GPUs, guaranteed GPUs in use (held by gangs), opportunistic GPUs in use."""
    out = {
        vc: {"quota": core.vc_quota_leaves.get(vc, 0), "used": 0, "opportunistic": 0} for vc in core.vc_owner
    }
    for (vc, guaranteed), n in core.reservations.held.items():  # kept as gangs change: no walk of them
        row = out.setdefault(vc, {"quota": 0, "used": 0, "opportunistic": 0})
        row["used" if guaranteed else "opportunistic"] += n
    return out


def gangs_by_phase(core: Core) -> dict[str, int]:
    """Gangs by phase, from those not whole (`Reservations.unsettled`): every other gang is bound,
    so at 59,000 gangs this reads the few hundred placed and not yet whole, not all of them."""
    out = {p.value: 0 for p in GangPhase}
    for g in core.reservations.unsettled():
        if g.phase is not GangPhase.BOUND:  # a downgraded gang is unsettled, and may be whole
            out[g.phase.value] += 1
    out[GangPhase.BOUND.value] = len(core.reservations.by_id) - sum(out.values())
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
    tops = [c for ch in topo.chains for c in ch.cells_by_level[ch.top_level]]  # the cells with no parent
    return (
        sum(topo.leaf_count[c] for c in tops),
        sum(st.free[c] for c in tops),
        sum(st.bad_count[c] for c in tops),
    )


def node_unheld_gpus(core: Core, node: str) -> tuple[int, ...]:
    """GPU indices of a node that no gang holds or is reserving (healthy or not): where GPUs another
    scheduler's pods took can be marked bad without touching a placed gang."""
    topo, st = core.topo, core.state
    lg, lr = st.leaf_gang, st.leaf_reserver
    return tuple(
        topo.gpu_index[x] for x in topo.machine_leaves(node) if lg[x] == NO_GANG and lr[x] == NO_GANG
    )


def node_halves(core: Core, node: str) -> dict[int, str]:
    """GPU index -> its half of the node, in the config in force (`topology.node_layout`)."""
    return node_layout.node_halves(core.topo, node)


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
                "cellChain": topo.chains[topo.cell_chain[c]].name,
                "cellPriority": phys["cellPriority"],
                "physicalCell": phys,
            }
            if owner.pinned_cell_id is not None:
                entry["pinnedCellId"] = owner.pinned_cell_id
            cells.append(entry)
        doomed = doomed_of(st, owner.index)
        for ch, levels in sorted(st.unbound.get(owner.index, {}).items()):
            chain = topo.chains[ch]
            for lvl, k in enumerate(levels):
                for i in range(k):
                    cells.append(
                        {
                            "cellType": chain.level_types[lvl],
                            "cellAddress": f"{owner.vc}/{len(cells)}",
                            "cellState": "Free",
                            # HiveD's doomed bad cells: the ones only bad hardware could now honour
                            "cellHealthiness": "Bad" if i < doomed.get((ch, lvl), 0) else "Healthy",
                            "cellChain": chain.name,
                            "cellPriority": FREE_PRIORITY,
                            "physicalCell": None,
                        }
                    )
    return out


# ------------------------------------------------------------------------------------ the GPU map
class GpuState(StrEnum):
    """What a GPU is doing, as a map of the cluster shows it."""

    BAD = "bad"
    FREE = "free"
    PREEMPTING = "preempting"  # reserved for a preempting gang, its victim still on it
    OPPORTUNISTIC = "opportunistic"
    USED = "used"  # guaranteed


def gpu_layout(core: Core) -> tuple[list[list[Any]], tuple[int, ...]]:
    """The cluster's shape for a map of it, and every GPU (its leaf cell id) in map order: chains in
    config order, each chain's top cells in config order, each top cell's leaves depth-first.

    Per chain: [name, leaf type, level types, node level, tops (a cell above node level is
    [address, [children]], a node is its name), the GPU indices of a node, the nodes whose indices
    differ from those, child number per level]."""
    topo = core.topo
    order: list[int] = []
    chains: list[list[Any]] = []
    for ch in topo.chains:

        def tree(c: int, node_level: int = ch.node_level) -> Any:
            if topo.level[c] <= node_level:
                ni = topo.cell_node[c]
                return topo.node_names[ni]
            return [topo.address[c], [tree(k) for k in topo.children[c]]]

        tops = []
        pattern: list[int] | None = None
        exceptions: dict[str, list[int]] = {}
        for top in ch.tops:
            tops.append(tree(top))
            leaves = topo.leaves[topo.leaf_lo[top] : topo.leaf_hi[top]]
            order.extend(leaves)
        for ni in topo.chain_nodes[ch.index]:
            gpus = [topo.gpu_index[x] for x in topo.node_leaves[ni]]
            if pattern is None:
                pattern = gpus
            elif gpus != pattern:
                exceptions[topo.node_names[ni]] = gpus
        chains.append(
            [
                ch.name,
                ch.leaf_type,
                list(ch.level_types),
                ch.node_level,
                tops,
                pattern or [],
                exceptions,
                list(ch.child_number),
            ]
        )
    return chains, tuple(order)


def gpu_states(core: Core, order: Sequence[int]) -> list[GpuState]:
    """Each GPU's state, in `order` (leaf cell ids from `gpu_layout`)."""
    st = core.state
    lg, lp, lb, lr = st.leaf_gang, st.leaf_priority, st.leaf_bad, st.leaf_reserver
    out: list[GpuState] = []
    for leaf in order:
        g = lg[leaf]
        if lb[leaf]:
            out.append(GpuState.BAD)
        elif g == NO_GANG:
            out.append(GpuState.FREE)
        elif lr[leaf] != NO_GANG and lr[leaf] != g:
            out.append(GpuState.PREEMPTING)
        else:
            out.append(GpuState.OPPORTUNISTIC if lp[leaf] < 0 else GpuState.USED)
    return out


def gpu_vcs(core: Core, order: Sequence[int]) -> list[str | None]:
    """The VC whose cell holds each GPU (None: unbound), in `order`."""
    owners, lo = core.owners, core.state.leaf_owner
    return [owners[lo[leaf]].vc if lo[leaf] != NO_OWNER else None for leaf in order]


def gang_chain(core: Core, gang: Gang) -> str:
    """The name of the chain a gang is placed on."""
    return core.topo.chains[gang.chain].name


def quota_cells(core: Core) -> dict[str, list[list[Any]]]:
    """Per VC, its quota by cell type: [cell type, cells, GPUs per cell, bound cells, guaranteed
    GPUs in use through them], as configured, then one row per pinned cell."""
    topo, st = core.topo, core.state
    # guaranteed GPUs in use, by (owner, cell type of the VC cell they are bound through)
    used_by: dict[tuple[int, str], int] = {}
    for gang in core.gangs():
        if gang.priority < 0:
            continue
        for leaf in gang.held_leaves():
            root = st.binding_root(leaf)
            if root < 0:
                continue
            key = (st.bound_owner[root], topo.cell_type[root])
            used_by[key] = used_by.get(key, 0) + 1
    by_vc = {vc.name: vc for vc in core.spec.virtual_clusters}
    out: dict[str, list[list[Any]]] = {}
    for name in core.vc_names():
        owner = core.vc_owner[name]
        cells: list[list[Any]] = []
        spec = by_vc.get(name)
        seen: dict[tuple[int, int], list[Any]] = {}
        for vcell in spec.virtual_cells if spec is not None else ():
            ch = topo.chain_index[vcell.chain]
            lvl = topo.types[vcell.cell_type].level
            row = seen.get((ch, lvl))
            if row is None:
                unbound = st.unbound.get(owner, {}).get(ch, [])
                row = [
                    vcell.cell_type,
                    0,
                    topo.chains[ch].leaf_count[lvl],
                    0,
                    used_by.get((owner, vcell.cell_type), 0),
                ]
                row[3] = -(unbound[lvl] if lvl < len(unbound) else 0)
                seen[(ch, lvl)] = row
                cells.append(row)
            row[1] += vcell.number
        for row in cells:
            row[3] += row[1]  # bound = promised - still unbound
        for o in core.owners:
            if o.vc == name and o.pinned_cell_id is not None:
                c = topo.pinned_cells[o.pinned_cell_id]
                cells.append(
                    [
                        f"pinned {o.pinned_cell_id}",
                        1,
                        topo.leaf_count[c],
                        1,
                        used_by.get((o.index, topo.cell_type[c]), 0),
                    ]
                )
        out[name] = cells
    return out
