"""The durable reservations' sync and write-through look at the gangs not whole, not at every gang.

At 80% of 100,000 GPUs the core holds ~59,000 gangs, nearly all bound. The once-a-second sync used
to judge each of them under the verbs' lock (160-210 ms a second), and the write-through after each
new gang walked them all again (~6 ms a new gang). Both now read the core's unsettled gangs
(`Core.gangs(unsettled=True)`): those not whole, or running downgraded. Counted here with
`needs_object`, which each looks at a gang with.
"""

from __future__ import annotations

from typing import Any

import pytest

from extender.gangs import reservation_objects as rsv
from extender.kube.reservation_sync import ReservationStore
from loadtest.kubefake import FakeKube
from tests.extender.helpers import args, place, pod, run, scheduler, spec

NS = "topogang-system"


def test_the_sync_and_the_write_through_judge_the_gangs_not_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    judged: list[str] = []
    real = rsv.needs_object

    def counting(g: Any) -> bool:
        judged.append(g.name)
        return real(g)

    monkeypatch.setattr(rsv, "needs_object", counting)

    async def go() -> None:
        kube = FakeKube()
        s = scheduler()
        store = ReservationStore(s, kube, NS)
        for i in range(12):  # twelve one-GPU gangs, each bound: whole
            _, node = await place(s, pod(f"u{i}", f"one-{i}", "vision", spec("vision", 1)))
            assert node is not None
        two = spec("vision", 2, 2, "vision/two")
        assert (await s.filter(args(pod("t0", "two-0", "vision", two))))["NodeNames"]  # reserved, not whole
        await store.flush_new()  # as the extender's routes do after every filter
        await store.sync()  # the first read finds the bound ones whole, and forgets them
        judged.clear()
        await store.sync()
        assert judged == ["vision/two"]
        assert [o["spec"]["gang"] for o in kube.server.list(rsv.collection_path(NS))[0]] == ["vision/two"]

        judged.clear()
        three = spec("vision", 2, 2, "vision/three")
        assert (await s.filter(args(pod("h0", "three-0", "vision", three))))["NodeNames"]
        await store.flush_new()  # after the filter that made it: the new gang, written through
        assert set(judged) == {"vision/three"}
        assert sorted(o["spec"]["gang"] for o in kube.server.list(rsv.collection_path(NS))[0]) == [
            "vision/three",
            "vision/two",
        ]

    run(go())
