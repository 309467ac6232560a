"""Promotion: an opportunistic gang that opted in becomes guaranteed where it runs once its VC has room.

A gang that started as opportunistic (its VC's quota was in use at the time) keeps running as a
preemptible guest. If it is preempted later, its VC loses the work although the VC had quota for it
by then: in a private cluster of the VC's size the job would have run to the end, so the loss shows
as the sharing anomaly (a long restart of that VC's job). When a release leaves the gang's VC with
unbound quota cells, and every GPU of the gang lies in the free pool, the VC's quota cells are bound
around the gang (`buddy.bind_for`, with the same safety check as every bind: every VC's outstanding
quota stays satisfiable) and the gang becomes guaranteed in place, no longer anybody's victim. Its
pods do not move.

Only gangs whose request sets `promote_when_quota` are promoted (the edge decides; an opportunistic
job that should stay out of its VC's quota does not opt in). A guaranteed gang that opted in and was
started as a guest rather than preempt (`room.py`) is promoted to the priority it asked for. A gang
waiting for victims, being evicted, or downgraded by lazy preemption is left alone. The gangs that
have run longest go first: they have the most work to lose.
"""

from __future__ import annotations

from dataclasses import replace

from topology.buddy import bind_for
from topology.cluster import Cluster
from topology.reservations import Gang, GangPhase
from topology.state import NO_GANG, NO_OWNER

PROMOTED_PRIORITY = 0  # the lowest guaranteed priority: the VC's own jobs are not outbid by it


def promotable(g: Gang) -> bool:
    return (
        g.priority < 0
        and g.request.promote_when_quota
        and not g.evicting
        and g.downgraded_by is None
        and g.phase is GangPhase.BOUND
    )


def promote_waiting(cluster: Cluster) -> list[str]:
    """Promote every opted-in opportunistic gang that now fits its VC's unbound quota; their names."""
    st = cluster.state
    res = cluster.reservations
    waiting = [g for g in (res.by_id[i] for i in res.promote_ids) if promotable(g)]
    if not waiting:
        return []
    out: list[str] = []
    for g in sorted(waiting, key=lambda g: (g.created, g.id)):
        owner = cluster.vc_owner.get(g.request.vc, NO_OWNER)
        if owner == NO_OWNER or not any(any(v) for v in st.unbound.get(owner, {}).values()):
            continue
        if _hosts_others(cluster, g, g.held_leaves()):
            continue
        if not bind_in_place(cluster, g, owner, max(PROMOTED_PRIORITY, g.request.priority)):
            continue
        g.history.append("promoted to guaranteed: its VC had quota for it")
        res.promoted.add(g.id)
        out.append(g.name)
    return out


def bind_in_place(cluster: Cluster, g: Gang, owner: int, priority: int) -> bool:
    """Bind `owner`'s quota cells around the GPUs `g` runs on and run it at `priority` there; False,
    and nothing changed, when it holds none, one of them is not in the free pool (a quota cell
    holds it already), or the quota cannot cover them safely."""
    st = cluster.state
    leaves = g.held_leaves()
    if not leaves or any(st.leaf_owner[leaf] != NO_OWNER for leaf in leaves):
        return False
    st.begin()
    if not bind_for(st, owner, sorted(leaves)):
        st.rollback()
        return False
    for leaf in leaves:
        st.release_leaf(leaf)
        st.allocate_leaf(leaf, g.id, priority)
    st.commit()
    g.owner, g.priority = owner, priority
    cluster.reservations.retally(g)
    return True


def withdraw(cluster: Cluster, name: str) -> bool:
    """The gang's opt-in no longer holds: the edge's rules no longer let its namespace take its VC's
    quota. Its request then reads as if it never opted in (not promoted, not counted as a guest of
    its VC), which is how a restart rebuilds it from its bind info, so the gang is the same with or
    without one. What it already holds it keeps. False: nothing to withdraw."""
    res = cluster.reservations
    g = res.by_name.get(name)
    if g is None or not g.request.promote_when_quota:
        return False
    res.touch(g).request = replace(g.request, promote_when_quota=False)
    g.guest = False
    res.promote_ids.discard(g.id)
    return True


def _hosts_others(cluster: Cluster, g: Gang, leaves: list[int]) -> bool:
    """Does a node of the gang run other gangs? Binding it would hand them to the VC, which displaces
    them as soon as it needs their GPUs: promotion would only move the loss to another gang."""
    topo, st = cluster.topo, cluster.state
    for n in sorted({topo.cell_node[leaf] for leaf in leaves}):
        nc = topo.node_cell[n]
        for leaf in topo.leaves[topo.leaf_lo[nc] : topo.leaf_hi[nc]]:
            if st.leaf_gang[leaf] not in (NO_GANG, g.id):
                return True
    return False
