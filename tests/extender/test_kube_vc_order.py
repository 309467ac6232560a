"""The VC order over a restart, against the in-memory API server (`extender.kube.pending`): a gang
pending when the extender takes the lead stays ahead of its VC's younger gangs until kube-scheduler
filters it again, and its pods are marked so that it does so soon. Who is noted: only pods of
topogang's scheduler profile, read as the filter reads them, of gangs that could ever run."""

from __future__ import annotations

from typing import Any

from config.load import LoadedConfig, load_config_text
from extender.gangs.vc_order import BEST_EFFORT_FIFO
from extender.kube.client import pod_path
from extender.kube.service import kube_service
from extender.standalone import EXAMPLE_CONFIG
from loadtest.kubefake import FakeApiServer, FakeKube
from tests.extender.helpers import Clock, example, nodes, pod, ready_node, run, spec
from tests.extender.test_kube_durable import NS, Running, until
from tests.extender.test_kube_requeue import mark_of
from topology.decisions import WaitCode

NLP = "nlp"  # 24 GPUs of quota in the example config, three whole nodes


def cluster_on(clock: Clock) -> FakeKube:
    """An API server whose clock (its `creationTimestamp`s) is the test's."""
    kube = FakeKube(FakeApiServer(clock=clock))
    for n in nodes():
        kube.server.put(f"/api/v1/nodes/{n}", ready_node(n, 8))
    return kube


def lab_may_use_vision_only() -> LoadedConfig:
    """The example config, with namespace lab entitled to VC vision alone."""
    text = EXAMPLE_CONFIG.read_text(encoding="utf-8") + "  tenants:\n    lab: {virtualClusters: [vision]}\n"
    return load_config_text(text, "example-cluster.yaml")


async def start_on(
    kube: FakeKube, clock: Clock, *, best_effort: bool = False, loaded: LoadedConfig | None = None
) -> Running:
    """The service, reading creation times on the API server's clock (the test's, shifted)."""
    service = kube_service(loaded or example(), kube, clock=clock, namespace=NS)
    if best_effort:  # as the config's `topogang.vcQueueing` would set it
        service.scheduler.vc_queueing = BEST_EFFORT_FIFO
    service.scheduler.holders.wall = lambda: kube.server.wall_offset + clock.t
    r = Running(service)
    await until("ready", lambda: r.s.ready)
    return r


def submit(
    kube: FakeKube, uid: str, name: str, text: str, *, scheduler: str = "topogang", ns: str = NLP
) -> dict[str, Any]:
    p = pod(uid, name, ns, text)
    p["spec"]["schedulerName"] = scheduler
    return kube.server.put(pod_path(ns, name), p)


async def reasons(r: Running, p: dict[str, Any]) -> str:
    """Why the filter turned `p` away (every node's reason, joined); fails if any node passed."""
    got = await r.verb("filter", p)
    assert not got["NodeNames"], got
    return " ".join([*got["FailedNodes"].values(), *got["FailedAndUnresolvableNodes"].values()])


def test_a_gang_pending_at_a_restart_stays_ahead_of_younger_gangs_until_it_is_filtered() -> None:
    async def go() -> None:
        clock = Clock()
        kube = cluster_on(clock)
        a = await start_on(kube, clock)
        await a.place(submit(kube, "o0", "one", spec(NLP, 8)))  # one of nlp's three nodes
        big = [submit(kube, f"g{i}", f"big-{i}", spec(NLP, 8, 3, "nlp/big")) for i in range(3)]
        assert "[InsufficientQuota]" in await reasons(a, big[0])
        await a.stop()

        clock.t += 30.0
        b = await start_on(kube, clock)  # a restart, or a standby taking the lead: no waits yet
        w = b.s.waiting["nlp/big"]
        assert w.reason.code is WaitCode.UNASKED and w.holds
        assert w.since == w.order <= clock.t - 30.0  # waiting since its pods were made, not the restart
        await until("big's pods marked", lambda: all(mark_of(kube, NLP, f"big-{i}") for i in range(3)))
        clock.t += 10.0
        small = submit(kube, "s0", "small", spec(NLP, 8))  # it would fit: two of nlp's nodes are free
        why = await reasons(b, small)
        assert "[Queued]" in why and "gang nlp/big" in why, why
        assert b.s.core.gang("nlp/pod:small") is None
        # kube-scheduler filters big again: the core's answer replaces the note
        assert "[InsufficientQuota]" in await reasons(b, kube.server.at(pod_path(NLP, "big-1")))
        assert b.s.waiting["nlp/big"].reason.code is WaitCode.INSUFFICIENT_QUOTA
        await b.stop()

    run(go())


def test_only_gangs_that_could_run_on_topogangs_profile_are_noted() -> None:
    """Not a gang larger than its VC's quota (it holds nobody back), not a pod of another scheduler
    or one with scheduling gates (kube-scheduler would not ask about it, so its note would hold the
    VC for a TTL), not a gang some of whose pods do not exist yet, not a pod whose namespace may not
    use the VC, and nothing under BestEffortFIFO."""

    async def go() -> None:
        clock = Clock()
        kube = cluster_on(clock)
        for i in range(4):
            submit(kube, f"h{i}", f"huge-{i}", spec(NLP, 8, 4, "nlp/huge"))  # 32 GPUs of 24
        submit(kube, "x0", "elsewhere", spec(NLP, 8), scheduler="default-scheduler")
        gated = pod("q0", "gated", NLP, spec(NLP, 8))
        gated["spec"] |= {"schedulerName": "topogang", "schedulingGates": [{"name": "example.com/hold"}]}
        kube.server.put(pod_path(NLP, "gated"), gated)  # kube-scheduler asks about no gated pod
        submit(kube, "l0", "lab-0", spec(NLP, 8, 2, "lab/pair"), ns="lab")  # lab may not use nlp
        for i in range(2):
            submit(kube, f"k{i}", f"kept-{i}", spec(NLP, 8, 2, "nlp/kept"))
        submit(kube, "p0", "partial-0", spec(NLP, 8, 2, "nlp/partial"))  # its second pod is not made yet
        a = await start_on(kube, clock, loaded=lab_may_use_vision_only())
        assert set(a.s.waiting) == {"nlp/kept"}
        await until("kept's pods marked", lambda: all(mark_of(kube, NLP, f"kept-{i}") for i in range(2)))
        assert mark_of(kube, NLP, "huge-0") is None and mark_of(kube, NLP, "elsewhere") is None
        assert mark_of(kube, NLP, "gated") is None and mark_of(kube, NLP, "partial-0") is None
        assert mark_of(kube, "lab", "lab-0") is None
        await a.stop()

        b = await start_on(kube, clock, best_effort=True)
        assert b.s.waiting == {}
        await b.stop()

    run(go())
