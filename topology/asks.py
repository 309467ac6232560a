"""Each extender verb as one question to the core, and the one answer the edge replies with.

The edge (`extender.http.verbs`) asks the core once per verb and gets back everything its reply, the
gang ledger and the promised slots need: for filter, the member's request in, and out either its
slots (with the reservation the ledger reads) or the wait with its reason and victims. Asking again
for what the core already knew when it answered (the gang, its open slots, a slot's holder, a node's
fill) would cross the boundary several times per verb and read state the first answer had in hand.

A `MemberAsk`'s ranges are checked by whoever built it (`topology.requests.check_ranges`, run by the
pod contract and the conventions as they read a pod), so the core checks here only what depends on
the config (`requests.fits`, remembered per shape): each range rule runs once per request read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from topology import compact, expiry, gangs, preemption, promotion, requests, room
from topology.cluster import Cluster
from topology.decisions import (
    Bind,
    GangPlacement,
    GangRequest,
    PodPlacement,
    Preemption,
    Released,
    UserError,
    Wait,
    WaitCode,
    WaitReason,
)
from topology.preemption import Plan
from topology.reservations import Gang


@dataclass(frozen=True, slots=True)
class MemberAsk:
    """One member pod's request, its ranges checked: its gang's request (kube-scheduler's nodes as
    suggested nodes), the pod, its leaf cells, its slot key, and its rank among the members of its
    shape (a FrameworkController task index), which picks its own slot among equal ones."""

    request: GangRequest
    pod_uid: str
    leaf_number: int
    slot_key: str | None = None
    rank: int | None = None


@dataclass(frozen=True, slots=True)
class ReserveLimit:
    """The most GPUs (leaf cells) the gangs of `group` (`reservations.group_of`: the edge's
    namespace, every gang key of which starts `<namespace>/`) may hold at once in slots no pod has
    been bound to yet: one tenant's reservations not yet filled. `key` names the setting, for the
    wait's text. Without it, a tenant who creates one pod of each of many large
    gangs holds the cluster's free GPUs (or a shared VC's quota) for a reservation TTL at a time,
    and again under each new name: the GPUs are reserved, not used, and other teams wait."""

    group: str
    gpus: int
    key: str


@dataclass(frozen=True, slots=True)
class FilterAsk:
    """A filter's question. `preempt`: when the gang fits only by preemption, preempt now (filter-time
    preemption). `supersede`: an older framework attempt's gang, let go first (its pods are evicted).
    `abandon`: a gang the pod left (its spec now names another), let go first when no pod of it
    holds a slot. `place`: False when none of kube-scheduler's nodes is in the config (nothing is
    placed, and nobody waits). `behind`: an older gang of the same VC, at this gang's priority or
    above, waits for room (as the pod may see it named): a gang not yet placed waits behind it, so
    a VC's small gangs do not take, one after another, the room its big gang waits for. `limit`: the
    namespace's `ReserveLimit`; a gang not yet placed that would pass it waits, placing nothing and
    preempting nobody."""

    member: MemberAsk
    preempt: bool = False
    supersede: str | None = None
    abandon: str | None = None
    place: bool = True
    behind: str | None = None
    limit: ReserveLimit | None = None


@dataclass(frozen=True, slots=True)
class Slots:
    """A member of a placed gang: its own claimed slot, else the open slots of its shape in rank
    order (empty when every one is claimed); `holder` is the pod holding its named slot then, and
    `going` says why the slots are closed: the gang is being "evicted" or "preempted".
    `rank_slot`: the slot its rank points at among slots of its shape. `fill`: (free, total) GPUs
    of each slot node (prioritize's packing score). `gang` is the reservation the ledger reads."""

    gang: Gang
    slots: tuple[PodPlacement, ...]
    own: bool = False
    rank_slot: int | None = None
    holder: str | None = None
    fill: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    going: str | None = None


@dataclass(frozen=True, slots=True)
class Waits:
    """A member whose gang waits: why (with the victims), the reservation it may already hold (one
    waiting for its victims to go), its VC's quota (whether the wait can ever end), and the
    victims of a preemption this call started."""

    wait: Wait
    gang: Gang | None
    vc_quota: int
    preempted: Preemption | None = None


@dataclass(frozen=True, slots=True)
class FilterAnswer:
    """The filter's one answer (None: nothing was asked to be placed), or the request's error, and
    what letting go of a superseded or abandoned gang, or a reservation outbid by its preemption,
    released (whichever the answer is)."""

    outcome: Slots | Waits | None
    released: tuple[Released, ...] = ()
    error: UserError | None = None


class IdentityError(UserError):
    """A pod that holds a slot asks as another member: refused before anything changes."""


@dataclass(frozen=True, slots=True)
class PreemptAnswer:
    """The preempt verb's answer, with the gang (if placed or preempting) and its VC's quota."""

    got: GangPlacement | Preemption | Wait
    gang: Gang | None
    vc_quota: int
    released: tuple[Released, ...] = ()  # reservations that ran nothing, let go for it (outbid)


@dataclass(frozen=True, slots=True)
class Claimed:
    """A bind's claim: the decision, the reservation, whether the slot is newly claimed, and the
    reservation's deadline before the claim (a failed Binding gives the slot back with it)."""

    bind: Bind
    gang: Gang
    fresh: bool
    deadline: float | None


# ---------------------------------------------------------------------------------- the questions
def reserve(cluster: Cluster, req: GangRequest, now: float, *, checked: bool = False) -> GangPlacement | Wait:
    """Place the whole gang (or find it placed), lazily downgrading opted-in victims when that
    alone makes room; Wait(PREEMPTIBLE) with the victims when it fits only by preemption.
    `checked`: the request's ranges were checked where it was built."""
    got = _closer_waits(cluster, req, _reserve(cluster, req, now, checked))
    return gangs.placement_of(cluster, got) if isinstance(got, Gang) else got


def _closer_waits(
    cluster: Cluster, req: GangRequest, got: Gang | GangPlacement | Wait | Plan
) -> Gang | GangPlacement | Wait:
    """A closer plan as the filtering phase answers it: the gang waits to preempt its guests."""
    return compact.closer_wait(cluster, req, got) if isinstance(got, Plan) else got


def _reserve(
    cluster: Cluster, req: GangRequest, now: float, checked: bool
) -> Gang | GangPlacement | Wait | Plan:
    """`reserve`, with a gang placed now or before answered as its `Gang` (the filter answers with
    its open slots and does not build the placement), and a gang `compact.closer_plan` keeps close
    answered with that plan (the filter that may preempt takes it without a second what-if)."""
    held = gangs.existing(cluster, req)
    if held is not None:  # a member of a placed gang: no node-list work at all
        if held.pending:  # waiting for its victims to go (`GangPhase.PREEMPTING`)
            return _wait_preempting(cluster, held)
        return held
    suggested = requests.suggested_ids(cluster, req)
    if checked:
        requests.fits(cluster, req)
    else:
        requests.validate(cluster, req)
    cooling = expiry.cooling(cluster, req, now)  # it expired less than a TTL ago
    if cooling is not None:
        return cooling
    closer = compact.closer_plan(cluster, req, now, suggested)
    if closer is not None:
        return closer
    got = gangs.place_gang(cluster, req, now, suggested)
    if not isinstance(got, Wait) or req.opportunistic:
        return got
    lazily = preemption.lazy_place(cluster, req, now, suggested)  # HiveD does this in filter too
    if lazily is not None:
        return lazily
    return _preemptible(cluster, req, got, suggested, now)


def _wait_preempting(cluster: Cluster, g: Gang) -> Wait:
    """What a member of a gang that waits for its victims to go is told (filter answers Wait)."""
    victims = gangs.live_victims(cluster, g.victims)
    msg = f"gang {g.name} holds a reservation and waits for {len(victims)} preempted pods to go"
    return Wait(WaitReason(WaitCode.PREEMPTING, g.request.vc, msg, needed=len(g.pending)), victims)


def _preemptible(
    cluster: Cluster, req: GangRequest, wait: Wait, suggested: frozenset[int] | None, now: float
) -> Gang | Wait:
    """The filtering phase's answer for a gang that does not fit: the gang started as a guest in
    free room when the preemption would end running work (`room.py`), else Wait(PREEMPTIBLE) naming
    the victims when it would fit by preempting them (nothing is reserved yet), else `wait`."""
    plan = preemption.find_plan(cluster, req, cluster.owner_of(req), suggested)
    if plan is None or room.over_quota(cluster, req, plan.victims):
        return wait
    way = preemption.as_guest(cluster, req, plan, now, suggested)
    if isinstance(way, Gang):
        return way
    victims = gangs.live_victims(cluster, (way or plan).victims)
    r = wait.reason
    msg = (
        f"gang {req.name} fits by preempting {len(victims)} pods of {len(plan.victims)} lower-priority gangs"
        if way is None
        else f"gang {req.name} fits as a guest by preempting {len(victims)} pods of {len(way.victims)} "
        "younger guests elsewhere, which ends less work than reclaiming its VC's cells"
    )
    return Wait(
        WaitReason(WaitCode.PREEMPTIBLE, req.vc, msg, r.chain, r.level, r.cell_type, r.needed), victims
    )


def promoting(cluster: Cluster, released: Released | None) -> Released | None:
    """After a release: opted-in opportunistic gangs whose VC now has room become guaranteed."""
    if released:
        promotion.promote_waiting(cluster)
    return released


def filter_member(cluster: Cluster, ask: FilterAsk, now: float) -> FilterAnswer:
    """Filter: the member's slots, or why its gang waits. Raises `UserError`."""
    m = ask.member
    req = m.request
    check_identity(cluster, m)
    released: list[Released] = []
    if ask.abandon is not None:
        g = cluster.reservations.by_name.get(ask.abandon)
        if g is not None and not any(s.pod_uid is not None or s.finished for s in g.slots):
            got = promoting(cluster, gangs.delete_gang(cluster, ask.abandon))
            released += [got] if got is not None else []
    if ask.supersede is not None:
        got = promoting(cluster, gangs.evict_gang(cluster, ask.supersede, now))
        released += [got] if got is not None else []
    if not ask.place:
        return FilterAnswer(None, tuple(released))
    try:
        if cluster.reservations.by_name.get(req.name) is not None:
            requests.fits(cluster, req)  # a member of a placed gang: the config may have changed
        elif (held := held_back(cluster, req, ask.behind, ask.limit)) is not None:
            requests.fits(cluster, req)  # nothing is placed or preempted
            quota = cluster.vc_quota_leaves.get(req.vc, 0)
            return FilterAnswer(Waits(held, None, quota), tuple(released))
        first = _reserve(cluster, req, now, True)
        placed = _closer_waits(cluster, req, first)
        preempted = None
        if ask.preempt and isinstance(placed, Wait) and placed.reason.code is WaitCode.PREEMPTIBLE:
            closer = first if isinstance(first, Plan) else None
            plan = compact.preempt(cluster, req, now, closer, released)
            preempted = plan if isinstance(plan, Preemption) else None
            placed = _closer_waits(cluster, req, _reserve(cluster, req, now, True))
    except UserError as err:
        return FilterAnswer(None, tuple(released), err)
    gang = cluster.reservations.by_name.get(req.name)
    if isinstance(placed, Wait):
        quota = cluster.vc_quota_leaves.get(req.vc, 0)
        return FilterAnswer(Waits(placed, gang, quota, preempted), tuple(released))
    assert gang is not None
    return FilterAnswer(member_slots(cluster, gang, m), tuple(released))


def prioritize_member(cluster: Cluster, m: MemberAsk) -> Slots | None:
    """Prioritize: the member's slots (None when its gang has no reservation), with each slot
    node's fill. Raises `UserError` when the pod holds a slot as another member."""
    check_identity(cluster, m)
    gang = cluster.reservations.by_name.get(m.request.name)
    if gang is None:
        return None
    got = member_slots(cluster, gang, m)
    topo, free = cluster.topo, cluster.state.free
    fill = {}
    for p in got.slots:
        cells = [topo.node_cell[ni] for ni in topo.node_parts.get(p.node, ())]
        fill[p.node] = (sum(free[c] for c in cells), sum(topo.leaf_count[c] for c in cells))
    return Slots(got.gang, got.slots, got.own, got.rank_slot, got.holder, fill)


def preempt_member(
    cluster: Cluster, m: MemberAsk, now: float, behind: str | None = None, limit: ReserveLimit | None = None
) -> PreemptAnswer:
    """Preempt: place the gang if it fits, else reserve over the cheapest victims; a gang not yet
    placed that is held back (`FilterAsk.behind`, `FilterAsk.limit`) waits instead. Raises `UserError`."""
    check_identity(cluster, m)
    req = m.request
    placed = cluster.reservations.by_name.get(req.name) is not None
    held = None if placed else held_back(cluster, req, behind, limit)
    if placed or held is not None:
        requests.fits(cluster, req)
    outbid: list[Released] = []
    got = compact.preempt(cluster, req, now, outbid=outbid) if held is None else held
    gang = cluster.reservations.by_name.get(req.name)
    return PreemptAnswer(got, gang, cluster.vc_quota_leaves.get(req.vc, 0), tuple(outbid))


def bind_member(
    cluster: Cluster, m: MemberAsk, node: str, now: float, *, pod_name: str | None = None
) -> Claimed | None:
    """Bind: claim the member's slot on `node` (None: its gang has no reservation). Raises
    `UserError` when it has no slot to give, or asks for another shape than its gang (a pod
    filtered into an earlier placement of the name, whose request a restart made the bind read
    afresh: its gang's pods must agree, or a restart brings the gang back as either asked)."""
    check_identity(cluster, m)
    gang = cluster.reservations.by_name.get(m.request.name)
    if gang is None:
        return None
    requests.check_same_shape(gang.request, m.request)
    fresh = gang.slot_of(m.pod_uid) is None
    deadline = gang.deadline
    got = gangs.claim(
        cluster, gang.name, m.pod_uid, m.leaf_number, now, node=node, slot_key=m.slot_key, pod_name=pod_name
    )
    return Claimed(got, gang, fresh, deadline)


# ---------------------------------------------------------------------------------- the answers
def held_back(
    cluster: Cluster, req: GangRequest, behind: str | None, limit: ReserveLimit | None
) -> Wait | None:
    """Why a gang not yet placed may not be placed now, whatever room there is: its VC's older gang
    goes first (`behind`), or its tenant's reservations not yet filled would pass `limit`. A gang
    larger than the bound by itself could never be placed under it: `UserError`, as for any request
    the config cannot grant, so its members are told at once and nothing waits for it."""
    if behind is not None:
        return queued(req, behind)
    if limit is None:
        return None
    total = req.leaf_total
    if total > limit.gpus:
        raise UserError(
            "affinityGroup.members",
            f"gang {req.name} asks for {total} GPUs, more than its namespace may hold reserved before its "
            f"pods are bound ({limit.key}: {limit.gpus}): raise it, or split the gang",
        )
    held = cluster.reservations.unclaimed_leaves(limit.group, cluster.being_preempted)
    if held + total <= limit.gpus:
        return None
    msg = (
        f"its namespace's gangs hold {held} GPUs in slots no pod is bound to yet; with this gang's {total} "
        f"that passes {limit.key} ({limit.gpus}); it is placed once those gangs' pods are bound or the "
        "gangs let go"
    )
    reason = WaitReason(WaitCode.TENANT_LIMIT, req.vc, msg, needed=total, available=max(0, limit.gpus - held))
    return Wait(reason)


def queued(req: GangRequest, behind: str) -> Wait:
    """The wait of a gang whose VC's older gang (`behind`, as the pod may see it) waits for room, or
    its namespace's older gang for the namespace's bound on GPUs reserved and not yet bound."""
    msg = (
        f"{behind} is older and waits for room; the gangs of a VC, and a namespace's gangs under its "
        "bound on GPUs reserved unbound, start in the order they were created (topogang.vcQueueing: "
        "StrictFIFO)"
    )
    return Wait(WaitReason(WaitCode.QUEUED, req.vc, msg))


def check_identity(cluster: Cluster, m: MemberAsk) -> None:
    """A pod that holds a slot keeps the identity it was bound with: a request under its UID that
    names another gang or slot shape (a reused UID, or a spec edited after binding) is refused."""
    res = cluster.reservations
    gid = res.pod_gang.get(m.pod_uid)
    if gid is None:
        return
    gang = res.by_id[gid]
    slot = gang.slot_of(m.pod_uid)
    if gang.name != m.request.name or (slot is not None and slot.leaf_number != m.leaf_number):
        raise IdentityError(
            "metadata.uid",
            f"pod UID {m.pod_uid} is bound in gang {gang.name}; a bound pod's gang, slot and leaf "
            "cells cannot change (a new spec needs a new pod)",
        )


def member_slots(cluster: Cluster, gang: Gang, m: MemberAsk) -> Slots:
    """The pod's own claimed slot, else the gang's open slots of its shape (rank order)."""
    mine = gang.slot_of(m.pod_uid)
    if mine is not None:
        own = tuple(p for p in gangs.placement_of(cluster, gang).pods if p.slot == mine.index)
        return Slots(gang, own, own=True)
    slots = tuple(gangs.open_slots(cluster, gang.name, m.leaf_number, m.slot_key))
    rank_slot = None
    if m.rank is not None and m.slot_key is None:
        same = [s.index for s in gang.slots if s.leaf_number == m.leaf_number]
        rank_slot = same[m.rank] if m.rank < len(same) else None
    holder = None
    if not slots and m.slot_key is not None:
        holder = next((s.pod_uid for s in gang.slots if s.key == m.slot_key and not s.finished), None)
    going = None
    if not slots:
        going = "evicted" if gang.evicting else "preempted" if cluster.being_preempted(gang.id) else None
    return Slots(gang, slots, rank_slot=rank_slot, holder=holder, going=going)
