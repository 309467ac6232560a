"""The first copy of the state for the admins' reads after a start or a reload copies every gang:
at 100,000 GPUs (~59,000 gangs) that held the verbs' lock ~600 ms in one go. `Snapshots` takes it
in steps of `gangs_per_step` gangs (`topology.snapshot.StepwiseCopy`), letting go of the lock
between two steps: a filter that asks while the copy is under way is answered before the copy
ends, and the copy, ended after it, holds what the filter did (read-your-writes still holds)."""

from __future__ import annotations

import asyncio

from extender.http.snapshot import Snapshots
from tests.extender.helpers import place as place_pod
from tests.extender.helpers import pod, run, scheduler, spec


def test_a_first_copy_is_taken_in_steps_with_the_verbs_between_them() -> None:
    async def go() -> None:
        s = scheduler()
        for i in range(6):  # six one-pod gangs: the copy's first step of three
            assert (await place_pod(s, pod(f"u{i}", f"p{i}", "vision", spec("vision", 1))))[1] is not None
        snaps = Snapshots(s, min_interval=0.0, gangs_per_step=2)
        order: list[str] = []

        async def read() -> None:
            snap = await snaps.get()
            order.append("copy")
            assert snap.core.gang("vision/pod:late") is not None, "the copy missed the filter before it"

        async def filter_late() -> None:
            while not snaps.last_holds:  # the copy has taken its first step
                await asyncio.sleep(0)
            await place_pod(s, pod("late", "late", "vision", spec("vision", 1)))
            order.append("filter")

        await asyncio.gather(read(), filter_late())
        assert order == ["filter", "copy"], order
        assert len(snaps.last_holds) == 4, snaps.last_holds  # three steps of two gangs, then the last
        # the next copy is in the series: one step, sharing what did not change
        s.lock.generation += 1  # as a verb's release: a new generation to copy
        await snaps.get()
        assert len(snaps.last_holds) == 1, snaps.last_holds

    run(go())
