"""Work that runs beside the requests: what the verbs start and do not wait for (evictions), and what
the service repeats on a timer (expiry, gang timeouts, config reload). A failure is logged, not lost;
a spawned task is held until it ends (asyncio keeps only a weak reference to a running task), and a
repeated one goes on after a bad round."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

log = logging.getLogger("topogang.extender")

_background: set[asyncio.Task[None]] = set()

T = TypeVar("T")


async def wait_at_most(aw: Awaitable[T], timeout: float) -> T:
    """`asyncio.wait_for`, but the caller's cancellation is never lost: on Python 3.11 a cancellation
    that lands as `aw`'s result arrives is swallowed (the result is returned), and a loop that waits
    so would run on after its task was cancelled (a replica told to stop renewing its Lease)."""
    task = asyncio.current_task()
    before = task.cancelling() if task is not None else 0  # one handled earlier is not this one
    try:
        return await asyncio.wait_for(aw, timeout)
    finally:
        if task is not None and task.cancelling() > before:
            raise asyncio.CancelledError


def spawn(coro: Awaitable[None]) -> None:
    async def run() -> None:
        try:
            await coro
        except Exception:
            log.exception("background task failed")

    task = asyncio.get_running_loop().create_task(run())
    _background.add(task)
    task.add_done_callback(_background.discard)


async def every(interval: float, work: Callable[[], Awaitable[object]], what: str) -> None:
    """`work()` every `interval` seconds while the service runs: one failing round (a bug, a bad
    config) must never stop expiry, timeouts or reloads for good."""
    while True:
        await asyncio.sleep(interval)
        try:
            await work()
        except Exception:
            log.exception("%s failed", what)


def expiry_interval(ttl_seconds: float) -> float:
    """How often the reservation-expiry pass runs: a quarter of the TTL, so a gang outlives its window by
    at most that much, between 50 ms (tests with tiny TTLs) and 5 s (no busy loop on long TTLs)."""
    return max(0.05, min(5.0, ttl_seconds / 4))
