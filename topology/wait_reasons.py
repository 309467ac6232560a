"""Why a gang waits: one `WaitReason` for the chains that could not take it.

The first chain's shortfall is explained in the tenant's terms: their VC's quota ran out (and what
that quota is), their remaining quota can only map onto bad hardware, the gang does not fit on the
nodes kube-scheduler suggested, or the physical cluster has the GPUs but not in one place.
"""

from __future__ import annotations

from topology.cluster import Cluster
from topology.decisions import GangRequest, WaitCode, WaitReason
from topology.health import Doomed, doomed
from topology.placement import Shortfall


def wait_reason(
    cluster: Cluster,
    req: GangRequest,
    shortfalls: list[tuple[int, Shortfall]],
    suggested: frozenset[int] | None,
) -> WaitReason:
    """The reason given for the first chain's shortfall, in the tenant's terms."""
    topo = cluster.topo
    if not shortfalls:
        return WaitReason(WaitCode.INSUFFICIENT_CAPACITY, req.vc, f"no chain can hold gang {req.name}")
    ch, sf = shortfalls[0]
    chain = topo.chains[ch]
    lvl_type = chain.level_types[sf.level] if sf.level <= chain.top_level else chain.name
    where = f"chain {chain.name} level {sf.level} ({lvl_type})"
    level = sf.level
    if sf.quota_bound:
        code = WaitCode.INSUFFICIENT_QUOTA
        level = _quota_level(cluster, req.vc, ch, sf.level)  # the VC's own cells, not the gang's
        lvl_type = chain.level_types[level]
        msg = (
            f"VC {req.vc} has {sf.available} of its quota's leaf cells free on chain {chain.name} "
            f"(its quota there: {_quota_text(cluster, req.vc, ch)}); gang {req.name} needs {sf.needed}"
            f"{'' if sf.level in (1, level) else f' within one {chain.level_types[sf.level]}'}"
        )
        whole = cluster.vc_quota_leaves.get(req.vc, 0)
        if req.leaf_total > whole:
            msg += (
                f" (the gang needs {req.leaf_total} GPUs, more than VC {req.vc}'s whole quota of "
                f"{whole}: it can never run)"
            )
    elif (bad := _doomed_for(cluster, req, ch)) is not None:
        code = WaitCode.BAD_HARDWARE
        lvl_type = bad.cell_type
        msg = (
            f"VC {req.vc}'s remaining quota on chain {chain.name} can only map onto bad hardware: "
            f"{bad.demand} {bad.cell_type} cells are promised but {bad.healthy} healthy ones are free "
            f"(bad nodes: {', '.join(bad.bad_nodes) or 'none'})"
        )
        return WaitReason(code, req.vc, msg, chain.name, bad.level, lvl_type, bad.demand, bad.healthy)
    elif suggested is not None and len(suggested) < len(topo.nodes_in_chain(ch)):
        code = WaitCode.NO_SUGGESTED_NODE
        msg = f"gang {req.name} ({sf.needed} leaf cells) does not fit on the {len(suggested)} suggested nodes"
    else:
        code = WaitCode.INSUFFICIENT_CAPACITY
        scope = "the physical cluster" if req.opportunistic else f"VC {req.vc}"
        msg = (
            f"insufficient capacity when scheduling in {scope}: gang {req.name} needs {sf.needed} "
            f"leaf cells within one {lvl_type} on {where}; {sf.available} are free but not in one place"
        )
    return WaitReason(code, req.vc, msg, chain.name, level, lvl_type, sf.needed, sf.available)


def _quota_level(cluster: Cluster, vc: str, chain: int, needed: int) -> int:
    """The level of the VC's quota that came up short for a gang needing a level-`needed` cell:
    its smallest quota cells that could hold such a cell, else (the gang is bigger than any of
    them) its largest; `needed` itself when the VC has no quota cells on the chain."""
    levels = cluster.vc_quota_cells.get(vc, {}).get(chain, ())
    held = [lvl for lvl, k in enumerate(levels) if k]
    if not held:
        return needed
    return min((lvl for lvl in held if lvl >= needed), default=max(held))


def _quota_text(cluster: Cluster, vc: str, chain: int) -> str:
    """The VC's quota cells on a chain as configured, largest first: "1 RACK + 2 NODE cells"."""
    types = cluster.topo.chains[chain].level_types
    levels = cluster.vc_quota_cells.get(vc, {}).get(chain, ())
    parts = [f"{k} {types[lvl]}" for lvl, k in reversed(list(enumerate(levels))) if k]
    return f"{' + '.join(parts)} {'cell' if sum(levels) == 1 else 'cells'}" if parts else "no cells"


def _doomed_for(cluster: Cluster, req: GangRequest, chain: int) -> Doomed | None:
    """The doomed level (bad hardware) that the gang's VC still has unbound quota at or above."""
    if req.opportunistic or req.vc not in cluster.vc_owner:
        return None
    unbound = cluster.state.unbound[cluster.vc_owner[req.vc]].get(chain)
    if unbound is None:
        return None
    name = cluster.topo.chains[chain].name
    for d in doomed(cluster.state):
        if d.chain == name and any(unbound[lvl] for lvl in range(d.level, len(unbound))):
            return d
    return None


def held_by(gang_name: str, slot_key: str | None, holder: str) -> str:
    """Why a pod with the task identity of a live pod waits (the slot is still that pod's)."""
    return (
        f"slot {slot_key} of gang {gang_name} is held by pod {holder}, which is still alive; a "
        "pod with the same task identity waits until it is gone"
    )
