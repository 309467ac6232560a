"""Every victim pod went while no extender led (a restart, a fail-over), and the victim's job
controller re-created them. The reservations are read back highest priority first: the preemptor
takes the GPUs its victims left, and the victim's reservation is not restored on them. Read back by
name (the API server's order), the victim's came first when its name sorted first, and the
preemptor restored over it waited for victims with no pod until a TTL ended one of them."""

from __future__ import annotations

from extender.kube.client import pod_path
from tests.extender.helpers import Clock, run, spec
from tests.extender.test_kube_durable import COLLECTION, cluster, start, submit, until
from topology.invariants import violations
from topology.reservations import GangPhase

VICTIM = spec("vision", 8, 4, "vision/a-low", priority=10)  # its object sorts before the preemptor's
PREEMPTOR = spec("vision", 8, 6, "vision/z-high", priority=500)


def test_a_victim_gone_while_down_does_not_hold_the_preemptor_back() -> None:
    async def go() -> None:
        kube, clock = cluster(), Clock()
        a = await start(kube, clock)
        a.s.evictor = None  # the test plays kube-scheduler's deletions
        for i in range(4):
            await a.place(submit(kube, f"l{i}", f"low-{i}", "vision", VICTIM))
        r = await a.verb("filter", submit(kube, "h0", "high-0", "vision", PREEMPTOR))
        g = a.s.core.gang("vision/z-high")
        assert g is not None and g.phase is GangPhase.PREEMPTING, r
        kube.server.forget(pod_path("vision", "low-0"))
        await a.s.pod_gone("l0")  # one victim pod goes while the extender leads
        await until("both objects", lambda: len(kube.server.list(COLLECTION)[0]) == 2)
        await a.stop()
        # while no one leads: the other victim pods go, and the job controller re-creates all four
        for i in (1, 2, 3):
            kube.server.forget(pod_path("vision", f"low-{i}"))
        for i in range(4):
            submit(kube, f"n{i}", f"low-new-{i}", "vision", VICTIM)
        clock.t += 5
        b = await start(kube, clock)
        core = b.s.core
        h = core.gang("vision/z-high")
        assert h is not None
        assert not h.pending, (
            f"the preemptor waits for {len(h.pending)} GPUs of a victim with no pod: "
            f"victims {[core.reservations.by_id[v].name for v in h.victims]}, "
            f"live pods {sum(len(core.reservations.by_id[v].live_slots()) for v in h.victims)}"
        )
        assert violations(core) == []
        await b.stop()

    run(go())
