"""Gang-wide preemption: whom a gang may displace, the cheapest set of victims, the reservation.

Rules (HiveD's, which carry VC safety): a guaranteed gang preempts lower-priority gangs of its own VC
and opportunistic gangs of any VC, never another VC's guaranteed work. Victims are whole gangs, and
the cheapest priority tier that suffices is used. The filtering phase only reports victims; the
preempting phase reserves the preemptor's cells (leaves still held by victims are marked, the free
ones taken) until the victims are gone. Lazy preemption first tries to downgrade same-VC victims to
opportunistic and keep them running; it is undone if the preemptor still cannot be mapped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from topology.decisions import OPPORTUNISTIC_PRIORITY, GangRequest, Victim
from topology.ledger import Gang
from topology.placement import Shortfall
from topology.state import NO_GANG, NO_OWNER

if TYPE_CHECKING:
    from topology.core import Core

DRY_RUN_GANG = -2  # gang id used for what-if placements; never stored


@dataclass(frozen=True, slots=True)
class Plan:
    """A placement that needs `victims` (gang ids) gone, and the cells it binds for the VC."""

    chain: int
    leaves: list[tuple[int, ...]]
    binds: list[int]
    victims: list[int]


def may_preempt(req: GangRequest, owner: int, g: Gang) -> bool:
    """Can a gang of `req` displace `g`? Lower priority in the same VC (same owner), or opportunistic."""
    if g.name == req.name or req.opportunistic:
        return False
    if g.priority < 0:
        return True
    return g.owner == owner and g.priority < req.priority


def find_plan(core: Core, req: GangRequest, owner: int, suggested: frozenset[int] | None) -> Plan | None:
    """Dry run: the placement this gang gets by preempting the lowest priority tier that suffices.

    Only gangs that could matter are tried: same-VC lower-priority ones, and opportunistic ones on
    cells this VC owns or could bind (an opportunistic gang inside another VC's cells never helps)."""
    if req.opportunistic:
        return None
    st = core.state
    candidates = sorted(
        (
            g
            for g in core.ledger.by_id.values()
            if may_preempt(req, owner, g)
            and (g.priority >= 0 or any(st.leaf_owner[x] in (owner, NO_OWNER) for x in g.held_leaves()))
        ),
        key=lambda g: g.id,
    )
    for tier in sorted({g.priority for g in candidates}):
        plan = _try(core, req, owner, [g for g in candidates if g.priority <= tier], suggested)
        if plan is not None:
            return plan
    return None


def _try(
    core: Core, req: GangRequest, owner: int, pool: list[Gang], suggested: frozenset[int] | None
) -> Plan | None:
    st = core.state
    ids = {g.id for g in pool}
    holder: dict[int, set[int]] = {}  # leaf -> gangs that must go if we take it
    st.begin()
    try:
        for g in pool:
            for leaf in g.held_leaves():
                reserver = st.leaf_reserver[leaf]
                if reserver != NO_GANG and reserver not in ids:
                    continue  # promised to a preemptor we may not outbid
                holder[leaf] = {g.id} if reserver == NO_GANG else {g.id, reserver}
                st.release_leaf(leaf)
        sizes = [m.leaf_number for m in req.members for _ in range(m.pod_number)]
        for ch in core.chains_for(req):
            got = core.placer.place(owner, ch, sizes, DRY_RUN_GANG, req.priority, suggested)
            if isinstance(got, Shortfall):
                continue
            binds = [c for c in st.binds_since_begin() if st.bound_owner[c] == owner]
            victims = sorted({gid for ls in got for leaf in ls for gid in holder.get(leaf, ())})
            return Plan(ch, got, binds, victims)
        return None
    finally:
        st.rollback()


def live_victims(core: Core, gang_ids: list[int] | set[int]) -> tuple[Victim, ...]:
    """Every running pod of the victim gangs (gang-wide), in a stable order."""
    out = []
    topo = core.topo
    for gid in sorted(gang_ids):
        g = core.ledger.by_id.get(gid)
        if g is None:
            continue
        for s in g.slots:
            if s.pod_uid is not None:
                out.append(Victim(s.pod_uid, g.name, topo.node_names[s.node]))
    return tuple(out)


def downgrade(core: Core, g: Gang, preemptor: str) -> None:
    """Lazy preemption: `g` keeps its GPUs but runs as opportunistic, giving its VC cells back."""
    st = core.state
    leaves = g.held_leaves()
    for leaf in leaves:
        st.release_leaf(leaf)
        st.allocate_leaf(leaf, g.id, OPPORTUNISTIC_PRIORITY)
    g.owner, g.priority, g.downgraded_by = NO_OWNER, OPPORTUNISTIC_PRIORITY, preemptor
    g.history.append(f"downgraded to opportunistic by {preemptor}")
    core.unbind_unused(leaves)


def revert_downgrade(g: Gang, owner: int, priority: int) -> None:
    """Undo `downgrade`'s ledger fields (the cell state is rolled back by the caller's transaction)."""
    g.owner, g.priority, g.downgraded_by = owner, priority, None
    g.history.append("downgrade reverted: the preemptor could not be mapped")
