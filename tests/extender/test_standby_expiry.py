"""A standby's reservations expire as the leader's do (`STANDBY_EXPIRY_LAG` later; the evictions
stay the leader's). Before, expiry ran on the leader only: a gang whose reservation expired there (a
member never came) stayed reserved in the standby's core at its old placement; when the leader
placed the gang again and bound its pods, the standby judged those pods "of an earlier placement"
and held them apart as being evicted, and once it took over the running, whole gang was no gang of
its core: its pods sat in `<gang>/evicted/recovered-N` groups nothing would evict, and the gang's
name was free to be placed a second time."""

from __future__ import annotations

import asyncio

from config.load import LoadedConfig
from extender.kube.leader import LeaseSettings
from extender.kube.service import kube_service
from loadtest.kubefake import FakeKube
from tests.extender.helpers import Clock, example, run, spec
from tests.extender.test_kube_durable import NS, Running, cluster, submit, until

# a Lease of real seconds no loaded machine misses a renewal of (a replica that loses its lead does
# not lead again): a leader stopped without a release is taken over ~2.5 s later
LEASE = LeaseSettings(NS, "lead", lease_seconds=2.5, renew_deadline=1.5, retry_seconds=0.1)


async def leader_and_standby(
    shared: FakeKube, loaded: LoadedConfig, clock: Clock, lease: LeaseSettings = LEASE
) -> tuple[Running, Running]:
    """Replica "a" leading and replica "b" its standby, on one API server and one clock."""

    def replica(name: str) -> Running:
        return Running(
            kube_service(
                loaded, FakeKube(shared.server), clock=clock, namespace=NS, lease=lease, identity=name
            )
        )

    a = replica("a")
    await until("a leads", lambda: a.s.ready)
    b = replica("b")
    await until("b is standby", lambda: b.s.not_ready_reason.endswith("held by a"))
    return a, b


def test_a_standby_takes_over_with_the_gang_the_leader_placed_again_as_a_gang() -> None:
    async def go() -> None:
        shared, clock = cluster(), Clock()
        a, b = await leader_and_standby(shared, example(), clock)
        text = spec("nlp", 4, 2, "nlp/pair")
        await a.place(submit(shared, "p0", "w-0", "nlp", text))  # its peer never comes
        await until("b adopted w-0", lambda: b.s.core.holds_slot("p0"))
        clock.t += a.s.ttl_seconds + 1
        (released,) = await a.s.expire()  # the leader's expiry: w-0 evicted, the gang let go
        assert released.gang == "nlp/pair"
        clock.t += a.s.ttl_seconds + 1  # placed again one TTL later
        for _ in range(80):  # room for any periodic pass of the standby's (every TTL/4, at most 5 s)
            g = b.s.core.gang("nlp/pair")
            if g is None or "p0" not in {sl.pod_uid for sl in g.slots}:
                break
            await asyncio.sleep(0.1)
        await a.place(submit(shared, "p2", "w-2", "nlp", text))
        await a.place(submit(shared, "p3", "w-3", "nlp", text))
        ga = a.s.core.gang("nlp/pair")
        assert ga is not None and {sl.pod_uid for sl in ga.slots} == {"p2", "p3"}
        await until(
            "b saw both bound", lambda: all(b.s.core.gang_of_pod(u) is not None for u in ("p2", "p3"))
        )
        await a.stop()  # the leader goes; b takes over
        await until("b leads", lambda: b.s.ready, 15.0)  # real seconds: slower on a loaded machine
        got = {u: (g.name if (g := b.s.core.gang_of_pod(u)) is not None else None) for u in ("p2", "p3")}
        for t in b.tasks:
            t.cancel()
        assert got == {"p2": "nlp/pair", "p3": "nlp/pair"}, f"the new leader holds the running gang as {got}"

    run(go())
