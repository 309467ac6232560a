"""A pod an elastic gang's job controller re-creates while the gang is a preemption's victim waits
with the gang (`Conventions.place`), as every pod of a gang being preempted does, rather than go
as an extra pod of it (`<gang>/extra/<pod>`), which could run outside the gang meanwhile."""

from __future__ import annotations

from typing import Any

from tests.conventions.manifests import pod
from tests.extender.helpers import args, place, run, spec
from tests.extender.helpers import pod as plain_pod
from tests.extender.test_entitlement import config, make, settle
from topology.invariants import violations

COSCHED = "scheduling.x-k8s.io/pod-group"
MIN = "topogang.io/min-member"


def member(i: int, uid: str) -> dict[str, Any]:
    return pod(f"el-{i}", "vision", gpus=8, labels={COSCHED: "el"}, annotations={MIN: "2"}, uid=uid)


def test_a_recreated_pod_of_an_elastic_victim_waits_with_its_gang() -> None:
    async def go() -> None:
        s, evicted = make(config())
        for i in range(2):  # the elastic gang's core: two of vision's nodes
            assert (await place(s, member(i, f"el-{i}")))[1] is not None
        rack = spec("vision", 8, 4, "vision/rack")  # the rest of vision's quota
        for i in range(4):
            assert (await place(s, plain_pod(f"r{i}", f"rack-{i}", "vision", rack)))[1] is not None
        high = plain_pod("h0", "high-0", "vision", spec("vision", 8, 2, "vision/high", priority=100))
        await s.filter(args(high))
        await settle()
        victim = s.core.gang_of_pod(evicted[0]) if evicted else None
        assert victim is not None and victim.name == "vision/el", evicted
        await s.pod_gone(evicted[0])
        reply = await s.filter(args(member(0, "el-0-again")))  # its job controller re-creates it
        assert not reply["NodeNames"], reply
        texts = set(reply["FailedAndUnresolvableNodes"].values())
        assert len(texts) == 1 and "vision/el waits" in (t := texts.pop()) and "being preempted" in t, t
        assert {g.name for g in s.core.gangs()} == {"vision/el", "vision/rack", "vision/high"}
        assert violations(s.core) == []

    run(go())
