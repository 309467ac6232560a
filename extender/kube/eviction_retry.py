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
fed only by evictions, which are the leader's). A try that raises is that pod's, logged and put
back with its backoff; the loop itself never ends on one, and never wakes more than the due pods
and its poll call for.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Container, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from extender.gangs.disruption import Disruption
from extender.http.verbs import Scheduler
from extender.kube import pods as kpods
from extender.kube.client import AsyncKube
from extender.kube.evictions import FAILED, NOT_DELETED, evict_pod

log = logging.getLogger("topogang.kube")

FIRST, CAP = 1.0, 60.0  # seconds before the first try again; the most between two tries
LIMIT = 10_000  # pods kept at most: only pods that exist and that the leader ends can be in it
RATE = 20.0  # tries a second, at most (as the requeue's patches)
POLL = 0.25  # the longest the loop sleeps with pods in the book: a clock it is not woken for
MIN_PAUSE = 0.05  # the shortest: a due time in the past never makes the loop spin


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


def _done(pod: Mapping[str, Any]) -> bool:
    """Nothing left to end: its deletion taken (ours whose answer was lost, or another's), or finished."""
    return kpods.deleting(pod) or kpods.finished(pod)


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
        self.wake = asyncio.Event()

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
        delay = backoff(attempts, self.first, self.cap)
        retry = Retry(uid, namespace, name, why, attempts, self.clock() + delay)
        self.pending[uid] = retry
        self.by_name[(namespace, name)] = uid
        log.info(
            "pod %s/%s (%s): deletion tried again in %.0fs (%d failed)", namespace, name, uid, delay, attempts
        )
        self.wake.set()
        return retry

    def drop(self, uid: str) -> None:
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
        """The leader's task: try pods as they fall due, `rate` a second at most; asleep while the book
        is empty, until a failure wakes it."""
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
                await asyncio.wait_for(self.wake.wait(), min(POLL, max(MIN_PAUSE, wait)))
