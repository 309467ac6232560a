"""The verbs' lock, which counts the changes it guarded, so readers know when their copy is stale.

`Scheduler.lock` serialises every call into the core. Each release by a holder that may have
changed the state bumps `generation`; `extender.http.snapshot` takes a new copy of the state for the
readers only when the generation moved since its last one. A reader's own hold (`quietly`) counts
for nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class VersionedLock(asyncio.Lock):
    """The verbs' lock, counting the releases that may have changed the state (`generation`).
    A reader's own hold (`quietly`) counts for nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.generation = 0
        self._quiet = False

    def release(self) -> None:
        if self._quiet:
            self._quiet = False
        else:
            self.generation += 1
        super().release()

    @asynccontextmanager
    async def quietly(self) -> AsyncIterator[None]:
        """Hold the lock to read only: the generation stays as it was."""
        await self.acquire()
        try:
            yield
        finally:
            self._quiet = True
            self.release()
