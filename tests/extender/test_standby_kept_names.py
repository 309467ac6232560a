"""A standby keeps the eviction its own expiry decided under the name of the gang its pod was held
apart from: the held gang's name `<gang>/evicted/<n>` is cut at its last `/evicted/`, as
`Core.rejoin` reads it, since a tenant may name a gang with `evicted/` in it (a HiveD group
`evicted/pair` in namespace `nlp` is gang `nlp/evicted/pair`). Cut at the first, the standby looked
for gang `nlp`, kept nothing, and the next leader never evicted the lone member of a gang whose
time ran out: it ran on, held apart, and never expired."""

from __future__ import annotations

from typing import Any, cast

import pytest

from extender.kube.service import STANDBY_EXPIRY_LAG
from tests.extender.helpers import Clock, run, spec
from tests.extender.test_kube_durable import cluster, submit, until
from tests.extender.test_standby_expiry import leader_and_standby
from tests.extender.test_standby_expiry_crash import LEASE, TTL, config, ended, wall_follows


def test_a_gang_named_with_evicted_has_its_member_evicted_by_the_next_leader(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = Clock()
    wall_follows(monkeypatch, clock)

    async def go() -> None:
        shared, loaded = cluster(), config()
        a, b = await leader_and_standby(shared, loaded, clock, LEASE)
        await a.place(submit(shared, "p0", "w-0", "nlp", spec("nlp", 4, 2, "nlp/evicted/pair")))
        await until("b adopted w-0", lambda: b.s.core.holds_slot("p0"))
        for t in a.tasks:  # the leader dies before its expiry evicts anything
            t.cancel()
        clock.t += TTL + STANDBY_EXPIRY_LAG + 1
        await until("b leads", lambda: b.s.ready, 10.0)
        try:
            await until("w-0 evicted by the new leader", lambda: ended(shared, "nlp", "w-0"), 4.0)
        except AssertionError:
            g = b.s.core.gang_of_pod("p0")
            kept = cast(Any, b.service.background[0]).__self__.retries.kept  # the ClusterSync's book
            raise AssertionError(
                f"w-0 still runs, held as {g.name if g else None!r}, never evicted; kept: {dict(kept)}"
            ) from None
        finally:
            for t in b.tasks:
                t.cancel()

    run(go())
