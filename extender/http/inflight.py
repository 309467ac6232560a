"""One run at a time per key, its answer shared: kube-scheduler may send a bind again while the
first is still writing its Binding (a retry after its own timeout), and the second must neither
claim the slot again nor write a second Binding, only wait for the first one's answer."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

CANCELLED = "topogang: the bind did not complete (the request was cancelled)"


async def once(
    running: dict[str, asyncio.Future[str]], key: str, work: Callable[[], Awaitable[str]]
) -> tuple[str, bool]:
    """`work()`'s answer (an error text, "" for none), and whether it was another call's: a call
    while one for `key` runs waits for that one's answer. A cancelled run answers `CANCELLED`."""
    first = running.get(key)
    if first is not None:
        return await asyncio.shield(first), True
    fut: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    running[key] = fut
    answer = CANCELLED
    try:
        answer = await work()
    finally:
        fut.set_result(answer)
        del running[key]
    return answer, False
