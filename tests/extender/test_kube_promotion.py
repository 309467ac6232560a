"""Promotion end to end in Kubernetes mode, against the in-memory API server: a gang whose spec says
`promoteWhenQuota` is promoted when its VC's quota frees up, its pods' bind info is re-written (a
failed patch is retried by the next periodic pass, and signed again), and after a restart it is back
guaranteed; a gang that did not opt in stays opportunistic throughout."""

from __future__ import annotations

from datetime import UTC, datetime

from extender.gangs import reservation_objects as rsv
from extender.gangs.bindinfo import pod_bind_info
from extender.gangs.bindsig import SIGNATURE_ANNOTATION, BindSigner
from extender.kube.client import pod_path
from extender.standalone import MemoryBinder
from loadtest.kubefake import FakeKube, Fault
from tests.extender.helpers import Clock, args, bind_args, example, pod, run, scheduler, spec
from tests.extender.test_kube_durable import COLLECTION, Running, cluster, start, submit, until
from topology.core import Core
from topology.decisions import GangRequest, Member, Wait, WaitCode
from topology.invariants import violations

NLP = "nlp"  # 3 whole nodes of quota in the example cluster
KEY = b"promotion-test-signing-key-32-by"  # recovery adopts only bind info this key signed


def cell_types(kube: FakeKube, name: str) -> tuple[str, ...]:
    pod = kube.server.get(pod_path(NLP, name))
    assert pod is not None, name
    info = pod_bind_info(pod["metadata"]["annotations"])
    assert info is not None
    (mine,) = [p for p in info.placements if p.node == info.node and p.gpus == info.gpus]
    return mine.preassigned_cell_types


def gone(kube: FakeKube, name: str) -> None:
    """The pod has ended and is gone for good (a deletion with no grace period)."""
    kube.server.delete(pod_path(NLP, name), {"gracePeriodSeconds": 0})


async def shut_down(kube: FakeKube, r: Running) -> None:
    """A clean stop: the reservation objects are left as the core has them (none: every gang is
    bound), so what comes back after the restart comes from the pods' bind info alone."""
    for fn in r.service.on_stop:
        await fn()
    await r.stop()
    assert kube.server.list(COLLECTION)[0] == []


def priority(r: Running, gang: str) -> int:
    g = r.s.core.gang(gang)
    assert g is not None, gang
    return g.priority


async def vc_used(r: Running) -> float:
    text = (await r.http.get("/metrics")).text
    line = [x for x in text.splitlines() if x.startswith('topogang_vc_gpus{state="used",vc="nlp"}')]
    assert line, "no nlp usage metric"
    return float(line[0].rsplit(" ", 1)[1])


def test_a_promoted_gang_is_written_back_and_comes_back_guaranteed_after_a_restart() -> None:
    async def go() -> None:
        kube, clock = cluster(), Clock()
        a = await start(kube, clock, signing_key=KEY)
        big = [submit(kube, f"b{i}", f"big-{i}", NLP, spec(NLP, 8, 3, "nlp/big")) for i in range(3)]
        for p in big:
            await a.place(p)
        quota_types = cell_types(kube, "big-0")
        assert quota_types and all(quota_types)
        opp = spec(NLP, 8, 1, "nlp/opp", priority=-1, promoteWhenQuota=True)
        await a.place(submit(kube, "o0", "opp-0", NLP, opp))
        await a.place(submit(kube, "s0", "stay-0", NLP, spec(NLP, 8, 1, "nlp/stay", priority=-1)))
        assert (priority(a, "nlp/opp"), priority(a, "nlp/stay")) == (-1, -1)
        assert cell_types(kube, "opp-0") == ("",) * 8

        kube.inject(Fault("PATCH", r"/pods/opp-0$", "error"))  # the first write back fails
        for i in range(3):
            gone(kube, f"big-{i}")  # nlp's quota frees up
        await until("nlp/big released", lambda: a.s.core.gang("nlp/big") is None)
        assert (priority(a, "nlp/opp"), priority(a, "nlp/stay")) == (0, -1)
        assert violations(a.s.core) == []
        assert await vc_used(a) == 8.0  # the metrics count it as nlp's own work at once
        kube.server.add_token("t-viewer", "viewer", audiences=("topogang",))  # the ledger is an admin's
        kube.server.grant("viewer", "gangs", "get")
        doc = (await a.http.get("/v1/gangs/nlp/opp", headers={"Authorization": "Bearer t-viewer"})).json()
        assert doc["placement"]["priority"] == 0, doc

        await a.s.expire()  # the periodic pass: the patch fails, is logged, and stays pending
        assert kube.injected == {"error": 1} and a.s.promotions.failures == 1
        assert cell_types(kube, "opp-0") == ("",) * 8 and "nlp/opp" in a.s.promotions.pending
        await a.s.expire()  # the next pass writes it
        assert cell_types(kube, "opp-0") == quota_types[:8] and not a.s.promotions.pending
        ann = kube.server.at(pod_path(NLP, "opp-0"))["metadata"]["annotations"]
        assert ann[SIGNATURE_ANNOTATION] == BindSigner(KEY).sign("o0", ann["topogang.io/pod-bind-info"])
        assert cell_types(kube, "stay-0") == ("",) * 8  # never promoted, never re-written
        await a.s.expire()
        assert kube.requests.get("PATCH pods") == 2  # written once, not again every pass
        text = (await a.http.get("/metrics")).text
        assert 'topogang_promotion_writes_total{result="failed"} 1.0' in text
        assert 'topogang_promotion_writes_total{result="ok"} 1.0' in text
        await shut_down(kube, a)

        clock.t += 30
        b = await start(kube, clock, signing_key=KEY)
        assert (priority(b, "nlp/opp"), priority(b, "nlp/stay")) == (0, -1)
        assert await vc_used(b) == 8.0
        # the consequence: nlp's next 3-node job waits for quota, since nlp/opp holds one of nlp's
        # nodes and cannot be preempted by it (same VC, not a higher priority) ...
        nxt = [submit(kube, f"n{i}", f"next-{i}", NLP, spec(NLP, 8, 3, "nlp/next")) for i in range(3)]
        r = await b.verb("filter", nxt[0])
        assert not r["NodeNames"], r
        waiting = b.s.waiting_of("nlp/next")
        assert waiting is not None and waiting.reason.code is WaitCode.INSUFFICIENT_QUOTA
        # ... until it ends; nlp/stay, which did not opt in, stays a guest even with nlp's quota free
        gone(kube, "opp-0")
        await until("nlp/opp released", lambda: b.s.core.gang("nlp/opp") is None)
        for p in nxt:
            await b.place(p)
        assert priority(b, "nlp/stay") == -1 and priority(b, "nlp/next") == 0
        assert violations(b.s.core) == []
        await b.stop()

    run(go())


def test_without_the_key_an_opportunistic_gang_is_not_promoted_and_nothing_is_written() -> None:
    async def go() -> None:
        kube, clock = cluster(), Clock()
        a = await start(kube, clock)
        for i in range(3):
            await a.place(submit(kube, f"b{i}", f"big-{i}", NLP, spec(NLP, 8, 3, "nlp/big")))
        await a.place(submit(kube, "s0", "stay-0", NLP, spec(NLP, 8, 1, "nlp/stay", priority=-1)))
        for i in range(3):
            gone(kube, f"big-{i}")
        await until("nlp/big released", lambda: a.s.core.gang("nlp/big") is None)
        await a.s.expire()
        assert priority(a, "nlp/stay") == -1 and "PATCH pods" not in kube.requests
        await shut_down(kube, a)
        b = await start(kube, clock)
        assert priority(b, "nlp/stay") == -1
        # a guest: nlp's whole quota is there for a 3-node job, as if nlp/stay did not exist
        for i in range(3):
            await b.place(submit(kube, f"n{i}", f"next-{i}", NLP, spec(NLP, 8, 3, "nlp/next")))
        await b.stop()

    run(go())


def test_standalone_rewrites_the_in_memory_bind_info_and_reservation_objects_keep_the_opt_in() -> None:
    async def go() -> None:
        binder = MemoryBinder()
        s = scheduler(binder)

        async def place(uid: str, text: str) -> None:
            p = pod(uid, uid, NLP, text)
            r = await s.filter(args(p))
            assert r["NodeNames"], r
            assert (await s.bind(bind_args(p, r["NodeNames"][0]))) == {"Error": ""}

        for i in range(3):
            await place(f"big-{i}", spec(NLP, 8, 3, "nlp/big"))
        await place("opp-0", spec(NLP, 8, 1, "nlp/opp", priority=-1, promoteWhenQuota=True))

        def types() -> tuple[str, ...]:
            info = pod_bind_info(binder.bound["opp-0"].annotations)
            assert info is not None
            return info.placements[0].preassigned_cell_types

        assert types() == ("",) * 8
        for i in range(3):
            await s.pod_gone(f"big-{i}")
        g = s.core.gang("nlp/opp")
        assert g is not None and g.priority == 0
        known, s.promotions.locate = s.promotions.locate, []
        await s.expire()  # a pod it cannot name: nothing written, the gang stays pending
        assert types() == ("",) * 8 and list(s.promotions.pending) == ["nlp/opp"]
        s.promotions.locate = known
        await s.expire()
        assert types() == ("A100-NODE",) * 8 and not s.promotions.pending

    run(go())
    core = Core(example().spec)
    req = GangRequest("nlp/r", NLP, (Member(2, 8),), priority=-1, promote_when_quota=True)
    assert not isinstance(core.reserve(req, 1.0), Wait)
    g = core.gang("nlp/r")
    assert g is not None
    assert rsv.decode(rsv.encode(core, g, clock_now=1.0, wall_now=datetime.now(UTC))).request == req
