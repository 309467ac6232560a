"""A standby keeps an eviction its own expiry decided only for a gang the leader still lists a
reservation of, and drops it once the leader no longer does (`EvictionRetries.forget_kept`): the
leader made the gang whole, or let it go and evicted its pods itself. Before, a kept eviction was
carried out whenever the standby took the lead, however long after: when the standby's watch lagged
by more than `STANDBY_EXPIRY_LAG`, or its clock ran ahead of the leader's, it let go a gang the
leader then made whole, and the next fail-over evicted a running member of a healthy gang. A
dropped eviction's pod is a member of its gang again (`Core.rejoin`): before, the new leader held it
apart as `<gang>/evicted/<n>`, the gang split in two with that member's slot counted lost."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from config.load import LoadedConfig, load_config_text
from extender.kube import pods as kpods
from extender.kube.service import STANDBY_EXPIRY_LAG
from extender.standalone import EXAMPLE_CONFIG
from tests.conventions.manifests import pod
from tests.extender.helpers import Clock, run
from tests.extender.test_kube_durable import cluster, until
from tests.extender.test_standby_expiry import LEASE, leader_and_standby
from tests.extender.test_standby_expiry_crash import ended

COSCHED = "scheduling.x-k8s.io/pod-group"
NS = "topogang-system"
TTL = 2


def config() -> LoadedConfig:
    text = EXAMPLE_CONFIG.read_text(encoding="utf-8").replace(
        "reservationTtlSeconds: 300", f"reservationTtlSeconds: {TTL}"
    )
    return load_config_text(text, "example-cluster.yaml")


def member(i: int) -> dict[str, Any]:
    ann = {"topogang.io/min-member": "2"}
    return pod(f"train-{i}", "vision", gpus=8, labels={COSCHED: "train"}, annotations=ann, uid=f"t{i}")


def _taken_over(shared: Any, b: Any) -> tuple[dict[str, bool], dict[str, str | None]]:
    """On the new leader: whether each pod of gang vision/train was ended, and the gang each is in."""
    gone = {n: ended(shared, "vision", n) for n in ("train-0", "train-1")}
    return gone, {u: getattr(b.s.core.gang_of_pod(u), "name", None) for u in ("t0", "t1")}


def test_a_standby_whose_watch_lagged_does_not_evict_a_whole_gang_when_it_takes_over() -> None:
    """Nor does it hold the member it had let go apart from the gang (`Core.rejoin`): taking over,
    it holds one gang, whole."""

    async def go() -> None:
        shared, clock, loaded = cluster(), Clock(), config()
        a, b = await leader_and_standby(shared, loaded, clock, LEASE)
        b_sync = cast(Any, b.service.background[0]).__self__  # the standby's ClusterSync (`sync.run`)
        held: list[tuple[str, dict[str, Any]]] = []
        original = b_sync._on_pod
        lagging = True

        async def lagged(kind: str, p: dict[str, Any]) -> None:  # the standby's watch, behind for train-1
            if lagging and kpods.uid(p) == "t1":
                held.append((kind, p))
                return
            await original(kind, p)

        b_sync._on_pod = lagged
        await a.place(shared.server.put("/api/v1/namespaces/vision/pods/train-0", member(0)))
        await until("b adopted train-0", lambda: b.s.core.holds_slot("t0"))
        clock.t += 1  # within the gang's TTL, the leader makes it whole
        await a.place(shared.server.put("/api/v1/namespaces/vision/pods/train-1", member(1)))
        ga = a.s.core.gang("vision/train")
        assert ga is not None and ga.deadline is None  # whole on the leader
        await until(
            "the leader deleted the whole gang's reservation",
            lambda: not shared.server.items("topogang.io/v1alpha1", "gangreservations"),
            5.0,
        )
        clock.t += TTL + STANDBY_EXPIRY_LAG + 1
        await asyncio.sleep(2 * TTL / 4 + 0.3)  # two of the standby's passes
        lagging = False  # the watch catches up: train-1 runs, the gang is whole
        for kind, p in held:
            await original(kind, p)
        await a.stop()  # the leader goes; b takes over
        try:
            await until("b leads", lambda: b.s.ready, 30.0)
        except AssertionError:
            raise AssertionError(f"b never led: {b.s.not_ready_reason}") from None
        await asyncio.sleep(1.0)  # room for the new lead's eviction book to run
        gone, gangs = _taken_over(shared, b)
        whole = b.s.core.gang("vision/train")
        for t in b.tasks:
            t.cancel()
        assert gone == {"train-0": False, "train-1": False}, (
            f"the leader ran gang vision/train whole; the standby's lagging view let it go and, taking "
            f"over, ended its pods: {gone}"
        )
        assert gangs == {"t0": "vision/train", "t1": "vision/train"}, (
            f"the new leader holds the healthy gang's pods apart: {gangs}"
        )
        assert whole is not None and whole.deadline is None, "the gang is whole on the new leader"

    run(go())


SKEW = 30.0  # seconds the standby's wall clock runs ahead of the leader's (more than the lag)


def _store_of(running: Any) -> Any:
    """The replica's ReservationStore, from its step-down's closure."""
    fn = running.service.on_stop[0]
    cells = dict(zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=True))
    return cells["store"].cell_contents


def test_a_standby_whose_clock_runs_ahead_does_not_evict_a_whole_gang_when_it_takes_over(
    monkeypatch: Any,
) -> None:
    """The same with no watch lag: the standby's wall clock runs `SKEW` ahead of the leader's, so
    the deadline it follows (`ReservationStore.follow`: the leader's `expiresAt` read on its own
    wall clock) comes `SKEW` early; it lets the gang go `SKEW - STANDBY_EXPIRY_LAG` before the
    leader would, and keeps the eviction. The leader then makes the gang whole within its timeout;
    the kept eviction is never dropped, and the standby, taking over, ends a running member."""
    from datetime import UTC, datetime, timedelta

    from extender.kube import reservation_sync

    clock = Clock()
    start = datetime.now(UTC)

    class Wall(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:
            return start + timedelta(seconds=clock.t)

    monkeypatch.setattr(reservation_sync, "datetime", Wall)

    def timed(i: int) -> dict[str, Any]:
        p = member(i)
        p["metadata"]["annotations"]["topogang.io/gang-timeout-seconds"] = "60"
        return p

    async def go() -> None:
        shared, loaded = cluster(), config()
        a, b = await leader_and_standby(shared, loaded, clock, LEASE)
        _store_of(b).wall = lambda: Wall.now() + timedelta(seconds=SKEW)
        await a.place(shared.server.put("/api/v1/namespaces/vision/pods/train-0", timed(0)))
        await until("b adopted train-0", lambda: b.s.core.holds_slot("t0"))
        await asyncio.sleep(1.5)  # the leader's sync writes the reservation (its deadline: 60 s on)
        clock.t += 60 - SKEW + STANDBY_EXPIRY_LAG + 1  # within the leader's 60 s
        await asyncio.sleep(2 * TTL / 4 + 0.3)  # two of the standby's passes
        ga = a.s.core.gang("vision/train")
        assert ga is not None and ga.deadline is not None and ga.deadline > clock.t  # the leader keeps it
        await a.place(shared.server.put("/api/v1/namespaces/vision/pods/train-1", timed(1)))
        await until("b saw train-1 bound", lambda: b.s.core.gang_of_pod("t1") is not None)
        await asyncio.sleep(2 * TTL / 4 + 0.3)  # the leader deletes the whole gang's object; b's passes
        await a.stop()
        await until("b leads", lambda: b.s.ready, 15.0)
        await asyncio.sleep(1.0)
        gone, gangs = _taken_over(shared, b)
        for t in b.tasks:
            t.cancel()
        assert gone == {"train-0": False, "train-1": False}, (
            f"the leader ran gang vision/train whole within its 60 s; the standby, its clock {SKEW:.0f} s "
            f"ahead, let it go early and, taking over, ended its pods: {gone}"
        )
        assert gangs == {"t0": "vision/train", "t1": "vision/train"}, (
            f"the new leader holds the healthy gang's pods apart: {gangs}"
        )

    run(go())
