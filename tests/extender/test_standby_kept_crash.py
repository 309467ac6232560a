"""The leader lets a gang go at its deadline and deletes the gang's GangReservation at its next sync
(<= 1 s), while its eviction of the gang's bound member has not happened yet (here the API server
refuses it, 429; likewise a gang of many pods evicted one by one); then it dies, its retry book with
it, its mark never written on the pod, so `inherit` does not take it. The standby, expiring the same
gang `STANDBY_EXPIRY_LAG` later, keeps the eviction: it forgets a kept eviction only when its core
holds the gang again where the leader listed it (`ReservationStore.made_whole`: the leader bound its
other members), not merely because the leader stopped listing it. Before, the new leader held the
member apart as being evicted, for good, its GPUs held."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from extender.kube.service import STANDBY_EXPIRY_LAG
from loadtest.kubefake.client import Fault
from tests.extender.helpers import Clock, run, spec
from tests.extender.test_kube_durable import cluster, submit, until
from tests.extender.test_standby_expiry import leader_and_standby
from tests.extender.test_standby_expiry_crash import (
    LEASE,
    TTL,
    config,
    ended,
    evicted_by_the_new_leader,
    wall_follows,
)


def test_a_member_the_dead_leader_failed_to_evict_after_deleting_its_reservation_is_evicted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = Clock()
    wall_follows(monkeypatch, clock)

    async def go() -> None:
        shared, loaded = cluster(), config()
        a, b = await leader_and_standby(shared, loaded, clock, LEASE)
        a_kube = cast(Any, a.s.binder).kube  # the leader's own API client (its binder's)
        await a.place(submit(shared, "p0", "w-0", "nlp", spec("nlp", 4, 2, "nlp/pair")))  # w-1 never comes
        await until("b adopted w-0", lambda: b.s.core.holds_slot("p0"))
        await until(
            "the leader wrote the reservation",
            lambda: bool(shared.server.items("topogang.io/v1alpha1", "gangreservations")),
            5.0,
        )
        # the leader's API calls on w-0 are refused (API Priority and Fairness sheds load)
        for method in ("PATCH", "DELETE", "POST"):
            a_kube.inject(Fault(method, r"/pods/w-0", "error", count=10_000, status=429))
        clock.t += TTL + 1  # past the leader's deadline, not yet past the standby's (lag)
        (released,) = await a.s.expire()
        assert released.gang == "nlp/pair" and not ended(shared, "nlp", "w-0")
        await asyncio.sleep(1.5)  # a sync of the leader's: it deleted the let-go gang's reservation
        for t in a.tasks:  # a dies before its eviction goes through
            t.cancel()
        clock.t += STANDBY_EXPIRY_LAG + 1  # the standby lets the gang go too
        await asyncio.sleep(1.2)  # two of the standby's passes (every TTL/4)
        await until("b leads", lambda: b.s.ready, 10.0)
        await evicted_by_the_new_leader(
            shared,
            b,
            lambda held: (
                "the gang was let go and its member never evicted: w-0 still runs, held by the "
                f"new leader as {held}"
            ),
        )

    run(go())
