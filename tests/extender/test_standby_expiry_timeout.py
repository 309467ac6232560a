"""A standby's expiry follows the leader's deadlines (`ReservationStore.follow`, from the
GangReservations the leader persists): the standby's copy of a gang comes from the watch (bind info)
and is read with the config's `reservationTtlSeconds`, while the leader's reservation runs for the
timeout the gang asked for (`topogang.io/gang-timeout-seconds`, coscheduling's
`scheduleTimeoutSeconds`, a Soft gang's backstop), here an hour. Without it the standby let its copy
go `STANDBY_EXPIRY_LAG` past its own TTL while the leader still waited for the gang's other member;
the leader then made the gang whole, and the standby took over with the first member held apart in
`<gang>/evicted/N`."""

from __future__ import annotations

import asyncio
from typing import Any

from config.load import LoadedConfig, load_config_text
from extender.kube.service import STANDBY_EXPIRY_LAG, kube_service
from extender.standalone import EXAMPLE_CONFIG
from loadtest.kubefake import FakeKube
from tests.conventions.manifests import pod
from tests.extender.helpers import Clock, run
from tests.extender.test_kube_durable import Running, cluster, until
from tests.extender.test_standby_expiry import LEASE, leader_and_standby

COSCHED = "scheduling.x-k8s.io/pod-group"
NS = "topogang-system"
TTL = 2  # the config's reservationTtlSeconds: the standby's pass runs every TTL/4 (0.5 s real time)


def config() -> LoadedConfig:
    text = EXAMPLE_CONFIG.read_text(encoding="utf-8").replace(
        "reservationTtlSeconds: 300", f"reservationTtlSeconds: {TTL}"
    )
    return load_config_text(text, "example-cluster.yaml")


def member(i: int) -> dict[str, Any]:
    ann = {"topogang.io/min-member": "2", "topogang.io/gang-timeout-seconds": "3600"}
    return pod(f"train-{i}", "vision", gpus=8, labels={COSCHED: "train"}, annotations=ann, uid=f"t{i}")


async def standby_passes(b: Running) -> None:
    """Real time for two of the standby's expiry passes (`standby_expiry`, every TTL/4)."""
    await asyncio.sleep(2 * TTL / 4 + 0.3)


def test_a_standby_takes_over_a_gang_with_its_own_timeout_whole() -> None:
    async def go() -> None:
        shared, clock, loaded = cluster(), Clock(), config()
        a, b = await leader_and_standby(shared, loaded, clock, LEASE)
        await a.place(shared.server.put("/api/v1/namespaces/vision/pods/train-0", member(0)))
        await until("b adopted train-0", lambda: b.s.core.holds_slot("t0"))
        clock.t += 60 + STANDBY_EXPIRY_LAG  # a minute: far within the gang's hour
        await a.s.expire()  # the leader's own pass keeps it
        ga = a.s.core.gang("vision/train")
        assert ga is not None and ga.deadline is not None and ga.deadline > clock.t
        leader_deadline = ga.deadline
        await standby_passes(b)
        gb = b.s.core.gang("vision/train")
        kept_on_b = gb is not None and gb.slot_of("t0") is not None
        # the leader makes the gang whole within its hour; then it goes, and b takes over
        await a.place(shared.server.put("/api/v1/namespaces/vision/pods/train-1", member(1)))
        await until("b saw train-1 bound", lambda: b.s.core.gang_of_pod("t1") is not None)
        await a.stop()
        await until("b leads", lambda: b.s.ready, 15.0)  # real seconds: slower on a loaded machine
        got = {u: (g.name if (g := b.s.core.gang_of_pod(u)) is not None else None) for u in ("t0", "t1")}
        for t in b.tasks:
            t.cancel()
        assert kept_on_b and got == {"t0": "vision/train", "t1": "vision/train"}, (
            f"the leader kept gang vision/train until {leader_deadline} (its 3600 s timeout); the standby "
            f"let it go at {clock.t} (kept: {kept_on_b}) and took over with the running gang as {got}"
        )

    run(go())


def test_a_restart_keeps_a_gangs_own_timeout() -> None:
    """A restart adopts a not-whole gang's bound member with the config's TTL, then reads its
    GangReservation back: the gang takes the deadline written there, which its own timeout set
    (`topology.recovery.restore`), later as well as earlier. Before, only an earlier one was taken,
    and a gang that asked for an hour was let go a config TTL after the restart."""

    async def go() -> None:
        shared, clock, loaded = cluster(), Clock(), config()
        a = Running(kube_service(loaded, FakeKube(shared.server), clock=clock, namespace=NS))
        await until("a ready", lambda: a.s.ready)
        await a.place(shared.server.put("/api/v1/namespaces/vision/pods/train-0", member(0)))
        g = a.s.core.gang("vision/train")
        assert g is not None and g.deadline is not None and g.deadline - clock.t > 3000
        await a.stop()
        for fn in a.service.on_stop:  # the step-down's sync: the reservation written
            await fn()
        c = Running(kube_service(loaded, FakeKube(shared.server), clock=clock, namespace=NS))
        await until("c ready", lambda: c.s.ready)
        gc = c.s.core.gang("vision/train")
        for t in c.tasks:
            t.cancel()
        assert gc is not None and gc.slot_of("t0") is not None
        assert gc.deadline is not None and gc.deadline - clock.t > 3000, (
            f"the gang asked for an hour and was placed at {clock.t}; after the restart it expires at "
            f"{gc.deadline}"
        )

    run(go())
