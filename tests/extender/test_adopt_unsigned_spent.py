"""`--adopt-unsigned-bind-info` takes effect at the first start only ("Ignored once topogang has
bound a pod with the key", values.yaml; "first start only", docs/hived-migration.md): a start that
adopted with it records it spent (`extender.kube.opt_in`). Before, `recovery_verifier` re-armed it
at every start at which no listed pod carried a signature: once every pod topogang signed had
finished and been deleted, the next restart or fail-over adopted a tenant's forged, unsigned bind
info with a VC and a priority its namespace is not entitled to, or, bound to a node outside the
config, made the start refuse the config for everyone."""

from __future__ import annotations

import copy
from typing import Any

from extender.gangs.bindsig import SIGNATURE_ANNOTATION
from extender.kube.client import pod_path
from extender.kube.service import kube_service
from loadtest.kubefake import FakeKube
from tests.extender.helpers import Clock, pod, run, spec
from tests.extender.test_entitlement import STRICT, config
from tests.extender.test_kube_durable import NS, Running, cluster, until

KEY = b"k" * 32
INFO = "topogang.io/pod-bind-info"


async def start(kube: FakeKube, clock: Clock, **kw: Any) -> Running:
    r = Running(kube_service(config(STRICT), kube, clock=clock, namespace=NS, signing_key=KEY, **kw))
    await until("ready", lambda: r.s.ready)
    return r


async def stop(r: Running) -> None:
    for fn in r.service.on_stop:
        await fn()
    await r.stop()


def test_the_opt_in_left_on_does_not_adopt_forged_bind_info_after_signed_pods_are_gone() -> None:
    async def go() -> None:
        kube, clock = cluster(), Clock()
        # the switch-over start, with the opt-in (nothing of HiveD's left to adopt here)
        a = await start(kube, clock, adopt_unsigned_bind_info=True)
        team = pod("t0", "train-0", "research", spec("research", 4, 1, "research/job"))
        kube.server.put(pod_path("research", "train-0"), team)
        node = await a.place(team)  # topogang has bound a pod with the key: the switch-over is over
        genuine = kube.server.at(pod_path("research", "train-0"))

        # a tenant of a namespace entitled to no VC (defaultEntitlement: opportunistic) creates a
        # pod already bound, with bind info of its own making: research's VC, priority 1000
        forged = copy.deepcopy(genuine)
        ann = forged["metadata"]["annotations"]
        del ann[SIGNATURE_ANNOTATION]
        for k in (INFO, "hivedscheduler.microsoft.com/pod-bind-info"):
            ann[k] = (
                ann[k].replace("gang: research/job", "gang: take").replace("priority: 0", "priority: 1000")
            )
        ann["topogang.io/pod-scheduling-spec"] = spec("research", 4, 1, "take", priority=1000)
        forged["metadata"] = {**forged["metadata"], "uid": "x0", "name": "take-0", "namespace": "intruder"}
        forged["metadata"].pop("resourceVersion", None)
        assert forged["spec"]["nodeName"] == node

        # the genuine job ends and its pod is deleted; the forged one is created: held, not adopted
        kube.server.delete(pod_path("research", "train-0"), {"gracePeriodSeconds": 0})
        await until("train-0 gone", lambda: a.s.core.gang("research/job") is None)
        kube.server.put(pod_path("intruder", "take-0"), forged)
        await until("held", lambda: a.s.core.gang("unverified:intruder/take-0") is not None)
        assert a.s.core.gang("intruder/take") is None

        # a fail-over (or any restart) with the chart's value unchanged
        await stop(a)
        clock.t += 5
        b = await start(kube, clock, adopt_unsigned_bind_info=True)
        adopted = b.s.core.gang("intruder/take")
        got = None if adopted is None else (adopted.request.vc, adopted.priority, adopted.owner >= 0)
        assert adopted is None, (
            f"forged bind info adopted at a later start: (vc, priority, holds quota) = {got}"
        )
        held = b.s.core.gang("unverified:intruder/take-0")
        assert held is not None and held.priority == -1
        await b.stop()

    run(go())


def test_the_opt_in_left_on_lets_no_forged_pod_refuse_a_later_start() -> None:
    """The same re-armed opt-in, worse: a forged pod bound to a node outside topogang's config (any
    CPU node) is adopted, and the start judges that its config "costs running gangs GPUs" and
    refuses it (`start_config`): the new leader never turns ready (under `topogang serve`, it exits
    and crash-loops) until the admin confirms a capacity loss the tenant made up."""

    async def go() -> None:
        kube, clock = cluster(), Clock()
        a = await start(kube, clock, adopt_unsigned_bind_info=True)
        team = pod("t0", "train-0", "research", spec("research", 4, 1, "research/job"))
        kube.server.put(pod_path("research", "train-0"), team)
        await a.place(team)
        genuine = kube.server.at(pod_path("research", "train-0"))
        kube.server.delete(pod_path("research", "train-0"), {"gracePeriodSeconds": 0})
        await until("train-0 gone", lambda: a.s.core.gang("research/job") is None)
        node = genuine["spec"]["nodeName"]
        forged = copy.deepcopy(genuine)
        ann = forged["metadata"]["annotations"]
        del ann[SIGNATURE_ANNOTATION]
        for k in (INFO, "hivedscheduler.microsoft.com/pod-bind-info"):
            ann[k] = ann[k].replace(node, "cpu-node-7").replace("gang: research/job", "gang: x")
        forged["spec"]["nodeName"] = "cpu-node-7"
        forged["metadata"] = {**forged["metadata"], "uid": "x0", "name": "x-0", "namespace": "intruder"}
        forged["metadata"].pop("resourceVersion", None)
        kube.server.put(pod_path("intruder", "x-0"), forged)
        await stop(a)
        clock.t += 5
        service = kube_service(
            config(STRICT), kube, clock=clock, namespace=NS, signing_key=KEY, adopt_unsigned_bind_info=True
        )
        b = Running(service)
        try:
            await until("synced", lambda: "config refused" in b.s.not_ready_reason or b.s.ready)
            assert b.s.ready, f"a tenant's forged pod kept the extender from starting: {b.s.not_ready_reason}"
        finally:
            await b.stop()

    run(go())
