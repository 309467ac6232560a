"""A standby expires reservations too, and the evictions that follow are the leader's (its `evict` is
fenced); the evictions of its own expiry are kept for its own lead (`EvictionRetries.keep`), and
dropped when the watch shows the pods go, as they do when a live leader evicted them. When the
leader dies (no clean release: a node lost, an OOM kill) shortly before a gang's TTL, the standby
lets the gang go while it waits for the Lease to lapse: without the kept evictions it then led with
the gang's bound member held apart as "being evicted", which never expires and nobody evicted (the
old leader never marked the pod, so `EvictionRetries.inherit` does not take it), and a Hard gang's
lone member kept its GPUs for as long as it ran."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any, cast

import pytest

from config.load import LoadedConfig, load_config_text
from extender.kube import reservation_sync
from extender.kube.client import pod_path
from extender.kube.leader import LeaseSettings
from extender.kube.service import STANDBY_EXPIRY_LAG
from extender.standalone import EXAMPLE_CONFIG
from loadtest.kubefake import FakeKube
from tests.extender.helpers import Clock, run, spec
from tests.extender.test_kube_durable import cluster, submit, until
from tests.extender.test_standby_expiry import leader_and_standby

NS = "topogang-system"
TTL = 2
# a Lease long enough (real seconds) for the standby's expiry pass (every TTL/4 = 0.5 s) to run first
LEASE = LeaseSettings(NS, "lead", lease_seconds=2.5, renew_deadline=1.5, retry_seconds=0.1)


def config() -> LoadedConfig:
    text = EXAMPLE_CONFIG.read_text(encoding="utf-8").replace(
        "reservationTtlSeconds: 300", f"reservationTtlSeconds: {TTL}"
    )
    return load_config_text(text, "example-cluster.yaml")


def ended(shared: FakeKube, ns: str, name: str) -> bool:
    try:
        p = shared.server.at(pod_path(ns, name))
    except KeyError:
        return True
    conds = (p.get("status") or {}).get("conditions") or []
    return bool(p["metadata"].get("deletionTimestamp")) or any(
        c.get("type") == "DisruptionTarget" and c.get("status") == "True" for c in conds
    )


async def evicted_by_the_new_leader(shared: FakeKube, b: Any, why: Callable[[str], str]) -> None:
    """Pod nlp/w-0 (uid p0) ended by replica `b`, now leading; else fail with `why` told how `b`
    holds it. `b`'s tasks are stopped either way."""
    try:
        await until("w-0 evicted by the new leader", lambda: ended(shared, "nlp", "w-0"), 4.0)
    except AssertionError:
        g = b.s.core.gang_of_pod("p0")
        raise AssertionError(
            why(f"{g.name if g else None!r} (evicting: {g.evicting if g else None})")
        ) from None
    finally:
        for t in b.tasks:
            t.cancel()


def wall_follows(monkeypatch: pytest.MonkeyPatch, clock: Clock) -> None:
    """The wall clock the GangReservations are written and read on, moving with the test's clock
    as a real one does with the monotonic one (the standby follows the deadlines the leader wrote,
    `ReservationStore.follow`)."""
    start = datetime.now(UTC)

    class Wall(datetime):
        @classmethod
        def now(cls, tz: tzinfo | None = None) -> Wall:
            return cast(Wall, start + timedelta(seconds=clock.t))

    monkeypatch.setattr(reservation_sync, "datetime", Wall)


# a tenant may name a gang with `evicted/` in it: the standby files the eviction it keeps under the
# held-apart gang's name cut at its last `/evicted/`, as `Core.rejoin` reads it (cut at the first,
# `nlp/evicted/pair/evicted/1` read as gang `nlp`: nothing was kept, and w-0 ran on, never evicted)
@pytest.mark.parametrize("group", ["nlp/pair", "nlp/evicted/pair"])
def test_a_gang_expired_while_the_leader_was_dead_has_its_member_evicted_by_the_next_leader(
    monkeypatch: pytest.MonkeyPatch, group: str
) -> None:
    clock = Clock()
    wall_follows(monkeypatch, clock)

    async def go() -> None:
        shared, loaded = cluster(), config()
        a, b = await leader_and_standby(shared, loaded, clock, LEASE)
        await a.place(submit(shared, "p0", "w-0", "nlp", spec("nlp", 4, 2, group)))  # w-1 never comes
        await until("b adopted w-0", lambda: b.s.core.holds_slot("p0"))
        for t in a.tasks:  # a dies: no release of the Lease, no expiry pass of its own
            t.cancel()
        clock.t += TTL + STANDBY_EXPIRY_LAG + 1  # the gang's TTL runs out meanwhile
        await until("b leads", lambda: b.s.ready, 10.0)
        await evicted_by_the_new_leader(
            shared,
            b,
            lambda held: (
                f"the gang's TTL ran out, yet w-0 still runs, held by the new leader as {held} "
                "and never evicted"
            ),
        )

    run(go())
