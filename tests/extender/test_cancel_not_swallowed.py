"""A task cancelled as the thing it waits for with a timeout finishes stops, whatever lands first.

On Python 3.11, `asyncio.wait_for` returns the awaited result when the caller's cancellation lands
as that result arrives, and the cancellation is lost. The loops that wait so (the Lease's renewals,
`LeaderElector.hold`; the eviction book; the admission gate) then run on after their task was
cancelled: a replica told to stop went on renewing its Lease, so no standby could take over until
the process was killed, and a test hung in `asyncio.run`'s final cancellation (the dump showed
`LeaderElector.hold` cancelled twice, still renewing). `wait_at_most` raises the cancellation."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import pytest

from extender.kube.leader import LeaderElector, LeaseSettings
from extender.kube.reviews import Reviews
from extender.ops.background import wait_at_most
from loadtest.kubefake import FakeKube
from tests.extender.helpers import run


async def _cancelled_as_it_finishes(outer: asyncio.Task[Any], value: int) -> int:
    """A result that arrives in the same turn as its waiter's cancellation."""
    me = asyncio.current_task()
    assert me is not None
    me.add_done_callback(lambda _: outer.cancel())
    return value


def test_a_cancellation_that_lands_as_the_result_arrives_is_raised() -> None:
    async def go() -> list[int]:
        got: list[int] = []

        async def loop() -> None:
            me = asyncio.current_task()
            assert me is not None
            while len(got) < 3:  # bounded: a lost cancellation shows as three results
                got.append(await wait_at_most(_cancelled_as_it_finishes(me, len(got)), 5.0))

        task = asyncio.get_running_loop().create_task(loop())
        with pytest.raises(asyncio.CancelledError):
            await task
        return got

    assert run(go()) == []


def test_the_lease_holder_stops_when_cancelled_as_a_renewal_succeeds() -> None:
    async def go() -> int:
        kube = FakeKube()
        settings = LeaseSettings("ns", "lead", lease_seconds=5.0, renew_deadline=3.0, retry_seconds=0.0)
        elector = LeaderElector(kube, settings, "a", clock=time.monotonic)
        await elector.acquire()
        renewals = 0
        renew = elector.try_acquire_or_renew

        async def renewing() -> bool:
            nonlocal renewals
            renewals += 1
            ok = await renew()
            if renewals == 2:  # cancelled in the very turn its second renewal succeeds
                holder.cancel()
            return ok

        elector.try_acquire_or_renew = renewing  # type: ignore[method-assign]
        holder = asyncio.get_running_loop().create_task(elector.hold())
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(asyncio.shield(holder), 5.0)
        return renewals

    assert run(go()) == 2


def test_a_handled_earlier_cancellation_does_not_fail_a_later_wait() -> None:
    """A cancellation the task handled before and went on from is not the one `wait_at_most` raises:
    it raises only for one that arrived while it waited."""

    async def go() -> str:
        async def worker() -> str:
            with contextlib.suppress(asyncio.CancelledError):  # handled (no uncancel): it goes on
                await asyncio.Event().wait()
            return await wait_at_most(asyncio.sleep(0, "renewed"), 5.0)

        t = asyncio.get_running_loop().create_task(worker())
        await asyncio.sleep(0)
        t.cancel()
        try:
            return await t
        except asyncio.CancelledError:
            return "cancelled"

    assert run(go()) == "renewed"


async def _two_waiting_reviews() -> tuple[asyncio.Task[Any], asyncio.Task[Any], list[int]]:
    """Two reviews of one key: the first asks (and waits until it is cancelled), the second waits on
    its answer (`Reviews._once`); how many times the API server was asked."""
    reviews = Reviews(None)  # type: ignore[arg-type]  # _once never touches kube
    asked = [0]
    never = asyncio.get_running_loop().create_future()

    async def ask() -> str:
        asked[0] += 1
        if asked[0] == 1:
            await never
        return "answer"

    first = asyncio.get_running_loop().create_task(reviews._once("k", ask))
    await asyncio.sleep(0)
    second = asyncio.get_running_loop().create_task(reviews._once("k", ask))
    await asyncio.sleep(0)  # second now waits on shield(pending)
    return first, second, asked


def test_a_waiter_cancelled_with_the_first_asker_is_not_swallowed() -> None:
    """Two token reviews of one key share one request (`Reviews._once`): a waiter asks again when the
    first asker goes away, but not when it is cancelled itself in the same turn (one deadline for
    both); it went on before, asking the API server again for a request nobody waits for."""

    async def go() -> tuple[bool, int]:
        first, second, asked = await _two_waiting_reviews()
        first.cancel()
        second.cancel()  # both requests cancelled in the same turn (e.g. one shared deadline)
        await asyncio.gather(first, second, return_exceptions=True)
        return second.cancelled(), asked[0]

    cancelled, asked = run(go())
    assert (cancelled, asked) == (True, 1)


def test_a_waiter_asks_again_when_only_the_first_asker_is_cancelled() -> None:
    async def go() -> tuple[object, int]:
        first, second, asked = await _two_waiting_reviews()
        first.cancel()
        return await second, asked[0]

    assert run(go()) == ("answer", 2)
