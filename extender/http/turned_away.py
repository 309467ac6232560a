"""Pods the filter turned away for lack of room, to be requeued once room may have freed.

kube-scheduler parks a pod an extender turned away in its unschedulable queue, and moves it back
only on a cluster event it sees (any event: the rejector it records, `Extender`, answers Queue to
all) or after its 5-minute flush. The extender learns that room freed from its own watch, which may
run behind kube-scheduler's informer: a victim's deletion can requeue the pod in kube-scheduler,
the filter turn it away again because the extender has not seen that deletion yet, and then nothing
is left to happen. So the filter records each pod it turns away for lack of room (`turned_away`),
whatever frees room says so (`freed`: a gang released, a node's GPUs healthy again; a slot's pod
gone, for its own gang), and every pod recorded before that is due for a requeue (`take`):
`extender.kube.requeue` marks it with an annotation, an update of the pod itself, which moves it
out of kube-scheduler's unschedulable queue.

A pod is due at most once per time it was turned away: filtered again (placed, or turned away once
more, which records it anew), deleted, or requeued, it leaves. Only lack of room counts: a wait that
can never end, or one that only kube-scheduler's own filters or time can end, is not recorded.
Everything here runs under the verbs' lock (or, single-threaded, between two awaits).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from itertools import islice

from extender.gangs.podspec import PodRequest
from topology.asks import Waits
from topology.decisions import GangRequest, WaitCode

# waits that end when room frees: capacity or quota returns, a node heals, victims or a slot's
# holder go. Not NO_SUGGESTED_NODE (kube-scheduler's filters; their events requeue) nor EXPIRED
# (its reservation is placed again after a time, not after a release).
ROOM_CODES = frozenset(
    {
        WaitCode.INSUFFICIENT_QUOTA,
        WaitCode.INSUFFICIENT_CAPACITY,
        WaitCode.BAD_HARDWARE,
        WaitCode.RESERVED,
        WaitCode.PREEMPTIBLE,
        WaitCode.PREEMPTING,
        WaitCode.QUEUED,  # behind its VC's older gang: also due when that gang stops waiting (`freed_vc`)
        # its namespace's reservations not yet filled: due when one of them goes (a bind that fills
        # one is an event kube-scheduler sees itself, after the extender, which made the bind)
        WaitCode.TENANT_LIMIT,
    }
)


# waits for room that hold nobody back (`holds_vc`): a gang kept back by its own namespace's
# reservation limit would otherwise stop the VC's other namespaces' gangs behind it
NOT_HOLDING = frozenset({WaitCode.BAD_HARDWARE, WaitCode.QUEUED, WaitCode.TENANT_LIMIT})


def holds_vc(code: WaitCode, request: GangRequest, vc_quota: int) -> bool:
    """Whether a gang waiting with `code` holds its VC's later gangs back (`extender.gangs.vc_order`):
    it waits for room it can get (`waits_for_room`), not for hardware to heal (a node down for days
    would stop its VC's every other gang), nor only behind another gang (then the gangs queued
    behind one would, once it is placed, start one requeue round trip at a time)."""
    return code not in NOT_HOLDING and waits_for_room(code, request, vc_quota)


def waits_for_room(code: WaitCode, request: GangRequest, vc_quota: int) -> bool:
    """Whether a gang waiting with `code` may fit once room frees (`can_ever_run`)."""
    return code in ROOM_CODES and can_ever_run(request, vc_quota)


def can_ever_run(request: GangRequest, vc_quota: int) -> bool:
    """Not a guaranteed gang larger than its VC's whole quota (`vc_quota` GPUs)."""
    return request.opportunistic or request.leaf_total <= vc_quota


@dataclass(frozen=True, slots=True)
class TurnedAway:
    """A pod the filter turned away, as the API server names it (the verbs trust its copy)."""

    namespace: str
    name: str
    uid: str
    gang: str
    vc: str = ""

    @classmethod
    def of(cls, pr: PodRequest) -> TurnedAway:
        return cls(pr.namespace, pr.name, pr.uid, pr.gang, pr.request.vc)


class Requeue:
    """The pods turned away since room last freed, and those due for a requeue."""

    def __init__(self) -> None:
        self._waiting: dict[str, TurnedAway] = {}
        self._due: dict[str, TurnedAway] = {}
        self.wake = asyncio.Event()  # set while some pod is due
        # set when a gang stopped holding its VC's later gangs back: the admission gate's keeper
        # (`extender.kube.admission_gate`) lets the gated pods of that VC go
        self.vc_moved = asyncio.Event()

    def turned_away(self, pod: TurnedAway) -> None:
        """The filter turned `pod` away for lack of room: it saw the room as it is now."""
        self._due.pop(pod.uid, None)
        self._waiting[pod.uid] = pod
        self._sync_wake()

    def waits(self, pr: PodRequest, w: Waits) -> None:
        """The filter's answer for a pod whose gang waits: recorded if room may end the wait."""
        if waits_for_room(w.wait.reason.code, pr.request, w.vc_quota):
            self.turned_away(TurnedAway.of(pr))
        else:
            self.passed(pr.uid)

    def gone(self, uid: str, gang: str | None, *, finished: bool) -> None:
        """A pod is gone: it leaves; the slot it held (in `gang`) opens for that gang's pods; a
        finished pod's GPUs may free at once (gangReleaseEnable)."""
        self.passed(uid)
        if finished:
            self.freed()
        elif gang is not None:
            self.freed(gang)

    def passed(self, uid: str) -> None:
        """The pod was filtered and not turned away (or is gone): nothing to requeue."""
        self._waiting.pop(uid, None)
        self._due.pop(uid, None)
        self._sync_wake()

    def freed(self, gang: str | None = None) -> None:
        """Room may have freed: every pod turned away before now is due (only the pods of `gang`
        when what freed is one of its own slots, which no other gang may take)."""
        if gang is None:
            self._due.update(self._waiting)
            self._waiting.clear()
            self._sync_wake()
        else:
            self._due_where(lambda p: p.gang == gang)

    def due(self, pod: TurnedAway) -> None:
        """`pod` is due now: pending when the extender took the lead, unasked since
        (`extender.kube.pending`), so kube-scheduler filters it again soon."""
        self._waiting.pop(pod.uid, None)
        self._due[pod.uid] = pod
        self._sync_wake()

    def freed_vc(self, vc: str) -> None:
        """A gang of `vc` stopped waiting (placed, gone, or no longer waiting for room): the pods of
        `vc` turned away before now are due, those queued behind it among them (`vc_order`)."""
        self.vc_moved.set()
        self._due_where(lambda p: p.vc == vc)

    def _due_where(self, which: Callable[[TurnedAway], bool]) -> None:
        for uid in [u for u, p in self._waiting.items() if which(p)]:
            self._due[uid] = self._waiting.pop(uid)
        self._sync_wake()

    def take(self, limit: int) -> list[TurnedAway]:
        """Up to `limit` due pods, the longest due first; they leave."""
        out: list[TurnedAway] = []
        for uid in list(islice(self._due, limit)):  # not a copy of every due UID per batch
            out.append(self._due.pop(uid))
        self._sync_wake()
        return out

    def keep_only(self, present: set[str]) -> None:
        """Forget every pod whose UID is not in `present` (a relist: deletions the watch missed)."""
        for book in (self._waiting, self._due):
            for uid in [u for u in book if u not in present]:
                del book[uid]
        self._sync_wake()

    def counts(self) -> tuple[int, int]:
        """(turned away, due)."""
        return len(self._waiting), len(self._due)

    def _sync_wake(self) -> None:
        if self._due:
            self.wake.set()
        else:
            self.wake.clear()
