"""Gangs re-created where their pods already run: after a restart, and across a reconfiguration.

`adopt` takes running pods as facts: it never fails, reports what it cannot account for, and keeps a
guaranteed gang whose cells no longer fit its VC running as opportunistic. `restore` brings back a
reservation persisted before a restart (nothing runs in it yet), whole on its recorded cells or not
at all. Both bind the VC's quota cells again through `buddy.bind_for`, the type recorded at bind
time first, so the VC gets the same cells back. `keep_downgraded` puts back a lazy preemption's
downgrade, which neither the pods nor a reservation's cells can say alone.
"""

from __future__ import annotations

from collections.abc import Iterator

from topology.buddy import bind_for
from topology.cluster import Cluster
from topology.decisions import OPPORTUNISTIC_PRIORITY, AdoptedPod, GangPlacement, GangRequest, held_no_quota
from topology.gangs import placement_of, release
from topology.model import Topology
from topology.preemption import downgrade
from topology.promotion import PROMOTED_PRIORITY, bind_in_place
from topology.reservations import Gang, GangPhase, Slot, evicted_origin
from topology.state import NO_GANG, NO_OWNER


def adopt(
    cluster: Cluster, req: GangRequest, pods: list[AdoptedPod], now: float, *, evicting: bool = False
) -> GangPlacement:
    """Re-create a gang from where its pods already run (bind annotations after a restart, or a
    running allocation across a reconfiguration). Never fails: leaves it cannot account for are
    reported in the gang's history, and a guaranteed gang whose cells no longer fit its VC keeps
    running downgraded to opportunistic."""
    topo = cluster.topo
    gang = cluster.reservations.by_name.get(req.name)
    if gang is None:
        gang = _adopt_new(cluster, req, pods, now)
    cluster.reservations.touch(gang)
    for p in pods:
        if not p.pod_uid or gang.slot_of(p.pod_uid) is not None:
            continue
        # its GPUs the cluster still has: a reload may take some of a node's GPUs out from under a
        # running pod, whose slot holds the rest; an open slot there would expire onto a busy GPU
        kept = tuple(g for g, leaf, _ in _gpus(topo, p) if leaf is not None)
        slot = next(
            (
                s
                for s in gang.slots
                if s.pod_uid is None
                and topo.node_names[s.node] == p.node
                and tuple(topo.gpu_index[x] for x in s.leaves) == kept
            ),
            None,
        )
        if slot is None and gang.lost > 0:
            slot = _adopt_slot(cluster, gang, p)
        if slot is None:
            gang.history.append(f"pod {p.pod_uid} on {p.node} {p.gpu_indices} matches no slot")
            continue
        slot.pod_uid, slot.pod_name = p.pod_uid, p.pod_name
        cluster.reservations.pod_gang[p.pod_uid] = gang.id
    if gang.phase is GangPhase.BOUND:
        gang.deadline = None
    if evicting and cluster.reservations.by_name.get(req.name) is gang:
        gang.evicting, gang.deadline = True, None
    return placement_of(cluster, gang)


def restore(
    cluster: Cluster, req: GangRequest, slots: list[AdoptedPod], now: float, deadline: float | None
) -> GangPlacement | str:
    """Re-create a reservation persisted before a restart, on exactly its recorded cells.

    Unlike `adopt`, nothing runs here yet, so nothing needs saving at any cost: the reservation
    comes back whole or not at all (the reason is returned, and the gang simply places afresh).
    A leaf still held by a lower-priority gang is reserved over it again (a preemption in flight:
    that gang is a victim once more); a leaf held by an equal or higher priority, missing from the
    config, or a VC that no longer exists refuses the restore. A gang already known (its bound
    members were adopted first, with a fresh TTL of the config's) keeps its place and takes the
    persisted deadline, which the gang's own timeout set: a restart must neither extend how long a
    gang stays not whole, nor cut short a gang that asked for longer than the config's TTL."""
    existing = cluster.reservations.by_name.get(req.name)
    if existing is not None:
        if deadline is not None and existing.deadline is not None and deadline != existing.deadline:
            cluster.reservations.touch(existing).deadline = deadline
        return placement_of(cluster, existing)
    if req.vc not in cluster.vc_owner:
        return f"VC {req.vc} is not in the config"
    topo, st = cluster.topo, cluster.state
    owner = NO_OWNER if _held_no_quota(slots) else cluster.owner_of(req)
    priority = req.priority if owner != NO_OWNER else OPPORTUNISTIC_PRIORITY
    gid = cluster.reservations.new_id()
    rows: list[tuple[AdoptedPod, list[int]]] = []
    hints: dict[int, str] = {}
    seen: set[int] = set()
    victims: set[int] = set()
    for p in slots:
        leaves: list[int] = []
        for g, leaf, cell_type in _gpus(topo, p):
            if leaf is None:
                return f"GPU {g} of node {p.node} is not in the cluster"
            if leaf in seen:
                return f"GPU {g} of node {p.node} is recorded twice"
            holder = st.leaf_gang[leaf]
            if holder != NO_GANG:
                other = cluster.reservations.by_id.get(holder)
                if (
                    other is None
                    or not _outbids(req, owner, priority, other)
                    or st.leaf_reserver[leaf] != NO_GANG
                ):
                    return f"GPU {g} of node {p.node} is held by gang {other.name if other else holder}"
                victims.add(holder)
            seen.add(leaf)
            leaves.append(leaf)
            hints[leaf] = cell_type
        rows.append((p, leaves))
    if not rows or any(not ls for _, ls in rows):
        return "the reservation records no GPUs"
    st.begin()
    if owner != NO_OWNER and not bind_for(cluster.state, owner, sorted(seen), hints):
        st.rollback()
        return f"its cells no longer fit VC {req.vc}"
    gang = Gang(
        id=gid,
        name=req.name,
        request=req,
        owner=owner,
        chain=topo.cell_chain[min(seen)],
        priority=priority,
        slots=[
            Slot(i, len(ls), p.slot_key, topo.cell_node[ls[0]], tuple(ls)) for i, (p, ls) in enumerate(rows)
        ],
        created=now,
        deadline=deadline,
        lca_level=topo.lca_level(sorted(seen)),
        history=["restored from a persisted reservation"],
        guest=_ran_as_guest(req, owner),
    )
    for leaf in sorted(seen):
        if st.leaf_gang[leaf] == NO_GANG:
            st.allocate_leaf(leaf, gid, priority)
        else:
            st.set_reserver(leaf, gid)
            gang.pending.add(leaf)
    st.commit()
    cluster.reservations.add(gang)
    gang.victims = victims
    if victims:
        cluster.preemptors.add(gid)
    return placement_of(cluster, gang)


def keep_downgraded(cluster: Cluster, name: str, preemptor: str) -> bool:
    """The gang `name`, adopted or restored again, was downgraded to opportunistic by `preemptor`
    (a lazy preemption, or a reload that took its cells) before the restart or reload that rebuilt
    it: it is so again. False: no such gang, or one being evicted (it holds its GPUs only until its
    pods are gone, and is never promoted anyway).

    HiveD leaves a lazily preempted gang opportunistic for good (`promotion.promotable`), but only
    memory says it was downgraded: its pods' bind info was written at bind, before the downgrade,
    and adoption brings back opportunistic only a gang whose cells no longer fit its VC, and as any
    other opportunistic gang, promoted at the next release that frees its VC's quota. So the caller
    says which gangs were downgraded (a record the edge keeps where tenants cannot write), and:

    - a gang adopted on its VC's quota cells again (they fit: its preemptor ended before the
      restart, or a standby's view never saw the downgrade, or promoted it meanwhile) gives them
      back, as the downgrade gave them back when it was made, so its VC's other gangs get them;
    - it is not promoted: a promotion made since the rebuild and not yet told to the edge
      (`Core.take_promoted`) is taken back with it;
    - it is no guest (`room`): a guaranteed gang that opted in and comes back on no quota cell is
      taken for one (`_ran_as_guest`), counted against its VC's quota (`room.over_quota`) and kept
      out of other guests' reach (`preemption.guest_plan`); a downgraded gang is neither, as before
      the rebuild: it gave its quota up to a gang of its VC, and waits for none."""
    g = cluster.reservations.by_name.get(name)
    if g is None or g.evicting:
        return False
    if g.priority >= 0:
        downgrade(cluster, g, preemptor)
    mark_downgraded(cluster, g, preemptor)
    g.history.append(f"still downgraded to opportunistic by {preemptor}, as recorded before it was rebuilt")
    _refit(cluster, preemptor)
    return True


def _refit(cluster: Cluster, name: str) -> None:
    """The preemptor `name`, rebuilt before the downgrade was put back (a standby adopts pods as it
    sees them bound, so it adopted the victim on its VC's quota cells while the leader still ran it
    so), found that quota held and came back opportunistic, open to any VC's guaranteed gang: it
    runs guaranteed again on the quota its victim's downgrade gave back, as it did before."""
    g = cluster.reservations.by_name.get(name)
    owner = cluster.vc_owner.get(g.request.vc, NO_OWNER) if g is not None else NO_OWNER
    if g is None or owner == NO_OWNER or g.owner != NO_OWNER or g.request.opportunistic or g.guest:
        return
    if g.downgraded_by is not None or g.evicting or g.pending:
        return
    if bind_in_place(cluster, g, owner, g.request.priority):
        g.history.append(f"guaranteed again: its victim's downgrade gave VC {g.request.vc} its quota back")


def mark_downgraded(cluster: Cluster, g: Gang, preemptor: str) -> None:
    """`g` runs downgraded by `preemptor`: never promoted (a promotion not yet told to the edge is
    taken back), and no guest (`keep_downgraded` says why)."""
    g.downgraded_by, g.guest = preemptor, False
    cluster.reservations.unsettle(g)
    cluster.reservations.promoted.discard(g.id)


def _adopt_new(cluster: Cluster, req: GangRequest, pods: list[AdoptedPod], now: float) -> Gang:
    topo, st = cluster.topo, cluster.state
    owner = cluster.owner_of(req) if req.vc in cluster.vc_owner and not _held_no_quota(pods) else NO_OWNER
    priority = req.priority if owner != NO_OWNER else OPPORTUNISTIC_PRIORITY
    if was_promoted(req, pods) and req.vc in cluster.vc_owner:  # it held quota cells: promoted
        owner, priority = cluster.vc_owner[req.vc], PROMOTED_PRIORITY
    gid = cluster.reservations.new_id()
    slots: list[Slot] = []
    history: list[str] = []
    claimed: list[int] = []
    hints: dict[int, str] = {}
    lost = 0
    lost_at: list[tuple[int, ...]] = []
    for p in pods:
        leaves: list[int] = []
        found: list[int] = []  # its GPUs the cluster has, held or not
        for g, leaf, cell_type in _gpus(topo, p):
            if leaf is not None:
                found.append(leaf)
            if leaf is None:
                history.append(f"pod {p.pod_uid}: GPU {g} of node {p.node} is not in the cluster")
            elif st.leaf_gang[leaf] != -1 or leaf in claimed:
                history.append(f"pod {p.pod_uid}: GPU {g} of node {p.node} is already held")
            else:
                leaves.append(leaf)
                claimed.append(leaf)
                hints[leaf] = cell_type
        if not leaves:
            lost += 1
            if found and len(found) == len(p.gpu_indices):  # every GPU there, held by another gang
                lost_at.append(tuple(sorted(found)))
            continue
        slots.append(Slot(len(slots), len(leaves), p.slot_key, topo.cell_node[leaves[0]], tuple(leaves)))
    if owner != NO_OWNER and not bind_for(cluster.state, owner, claimed, hints):
        history.append(f"cells no longer fit VC {req.vc}: kept running as opportunistic")
        owner, priority = NO_OWNER, OPPORTUNISTIC_PRIORITY
    for leaf in claimed:
        st.allocate_leaf(leaf, gid, priority)
    chain = topo.cell_chain[claimed[0]] if claimed else 0
    guest = _ran_as_guest(req, owner)
    gang = Gang(
        id=gid,
        name=req.name,
        request=req,
        owner=owner,
        chain=chain,
        priority=priority,
        slots=slots,
        created=now,
        deadline=now + req.ttl_seconds,
        lca_level=topo.lca_level(claimed) if claimed else 0,
        history=history,
        lost=lost + max(0, req.pod_count - len(pods)),
        guest=guest,
        lost_at=lost_at,
    )
    if not slots:
        gang.history.append("nothing left to adopt")
        return gang
    cluster.reservations.add(gang)
    return gang


def _outbids(req: GangRequest, owner: int, priority: int, other: Gang) -> bool:
    """May a reservation of `req` at `priority` (on no quota cell: `owner` NO_OWNER) be restored over
    `other`'s GPUs (a preemption in flight)? A lower priority, or, for a gang that started as a guest
    over other guests (`preemption.guest_plan`), a plain guest."""
    if other.priority < priority:
        return True
    return _ran_as_guest(req, owner) and other.priority < 0 and not other.guest


def _ran_as_guest(req: GangRequest, owner: int) -> bool:
    """A guaranteed gang that opted in and comes back on no quota cell ran as a guest (`room`): its
    VC counts it against its quota again (`room.over_quota`), and no other gang starting as a guest
    displaces it (`preemption.guest_plan`), as before the restart."""
    return owner == NO_OWNER and not req.opportunistic and req.promote_when_quota


def _adopt_slot(cluster: Cluster, gang: Gang, p: AdoptedPod) -> Slot | None:
    """A member recovered after the others (pods are listed one by one after a restart)."""
    topo, st = cluster.topo, cluster.state
    leaves = [topo.leaf_of(p.node, g) for g in sorted(p.gpu_indices)]
    if any(x is None or st.leaf_gang[x] != NO_GANG for x in leaves):
        return None
    found = [x for x in leaves if x is not None]
    hints = dict(zip(found, p.cell_types, strict=False))
    if not found or (gang.owner != NO_OWNER and not bind_for(cluster.state, gang.owner, found, hints)):
        return None
    for leaf in found:
        st.allocate_leaf(leaf, gang.id, gang.priority)
    slot = Slot(len(gang.slots), len(found), p.slot_key, topo.cell_node[found[0]], tuple(found))
    gang.slots.append(slot)
    cluster.reservations.retally(gang)
    gang.placement = None
    gang.lost -= 1
    gang.lca_level = topo.lca_level(gang.held_leaves())
    if (at := tuple(sorted(found))) in gang.lost_at:  # the member itself: nothing may rejoin there
        gang.lost_at.remove(at)
    return slot


def _gpus(topo: Topology, p: AdoptedPod) -> Iterator[tuple[int, int | None, str]]:
    """Each GPU a pod records, in index order: (index, its leaf cell or None when the cluster has no
    such GPU, the quota cell type recorded for it or "")."""
    types = dict(zip(p.gpu_indices, p.cell_types, strict=False))
    for g in sorted(p.gpu_indices):
        yield g, topo.leaf_of(p.node, g), types.get(g, "")


def was_promoted(req: GangRequest, pods: list[AdoptedPod]) -> bool:
    """An opportunistic request whose pods' records name a quota cell for every GPU was promoted
    (`promotion.py`) before the restart (or the reconfiguration), and comes back guaranteed. Its
    opt-in is not asked for: an opportunistic placement records no quota cell, so only a promotion
    writes them, and a promotion stands once made, even when the edge has since withdrawn the opt-in
    (`Core.withdraw_promotion`: its namespace lost the VC)."""
    return (
        req.opportunistic
        and bool(pods)
        and all(p.cell_types and len(p.cell_types) == len(p.gpu_indices) and all(p.cell_types) for p in pods)
    )


def _held_no_quota(pods: list[AdoptedPod]) -> bool:
    """Rebinding the VC's cells of a gang that held none would take quota its preemptor now holds."""
    return held_no_quota((p.gpu_indices, p.cell_types) for p in pods)


def rejoin(cluster: Cluster, name: str, pod_uid: str) -> bool:
    """Move a pod held apart as being evicted from gang `name` (in `<name>/evicted/<n>`) back into
    `name`, on the GPUs it runs on; whether it moved. For a view that let go a gang its owner in
    fact kept (a standby whose watch lagged behind the leader's binds): the gang held again under
    the name is that gang, adopted from its other members with this member's GPUs counted lost
    (held apart), and this pod is not being evicted. Its GPUs pass from the kept gang to `name` as
    they are, at the same owner and priority, so nothing is freed even for a moment; any other
    case moves nothing."""
    res, st = cluster.reservations, cluster.state
    gang = res.by_name.get(name)
    held = res.by_id.get(res.pod_gang.get(pod_uid, -1))
    if gang is None or gang.evicting or gang.lost <= 0 or held is None or not held.evicting:
        return False
    if evicted_origin(held.name) != name:
        return False
    if (held.owner, held.priority) != (gang.owner, gang.priority):
        return False
    slot = held.slot_of(pod_uid)
    if slot is None or slot.finished or slot.released_early:
        return False
    # only where the gang's adoption found a recorded slot held by another: a gang of that name
    # placed again elsewhere (its lost slot on other GPUs) is not the gang this pod left
    at = tuple(sorted(slot.leaves))
    if at not in gang.lost_at:
        return False
    if any(st.leaf_gang[x] != held.id or st.leaf_reserver[x] != NO_GANG for x in slot.leaves):
        return False
    res.touch(held)
    st.hand_over(slot.leaves, gang.id)
    slot.pod_uid, slot.finished, slot.released_early = None, True, True  # its GPUs are the gang's now
    res.retally(held)
    back = Slot(len(gang.slots), slot.leaf_number, slot.key, slot.node, slot.leaves, pod_uid, slot.pod_name)
    gang.slots.append(back)
    gang.lost -= 1
    gang.lost_at.remove(at)
    gang.lca_level = cluster.topo.lca_level(gang.held_leaves())
    gang.placement = None
    res.pod_gang[pod_uid] = gang.id
    res.retally(gang)
    if gang.phase is GangPhase.BOUND:
        gang.deadline = None
    if not held.live_slots():
        release(cluster, held, "its pods rejoined their gang")
    return True
