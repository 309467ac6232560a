"""Pods the leader meant to end whose deletion failed, tried again until they are gone.

By the time a pod is evicted the core has moved it out of its gang (into `<gang>/evicted/N`, or let
its gang go): nothing else will ask for it again. Expiry passes skip it, a relist finds it held, and
a gang's pods outside the config have left their index. So one refused DELETE (a 429 from API
Priority and Fairness, a 5xx, no answer) would leave the pod running for ever without its peers,
its node's GPUs held. The book keeps such a pod by UID and tries it again, the same cause's mark
then the deletion with the UID as precondition (`extender.kube.evictions`), after 1 s, doubling up
to 60 s, so an API server that sheds load is not hammered. A pod leaves the book when a deletion is
answered (done, or 404/409: gone or replaced), or when the watch shows it deleted, going, finished
or replaced by a pod of the same name.

Only the leader tries again (`run` is one of its tasks, cancelled when the lead ends; the book is
fed by evictions, which are the leader's, and by what a lead inherits, `inherit`). A try that
raises is that pod's, logged and put back with its backoff; the loop itself never ends on one, and
never wakes more than the due pods and its poll call for.

The book lives in memory, so a leader that dies (or loses the Lease) before a kept pod is deleted
takes it along, and nothing else would end that pod. What outlives the leader is the mark it wrote
first, on the pod's status: each lead begins by taking back every watched pod that still runs with
topogang's own mark (`own_mark`), as the dead leader's book would have had it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Container, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from config.untrusted import printable
from extender.gangs.disruption import MARK_PREFIX, OWN_REASONS, PREEMPTED, Disruption, preempted_by
from extender.http.verbs import Scheduler
from extender.kube import pods as kpods
from extender.kube.client import AsyncKube
from extender.kube.events import MAX_MESSAGE
from extender.kube.evictions import FAILED, NOT_DELETED, evict_pod
from extender.ops.background import wait_at_most

log = logging.getLogger("topogang.kube")

FIRST, CAP = 1.0, 60.0  # seconds before the first try again; the most between two tries
LIMIT = 10_000  # pods kept at most: only pods that exist and that the leader ends can be in it
RATE = 20.0  # tries a second, at most (as the requeue's patches)
POLL = 0.25  # the longest the loop sleeps with pods in the book: a clock it is not woken for
MIN_PAUSE = 0.05  # the shortest: a due time in the past never makes the loop spin

PREEMPTION_TEXT = MARK_PREFIX + preempted_by("").why  # topogang's preemption message, before its gang


class Sync(Protocol):
    """What the book reads of the sync (`ClusterSync`): its scheduler (clock, metrics), the API, the
    watched pods (the copy to mark from) and whom to tell of a pod ended."""

    s: Scheduler
    kube: AsyncKube
    pods: dict[str, Mapping[str, Any]]
    on_evicted: Callable[[str, str, str, Disruption], None]


@dataclass(frozen=True, slots=True)
class Retry:
    """One pod to end: who it is, why (the mark it gets), the failed tries so far, and when next."""

    uid: str
    namespace: str
    name: str
    why: Disruption
    attempts: int
    due: float


async def _nothing() -> None:
    """No look at kept evictions (a replica without a Lease keeps none)."""


def _done(pod: Mapping[str, Any]) -> bool:
    """Nothing left to end: its deletion taken (ours whose answer was lost, or another's), or finished."""
    return kpods.deleting(pod) or kpods.finished(pod)


def own_mark(pod: Mapping[str, Any]) -> Disruption | None:
    """The cause of topogang's own mark on the pod (a true `DisruptionTarget` condition whose reason
    and message are ones topogang writes), or None.

    The condition is trusted because of who can write it: a pod's status is written through
    `pods/status` only (the API server clears the status a pod is created with and ignores the
    status of an update to the pod itself), which the kubelet, kube-scheduler, the controllers and
    topogang may write, and a tenant normally may not. Nothing a tenant can patch (metadata,
    annotations, labels) is read here. And the only pod ever deleted for a mark is the very pod
    that carries it (the UID as precondition): whoever may write its status already holds its life.

    Other writers mark pods too, and their marks are not topogang's to finish: the taint manager,
    the Eviction API, the kubelet and the pod garbage collector each have a reason of their own,
    and kube-scheduler's `PreemptionByScheduler` is the reason topogang gives its preemptions as
    well. kube-scheduler writes "<schedulerName>: preempting to accommodate a higher priority pod"
    (or "podgroup"), and topogang's profile is named `topogang` by default, so the prefix alone
    proves nothing there: only topogang's own text, "pod group" and an optional "(<gang>)", does.
    kube-scheduler preempts in that profile on its own for a preemptor the extender is not asked
    about, so such a victim is no pod topogang chose. (A victim topogang chose that kube-scheduler
    happened to mark first keeps kube-scheduler's text: it is not taken, the safe way to be wrong.)
    The first `DisruptionTarget` condition counts, as Kubernetes' own readers take it."""
    mark = kpods.disruption_mark(pod)
    if mark is None or mark.get("status") != "True":
        return None
    reason, message = mark.get("reason"), mark.get("message")
    if not isinstance(reason, str) or not isinstance(message, str):
        return None
    if reason == PREEMPTED:
        if message != PREEMPTION_TEXT and not message.startswith(PREEMPTION_TEXT + " ("):
            return None
    elif reason not in OWN_REASONS or not message.startswith(MARK_PREFIX):
        return None
    # the message as written, so a mark written again (reset meanwhile) reads the same
    return Disruption(reason, printable(message[len(MARK_PREFIX) :], MAX_MESSAGE))


def backoff(attempts: int, first: float = FIRST, cap: float = CAP) -> float:
    """Seconds after the `attempts`-th failed try: `first`, doubling, never over `cap`."""
    return min(cap, first * 2.0 ** min(max(attempts - 1, 0), 32))


class EvictionRetries:
    """The book, and the leader's loop over it. `clock` defaults to the scheduler's, so tests and
    the soak move its time as they move the rest of the extender's."""

    def __init__(
        self,
        sync: Sync,
        *,
        clock: Callable[[], float] | None = None,
        first: float = FIRST,
        cap: float = CAP,
        limit: int = LIMIT,
        rate: float = RATE,
    ) -> None:
        self.sync = sync
        self.clock = clock or sync.s.clock
        self.first, self.cap, self.limit, self.rate = first, cap, limit, rate
        self.pending: dict[str, Retry] = {}
        self.by_name: dict[tuple[str, str], str] = {}  # (namespace, name) -> uid: a replacement's
        # a standby's own decisions (`keep`): uid -> the gang let go, and what the leader listed of it
        self.kept: dict[str, tuple[str, object]] = {}
        self.wake = asyncio.Event()
        self.may_act: Callable[[], bool] = lambda: True  # the Lease still held (`LeaderElector.holds`)
        # a lead's first look at what it kept (`forget_kept`)
        self.vet: Callable[[], Awaitable[None]] = _nothing

    def __len__(self) -> int:
        return len(self.pending)

    async def evict(self, uid: str, namespace: str, name: str, why: Disruption) -> str:
        """One try at ending the pod: counted, told when deleted, kept for later when it failed for a
        reason that may pass. The outcome (`extender.kube.evictions`)."""
        watched = uid in self.sync.pods
        outcome = await evict_pod(self.sync.kube, uid, namespace, name, why, self.sync.pods.get(uid))
        self.sync.s.metrics.evictions.labels(why.reason, NOT_DELETED if outcome == FAILED else outcome).inc()
        if outcome == FAILED:
            now = self.sync.pods.get(uid)
            if not watched or (now is not None and not _done(now)):  # else the watch saw it go meanwhile
                self.failed(uid, namespace, name, why)
            return outcome
        self.drop(uid)
        if outcome != NOT_DELETED:
            self.sync.on_evicted(namespace, name, uid, why)
        return outcome

    def failed(self, uid: str, namespace: str, name: str, why: Disruption) -> Retry | None:
        """A try failed: the pod's next try, one backoff step later; None when the book is full."""
        last = self.pending.get(uid)
        if last is None and len(self.pending) >= self.limit:
            log.warning(
                "pod %s/%s (%s) is not deleted and will not be tried again: %d pods wait already",
                namespace,
                name,
                uid,
                len(self.pending),
            )
            return None
        attempts = last.attempts + 1 if last is not None else 1
        self.kept.pop(uid, None)  # tried: this replica's own eviction from now on
        delay = backoff(attempts, self.first, self.cap)
        retry = Retry(uid, namespace, name, why, attempts, self.clock() + delay)
        self.pending[uid] = retry
        self.by_name[(namespace, name)] = uid
        log.info(
            "pod %s/%s (%s): deletion tried again in %.0fs (%d failed)", namespace, name, uid, delay, attempts
        )
        self.wake.set()
        return retry

    def keep(self, uid: str, namespace: str, name: str, why: Disruption, gang: str, listed: object) -> None:
        """An eviction decided but not tried (a standby's: `may_act` said no), due at once when
        this replica leads; dropped as any kept pod is once the watch shows it go, and once the
        leader no longer lists `gang`'s reservation and made the gang whole where it had listed it
        (`listed`, what it last listed of the gang: `forget_kept`)."""
        if uid in self.pending or len(self.pending) >= self.limit:
            return
        self.pending[uid] = Retry(uid, namespace, name, why, 0, self.clock())
        self.by_name[(namespace, name)] = uid
        self.kept[uid] = (gang, listed)

    def forget_kept(
        self, listed: Container[str], made_whole: Callable[[str, Any], bool]
    ) -> list[tuple[str, str]]:
        """A standby's pass: a kept eviction whose gang the leader no longer keeps a reservation of,
        and which the standby's core holds again where the leader had it (`made_whole`: its other
        members bound), was not the leader's to do. A gang the leader stopped listing because it let
        it go keeps its evictions: the leader deletes the object at its next sync, before the
        evictions are through (a refused one waits in its book, which dies with it), and a pod
        it evicted leaves the book when the watch shows it go. The (pod, gang) pairs dropped: the
        caller holds each pod in its gang again (`Core.rejoin`)."""
        dropped = [(u, g) for u, (g, at) in self.kept.items() if g not in listed and made_whole(g, at)]
        for uid, _ in dropped:
            self.drop(uid)
        return dropped

    def inherit(self) -> int:
        """Keep every watched pod that runs with topogang's own mark (`own_mark`), due at once: a
        lead taking over the evictions a leader before it (or this process before a restart) began
        and may not have finished. How many were taken.

        Only a pod not going and not finished: one with its deletion taken is done, as `saw` says.
        Whether the new leader's core holds the pod as a member does not count. topogang marks a
        pod only once it has decided to end it (the mark comes just before the deletion, never on
        its own), and no path takes that decision back. But recovery, after a restart or on a pod
        the watch brings, adopts every bound pod from its signed bind info without reading marks,
        so a marked pod is often back in its gang there: adopted blindly, not kept by a decision.
        Ending it finishes what the earlier leader decided, as its own book would have, and the new
        core sees a member go, as for any deletion (its slot open for a replacement, within its
        gang's TTL).

        The mark does not last for ever: kube-controller-manager's disruption controller sets a
        true `DisruptionTarget` on a pod not deleted within 2 minutes back to False, dropping its
        reason. A try writes the mark again when it is gone (`extender.kube.evictions`), and tries
        come at most `CAP` apart, so while a leader tries the mark is missing for a minute at most
        at a time; a pod no leader tried for longer reads as unmarked, and is left to the new core
        (a lead that begins in such a minute misses it too)."""
        taken = 0
        now = self.clock()
        for pod in list(self.sync.pods.values()):
            try:
                uid, ns, name = kpods.uid(pod), kpods.namespace(pod), kpods.name(pod)
                if not uid or not name or uid in self.pending or _done(pod):
                    continue
                why = own_mark(pod)
            except Exception:  # one pod's content: logged, and the others are still read
                log.exception("reading a watched pod for topogang's mark failed; skipped")
                continue
            if why is None:
                continue
            if len(self.pending) >= self.limit:
                log.warning(
                    "pods marked by topogang and still running are not all tried: %d pods wait already",
                    len(self.pending),
                )
                break
            self.pending[uid] = Retry(uid, ns, name, why, 0, now)
            self.by_name[(ns, name)] = uid
            taken += 1
            log.info("pod %s/%s (%s) runs with topogang's mark (%s): deleting it", ns, name, uid, why.reason)
        if taken:
            self.wake.set()
        return taken

    def drop(self, uid: str) -> None:
        self.kept.pop(uid, None)
        retry = self.pending.pop(uid, None)
        if retry is not None and self.by_name.get((retry.namespace, retry.name)) == uid:
            del self.by_name[(retry.namespace, retry.name)]

    def saw(self, kind: str, pod: Mapping[str, Any]) -> None:
        """A pod event: one deleted, going, finished, or a new pod under a kept one's name, is done
        with (a replacement is never the pod that was meant)."""
        if not self.pending:
            return
        uid = kpods.uid(pod)
        if kind == "DELETED" or _done(pod):
            self.drop(uid)
        kept = self.by_name.get((kpods.namespace(pod), kpods.name(pod)))
        if kept is not None and kept != uid:
            self.drop(kept)

    def keep_only(self, present: Container[str]) -> None:
        """A relist: pods it no longer has are gone (their DELETED events were missed)."""
        for uid in [u for u in self.pending if u not in present]:
            self.drop(uid)

    def due(self) -> list[Retry]:
        now = self.clock()
        return sorted((r for r in self.pending.values() if r.due <= now), key=lambda r: r.due)

    def next_in(self) -> float | None:
        """Seconds until the earliest try (maybe below 0); None with nothing kept."""
        if not self.pending:
            return None
        return min(r.due for r in self.pending.values()) - self.clock()

    async def retry_due(self) -> int:
        """Try the pods whose time has come, as many as `rate` allows at once; how many were tried."""
        batch = self.due()[: max(1, int(self.rate))]
        for retry in batch:
            if not self.may_act():
                break
            if self.pending.get(retry.uid) is not retry:
                continue  # gone, replaced or tried meanwhile
            log.info(
                "evicting pod %s/%s (%s) again, after %d failed tries",
                retry.namespace,
                retry.name,
                retry.uid,
                retry.attempts,
            )
            try:
                await self.evict(retry.uid, retry.namespace, retry.name, retry.why)
            except Exception:
                log.exception("evicting pod %s/%s (%s) again failed", retry.namespace, retry.name, retry.uid)
                if self.pending.get(retry.uid) is retry:
                    self.failed(retry.uid, retry.namespace, retry.name, retry.why)
        return len(batch)

    async def run(self) -> None:
        """The leader's task: take over what an earlier leader left marked (`inherit`), then try pods
        as they fall due, `rate` a second at most; asleep while the book is empty, until a failure
        wakes it."""
        await self.vet()
        self.inherit()
        while True:
            try:
                tried = await self.retry_due()
            except Exception:  # a bug of the book's own: logged, and the loop goes on, not at once
                log.exception("retrying evictions failed")
                await asyncio.sleep(self.first)
                tried = 0
            self.wake.clear()  # what failed during the pass is in `next_in` below
            if tried:
                await asyncio.sleep(tried / self.rate)
            wait = self.next_in()
            if wait is None:
                await self.wake.wait()
                continue
            with contextlib.suppress(TimeoutError):
                await wait_at_most(self.wake.wait(), min(POLL, max(MIN_PAUSE, wait)))
