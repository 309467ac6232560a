"""A gang's reservation from placement to release: place, claim, unclaim, release, expire.

A gang is placed whole when its first member is filtered (`place_new`): the `Placer` finds cells for
every pod and a `Gang` with one `Slot` per pod is recorded in the reservations. Its pods then claim the
slots one by one (`claim`). A gang is released when none of its pods is alive, when it is deleted,
or when its reservation expires before every slot was claimed; pods still running then keep their
GPUs until they are gone (`keep_until_gone`), and a leaf a preemptor waits for passes straight to it.

The TTL caps how long a gang holds cells while not whole: its deadline is set when it is placed (or
its victims are gone) and again only when a whole gang loses a member; filters, members re-created,
failed binds never move it, and a gang whose bound members all went before it was whole carries it
into its next placement (`record_gang`). Expiry is `topology.expiry`. What a gang holds is counted
again after each change to it (`Reservations.retally`), for the per-VC use the metrics show.
"""

from __future__ import annotations

from dataclasses import replace

from topology.buddy import unbind_unused
from topology.cluster import Cluster
from topology.decisions import (
    OPPORTUNISTIC_PRIORITY,
    Bind,
    GangPlacement,
    GangRequest,
    Member,
    PodPlacement,
    Released,
    UserError,
    Victim,
    Wait,
)
from topology.placement import Shortfall
from topology.requests import chains, check_same_shape, placement_top, suggested_ids
from topology.reservations import EVICTED, Gang, GangPhase, Slot
from topology.state import NO_GANG, NO_OWNER
from topology.wait_reasons import held_by, wait_reason


def existing(cluster: Cluster, req: GangRequest) -> Gang | None:
    """The gang's live reservation; a preemption that now needs a bad or non-suggested node is
    cancelled here (HiveD's rule), so the caller places the gang afresh."""
    g = cluster.reservations.by_name.get(req.name)
    if g is None:
        return None
    check_same_shape(g.request, req)
    if g.pending and _preemptor_broken(cluster, g, suggested_ids(cluster, req)):
        cancel(cluster, g, "its placement needs a bad or non-suggested node")
        return None
    return g


def _preemptor_broken(cluster: Cluster, g: Gang, suggested: frozenset[int] | None) -> bool:
    """A bad leaf breaks the reservation; so does a node kube-scheduler no longer suggests, unless
    the slot there still waits for a victim: a node whose GPUs the victims still hold is one its
    resource accounting filters out until they are gone, which must not cancel the preemption
    that is making them go."""
    st = cluster.state
    for s in g.slots:
        if any(st.leaf_bad[leaf] for leaf in s.leaves):
            return True
        if suggested is not None and s.node not in suggested and not g.pending.intersection(s.leaves):
            return True
    return False


def place_new(
    cluster: Cluster, req: GangRequest, now: float, suggested: frozenset[int] | None
) -> GangPlacement | Wait:
    """Place a new gang whole on the first of its chains that can take it, and record it; else say
    why it waits (reserving nothing)."""
    got = place_gang(cluster, req, now, suggested)
    return got if isinstance(got, Wait) else placement_of(cluster, got)


def place_gang(
    cluster: Cluster, req: GangRequest, now: float, suggested: frozenset[int] | None
) -> Gang | Wait:
    """`place_new` with the recorded gang, its placement built when first read (`placement_of`)."""
    got = place_on_chains(cluster, req, now, suggested)
    return got if isinstance(got, Gang) else Wait(wait_reason(cluster, req, got, suggested))


def place_on_chains(
    cluster: Cluster,
    req: GangRequest,
    now: float,
    suggested: frozenset[int] | None,
    *,
    as_guest: bool = False,
) -> Gang | list[tuple[int, Shortfall]]:
    """The gang placed whole on the first chain that takes it, recorded; else each chain's shortfall.
    `as_guest`: placed as opportunistic, its request kept as asked (`room.start_as_guest`)."""
    placing = replace(req, priority=OPPORTUNISTIC_PRIORITY) if as_guest else req
    owner = cluster.owner_of(placing)
    sizes = [m.leaf_number for m in req.members for _ in range(m.pod_number)]
    gang_id = cluster.reservations.new_id()
    shortfalls: list[tuple[int, Shortfall]] = []
    for ch in chains(cluster, req):
        top = placement_top(cluster.topo.chains[ch], placing, req.leaf_total)
        got = cluster.placer.place(owner, ch, sizes, gang_id, placing.priority, suggested, top)
        if isinstance(got, Shortfall):
            shortfalls.append((ch, got))
            continue
        at = placing.priority  # a guest's: opportunistic
        return record_gang(cluster, gang_id, req, owner, ch, got, now, priority=at, guest=as_guest)
    return shortfalls


def record_gang(
    cluster: Cluster,
    gang_id: int,
    req: GangRequest,
    owner: int,
    chain: int,
    leaves: list[tuple[int, ...]],
    now: float,
    *,
    priority: int | None = None,
    guest: bool = False,
) -> Gang:
    """Record a placed gang: slots, TTL deadline, lowest common cell level, the priority it runs at
    (its request's unless given). One released not whole with every member gone keeps its deadline."""
    slots = _slots(cluster, req, leaves)
    deadline = now + req.ttl_seconds
    carried = cluster.reservations.windows.pop(req.name, None)
    if carried is not None and carried[0] > now:
        deadline = min(deadline, carried[0])
    gang = Gang(
        id=gang_id,
        name=req.name,
        request=req,
        owner=owner,
        chain=chain,
        priority=req.priority if priority is None else priority,
        slots=slots,
        created=now,
        deadline=deadline,
        lca_level=cluster.topo.lca_level([leaf for s in slots for leaf in s.leaves]),
        guest=guest,
    )
    cluster.reservations.add(gang)
    return gang


def _slots(cluster: Cluster, req: GangRequest, leaves: list[tuple[int, ...]]) -> list[Slot]:
    """Slots in member order; pods of equal size are given placements in topology order, so
    consecutive ranks sit on neighbouring GPUs and nodes."""
    topo = cluster.topo
    slots: list[Slot] = []
    i = 0
    for m in req.members:
        group = leaves[i : i + m.pod_number]
        if len(group) > 1:
            group.sort(key=lambda ls: topo.leaf_pos[ls[0]])
        for ls in group:
            key = req.slot_keys[len(slots)] if req.slot_keys is not None else None
            slots.append(Slot(len(slots), m.leaf_number, key, topo.cell_node[ls[0]], ls))
        i += m.pod_number
    return slots


def placement_of(cluster: Cluster, gang: Gang) -> GangPlacement:
    """The gang's placement, cached until its priority changes (a downgrade)."""
    if gang.placement is not None and gang.placement.priority == gang.priority:
        return gang.placement
    gang.placement = placed = _placement(cluster, gang)
    return placed


def quota_cell_types(cluster: Cluster, gang: Gang, leaves: tuple[int, ...]) -> tuple[str, ...]:
    """Per GPU, the type of the gang's own VC cell it is held through, "" for none (every GPU
    of an opportunistic or downgraded gang, even inside a cell its VC bound for another gang).
    Recovery rebinds exactly these cells, and all-empty records bring the gang back
    opportunistic."""
    topo, st = cluster.topo, cluster.state
    if gang.owner == NO_OWNER:
        return ("",) * len(leaves)
    return tuple(
        topo.cell_type[root] if root >= 0 and st.bound_owner[root] == gang.owner else ""
        for root in st.binding_roots(leaves)
    )


def _placement(cluster: Cluster, gang: Gang) -> GangPlacement:
    topo = cluster.topo
    gpu = topo.gpu_index.__getitem__
    pods = tuple(
        [
            PodPlacement(
                s.index,
                topo.node_names[s.node],
                tuple(map(gpu, s.leaves)),
                s.key,
                quota_cell_types(cluster, gang, s.leaves),
            )
            for s in gang.slots
        ]
    )
    nodes = tuple(dict.fromkeys([p.node for p in pods]))
    return GangPlacement(
        gang=gang.name,
        vc=gang.request.vc,
        chain=topo.chains[gang.chain].name,
        priority=gang.priority,
        requested_priority=gang.request.priority,
        pods=pods,
        lca_level=gang.lca_level,
        nodes=nodes,
    )


def open_slots(
    cluster: Cluster, gang_name: str, leaf_number: int, slot_key: str | None = None
) -> list[PodPlacement]:
    """Unclaimed slots of this shape (the nodes a filter call may return), in rank order. None
    while the gang waits for victims to go, or while it is a waiting preemptor's victim (HiveD binds
    no pod of a BeingPreempted group: its slots stay its own, closed, until the preemption ends or
    the gang is gone): `claim` refuses them until then."""
    gang = cluster.reservations.by_name.get(gang_name)
    if gang is None or gang.pending or cluster.being_preempted(gang.id):
        return []
    topo = cluster.topo
    out = []
    for s in gang.slots:
        if s.leaf_number != leaf_number or s.finished:
            continue
        if slot_key is not None and s.key is not None:
            if s.key == slot_key and s.pod_uid is None:
                return [PodPlacement(s.index, topo.node_names[s.node], _gpus(cluster, s), s.key)]
            continue
        if s.pod_uid is None:
            out.append(PodPlacement(s.index, topo.node_names[s.node], _gpus(cluster, s), s.key))
    return out


def _gpus(cluster: Cluster, s: Slot) -> tuple[int, ...]:
    return tuple(cluster.topo.gpu_index[x] for x in s.leaves)


def claim(
    cluster: Cluster,
    gang_name: str,
    pod_uid: str,
    leaf_number: int,
    now: float,
    *,
    node: str | None = None,
    slot_key: str | None = None,
    pod_name: str | None = None,
) -> Bind:
    """Give `pod_uid` a slot of the gang (on `node` when given). Idempotent for the same pod; a
    pod with the slot key of an earlier pod (a retry) takes that slot back once the earlier pod
    is gone (`release_pod`): while it lives, the slot and its GPUs are that pod's, and a second
    pod with the same identity is refused rather than put on the same GPUs.

    Refused while the gang waits for preempted pods to go (`GangPhase.PREEMPTING`): their GPUs
    are still in use. Filter answers Wait then, but a bind can come without it (kube-scheduler
    binding from an answer about an earlier reservation of the same name, or retrying)."""
    gang = cluster.reservations.by_name.get(gang_name)
    if gang is None:
        raise UserError("affinityGroup.name", f"gang {gang_name} has no reservation")
    mine = gang.slot_of(pod_uid)
    if mine is not None:
        if node is not None and cluster.topo.node_names[mine.node] != node:
            raise UserError(
                "node",
                f"pod already holds slot {mine.index} on {cluster.topo.node_names[mine.node]}, not {node}",
            )
        return _bind(cluster, gang, mine, pod_uid)
    if gang.pending:
        victims = live_victims(cluster, gang.victims)
        raise UserError(
            "affinityGroup.name",
            f"gang {gang_name} waits for {len(victims)} preempted pods to go before its pods bind",
        )
    if cluster.being_preempted(gang.id):
        raise UserError("affinityGroup.name", f"gang {gang_name} is being preempted: no new pod of it binds")
    other = cluster.reservations.by_id.get(cluster.reservations.pod_gang.get(pod_uid, -1))
    if other is not None:  # a pod has one slot: a second would outlive the pod
        raise UserError("affinityGroup.name", f"pod {pod_uid} already holds a slot of gang {other.name}")
    slot = pick_slot(cluster, gang, leaf_number, node, slot_key)
    if slot is None:
        where = f" on node {node}" if node is not None else ""
        raise UserError(
            "node" if node is not None else "leafCellNumber",
            f"gang {gang_name} has no unclaimed slot of {leaf_number} leaf cells{where}",
        )
    if slot.pod_uid is not None:
        raise UserError("slotKey", held_by(gang_name, slot.key, slot.pod_uid))
    slot.pod_uid = pod_uid
    slot.pod_name = pod_name
    cluster.reservations.touch(gang)
    cluster.reservations.pod_gang[pod_uid] = gang.id
    if gang.phase is GangPhase.BOUND:
        gang.deadline = None
    return _bind(cluster, gang, slot, pod_uid)


def pick_slot(
    cluster: Cluster, gang: Gang, leaf_number: int, node: str | None, slot_key: str | None
) -> Slot | None:
    """The slot a pod of this shape would claim (on `node`, by `slot_key` when given), if any."""
    names = cluster.topo.node_names
    for s in gang.slots:
        if s.leaf_number != leaf_number or s.finished:
            continue
        if node is not None and names[s.node] != node:
            continue
        if slot_key is not None and s.key is not None:
            if s.key == slot_key:
                return s
            continue
        if s.pod_uid is None:
            return s
    return None


def _bind(cluster: Cluster, gang: Gang, slot: Slot, pod_uid: str) -> Bind:
    node = cluster.topo.node_names[slot.node]
    return Bind(pod_uid, slot.index, node, _gpus(cluster, slot), placement_of(cluster, gang))


def unclaim(
    cluster: Cluster, gang_name: str, pod_uid: str, now: float, *, deadline: float | None = None
) -> None:
    """Give a claimed slot back without touching the reservation (a Binding that failed).
    `deadline`: the reservation's before the claim (one that completed the gang cleared it)."""
    gang = cluster.reservations.by_name.get(gang_name)
    slot = gang.slot_of(pod_uid) if gang is not None else None
    if gang is None or slot is None:
        return
    slot.pod_uid = slot.pod_name = None
    cluster.reservations.pod_gang.pop(pod_uid, None)
    cluster.reservations.unsettle(gang)
    if gang.deadline is None:
        gang.deadline = deadline if deadline is not None else now + gang.request.ttl_seconds


def release_pod(cluster: Cluster, pod_uid: str, now: float, *, finished: bool = False) -> Released | None:
    """A pod was deleted (or completed, `finished`). Its slot opens for a retry (not while a
    preemptor waits for the gang: `open_slots`); the gang is released once none of its pods is
    alive; with gangReleaseEnable a finished pod's GPUs are freed at once."""
    gid = cluster.reservations.pod_gang.pop(pod_uid, None)
    if gid is None:
        return None
    gang = cluster.reservations.by_id[gid]
    slot = gang.slot_of(pod_uid)
    assert slot is not None
    slot.pod_uid = None
    cluster.reservations.unsettle(gang)
    if finished or gang.evicting:
        slot.finished = True
        if (gang.request.gang_release or gang.evicting) and not slot.released_early:
            slot.released_early = True
            _free_leaves(cluster, list(slot.leaves), now)
            cluster.reservations.retally(gang)
    if not gang.live_slots():
        if not finished and gang.deadline is not None and not gang.evicting:
            # not whole: a member re-created now places it again inside the same window
            cluster.reservations.windows[gang.name] = (gang.deadline, gang.request.ttl_seconds)
        return release(cluster, gang, "all members gone", now)
    if not finished and not gang.evicting and gang.deadline is None:
        gang.deadline = now + gang.request.ttl_seconds  # it was whole: a new window starts now
    return None


def delete_gang(cluster: Cluster, name: str) -> Released | None:
    """Release a gang at once (its pods are named for eviction)."""
    gang = cluster.reservations.by_name.get(name)
    if gang is None:
        return None
    return release(cluster, gang, "deleted")


def evict_gang(cluster: Cluster, name: str, now: float) -> Released | None:
    """Let a gang go whose pods the caller evicts (a superseded framework attempt): as
    `delete_gang`, but its running pods keep their GPUs until they are gone (`keep_until_gone`)."""
    gang = cluster.reservations.by_name.get(name)
    if gang is None:
        return None
    keep_until_gone(cluster, gang, now)
    return release(cluster, gang, "deleted", now)


def keep_until_gone(cluster: Cluster, gang: Gang, now: float) -> None:
    """A gang let go while its pods run: they are evicted, but each runs until it is gone (its
    grace period), so its GPUs must not go to anyone else before. Their slots move to a gang of
    their own, `<gang>/evicted/<id>`, that frees each slot's GPUs as its pod goes (and only then
    hands them to a preemptor waiting for them); the name is free to be placed again at once."""
    live = [
        s
        for s in gang.slots
        if s.pod_uid is not None and not s.released_early and not gang.pending.intersection(s.leaves)
    ]
    if not live:
        return
    counts: dict[int, int] = {}
    for s in live:
        counts[s.leaf_number] = counts.get(s.leaf_number, 0) + 1
    # a name no gang has: a reload numbers the gangs afresh and keeps their names, so the gang an
    # earlier eviction of this one left running may be `<gang>/evicted/<its id now>` already
    suffix = gang.id
    while (name := f"{gang.name}{EVICTED}{suffix}") in cluster.reservations.by_name:
        suffix += 1
    members = tuple(Member(n, k) for k, n in counts.items())
    keep = Gang(
        id=cluster.reservations.new_id(),
        name=name,
        request=replace(gang.request, name=name, members=members, slot_keys=None, suggested_nodes=None),
        owner=gang.owner,
        chain=gang.chain,
        priority=gang.priority,
        slots=[
            Slot(i, s.leaf_number, s.key, s.node, s.leaves, s.pod_uid, s.pod_name) for i, s in enumerate(live)
        ],
        created=now,
        deadline=None,
        lca_level=cluster.topo.lca_level([leaf for s in live for leaf in s.leaves]),
        history=[f"evicted from gang {gang.name}: holds its pods' GPUs until they are gone"],
        downgraded_by=gang.downgraded_by,
        evicting=True,
    )
    st = cluster.state
    for s in live:
        for leaf in s.leaves:
            st.release_leaf(leaf)
            st.allocate_leaf(leaf, keep.id, gang.priority)
        s.released_early = True  # no longer the old gang's to free
        assert s.pod_uid is not None
        cluster.reservations.pod_gang[s.pod_uid] = keep.id
    cluster.reservations.retally(gang)
    cluster.reservations.add(keep)
    for pid in sorted(cluster.preemptors):
        preemptor = cluster.reservations.by_id[pid]
        if gang.id in preemptor.victims:
            cluster.reservations.touch(preemptor).victims.add(keep.id)


def release(
    cluster: Cluster, gang: Gang, reason: str, now: float | None = None, *, unbind: bool = True
) -> Released:
    """Free everything the gang holds and drop its marks on leaves its victims still hold."""
    evict = tuple(s.pod_uid for s in gang.slots if s.pod_uid is not None)
    cluster.reservations.remove(gang)
    held = gang.held_leaves()
    for leaf in sorted(gang.pending):
        cluster.state.set_reserver(leaf, NO_GANG)
    gang.pending.clear()
    _free_leaves(cluster, held, now, unbind=False)  # one unbinding pass below covers every leaf
    if unbind:
        unbind_unused(cluster.state, [leaf for s in gang.slots for leaf in s.leaves])
    cluster.preemptors.discard(gang.id)
    for pid in sorted(cluster.preemptors):
        cluster.reservations.touch(cluster.reservations.by_id[pid]).victims.discard(gang.id)
    return Released(gang.name, reason, evict)


def _free_leaves(
    cluster: Cluster, leaves: list[int], now: float | None = None, *, unbind: bool = True
) -> None:
    """Free leaves; a leaf reserved by a preemptor passes straight to it (Reserving → Reserved)."""
    st = cluster.state
    st.release_leaves(leaves)
    for leaf in leaves:
        heir = st.leaf_reserver[leaf]
        if heir != NO_GANG:
            st.set_reserver(leaf, NO_GANG)
            g = cluster.reservations.by_id.get(heir)
            if g is not None:
                st.allocate_leaf(leaf, g.id, g.priority)
                g.pending.discard(leaf)
                cluster.reservations.retally(g)
                if not g.pending:
                    g.history.append("victims gone: reservation complete")
                    if now is not None:
                        g.deadline = now + g.request.ttl_seconds
    if unbind:
        unbind_unused(cluster.state, leaves)


def cancel(cluster: Cluster, g: Gang, why: str) -> Released:
    """Drop a reservation: victims' leaves stop being reserved, the gang's own leaves are freed."""
    g.history.append(f"cancelled: {why}")
    return release(cluster, g, f"cancelled: {why}")


def live_victims(cluster: Cluster, gang_ids: list[int] | set[int]) -> tuple[Victim, ...]:
    """Every running pod of the victim gangs (gang-wide), in a stable order."""
    out = []
    topo = cluster.topo
    for gid in sorted(gang_ids):
        g = cluster.reservations.by_id.get(gid)
        if g is None:
            continue
        for s in g.slots:
            if s.pod_uid is not None:
                out.append(Victim(s.pod_uid, g.name, topo.node_names[s.node]))
    return tuple(out)
