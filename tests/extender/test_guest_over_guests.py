"""A guaranteed gang that opted in (`promoteWhenQuota`) and finds its VC's cells held by long-running
guests, with no free room anywhere, starts as a guest over a younger guest elsewhere
(`topology.preemption.guest_plan`): seen through the Kubernetes-mode service, its filter reply, its
victims, its durable reservation across a restart, and its start once the victim's pod has gone. Such
a gang is then the last victim of another VC's one-node reclaim (`room.ends_a_guest_in_lieu`)."""

from __future__ import annotations

from typing import Any

from extender.kube.client import pod_path
from tests.extender.helpers import Clock, run, spec
from tests.extender.test_kube_durable import Running, cluster, start, submit
from topology.invariants import violations
from topology.reservations import GangPhase

HOUR = 3600.0
NOW = {"gracePeriodSeconds": 0}  # a pod deleted at once, as when its job ends


async def crowd(r: Running, kube: Any, clock: Clock) -> dict[str, str]:
    """nlp binds its three quota nodes with 6 GPUs each; vision's 2-GPU guests fill every other GPU,
    among them the 2 left in each nlp node; 5 hours later one guest outside nlp's nodes goes and a
    new one, `young`, takes its place 15 minutes before nlp's next job. Returns each pod's node."""
    at: dict[str, str] = {}
    for i in range(3):
        at[f"n{i}"] = await r.place(submit(kube, f"n{i}", f"n{i}", "nlp", spec("nlp", 6)))
    i = 0
    while True:
        p = submit(kube, f"g{i}", f"guest-{i}", "vision", spec("vision", 2, priority=-1))
        reply = await r.verb("filter", p)
        if not reply["NodeNames"]:
            kube.server.delete(pod_path("vision", f"guest-{i}"), NOW)
            break
        at[f"g{i}"] = await r.place(p)
        i += 1
    nlp_nodes = {at[f"n{k}"] for k in range(3)}
    assert sum(1 for k, n in at.items() if k.startswith("g") and n in nlp_nodes) == 3
    clock.t += 5 * HOUR - 900.0
    gone = next(k for k, n in sorted(at.items()) if k.startswith("g") and n not in nlp_nodes)
    kube.server.delete(pod_path("vision", f"guest-{gone[1:]}"), NOW)
    await r.s.pod_gone(gone)
    young = submit(kube, "young", "young", "vision", spec("vision", 2, priority=-1))
    at["young"] = await r.place(young)
    assert at["young"] == at.pop(gone)
    clock.t += 900.0
    return at


def test_a_gang_with_no_free_room_starts_as_a_guest_over_a_younger_guest_and_keeps_it_over_a_restart() -> (
    None
):
    async def go() -> None:
        kube, clock = cluster(), Clock()
        a = await start(kube, clock)
        a.s.evictor = None  # the victim stays until after the restart
        at = await crowd(a, kube, clock)
        asked = submit(kube, "n3", "n3", "nlp", spec("nlp", 2, priority=10, promoteWhenQuota=True))
        reply = await a.verb("filter", asked)
        assert reply["NodeNames"] == [], reply  # it waits for its victim to go
        g = a.s.core.gang("nlp/pod:n3")
        assert g is not None and g.guest and g.priority < 0 and g.phase is GangPhase.PREEMPTING
        victims = {a.s.core.reservations.by_id[v].name for v in g.victims}
        assert victims == {"vision/pod:young"}  # not one of the 5-hour guests in nlp's own nodes
        assert violations(a.s.core) == []
        await a.stop()

        b = await start(kube, clock)  # its reservation object brings it back, over the same guest
        h = b.s.core.gang("nlp/pod:n3")
        assert h is not None and h.guest and h.priority < 0 and h.phase is GangPhase.PREEMPTING
        assert {b.s.core.reservations.by_id[v].name for v in h.victims} == victims
        kube.server.delete(pod_path("vision", "young"), NOW)
        await b.s.pod_gone("young")
        assert await b.place(asked) == at["young"]  # the guest runs where the younger one ran
        h = b.s.core.gang("nlp/pod:n3")
        assert h is not None and h.guest and violations(b.s.core) == []
        nlp_nodes = {at[f"n{k}"] for k in range(3)}
        olds = [k for k, n in at.items() if k.startswith("g") and n in nlp_nodes]
        assert len(olds) == 3  # the 5-hour guests in nlp's own nodes run on
        assert all(b.s.core.reservations.pod_gang.get(k) is not None for k in olds)
        await b.stop()

    run(go())


def test_a_reclaim_that_would_end_a_guaranteed_gang_running_as_a_guest_takes_free_room_instead() -> None:
    """nlp's n3 runs as a guest where `young` ran (its VC had quota; its reclaim would have ended a
    5-hour guest). Ten minutes on, vision's guaranteed, opted-in pod would reclaim it (20 GPU-minutes,
    the cheapest victim in the pool vision binds from): instead, with two GPUs idle in nlp's node, it
    starts there as a guest, and n3 runs on. Seen through the Kubernetes-mode service's filter."""

    async def go() -> None:
        kube, clock = cluster(), Clock()
        a = await start(kube, clock)
        at = await crowd(a, kube, clock)
        asked = submit(kube, "n3", "n3", "nlp", spec("nlp", 2, priority=10, promoteWhenQuota=True))
        assert (await a.verb("filter", asked))["NodeNames"] == []  # waits for `young` to go
        kube.server.delete(pod_path("vision", "young"), NOW)
        await a.s.pod_gone("young")
        assert await a.place(asked) == at["young"]
        n3 = a.s.core.gang("nlp/pod:n3")
        assert n3 is not None and n3.guest
        clock.t += 600.0
        nlp_nodes = {at[f"n{k}"] for k in range(3)}
        gone = next(k for k, n in sorted(at.items()) if k.startswith("g") and n in nlp_nodes)
        kube.server.delete(pod_path("vision", f"guest-{gone[1:]}"), NOW)  # 2 GPUs idle in nlp's node
        await a.s.pod_gone(gone)
        v = submit(kube, "v1", "v1", "vision", spec("vision", 2, priority=10, promoteWhenQuota=True))
        assert await a.place(v) == at[gone]  # beside nlp's job, as a guest, ending nobody
        g = a.s.core.gang("vision/pod:v1")
        assert g is not None and g.guest and g.priority < 0
        n3 = a.s.core.gang("nlp/pod:n3")
        assert n3 is not None and n3.guest and not g.victims
        assert violations(a.s.core) == []
        await a.stop()

    run(go())
