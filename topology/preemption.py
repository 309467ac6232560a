"""Gang-wide preemption: whom a gang may displace, the cheapest set of victims, the reservation.

Rules (HiveD's, which carry VC safety): a guaranteed gang preempts lower-priority gangs of its own VC
and opportunistic gangs of any VC, never another VC's guaranteed work. Victims are whole gangs, and
the cheapest priority tier that suffices is used. The filtering phase only reports victims; the
preempting phase reserves the preemptor's cells (leaves still held by victims are marked, the free
ones taken) until the victims are gone. Lazy preemption first tries to downgrade same-VC victims to
opportunistic and keep them running; it is undone if the preemptor still cannot be mapped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from topology.buddy import unbind_unused
from topology.cluster import Cluster
from topology.decisions import (
    OPPORTUNISTIC_PRIORITY,
    GangPlacement,
    GangRequest,
    Preemption,
    Released,
    Wait,
)
from topology.expiry import cooling
from topology.gangs import existing, live_victims, place_new, placement_of, record_gang, release
from topology.placement import Shortfall
from topology.requests import chains, level_named, suggested_ids, validate
from topology.reservations import Gang, GangPhase
from topology.room import (
    ends_a_guest_in_lieu,
    loss_of,
    may_start_as_guest,
    over_quota,
    start_as_guest,
    worth_a_guest,
)
from topology.state import NO_GANG, NO_OWNER
from topology.victims import batches, cheapest_first, latest_decision, spread, work_lost

DRY_RUN_GANG = -2  # gang id used for what-if placements; never stored
# how many cells `_cheapest_cell` searches beyond the first plan (bounds a preemption's worst-case
# latency on a large cluster, as `placement.MAX_DOMAIN_TRIALS` bounds a placement's)
MAX_CELL_TRIALS = 32
# a reservation that ran nothing, let go for a preemptor: the preemptor unnamed (`apply_plan`)
OUTBID = "cancelled: outbid by a gang of higher priority"


@dataclass(frozen=True, slots=True)
class Plan:
    """A placement that needs `victims` (gang ids) gone, and the cells it binds for the VC."""

    chain: int
    leaves: list[tuple[int, ...]]
    binds: list[int]
    victims: list[int]


# a plan taken before anything else is tried (`compact.closer_plan`); None: go on as usual
FirstPlan = Callable[[Cluster, GangRequest, float, frozenset[int] | None], Plan | None]


def may_preempt(req: GangRequest, owner: int, g: Gang) -> bool:
    """Can a gang of `req` displace `g`? Lower priority in the same VC (same owner), or opportunistic.
    Never one already being evicted: its GPUs come free as its pods go (or, for a pod whose bind
    info topogang did not write, when the admin removes it)."""
    if g.name == req.name or req.opportunistic or g.evicting:
        return False
    if g.priority < 0:
        return True
    return g.owner == owner and g.priority < req.priority


def find_plan(
    cluster: Cluster, req: GangRequest, owner: int, suggested: frozenset[int] | None
) -> Plan | None:
    """Dry run: the placement this gang gets by preempting the lowest priority tier that suffices.

    Only gangs that could matter are tried: same-VC lower-priority ones, and opportunistic ones on
    cells this VC owns or could bind (an opportunistic gang inside another VC's cells never helps)."""
    if req.opportunistic:
        return None
    candidates = may_help(cluster, req, owner)
    for tier in sorted({g.priority for g in candidates}):
        plan = plan_over(cluster, req, owner, [g for g in candidates if g.priority <= tier], suggested)
        if plan is not None:
            return plan
    return None


def may_help(cluster: Cluster, req: GangRequest, owner: int) -> list[Gang]:
    """The gangs a preemption for `req` could free, by id (`find_plan`'s candidates)."""
    st = cluster.state
    return sorted(
        (
            g
            for g in cluster.reservations.by_id.values()
            if may_preempt(req, owner, g)
            and (g.priority >= 0 or any(st.leaf_owner[x] in (owner, NO_OWNER) for x in g.held_leaves()))
        ),
        key=lambda g: g.id,
    )


def plan_over(
    cluster: Cluster, req: GangRequest, owner: int, pool: list[Gang], suggested: frozenset[int] | None
) -> Plan | None:
    """The plan over `pool` that loses the least work (`victims.py`) among those that land the gang
    as close as it would with the whole pool gone."""
    now = latest_decision(cluster.reservations.by_id.values())
    order = cheapest_first(pool, now)
    ids = {g.id for g in pool}
    best = _dry_run(cluster, req, owner, order, len(order), ids, suggested)
    if best is None:
        return None
    target = spread(cluster.topo, best.leaves)
    first = _cheapest_prefix(cluster, req, owner, order, ids, suggested, target)
    if first is None:
        return best
    return _cheapest_cell(cluster, req, owner, order, ids, suggested, target, first, now)


def _cheapest_prefix(
    cluster: Cluster,
    req: GangRequest,
    owner: int,
    order: list[Gang],
    ids: set[int],
    suggested: frozenset[int] | None,
    target: tuple[int, int],
) -> Plan | None:
    """The shortest prefix of `order` (in doubling batches) over which the gang lands at `target`."""
    for upto in batches(len(order)):
        plan = _dry_run(cluster, req, owner, order, upto, ids, suggested)
        if plan is not None and spread(cluster.topo, plan.leaves) <= target:
            return plan
    return None


def _cheapest_cell(
    cluster: Cluster,
    req: GangRequest,
    owner: int,
    order: list[Gang],
    ids: set[int],
    suggested: frozenset[int] | None,
    target: tuple[int, int],
    plan: Plan,
    now: float,
) -> Plan:
    """`plan`, or a plan confined to one cell of the level the gang needs (its node, or its rack)
    that loses less work. Cells go in order of their cheapest candidate, a bound on what they cost,
    at most `MAX_CELL_TRIALS` of them."""
    topo = cluster.topo
    ch = topo.chains[plan.chain]
    level = max(ch.node_level, target[0])
    if level > ch.top_level or len(ch.cells_by_level[level]) < 2 or not plan.victims:
        return plan  # one cell holds every choice: the prefix search already compared them
    by_id = cluster.reservations.by_id
    cost = sum(work_lost(by_id[v], now) for v in plan.victims)
    in_cell: dict[int, list[Gang]] = {}
    for g in order:  # cheapest first, so each cell's list is too
        for c in {topo.ancestor_at(leaf, level) for leaf in g.held_leaves()}:
            if c >= 0 and topo.cell_chain[c] == plan.chain:
                in_cell.setdefault(c, []).append(g)
    return _cheapest_in_cells(cluster, req, owner, in_cell, ids, suggested, target, cost, now) or plan


def _cheapest_in_cells(
    cluster: Cluster,
    req: GangRequest,
    owner: int,
    in_cell: dict[int, list[Gang]],
    ids: set[int],
    suggested: frozenset[int] | None,
    target: tuple[int, int],
    cost: float,
    now: float,
) -> Plan | None:
    """The plan confined to one cell of `in_cell` (each cell's candidates, cheapest first) that loses
    less than `cost`, the cheapest such; None if none does. Cells go in order of their cheapest
    candidate, a bound on what they cost, at most `MAX_CELL_TRIALS` of them."""
    topo, by_id = cluster.topo, cluster.reservations.by_id
    best: Plan | None = None
    ranked = sorted(in_cell, key=lambda c: (work_lost(in_cell[c][0], now), c))
    for c in ranked[:MAX_CELL_TRIALS]:
        if work_lost(in_cell[c][0], now) >= cost:
            break
        nodes = frozenset(topo.nodes_within(c))
        within = nodes if suggested is None else nodes & suggested
        if not within:
            continue
        got = _cheapest_prefix(cluster, req, owner, in_cell[c], ids, within, target)
        if got is None:
            continue
        spent = sum(work_lost(by_id[v], now) for v in got.victims)
        if spent < cost:
            best, cost = got, spent
    return best


def _dry_run(
    cluster: Cluster,
    req: GangRequest,
    owner: int,
    order: list[Gang],
    upto: int,
    ids: set[int],
    suggested: frozenset[int] | None,
) -> Plan | None:
    """Where the gang goes with the first `upto` gangs of `order` gone; changes nothing."""
    st = cluster.state
    holder: dict[int, set[int]] = {}  # leaf -> gangs that must go if we take it
    sizes = [m.leaf_number for m in req.members for _ in range(m.pod_number)]
    st.begin()
    try:
        for g in order[:upto]:
            for leaf in g.held_leaves():
                reserver = st.leaf_reserver[leaf]
                if reserver != NO_GANG and reserver not in ids:
                    continue  # promised to a preemptor we may not outbid
                holder[leaf] = {g.id} if reserver == NO_GANG else {g.id, reserver}
                st.release_leaf(leaf)
        for ch in chains(cluster, req):
            top = level_named(cluster.topo.chains[ch], req.within_level)
            got = cluster.placer.place(owner, ch, sizes, DRY_RUN_GANG, req.priority, suggested, top)
            if isinstance(got, Shortfall):
                continue
            binds = [c for c in st.binds_since_begin() if st.bound_owner[c] == owner]
            victims = sorted({gid for ls in got for leaf in ls for gid in holder.get(leaf, ())})
            return Plan(ch, got, binds, victims)
        return None
    finally:
        st.rollback()


def downgrade(cluster: Cluster, g: Gang, preemptor: str) -> None:
    """Lazy preemption: `g` keeps its GPUs but runs as opportunistic, giving its VC cells back."""
    st = cluster.state
    leaves = g.held_leaves()
    for leaf in leaves:
        st.release_leaf(leaf)
        st.allocate_leaf(leaf, g.id, OPPORTUNISTIC_PRIORITY)
    g.owner, g.priority, g.downgraded_by = NO_OWNER, OPPORTUNISTIC_PRIORITY, preemptor
    cluster.reservations.unsettle(g)
    cluster.reservations.retally(g)
    g.history.append(f"downgraded to opportunistic by {preemptor}")
    unbind_unused(st, leaves)


def revert_downgrade(g: Gang, owner: int, priority: int) -> None:
    """Undo `downgrade`'s ledger fields (the cell state is rolled back by the caller's transaction)."""
    g.owner, g.priority, g.downgraded_by = owner, priority, None
    g.history.append("downgrade reverted: the preemptor could not be mapped")


def preempt(
    cluster: Cluster,
    req: GangRequest,
    now: float,
    first: FirstPlan | None = None,
    outbid: list[Released] | None = None,
) -> GangPlacement | Preemption | Wait:
    """Preempting phase: place the gang if it fits now; otherwise reserve its cells over the
    cheapest victims (lazily downgrading opted-in same-VC victims first) and name the pods that
    must go. Repeated calls return the same reservation and its remaining victims. `first`, asked
    once the request is checked and before the free room, may name a plan to take instead.
    `outbid` gets the reservations that ran nothing and were let go for it (`apply_plan`)."""
    held = existing(cluster, req)
    if held is not None:
        return _answer(cluster, held)
    validate(cluster, req)
    cooling_wait = cooling(cluster, req, now)
    if cooling_wait is not None:
        return cooling_wait
    suggested = suggested_ids(cluster, req)
    st = cluster.state
    chosen = first(cluster, req, now, suggested) if first is not None else None
    if chosen is not None:
        st.begin()
        gang = apply_plan(cluster, req, cluster.owner_of(req), chosen, now, outbid)
        st.commit()
        return _answer(cluster, gang)
    got = place_new(cluster, req, now, suggested)
    if not isinstance(got, Wait) or req.opportunistic:
        return got
    owner = cluster.owner_of(req)
    st.begin()
    lazy, placed = _downgrade_then_place(cluster, req, owner, now, suggested)
    if placed is not None:
        st.commit()
        return placed
    plan = find_plan(cluster, req, owner, suggested)
    if plan is not None and over_quota(cluster, req, plan.victims):
        plan = None
    # free room first (`room.py`); not after a lazy downgrade, which made room in the VC's cells
    way = as_guest(cluster, req, plan, now, suggested) if plan and not lazy else None
    if isinstance(way, Gang):
        st.commit()
        return placement_of(cluster, way)
    if plan is None:
        st.rollback()
        for g, o, p in lazy:
            revert_downgrade(g, o, p)
            cluster.reservations.retally(g)
        return got
    gang = (
        apply_plan(cluster, req, owner, plan, now, outbid)
        if way is None
        else _apply_guest_plan(cluster, req, way, now, outbid)
    )
    st.commit()
    return _answer(cluster, gang)


def _answer(cluster: Cluster, gang: Gang) -> GangPlacement | Preemption:
    """A reserved gang as the preempting phase names it: its victims still to go, or its placement."""
    if gang.phase is GangPhase.PREEMPTING:
        return Preemption(gang.name, live_victims(cluster, gang.victims))
    return placement_of(cluster, gang)


def lazy_place(
    cluster: Cluster, req: GangRequest, now: float, suggested: frozenset[int] | None
) -> GangPlacement | None:
    """HiveD's lazy preemption, in either phase: when the gang would displace lazy-preemptible
    same-VC gangs, downgrade them to opportunistic (they keep running on their GPUs, giving their
    VC cells back) and place the gang again. If it now fits with no victim at all, typically by
    binding the VC's cell to another free physical cell, that is the answer and the downgrade
    stands; otherwise everything is undone and the caller goes on to real preemption."""
    if req.opportunistic:
        return None
    owner = cluster.owner_of(req)
    if not any(
        g.request.lazy_preemption and g.priority >= 0 and may_preempt(req, owner, g)
        for g in cluster.reservations.by_id.values()
    ):
        return None  # nobody to downgrade: no dry run
    st = cluster.state
    st.begin()
    lazy, placed = _downgrade_then_place(cluster, req, owner, now, suggested)
    if placed is not None:
        st.commit()
        return placed
    st.rollback()
    for g, o, p in lazy:  # quietly: a filter call that changed nothing leaves no trace
        g.owner, g.priority, g.downgraded_by = o, p, None
        g.history.pop()
        cluster.reservations.retally(g)
    return None


def _downgrade_then_place(
    cluster: Cluster, req: GangRequest, owner: int, now: float, suggested: frozenset[int] | None
) -> tuple[list[tuple[Gang, int, int]], GangPlacement | None]:
    """Inside the caller's transaction: downgrade the opted-in victims, then place the gang again.
    Returns what to revert, and the placement when the gang now fits with no victim."""
    lazy = _lazy_downgrade(cluster, req, owner, suggested)
    placed = place_new(cluster, req, now, suggested) if lazy else None
    return lazy, None if placed is None or isinstance(placed, Wait) else placed


def _lazy_downgrade(
    cluster: Cluster, req: GangRequest, owner: int, suggested: frozenset[int] | None
) -> list[tuple[Gang, int, int]]:
    """Downgrade the opted-in same-VC victims of a dry-run plan; return what to revert."""
    plan = find_plan(cluster, req, owner, suggested)
    if plan is None:
        return []
    out: list[tuple[Gang, int, int]] = []
    for gid in plan.victims:
        g = cluster.reservations.by_id[gid]
        if g.priority >= 0 and g.request.lazy_preemption and g.phase is not GangPhase.PREEMPTING:
            out.append((g, g.owner, g.priority))
            downgrade(cluster, g, req.name)
    return out


def apply_plan(
    cluster: Cluster,
    req: GangRequest,
    owner: int,
    plan: Plan,
    now: float,
    outbid: list[Released] | None = None,
) -> Gang:
    """Make the preemption real: cancel victims that run nothing (each told in `outbid`: the edge's
    ledger, requeue and promises hear of it as of any release), bind the plan's cells, take the
    free leaves and mark the victims' leaves as reserved for this gang. The release's reason does
    not name the preemptor, which may be of another namespace (its history, for admins, does)."""
    st = cluster.state
    live: set[int] = set()
    freed: list[int] = []
    for gid in plan.victims:
        g = cluster.reservations.by_id[gid]
        if g.live_slots():
            live.add(gid)
        else:
            # cancel without giving cells back yet: the plan may sit in them
            freed.extend(leaf for s in g.slots for leaf in s.leaves)
            g.history.append(f"cancelled: outbid by {req.name}")
            gone = release(cluster, g, OUTBID, now, unbind=False)
            if outbid is not None:
                outbid.append(gone)
    for c in plan.binds:
        if st.bound_owner[c] != owner:
            st.bind(owner, c)
    gang = record_gang(cluster, cluster.reservations.new_id(), req, owner, plan.chain, plan.leaves, now)
    for ls in plan.leaves:
        for leaf in ls:
            if st.leaf_gang[leaf] == NO_GANG:
                st.allocate_leaf(leaf, gang.id, req.priority)
            else:
                st.set_reserver(leaf, gang.id)
                gang.pending.add(leaf)
    cluster.reservations.retally(gang)
    gang.victims = live
    if live:
        cluster.preemptors.add(gang.id)
    gang.history.append(f"preempting {len(live)} gangs")
    unbind_unused(cluster.state, freed)
    return gang


def as_guest(
    cluster: Cluster, req: GangRequest, plan: Plan, now: float, suggested: frozenset[int] | None
) -> Gang | Plan | None:
    """The gang's way in as a guest instead of `plan` (a reclaim in its VC's cells, `room.py`): started
    in free room (the `Gang`), else a plan over plain guests elsewhere that loses less (`guest_plan`,
    one-node gangs); None: it reclaims. Only for a gang that may run as a guest, and only when `plan`
    ends more work than the guest's risk is worth (`room.worth_a_guest`) or, on one node, ends a
    guaranteed gang running as a guest (`room.ends_a_guest_in_lieu`, at any loss). The loss is
    counted once, for both ways."""
    if not may_start_as_guest(req):
        return None
    cost = loss_of(cluster, plan.victims, now)
    topo = cluster.topo
    one_node = len({topo.cell_node[ls[0]] for ls in plan.leaves}) == 1
    spares = one_node and ends_a_guest_in_lieu(cluster, plan.victims)
    if not spares and not worth_a_guest(cluster, req, cost):
        return None
    guest = start_as_guest(cluster, req, now, suggested, len(plan.victims))
    if guest is not None:
        return guest
    return guest_plan(cluster, req, plan, cost, now, suggested) if one_node and plan.victims else None


def guest_plan(
    cluster: Cluster, req: GangRequest, plan: Plan, cost: float, now: float, suggested: frozenset[int] | None
) -> Plan | None:
    """A cheaper way in than `plan` (a one-node preemption in the gang's VC's cells, ending `cost`
    GPU-seconds of work) for a gang that may run as a guest, when `_as_guest` found it worth it:
    start as a guest over plain guests (opportunistic gangs that are not themselves guaranteed gangs
    running as guests) on any node, where that ends less work. A quota counted in GPUs reclaims
    from the youngest borrowers anywhere; a VC's cells leave only the guests that sit in them, often
    runs of tens of hours, so this is the same reclaim with the gang unguaranteed until a release
    promotes it (`promotion.py`). It binds nothing, so every VC keeps its whole quota. Nodes are
    searched as `_cheapest_cell` searches cells (`_cheapest_in_cells`); the plan lands the gang as
    close as `plan`."""
    topo = cluster.topo
    pool = [
        g
        for g in cluster.reservations.by_id.values()
        if g.priority < 0 and not g.guest and may_preempt(req, NO_OWNER, g) and g.live_slots()
    ]
    in_node: dict[int, list[Gang]] = {}  # by node cell
    for g in cheapest_first(pool, now):  # cheapest first, so each node's list is too
        nodes = {topo.cell_node[leaf] for leaf in g.held_leaves()}
        if len(nodes) == 1:  # a gang across nodes frees room on one only: never the cheapest way
            in_node.setdefault(topo.node_cell[nodes.pop()], []).append(g)
    ids = {g.id for gs in in_node.values() for g in gs}
    placing = replace(req, priority=OPPORTUNISTIC_PRIORITY)
    target = spread(topo, plan.leaves)
    # every candidate runs, so what a plan over them loses is their work (`loss_of` = `work_lost`)
    best = _cheapest_in_cells(cluster, placing, NO_OWNER, in_node, ids, suggested, target, cost, now)
    return None if best is None or over_quota(cluster, req, best.victims) else best


def _apply_guest_plan(
    cluster: Cluster, req: GangRequest, plan: Plan, now: float, outbid: list[Released] | None = None
) -> Gang:
    """`apply_plan` for a gang starting as a guest (`guest_plan`): opportunistic, binding no cell,
    its request kept as asked, so a release promotes it to the priority it asked for."""
    gang = apply_plan(cluster, replace(req, priority=OPPORTUNISTIC_PRIORITY), NO_OWNER, plan, now, outbid)
    cluster.reservations.touch(gang).request, gang.guest = req, True
    gang.history.append(f"started as a guest over {len(plan.victims)} younger guests elsewhere")
    return gang
