"""The core's guarantees as executable checks.

Property tests call `violations` after every step; the service can expose it on a debug endpoint.
Each check recomputes from first principles (the ledger and the leaves) rather than trusting the
incremental counters, which is how a counter bug gets caught.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from topology.buddy import feasible, holds_guaranteed
from topology.reservations import GangPhase, group_of
from topology.state import FREE_PRIORITY, NO_GANG, NO_OWNER

if TYPE_CHECKING:
    from topology.core import Core


def violations(core: Core) -> list[str]:
    """Every broken invariant, as a sentence; empty when all hold."""
    out: list[str] = []
    out += _no_double_allocation(core)
    out += _pods_once(core)
    out += _gangs_whole(core)
    out += _quotas(core)
    out += _safety(core)
    out += _counters(core)
    out += _indexes(core)
    return out


def _no_double_allocation(core: Core) -> list[str]:
    out = []
    st = core.state
    holder: dict[int, str] = {}
    for gang in core.gangs():
        for leaf in gang.held_leaves():
            if leaf in holder:
                out.append(f"leaf {core.topo.address[leaf]} held by {holder[leaf]} and {gang.name}")
            holder[leaf] = gang.name
            if st.leaf_gang[leaf] != gang.id:
                out.append(
                    f"leaf {core.topo.address[leaf]} of {gang.name} is marked for gang {st.leaf_gang[leaf]}"
                )
    for leaf in core.topo.leaves:
        if st.leaf_gang[leaf] != NO_GANG and leaf not in holder:
            out.append(
                f"leaf {core.topo.address[leaf]} is used by gang {st.leaf_gang[leaf]} that holds nothing"
            )
    reserved: dict[int, int] = {}
    for gang in core.gangs():
        for leaf in gang.pending:
            if leaf in reserved:
                out.append(f"leaf {core.topo.address[leaf]} reserved by two preemptors")
            reserved[leaf] = gang.id
            if st.leaf_gang[leaf] == NO_GANG:
                out.append(f"leaf {core.topo.address[leaf]} reserved by {gang.name} is free but not taken")
    for leaf in core.topo.leaves:
        if st.leaf_reserver[leaf] != reserved.get(leaf, NO_GANG):
            out.append(f"leaf {core.topo.address[leaf]} reserver mark disagrees with the ledger")
    for gang in core.gangs():  # the victim's pod still runs there: two pods on one GPU
        for s in gang.slots:
            if s.pod_uid is not None and gang.pending.intersection(s.leaves):
                out.append(f"pod {s.pod_uid} claimed slot {s.index} of {gang.name}, still held by a victim")
    return out


def _pods_once(core: Core) -> list[str]:
    """Every pod holds at most one slot, and the pod index points at the gang that has it."""
    out = []
    where: dict[str, str] = {}
    for gang in core.gangs():
        for s in gang.slots:
            if s.pod_uid is None:
                continue
            if s.pod_uid in where:
                out.append(f"pod {s.pod_uid} holds slots in gangs {where[s.pod_uid]} and {gang.name}")
            where[s.pod_uid] = gang.name
            if core.reservations.pod_gang.get(s.pod_uid) != gang.id:
                out.append(f"pod {s.pod_uid} holds a slot of {gang.name}, but is indexed elsewhere")
    for uid in core.reservations.pod_gang:
        if uid not in where:
            out.append(f"pod {uid} is indexed to a gang but holds no slot")
    return out


def _gangs_whole(core: Core) -> list[str]:
    out = []
    for gang in core.gangs():
        if len(gang.slots) + gang.lost != gang.request.pod_count:
            out.append(f"gang {gang.name} has {len(gang.slots)} slots for {gang.request.pod_count} pods")
        for s in gang.slots:
            if s.released_early:
                if not s.finished:
                    out.append(f"gang {gang.name} slot {s.index} released early without finishing")
                continue
            if len(s.leaves) != s.leaf_number:
                out.append(f"gang {gang.name} slot {s.index} holds {len(s.leaves)} of {s.leaf_number} leaves")
            if any(core.topo.cell_node[leaf] != s.node for leaf in s.leaves):
                out.append(f"gang {gang.name} slot {s.index} spans more than one node")
    return out


def _quotas(core: Core) -> list[str]:
    out = []
    used: dict[str, int] = {}
    for gang in core.gangs():
        if gang.priority >= 0:
            used[gang.request.vc] = used.get(gang.request.vc, 0) + len(gang.held_leaves())
            st = core.state
            for leaf in gang.held_leaves():
                if st.leaf_owner[leaf] != gang.owner:
                    out.append(f"guaranteed gang {gang.name} uses a leaf outside its VC's cells")
                    break
    for vc, n in sorted(used.items()):
        if n > core.vc_quota_leaves[vc]:
            out.append(f"VC {vc} uses {n} leaf cells over its quota of {core.vc_quota_leaves[vc]}")
    return out


def _safety(core: Core) -> list[str]:
    out = []
    st = core.state
    for ch in core.topo.chains:
        short = feasible(st, ch.index, st.pool_counts(ch.index), st.demand[ch.index])
        if short is not None:
            lvl, need, avail = short
            out.append(f"VC safety broken at chain {ch.name} level {lvl}: {need} needed, {avail} available")
    return out


def _counters(core: Core) -> list[str]:
    """Recompute every incremental counter and compare."""
    out = []
    topo, st = core.topo, core.state
    n = topo.n_cells
    free = [0] * n
    ug = [0] * n
    uo = [0] * n
    for leaf in topo.leaves:
        g = st.leaf_gang[leaf]
        if (g == NO_GANG) != (st.leaf_priority[leaf] == FREE_PRIORITY):
            out.append(f"leaf {topo.address[leaf]} gang/priority disagree")
        c = leaf
        while c >= 0:
            if g == NO_GANG and not st.leaf_bad[leaf]:
                free[c] += 1
            elif g != NO_GANG and st.leaf_priority[leaf] >= 0:
                ug[c] += 1
            elif g != NO_GANG:
                uo[c] += 1
            c = topo.parent[c]
    if free != st.free:
        out.append("free-leaf counters drifted")
    if ug != st.used_guaranteed or uo != st.used_opportunistic:
        out.append("usage counters drifted")
    owned: list[dict[int, int]] = [{} for _ in core.owners]
    for leaf in topo.leaves:
        o = st.leaf_owner[leaf]
        root = st.binding_root(leaf)
        expect = NO_OWNER if root < 0 else st.bound_owner[root]
        if o != expect:
            out.append(f"leaf {topo.address[leaf]} owner {o} but bound cell says {expect}")
        if o != NO_OWNER and st.leaf_gang[leaf] == NO_GANG and not st.leaf_bad[leaf]:
            node = topo.cell_node[leaf]
            owned[o][node] = owned[o].get(node, 0) + 1
    if owned != st.owned_free:
        out.append("owned-free counters drifted")
    for c in range(n):
        if st.bound_owner[c] != NO_OWNER and topo.pinned_id[c] is None and not holds_guaranteed(st, c):
            out.append(f"cell {topo.address[c]} stays bound to a VC with no guaranteed use")
        if st.in_pool[c] and (
            st.binding_root(c) >= 0 or (topo.parent[c] >= 0 and st.pool_root(topo.parent[c]) >= 0)
        ):
            out.append(f"pool cell {topo.address[c]} overlaps a binding or another pool cell")
    for ch in topo.chains:
        for lvl, cells in enumerate(st.pool[ch.index]):
            if any(topo.level[c] != lvl or not st.in_pool[c] for c in cells):
                out.append(f"pool list of chain {ch.name} level {lvl} is inconsistent")
    return out


def _indexes(core: Core) -> list[str]:
    """The lookups placement reads instead of scanning agree with the counters: each VC's nodes by
    its free leaves, the opportunistic view of the nodes, the free pool by used leaves."""
    out = []
    topo, st = core.topo, core.state
    for o, owned in enumerate(st.owned_free):
        if st.nodes_by_free.entries(o) != owned:
            out.append(f"best-fit index of owner {o} disagrees with its free leaves")
    for ch in topo.chains:
        group = st.opp_group(ch.index)
        expect = {n: k for n in topo.nodes_in_chain(ch.index) if (k := st.opp_key(n))}
        if st.nodes_by_free.entries(group) != expect:
            out.append(f"opportunistic best-fit index of chain {ch.name} disagrees with the free leaves")
    pool = {
        c: topo.leaf_count[c] - st.free[c]
        for ch in topo.chains
        for level in range(ch.node_level, ch.top_level + 1)
        for c in st.pool[ch.index][level]
    }
    if st.pool_order.kept() != pool:
        out.append("the free pool's order by used leaves disagrees with the pool")
    res = core.reservations
    for key, ids in res.unsettled_ids.items():
        if not ids or any(i not in res.by_id or group_of(res.by_id[i].name) != key for i in ids):
            out.append(f"the unsettled gangs of group {key!r} name a gang gone, or of another group")
    for g in res.by_id.values():
        unsettled = g.phase is not GangPhase.BOUND or g.downgraded_by is not None
        if unsettled and g.id not in res.unsettled_ids.get(group_of(g.name), ()):
            out.append(f"gang {g.name} is not whole or runs downgraded, and is not among the unsettled gangs")
    held: dict[tuple[str, bool], int] = {}
    for g in res.by_id.values():
        kind, n = (g.request.vc, g.priority >= 0), len(g.held_leaves())
        if res.tallied.get(g.id) != (kind, n):
            out.append(f"gang {g.name} holds {n} GPUs as {kind}; its tally says {res.tallied.get(g.id)}")
        if n:
            held[kind] = held.get(kind, 0) + n
    if res.held != held or set(res.tallied) - set(res.by_id):
        out.append(f"the GPUs held by VC and kind {res.held} are not the gangs' {held}")
    return out


def snapshot(core: Core) -> tuple[object, ...]:
    """Everything that must come back exactly once every gang is gone."""
    st = core.state
    return (
        tuple(st.leaf_gang),
        tuple(st.leaf_reserver),
        tuple(st.free),
        tuple(st.used_guaranteed),
        tuple(st.used_opportunistic),
        tuple(st.bound_owner),
        tuple(st.leaf_owner),
        tuple(st.pool_leaves),
        tuple(tuple(tuple(sorted(s)) for s in chain) for chain in st.pool),
        tuple(sorted((o, ch, tuple(v)) for o, d in st.unbound.items() for ch, v in d.items())),
        tuple(tuple(x) for x in st.demand),
        tuple(tuple(sorted(d.items())) for d in st.owned_free),
    )
