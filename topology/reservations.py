"""Gang reservations: what each placed gang holds and which pod has claimed which slot.

A reservation is made for the whole gang when its first member is scheduled; members then claim its
slots one by one. `Reservations` is the single source of truth for "which GPUs belong to which gang", so
every invariant (no GPU twice, gangs whole) can be checked against it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

from topology.decisions import GangPlacement, GangRequest


class GangPhase(StrEnum):
    PREEMPTING = "Preempting"  # cells reserved over lower-priority victims that must go first
    RESERVED = "Reserved"  # placed whole, not every slot claimed yet
    BOUND = "Bound"  # every slot claimed by a pod


EVICTED = "/evicted/"  # `<gang>/evicted/<n>`: a gang let go while its pods run (`gangs.keep_until_gone`)


def evicted_origin(name: str) -> str | None:
    """The gang whose running pods a gang named so holds apart (cut at the last `/evicted/`: a
    tenant's own gang name may hold one), or None for any other gang."""
    origin, sep, _ = name.rpartition(EVICTED)
    return origin if sep else None


@dataclass(slots=True)
class Slot:
    """One pod position of a gang: fixed node and leaves, and the pod (if any) that claimed it."""

    index: int
    leaf_number: int
    key: str | None
    node: int
    leaves: tuple[int, ...]
    pod_uid: str | None = None
    pod_name: str | None = None
    finished: bool = False
    released_early: bool = False


@dataclass(slots=True)
class Gang:
    id: int
    name: str
    request: GangRequest
    owner: int  # CellState owner id; -1 for opportunistic gangs
    chain: int
    priority: int
    slots: list[Slot]
    created: float
    deadline: float | None
    lca_level: int
    history: list[str] = field(default_factory=list)
    pending: set[int] = field(default_factory=set)  # leaves still held by victims
    victims: set[int] = field(default_factory=set)  # ids of the gangs being preempted
    downgraded_by: str | None = None  # lazily preempted: runs as opportunistic for this gang
    lost: int = 0  # pods whose hardware vanished in a reconfiguration (reported, not held)
    placement: GangPlacement | None = None  # cached: it never changes once the slots are set
    evicting: bool = False  # its pods are being evicted: each slot's GPUs are freed as its pod goes
    gone: bool = False  # let go (released, expired, cancelled): an answer holding it is out of date
    guest: bool = False  # guaranteed, started as a guest in free room instead of preempting (`room`)
    # the leaves of recorded slots an adoption counted `lost` because another gang held them all
    # (sorted): the only GPUs a member held apart may rejoin the gang on (`recovery.rejoin`)
    lost_at: list[tuple[int, ...]] = field(default_factory=list)

    @property
    def phase(self) -> GangPhase:
        if self.pending:
            return GangPhase.PREEMPTING
        if all(s.pod_uid is not None or s.finished for s in self.slots):
            return GangPhase.BOUND
        return GangPhase.RESERVED

    def live_slots(self) -> list[Slot]:
        return [s for s in self.slots if s.pod_uid is not None and not s.finished]

    def held_leaves(self) -> list[int]:
        """Leaves allocated to this gang now (not those still waiting for a victim to leave)."""
        return [
            leaf for s in self.slots if not s.released_early for leaf in s.leaves if leaf not in self.pending
        ]

    def slot_of(self, pod_uid: str) -> Slot | None:
        for s in self.slots:
            if s.pod_uid == pod_uid:
                return s
        return None


def group_of(name: str) -> str:
    """A gang name's group: what comes before its first `/`. The edge makes every key
    `<namespace>/<name>` (`extender.gangs.identity`), so a group is a namespace; the core reads no
    more into it than that names sharing it are counted together."""
    return name.partition("/")[0]


class Reservations:
    """Gangs by name and id, and which gang each pod belongs to. (Not "ledger": that word names the
    FrameworkBarrier's gang ledger in `extender/`.)"""

    def __init__(self) -> None:
        self.by_name: dict[str, Gang] = {}
        self.by_id: dict[int, Gang] = {}
        self.pod_gang: dict[str, int] = {}
        self.promote_ids: set[int] = set()  # gangs that asked to be promoted (`promotion.py`)
        self.promoted: set[int] = set()  # gangs promoted since the edge last asked (`Core.take_promoted`)
        # gang name -> (deadline, TTL) of the not-whole window of a gang released before it was
        # whole (expired, or every member gone): its next placement carries the deadline on, or
        # waits a TTL past it (`expiry.cooling`, `gangs.record_gang`)
        self.windows: dict[str, tuple[float, float]] = {}
        # a name's group (`group_of`: the edge's namespace) -> the ids of its gangs that may not be
        # whole yet or run downgraded: a superset, kept as a gang may turn so (`unsettle`) and pruned
        # as it is read (`unsettled`). What looks at those gangs alone (expiry, the edge's durable
        # reservations, a tenant's bound) walks them rather than every running gang: ~59,000 at
        # 80% of 100,000 GPUs, against the tens to hundreds not whole at a time
        self.unsettled_ids: dict[str, set[int]] = {}
        # GPUs the gangs hold (`Gang.held_leaves`) by (the VC asked for, guaranteed or not), and what
        # each gang last added to it: the per-VC use the metrics show, without a walk of every gang.
        # Every change to what a gang holds, or to its priority, is followed by `retally`
        self.held: dict[tuple[str, bool], int] = {}
        self.tallied: dict[int, tuple[tuple[str, bool], int]] = {}
        # the ids of the gangs made or changed (a field, a slot, a set of theirs) since a reader's
        # last copy was taken (`snapshot.clone_since`, which shares every other gang with the copy
        # before, marked `mark`): copying all ~59,000 gangs at 100,000 GPUs held the verbs ~600 ms.
        # Every change to a gang in the registry is noted by `touch` (or `add`, `unsettle`,
        # `retally`, which call it); a missed one fails tests/topology/test_snapshot_since.py
        self.touched: set[int] = set()
        self.mark = object()
        self._next_id = 0

    def new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def rewind(self, last_id: int) -> None:
        """Hand out ids from `last_id` on again: a what-if gave out the ones after it to gangs it then
        removed (`explain.fits_in_order`), so the edges' "anything new since" check sees nothing new."""
        self._next_id = last_id

    @property
    def last_id(self) -> int:
        """The newest gang id handed out: a cheap "anything new since?" check for the edges."""
        return self._next_id

    def touch(self, gang: Gang) -> Gang:
        """Note that `gang` changed, or is about to within this call: a reader's next copy takes it
        afresh rather than share the previous copy's. Returns it, to write `touch(g).victims.add(i)`."""
        self.touched.add(gang.id)
        return gang

    def add(self, gang: Gang) -> None:
        self.by_name[gang.name] = gang
        self.by_id[gang.id] = gang
        self.unsettle(gang)  # (both note the gang for the readers' next copy: `touch`)
        self.retally(gang)
        if gang.request.promote_when_quota:
            self.promote_ids.add(gang.id)

    def remove(self, gang: Gang) -> None:
        gang.gone = True
        self.by_name.pop(gang.name, None)
        self.by_id.pop(gang.id, None)
        self.touched.discard(gang.id)  # not in the registry: no copy holds it from now on
        self._untally(gang.id)
        ids = self.unsettled_ids.get(group_of(gang.name))
        if ids is not None:
            ids.discard(gang.id)
            if not ids:
                del self.unsettled_ids[group_of(gang.name)]
        self.promote_ids.discard(gang.id)
        self.promoted.discard(gang.id)
        for s in gang.slots:
            if s.pod_uid is not None and self.pod_gang.get(s.pod_uid) == gang.id:
                del self.pod_gang[s.pod_uid]

    def unclaimed_leaves(self, group: str, going: Callable[[int], bool] | None = None) -> int:
        """Leaves held in slots no pod has been bound to yet by the gangs of `group` (`group_of`):
        what one tenant's reservations keep from everyone else until its pods come
        (`asks.ReserveLimit`). A finished pod's slot is not counted: its pod came and ran, and the
        GPUs are its running gang's, as any pod's it keeps busy. Nor are the slots of a gang
        `going` says another's preemption is taking: no pod of it may come, and that preemption,
        not the tenant, keeps them."""
        return sum(
            s.leaf_number
            for g in self.unsettled(group)
            if going is None or not going(g.id)
            for s in g.slots
            if s.pod_uid is None and not s.finished and not s.released_early
        )

    def retally(self, gang: Gang) -> None:
        """Count what `gang` holds now in `held` (after a change to its leaves or its priority)."""
        self._untally(gang.id)
        if gang.id in self.by_id:
            self.touch(gang)
            key, n = (gang.request.vc, gang.priority >= 0), len(gang.held_leaves())
            if n:
                self.held[key] = self.held.get(key, 0) + n
            self.tallied[gang.id] = (key, n)

    def _untally(self, gang_id: int) -> None:
        key, n = self.tallied.pop(gang_id, (("", False), 0))
        if n:
            self.held[key] -= n
            if not self.held[key]:
                del self.held[key]

    def unsettle(self, gang: Gang) -> None:
        """`gang` may now be not whole (new, a slot given back, victims to wait for) or run
        downgraded: `unsettled` returns it until it is whole and not downgraded."""
        self.touch(gang)
        self.unsettled_ids.setdefault(group_of(gang.name), set()).add(gang.id)

    def unsettled(self, group: str | None = None) -> list[Gang]:
        """The gangs not whole (a slot neither claimed nor finished, or victims still to go) or
        running downgraded, oldest first; of `group` alone when given. Those found whole and not
        downgraded leave the index as they are read."""
        out = []
        for key in list(self.unsettled_ids) if group is None else [group]:
            ids = self.unsettled_ids.get(key, set())
            for i in list(ids):
                g = self.by_id[i]
                if g.downgraded_by is None and g.phase is GangPhase.BOUND:
                    ids.discard(i)
                else:
                    out.append(g)
            if not ids:
                self.unsettled_ids.pop(key, None)
        out.sort(key=lambda g: g.id)
        return out

    def gangs(self, since: int = 0) -> list[Gang]:
        """Every gang, oldest first (stable order for iteration, export and expiry); with `since`,
        those with a newer id only, found without a walk of the others."""
        if since:
            return [g for i in range(since + 1, self._next_id + 1) if (g := self.by_id.get(i)) is not None]
        return [self.by_id[i] for i in sorted(self.by_id)]
