"""Work the verbs start and do not wait for (evictions): its failure is logged, not lost, and the task
is held until it ends (asyncio keeps only a weak reference to a running task)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable

log = logging.getLogger("topogang.extender")

_background: set[asyncio.Task[None]] = set()


def spawn(coro: Awaitable[None]) -> None:
    async def run() -> None:
        try:
            await coro
        except Exception:
            log.exception("background task failed")

    task = asyncio.get_running_loop().create_task(run())
    _background.add(task)
    task.add_done_callback(_background.discard)
