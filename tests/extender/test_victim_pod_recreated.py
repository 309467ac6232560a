"""A pod its job controller re-creates while its gang is a preemption's victim does not join the
gang (`topology.gangs.release_pod`): the filter tells it why, rather than "every slot is claimed by
another member", which no member was."""

from __future__ import annotations

from tests.extender.helpers import args, pod, run, spec
from tests.extender.test_entitlement import config, fill_vision, make, settle
from topology.invariants import violations

SPECS = {
    "vision/rack": spec("vision", 8, 4, "vision/rack"),
    "vision/pair": spec("vision", 8, 2, "vision/pair"),
}


def test_a_victims_recreated_pod_is_told_its_gang_is_being_preempted() -> None:
    async def go() -> None:
        s, evicted = make(config())
        await fill_vision(s)
        high = pod("h0", "high-0", "vision", spec("vision", 8, 2, "vision/high", priority=100))
        await s.filter(args(high))  # vision's quota is in use: a gang of lower priority is preempted
        await settle()
        assert evicted, "a preemption began"
        victim = s.core.gang_of_pod(evicted[0])
        assert victim is not None and len(evicted) > 1, evicted
        await s.pod_gone(evicted[0])  # one victim pod is gone, the victim's others still run
        again = pod("again", "again", "vision", SPECS[victim.name])  # its job controller re-creates it
        reply = await s.filter(args(again))
        assert not reply["NodeNames"], reply
        texts = set(reply["FailedAndUnresolvableNodes"].values())
        assert len(texts) == 1 and "the gang is being preempted" in texts.pop(), reply
        assert s.core.gang_of_pod("again") is None  # it holds nothing of the victim's
        assert violations(s.core) == []

    run(go())
