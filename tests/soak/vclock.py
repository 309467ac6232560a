"""An asyncio event loop on virtual time, so a soak covers hours of reservation TTLs, watch
back-offs and expiry sweeps in seconds, and runs the same way every time for the same seed.

`loop.time()` is a counter that only moves when the loop has nothing ready to run: instead of
blocking in `select` until the next timer is due, the selector polls once and, when no file
descriptor is ready, advances the counter to that timer. With no timer at all, nothing could ever
wake the loop (the soak starts no threads), so that is reported as a `DeadlockError` naming what
every task waits on, instead of hanging. Every `asyncio.sleep` and `call_later`
in the code under test (the extender's expiry loop, its watch back-off, the event rate limit)
therefore fires in order, at its virtual time, without any real waiting. The extender is given
the same counter as its clock, so TTL deadlines and timers agree.

`await asyncio.sleep(d)` in the driver is "let the cluster run for d seconds"; it returns once
everything due by then has run, which also makes it the way to let background work settle.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import selectors
from typing import Any


class _PollingSelector(selectors.DefaultSelector):
    """Polls instead of blocking; a would-be wait advances the owning loop's virtual time."""

    def __init__(self, clock: VirtualClock) -> None:
        super().__init__()
        self._clock = clock

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready: list[tuple[selectors.SelectorKey, int]] = super().select(0)
        if ready:
            return ready
        if timeout is None:  # nothing will ever run again: every task awaits another
            raise DeadlockError(self._clock.waiting())
        if timeout > 0:
            self._clock.now += timeout
        return ready


class DeadlockError(RuntimeError):
    """No timer is due and no callback is ready, yet tasks still wait: they wait on each other."""


class VirtualClock:
    """The loop's time, in seconds; starts at `start` (positive, like `time.monotonic`)."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self.loop: asyncio.AbstractEventLoop | None = None

    def waiting(self) -> str:
        """What every task is stuck on, for the deadlock report."""
        if self.loop is None:
            return "deadlock"
        lines = ["deadlock: no timer is due and these tasks wait on each other:"]
        for t in asyncio.all_tasks(self.loop):
            frames = t.get_stack()
            where = " <- ".join(f"{f.f_code.co_name}:{f.f_lineno}" for f in reversed(frames))
            lines.append(f"  {t.get_name()}: {where}")
        return "\n".join(lines)

    def __call__(self) -> float:
        return self.now


class _InlineExecutor(concurrent.futures.ThreadPoolExecutor):
    """Runs what the code under test hands a thread (`asyncio.to_thread`: the config watcher's
    file read) at once, in the loop's thread: a real thread would finish at a moment the virtual
    clock does not know, and the run would no longer be the same for the same seed."""

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        done: concurrent.futures.Future[Any] = concurrent.futures.Future()
        try:
            done.set_result(fn(*args, **kwargs))
        except BaseException as err:  # handed back to the awaiting task, as a thread would
            done.set_exception(err)
        return done


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    def __init__(self, clock: VirtualClock | None = None) -> None:
        self.clock = clock or VirtualClock()
        self.clock.loop = self
        super().__init__(selector=_PollingSelector(self.clock))
        self.set_default_executor(_InlineExecutor())

    def time(self) -> float:
        return self.clock.now


def run(main: Any, clock: VirtualClock | None = None) -> Any:
    """`asyncio.run` on a fresh virtual-time loop."""
    loop = VirtualTimeLoop(clock)
    try:
        asyncio.set_event_loop(loop)
        return loop.run_until_complete(main)
    finally:
        try:
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            asyncio.set_event_loop(None)
            loop.close()
