"""A private copy of the core, taken in a few milliseconds, for readers that must not hold the verbs.

The edge serialises every call into the core under one lock. A reader (an inspect document, the
cluster view, an explain what-if) that worked on the live core under that lock would hold every
filter behind it for as long as it renders; `copy.deepcopy` of a 1,000-node core takes ~45 ms, itself
too long to hold the lock for. `clone` copies only what the verbs change, each field the fastest way
its shape allows (a flat list of ints is one C-level copy), and shares what never changes after the
core is built (the `Topology`, the spec, the owners). The copy is then the reader's alone: it may be
rendered, or even run a rolled-back what-if, in another thread while the verbs go on.

Every field of `Core`, `CellState`, `Reservations` and `Gang` is named below with how it is copied;
a field nobody named makes `clone` fail loudly (tests/topology/test_snapshot.py), so a new field
can never be shared by mistake between the live core and a copy.

At 100,000 GPUs the core holds ~59,000 gangs and `clone` takes ~600 ms, most of it copying gangs
that have not changed. A reader's series of copies therefore uses `clone_since`: the core notes each
gang it changes (`Reservations.touch`), and the next copy takes only those afresh, sharing the rest
(and each cell list still equal) with the copy before it, ~35-45 ms. A change the core does not note
fails tests/topology/test_snapshot_since.py.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar, cast

from topology.bestfit import BestFitIndex
from topology.core import Core
from topology.placement import Placer
from topology.poolorder import PoolOrder
from topology.reservations import Gang, Reservations, Slot
from topology.state import CellState

_T = TypeVar("_T")


def _same(x: _T) -> _T:
    return x


def _flat(x: list[Any]) -> list[Any]:
    return x.copy()


def _nested(x: list[Any]) -> list[Any]:
    return [v.copy() for v in x]


def _pool(x: list[list[set[int]]]) -> list[list[set[int]]]:
    return [[s.copy() for s in levels] for levels in x]


def _unbound(x: dict[int, dict[int, list[int]]]) -> dict[int, dict[int, list[int]]]:
    return {o: {ch: levels.copy() for ch, levels in per.items()} for o, per in x.items()}


def _empty(x: list[Any]) -> list[Any]:
    if x:
        raise RuntimeError("topology.snapshot: the core has an open transaction; copy it between calls")
    return []


# how each field of CellState is copied (a field missing here is an error, not a silent share)
STATE_FIELDS: dict[str, Callable[[Any], Any]] = {
    "topo": _same,
    "owners": _same,  # frozen `Owner`s, fixed when the core is built
    "opp_penalty": _same,
    "_below_node": _same,  # derived from the topology alone
    "leaf_gang": _flat,
    "leaf_priority": _flat,
    "leaf_bad": _flat,
    "leaf_reserver": _flat,
    "free": _flat,
    "used_guaranteed": _flat,
    "used_opportunistic": _flat,
    "bad_count": _flat,
    "bound_owner": _flat,
    "leaf_owner": _flat,
    "in_pool": _flat,
    "pool_leaves": _flat,
    "pool": _pool,
    "unbound": _unbound,
    "demand": _nested,
    "owned_free": _nested,
    "owned_cells": _nested,
    "nodes_by_free": BestFitIndex.compacted,
    "pool_order": PoolOrder.compacted,
    "_log": _empty,
    "_marks": _empty,
    "recent_binds": _empty,
}


def _clone_state(st: CellState, before: CellState | None = None) -> CellState:
    """A copy of `st`; with `before` (the previous copy, `clone_since`), each flat list equal to its
    list there shared rather than copied: a comparison costs less than a copy of ~190,000 cells at
    100,000 GPUs, and a list not made anew is not for the garbage collector to walk again (a dozen
    such lists made one young-generation pass ~16 ms)."""
    out = object.__new__(CellState)
    for name, value in vars(st).items():
        copy = STATE_FIELDS[name]
        if copy is _flat and before is not None and (old := getattr(before, name)) == value:
            setattr(out, name, old)
        else:
            setattr(out, name, copy(value))
    return out


SLOT_FIELDS = tuple(f.name for f in dataclasses.fields(Slot))  # all immutable values


def _clone_slot(s: Slot) -> Slot:
    return Slot(*[getattr(s, name) for name in SLOT_FIELDS])


# how each field of Gang is copied; `request` and `placement` are frozen values
GANG_FIELDS: dict[str, Callable[[Any], Any]] = {
    "id": _same,
    "name": _same,
    "request": _same,
    "owner": _same,
    "chain": _same,
    "priority": _same,
    "slots": lambda slots: [_clone_slot(s) for s in slots],
    "created": _same,
    "deadline": _same,
    "lca_level": _same,
    "history": _flat,
    "pending": set.copy,
    "victims": set.copy,
    "downgraded_by": _same,
    "lost": _same,
    "placement": _same,
    "evicting": _same,
    "gone": _same,
    "guest": _same,
    "lost_at": _flat,  # tuples: immutable values
}


_GANG_ORDER = tuple(f.name for f in dataclasses.fields(Gang))
_GANG_COPIES = tuple(GANG_FIELDS[name] for name in _GANG_ORDER)  # a field nobody named fails here


def _clone_gang(g: Gang) -> Gang:
    return Gang(*[copy(getattr(g, name)) for name, copy in zip(_GANG_ORDER, _GANG_COPIES, strict=True)])


RESERVATION_FIELDS = (
    "by_name",
    "by_id",
    "pod_gang",
    "promote_ids",
    "promoted",
    "windows",
    "unsettled_ids",
    "held",
    "tallied",
    "touched",  # a copy's own: it starts with none, as it is no copy's source (`clone_since`)
    "mark",
    "_next_id",
)


def _clone_gangs(live: dict[int, Gang], shared: dict[int, Gang], touched: set[int]) -> dict[int, Gang]:
    """The registry's gangs by id, in its order (a render walks it so): those of `shared` (a
    previous copy's) not `touched` since, the others (touched, or new since) copied afresh."""
    if not shared:
        return {i: _clone_gang(g) for i, g in live.items()}
    out: dict[int, Gang | None] = {i: shared.get(i) for i in live}  # ~4 ms for 59,000 gangs
    for i in (live.keys() - shared.keys()).union(touched):
        g = live.get(i)
        if g is not None:
            out[i] = _clone_gang(g)
    return cast(dict[int, Gang], out)  # each None (not in `shared`) was replaced above


def _clone_reservations(r: Reservations, shared: dict[int, Gang], touched: set[int]) -> Reservations:
    """A copy of `r`, its gangs taken from `shared` (a previous copy's, by id) but for those
    `touched` since that copy or not in it; its indexes copied whole (C-level copies of flat dicts)."""
    if set(vars(r)) != set(RESERVATION_FIELDS):
        raise RuntimeError(
            f"topology.snapshot: Reservations has fields {sorted(vars(r))}, not {RESERVATION_FIELDS}"
        )
    out = Reservations()
    out.by_id = _clone_gangs(r.by_id, shared, touched)
    out.by_name = {name: out.by_id.get(g.id) or _clone_gang(g) for name, g in r.by_name.items()}
    out.pod_gang = r.pod_gang.copy()
    out.promote_ids = r.promote_ids.copy()
    out.promoted = r.promoted.copy()
    out.windows = r.windows.copy()  # (start, deadline) pairs: immutable values
    out.unsettled_ids = {group: ids.copy() for group, ids in r.unsettled_ids.items()}
    out.held, out.tallied = r.held.copy(), r.tallied.copy()  # immutable values
    out._next_id = r._next_id
    return out


# how each field of Core (its `Cluster` data) is copied; `state`, `placer` and `reservations` below
CORE_FIELDS: dict[str, Callable[[Any], Any]] = {
    "spec": _same,
    "topo": _same,
    "vc_owner": _same,
    "pinned_owner": _same,
    "vc_quota_cells": _same,
    "owners": _same,
    "preemptors": set.copy,
    "last_suggested": _same,  # a (frozenset, frozenset) cache entry
    "valid_shapes": dict.copy,  # a cache of config-derived answers
    "vc_quota_leaves": dict.copy,
}


def clone(core: Core) -> Core:
    """A copy of `core` that shares nothing the verbs change. Call it between core calls (under the
    edge's lock); the copy may then be read, or what-if'd, anywhere."""
    return _clone(core, {}, set(), None)


def clone_since(core: Core, previous: Core | None) -> Core:
    """`clone`, sharing with `previous` (the copy this returned for `core` last, when it is that)
    every gang not changed since (`Reservations.touched`) and every cell list still equal: at
    100,000 GPUs and ~59,000 gangs a full copy held the verbs' lock ~600 ms, this copies the few
    hundred gangs a busy 0.2 s changes. What is shared is a copy's, never the live core's, so the
    copy is still the reader's alone as long as copies are only read: a what-if must run on a
    `clone` of one (`http.snapshot.private_core`), never on the copy itself, which its successors
    share with.

    It resets the core's record of changes (so one reader's series of copies per core: a copy
    from an earlier series, or from another core, is not `previous` to it and gets a full copy)."""
    res = core.reservations
    if previous is not None and previous.reservations.mark is res.mark:
        out = _clone(core, previous.reservations.by_id, res.touched, previous.state)
    else:
        out = _clone(core, {}, res.touched, None)
    res.touched.clear()
    res.mark = out.reservations.mark
    return out


GANGS_PER_STEP = 2_000  # ~20 ms of copying at ~10 us a gang: the longest one step holds the verbs


class StepwiseCopy:
    """`clone_since` in steps, each short enough to hold the verbs' lock for. The first copy of a
    series (after a start or a reload: a new core) copies every gang, ~600 ms at 100,000 GPUs and
    ~59,000 gangs, and held every verb behind it that long in one go.

    Call `step` under the lock until it returns the copy; the verbs may run between two steps. The
    first step forgets the core's changes so far (`Reservations.touched`); each step then copies
    `gangs_per_step` gangs; the last copies the cell state, and shares every gang the steps copied
    unless the core changed it since the first step, which it copies afresh, as `clone_since` does
    with a previous copy. A copy in the series (`previous` this core's last copy), or of a core with
    few gangs, takes one step. Between two steps the core must be the same object (a reload that
    replaces it means a new `StepwiseCopy` of the new one)."""

    def __init__(self, core: Core, previous: Core | None, gangs_per_step: int = GANGS_PER_STEP) -> None:
        self.core = core
        self._previous = previous
        self._per_step = max(1, gangs_per_step)
        self._todo: list[int] | None = None  # the gang ids the steps copy before the last one
        self._next = 0
        self._copied: dict[int, Gang] = {}

    def step(self) -> Core | None:
        """One step of the copy under the caller's lock: the copy when it is the last, else None."""
        res = self.core.reservations
        if self._todo is None:
            in_series = self._previous is not None and self._previous.reservations.mark is res.mark
            if in_series or len(res.by_id) <= self._per_step:
                return clone_since(self.core, self._previous)
            res.touched.clear()  # from here on, what changes is copied afresh by the last step
            self._todo = list(res.by_id)
        if self._next < len(self._todo):
            live = res.by_id
            for i in self._todo[self._next : self._next + self._per_step]:
                if (g := live.get(i)) is not None:
                    self._copied[i] = _clone_gang(g)
            self._next += self._per_step
            return None
        out = _clone(self.core, self._copied, res.touched, None)
        res.touched.clear()
        res.mark = out.reservations.mark
        return out


def _clone(core: Core, shared: dict[int, Gang], touched: set[int], before: CellState | None) -> Core:
    out = object.__new__(type(core))
    # the gangs first: the garbage collections their allocations may set off then find the young
    # generation small, not yet holding the state's dozen lists of ~190,000 cells each
    reservations = _clone_reservations(core.reservations, shared, touched)
    state = _clone_state(core.state, before)
    for name, value in vars(core).items():
        if name == "state":
            out.state = state
        elif name == "placer":
            out.placer = Placer(state)
        elif name == "reservations":
            out.reservations = reservations
        else:
            setattr(out, name, CORE_FIELDS[name](value))
    return out


def same_topology(a: Core, b: Core) -> bool:
    """Whether two cores (a live one and a copy, or two copies) share one topology: what depends on
    the topology alone (the cluster view's layout) serves both."""
    return a.topo is b.topo
