"""The verbs' lock, which counts the changes it guarded, so readers know when their copy is stale.

`Scheduler.lock` serialises every call into the core. Each release by a holder that may have
changed the state bumps `generation`; `extender.http.snapshot` takes a new copy of the state for the
readers only when the generation moved since its last one. A reader's own hold (`quietly`) counts
for nothing. `on_acquire` runs each time a holder that may change the state takes it, before the
holder acts: what must reach the core before anything is placed (the Kubernetes mode holds the
GPUs an unverified pod claims as soon as they free, `extender.kube.unverified`). `pending` says
whether it has work waiting, so a holder that frees GPUs and then places within one hold (a filter
that lets a superseded gang go) runs it in between (`extender.http.filtercall`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Literal


def _nothing_pending() -> bool:
    return False


class VersionedLock(asyncio.Lock):
    """The verbs' lock, counting the releases that may have changed the state (`generation`).
    A reader's own hold (`quietly`) counts for nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.generation = 0
        self._quiet = False
        self.on_acquire: Callable[[], None] | None = None
        self.pending: Callable[[], bool] = _nothing_pending

    async def acquire(self) -> Literal[True]:
        await super().acquire()
        if self.on_acquire is not None:
            try:
                self.on_acquire()
            except BaseException:
                self.release()
                raise
        return True

    def release(self) -> None:
        if self._quiet:
            self._quiet = False
        else:
            self.generation += 1
        super().release()

    @asynccontextmanager
    async def quietly(self) -> AsyncIterator[None]:
        """Hold the lock to read only: the generation stays as it was (and `on_acquire` waits)."""
        await super().acquire()
        try:
            yield
        finally:
            self._quiet = True
            self.release()
