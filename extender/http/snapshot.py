"""Reads that never stall the verbs: the state as a private copy, rendered outside the lock.

Every route that only reads (`/v1/inspect/*`, `/v1/ui/state`, `/v1/explain`) used to build its
document from the live core under the scheduler's lock, and a 1,000-node cluster status takes
~100-200 ms to build: four readers in a loop pushed filter's median from 2 ms to 237 ms. Here:

- the scheduler's lock is a `VersionedLock`: each release by a verb bumps its `generation`, so a
  reader knows for free whether anything may have changed since its copy;
- `Snapshots.get` takes one copy per generation (`topology.snapshot.clone_since`: a few
  milliseconds under the lock, never the render, as it copies afresh only the gangs changed since
  the copy before and shares the rest with it; the first copy after a start or a reload, which has
  no copy before it, is taken in steps of a bounded number of gangs, `StepwiseCopy`, the verbs
  running between them), and every reader of that generation shares it; a
  copy is only ever read (a what-if runs on a `private_core`); copies are taken at
  most every `min_interval` seconds, so a flood of readers during busy scheduling costs the verbs a
  bounded share of the lock whatever its size;
- `Snapshots.render` builds a document from a copy in a worker thread, so the event loop (and with
  it every filter) runs while it renders; a document is built once per copy and route.

A reader always sees a state at least as new as the moment it asked (read-your-writes holds: a
filter that answered before the GET is in the copy the GET reads).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from extender.gangs.waiting import Waiting
from topology.core import Core
from topology.snapshot import GANGS_PER_STEP, StepwiseCopy, clone

if TYPE_CHECKING:
    from extender.http.verbs import Scheduler

DEFAULT_MIN_INTERVAL = 0.2  # seconds between two copies of a changing state


@dataclass
class Snapshot:
    """The scheduler's state at one generation: a private core and the edge's read-only facts."""

    generation: int
    ledger_version: int
    core: Core
    waiting: dict[str, Waiting]
    ready: bool
    not_ready_reason: str
    now: float
    phases: dict[str, str]  # the ledger's phase of each gang it knows (the cluster view shows it)
    documents: dict[str, asyncio.Future[Any]] = field(default_factory=dict)


class Snapshots:
    """One copy of the state per generation, shared by every reader of it."""

    def __init__(
        self,
        scheduler: Scheduler,
        *,
        min_interval: float = DEFAULT_MIN_INTERVAL,
        on_copy: Callable[[float], None] | None = None,
        gangs_per_step: int = GANGS_PER_STEP,
    ) -> None:
        self.s = scheduler
        self.min_interval = min_interval
        self.on_copy = on_copy  # told how long each hold of the lock by a copy lasted (metrics)
        self.gangs_per_step = gangs_per_step
        self.last_holds: list[float] = []  # the last copy's holds of the lock, in order
        self.copies = 0
        self._current: Snapshot | None = None
        self._taking = asyncio.Lock()  # one copy at a time: readers of one generation share it
        self._last_copy = float("-inf")

    async def get(self) -> Snapshot:
        """A copy at least as new as the state when this was called."""
        wanted = self._version()
        if self._fresh(wanted):
            assert self._current is not None
            return self._current
        async with self._taking:
            if self._fresh(wanted):
                assert self._current is not None
                return self._current
            wait = self._last_copy + self.min_interval - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            snap = await self._copy()
            self._current = snap
            return snap

    def _version(self) -> tuple[int, int]:
        return self.s.lock.generation, self.s.gang_ledger.version

    def _fresh(self, wanted: tuple[int, int]) -> bool:
        cur = self._current
        return cur is not None and (cur.generation, cur.ledger_version) >= wanted

    async def _copy(self) -> Snapshot:
        """A copy taken in steps under the lock (`StepwiseCopy`: one for a copy in the series, many
        for the first of one), the event loop and the verbs running between two steps."""
        s = self.s
        copier: StepwiseCopy | None = None
        self.last_holds = []
        while True:
            async with s.lock.quietly():
                t0 = time.perf_counter()
                if copier is None or copier.core is not s.core:  # a reload between steps: anew
                    previous = self._current.core if self._current is not None else None
                    copier = StepwiseCopy(s.core, previous, self.gangs_per_step)
                core = copier.step()
                if core is not None:
                    generation, ledger_version = self._version()
                    snap = Snapshot(
                        generation,
                        ledger_version,
                        core,
                        dict(s.waiting),
                        s.ready,
                        s.not_ready_reason,
                        s.clock(),
                        _ledger_phases(s),
                    )
                held = time.perf_counter() - t0
            self.last_holds.append(held)
            if self.on_copy is not None:
                self.on_copy(held)
            if core is not None:
                break
            await asyncio.sleep(0)  # the lock had no waiter yet: let a request that came be read
        self._last_copy = time.monotonic()
        self.copies += 1
        return snap

    async def render(self, snap: Snapshot, key: str | None, build: Callable[[Snapshot], Any]) -> Any:
        """`build(snap)` in a worker thread; with a `key`, once per copy for every reader of it."""
        if key is None:
            return await asyncio.to_thread(build, snap)
        fut = snap.documents.get(key)
        if fut is None:
            fut = asyncio.ensure_future(asyncio.to_thread(build, snap))
            snap.documents[key] = fut
        return await asyncio.shield(fut)

    async def read(self, key: str | None, build: Callable[[Snapshot], Any]) -> Any:
        """The current copy's document `key`, built outside the lock and the event loop."""
        return await self.render(await self.get(), key, build)


def _ledger_phases(s: Scheduler) -> dict[str, str]:
    records = s.gang_ledger.records
    return {name: rec.phase.value for name, rec in records.items()}


async def private_core(snaps: Snapshots) -> tuple[Core, float]:
    """A core of the caller's own (a copy of the current copy, made in a worker thread) that a
    what-if may change and roll back while the verbs and other readers go on; and its `now`. Never
    the current copy itself: the copies after it share its unchanged gangs (`clone_since`)."""
    snap = await snaps.get()
    core = await asyncio.to_thread(clone, snap.core)
    return core, snap.now
