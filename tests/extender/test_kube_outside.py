"""GPUs held by pods that are not topogang's, against the in-memory API server.

topogang's kube-scheduler profile leaves `nvidia.com/gpu` to the extender, so a pod without the
opt-in that holds GPUs (placed by the default scheduler, or created with `spec.nodeName`) is counted
by nobody else: its GPUs must be kept out of topogang's placements on its node while it is bound and
not finished, from the start-up list on (before readiness), and given back when it goes.
"""

from __future__ import annotations

from typing import Any

from extender.kube.client import pod_path
from extender.kube.outside import OutsidePods, highest
from extender.kube.sync import ClusterSync
from loadtest.kubefake import FakeKube
from tests.extender.helpers import Clock, nodes, ready_node, run, spec
from tests.extender.test_kube_bindsig import events, until_true
from tests.extender.test_kube_durable import Running, cluster, start, submit, until
from topology.invariants import violations

NLP = "nlp"
OTHER = "default"


def plain(
    name: str, node: str | None, gpus: int, *, phase: str = "Running", where: str = "limits"
) -> dict[str, Any]:
    """A pod that is not topogang's: no opt-in, `gpus` nvidia.com/gpu, bound to `node` (if any)."""
    spec_: dict[str, Any] = {
        "containers": [{"name": "main", "resources": {where: {"nvidia.com/gpu": str(gpus), "cpu": "1"}}}]
    }
    if node is not None:
        spec_["nodeName"] = node
    return {
        "metadata": {"uid": f"uid-{name}", "name": name, "namespace": OTHER},
        "spec": spec_,
        "status": {"phase": phase},
    }


def put(kube: FakeKube, p: dict[str, Any]) -> None:
    kube.server.put(pod_path(p["metadata"]["namespace"], p["metadata"]["name"]), p)


def sync_of(r: Running) -> ClusterSync:
    """The service's sync: the object behind its pod source."""
    sync = getattr(r.service.pod_source, "__self__", None)
    assert isinstance(sync, ClusterSync)
    return sync


async def filtered(r: Running, p: dict[str, Any], node: str) -> list[str]:
    """The nodes topogang's filter passes for pod `p`, offered `node` only."""
    return list((await r.verb("filter", p, NodeNames=[node]))["NodeNames"] or [])


def test_the_gpus_to_mark_are_the_highest_unheld_ones() -> None:
    assert highest([0, 3, 5, 7], 2) == {5, 7} and highest([1], 3) == {1} and highest([4], 0) == frozenset()
    out = OutsidePods()
    a = out.hold(plain("a", "n", 3), "n", 3)
    assert a is not None and out.hold(plain("a", "n", 3), "n", 3) is None  # told once
    assert out.hold(plain("b", "n", 2), "n", 2) is not None and out.gpus_on("n") == 5
    assert out.choose("n", [0, 1, 2, 6, 7]) == {0, 1, 2, 6, 7} and "n" not in out.short
    assert out.choose("n", [6, 7]) == {6, 7} and "n" in out.short
    assert out.forget("uid-a") == a and out.gpus_on("n") == 2 and out.forget("uid-a") is None
    assert out.forget("uid-b") is not None and out.per_node == {}


def test_a_plain_pod_holding_gpus_keeps_them_from_topogang_until_it_is_gone() -> None:
    async def go() -> None:
        kube, clock = cluster(), Clock()
        r = await start(kube, clock)
        core, node = r.s.core, nodes()[0]
        put(kube, plain("trainer", node, 6))
        await until("the GPUs held", lambda: core.node_fill(node) == (2, 8))
        assert core.node_health(node) == (2, 3, 4, 5, 6, 7)
        # the admin sees them: as bad GPUs in /v1/inspect and the metrics, and as their own gauge
        kube.server.add_token("t-admin", "admin", audiences=("topogang",))
        kube.server.grant("admin", "clusterstatus", "get")
        doc = (await r.http.get("/v1/inspect", headers={"Authorization": "Bearer t-admin"})).json()
        assert doc["gpus"]["bad"] == 6, doc
        text = (await r.http.get("/metrics")).text
        assert "topogang_outside_gpus 6.0" in text and 'topogang_cluster_gpus{state="bad"} 6.0' in text
        # a whole-node pod cannot go there; a 2-GPU one can, on the two GPUs left
        whole = submit(kube, "w0", "whole-0", NLP, spec(NLP, 8, 1, "nlp/whole"))
        assert await filtered(r, whole, node) == []
        small = submit(kube, "s0", "small-0", NLP, spec(NLP, 2, 1, "nlp/small"))
        assert await filtered(r, small, node) == [node]
        await r.place(small)
        g = core.gang("nlp/small")
        assert g is not None and [core.slot_place(s) for s in g.slots] == [(node, (0, 1))]
        # a status change is no new pod: one Event, once
        put(kube, {**plain("trainer", node, 6), "status": {"phase": "Running", "podIP": "10.0.0.9"}})
        assert await until_true(lambda: bool(events(kube, "GpusHeldOutside")))
        (ev,) = events(kube, "GpusHeldOutside")
        assert (
            ev["involvedObject"]["name"] == "trainer" and "holds 6 nvidia.com/gpu of " + node in ev["message"]
        )
        assert ev["metadata"]["namespace"] == OTHER
        # it finishes: its GPUs come back (topogang's two stay held)
        put(kube, plain("trainer", node, 6, phase="Succeeded"))
        await until("the GPUs back", lambda: core.node_fill(node) == (6, 8))
        assert core.node_health(node) == ()
        assert "topogang_outside_gpus 0.0" in (await r.http.get("/metrics")).text
        assert violations(core) == []
        await r.stop()

    run(go())


def test_what_is_not_held_changes_nothing() -> None:
    async def go() -> None:
        kube, clock = cluster(), Clock()
        r = await start(kube, clock)
        core, node = r.s.core, nodes()[0]
        put(kube, plain("pending", None, 4))  # not bound yet
        put(kube, plain("done", node, 4, phase="Failed"))
        put(kube, plain("cpu-only", node, 0))
        put(kube, plain("elsewhere", "not-in-the-config", 4))
        put(kube, plain("marker", node, 1))  # the last event: once it is seen, so are the others
        await until("the marker held", lambda: core.node_fill(node) == (7, 8))
        assert r.service.scheduler.core.node_health(node) == (7,)
        kube.server.delete(pod_path(OTHER, "marker"), {"gracePeriodSeconds": 0})
        await until("the marker gone", lambda: core.node_fill(node) == (8, 8))
        await r.stop()

    run(go())


def test_at_start_the_list_holds_them_before_readiness_and_after_recovery() -> None:
    async def go() -> None:
        kube, clock = cluster(), Clock()
        a = await start(kube, clock)
        node = await a.place(submit(kube, "s0", "small-0", NLP, spec(NLP, 2, 1, "nlp/small")))
        g = a.s.core.gang("nlp/small")
        assert g is not None
        (ours,) = [a.s.core.slot_place(s)[1] for s in g.slots]
        for fn in a.service.on_stop:
            await fn()
        await a.stop()
        put(kube, plain("trainer", node, 6))  # created while topogang was down
        b = await start(kube, clock)  # `start` returns once ready
        core = b.s.core
        assert core.node_fill(node) == (0, 8)
        held = set(core.node_health(node))
        assert len(held) == 6 and not held & set(ours)  # the GPUs the adopted gang holds stay its own
        assert violations(core) == []
        await b.stop()

    run(go())


def test_a_node_too_full_for_the_pod_is_marked_once_topogang_lets_gpus_go() -> None:
    async def go() -> None:
        kube, clock = cluster(), Clock()
        r = await start(kube, clock)
        core = r.s.core
        node = await r.place(submit(kube, "w0", "whole-0", NLP, spec(NLP, 8, 1, "nlp/whole")))
        put(kube, plain("intruder", node, 3))  # the kubelet will refuse one of them; count it anyway
        await until("the intruder seen", lambda: node in sync_of(r).outside.short)
        assert await until_true(lambda: bool(events(kube, "GpusHeldOutside")))
        assert core.node_health(node) == ()
        kube.server.delete(pod_path(NLP, "whole-0"), {"gracePeriodSeconds": 0})
        await until("the GPUs marked", lambda: core.node_health(node) == (5, 6, 7))
        assert core.node_fill(node) == (5, 8) and node not in sync_of(r).outside.short
        await r.stop()

    run(go())


def test_an_allocatable_shortfall_adds_to_what_the_pods_hold() -> None:
    async def go() -> None:
        kube, clock = cluster(), Clock()
        node = nodes()[0]
        kube.server.put(f"/api/v1/nodes/{node}", ready_node(node, 7, capacity=8))  # one GPU broken
        put(kube, plain("trainer", node, 2))
        r = await start(kube, clock)
        assert r.s.core.node_fill(node) == (5, 8)
        assert r.s.core.node_health(node) == (5, 6, 7)
        await r.stop()

    run(go())


def test_a_relist_gives_back_the_gpus_of_a_pod_deleted_while_the_watch_was_down() -> None:
    async def go() -> None:
        kube, clock = cluster(), Clock()
        node = nodes()[0]
        put(kube, plain("trainer", node, 4))
        r = await start(kube, clock)
        sync = sync_of(r)
        assert r.s.core.node_fill(node) == (4, 8)
        await sync.relist_pods([])
        assert r.s.core.node_fill(node) == (8, 8) and sync.outside.held == {}
        await r.stop()

    run(go())
