"""The Kubernetes edge's pure parts, on plain dicts: annotations, node health, recovery, the binder,
and the watch handlers, against a fake API (no network)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from extender.gangs.bindinfo import (
    BIND_INFO_ANNOTATIONS,
    ISOLATION_ANNOTATIONS,
    decode_bind_info,
    decode_isolation,
    encode_bind_info,
    pod_bind_info,
)
from extender.http.ports import BindError, BindTarget
from extender.kube import service as kube_service_module
from extender.kube.binder import KubeBinder, binding_body
from extender.kube.client import pod_path
from extender.kube.nodes import node_health
from extender.kube.recovery import recover
from extender.kube.service import kube_service
from extender.kube.sync import ClusterSync
from extender.standalone import MemoryBinder
from loadtest.kubefake import FakeKube, Fault
from tests.extender.helpers import (
    Clock,
    args,
    bind_args,
    example,
    fc_annotations,
    place,
    pod,
    run,
    scheduler,
    spec,
)
from topology.core import Core
from topology.decisions import GangPlacement, PodPlacement
from topology.invariants import violations

PLACEMENT = GangPlacement(
    gang="ml/llm/0_a",
    vc="vision",
    chain="A100-RACK",
    priority=100,
    requested_priority=100,
    pods=(
        PodPlacement(0, "a100-r1-n1", (0, 1, 2, 3, 4, 5, 6, 7), "worker/0"),
        PodPlacement(1, "a100-r1-n2", (0, 1, 2, 3, 4, 5, 6, 7), "worker/1"),
        PodPlacement(2, "a100-r1-n3", (4, 5), None),
    ),
    lca_level=5,
    nodes=("a100-r1-n1", "a100-r1-n2", "a100-r1-n3"),
)


def test_bind_info_round_trip() -> None:
    text = encode_bind_info(PLACEMENT, "a100-r1-n2", (0, 1, 2, 3, 4, 5, 6, 7), 1, "worker/1")
    assert "affinityGroupBindInfo:" in text and "podPlacements:" in text and "- 0\n" in text  # block style
    info = decode_bind_info(text)
    assert (info.node, info.chain, info.gang, info.vc, info.priority) == (
        "a100-r1-n2",
        "A100-RACK",
        "ml/llm/0_a",
        "vision",
        100,
    )
    assert [(p.node, p.gpus, p.slot, p.slot_key) for p in info.placements] == [
        ("a100-r1-n1", (0, 1, 2, 3, 4, 5, 6, 7), 0, "worker/0"),
        ("a100-r1-n2", (0, 1, 2, 3, 4, 5, 6, 7), 1, "worker/1"),
        ("a100-r1-n3", (4, 5), 2, None),
    ]
    assert info.slot == 1 and info.slot_key == "worker/1"


def test_hived_bind_info_and_isolation_decode() -> None:
    hived = """node: gpu-node-1
leafCellIsolation:
- 4
- 5
cellChain: V100-RACK
affinityGroupBindInfo:
- podPlacements:
  - physicalNode: gpu-node-1
    physicalLeafCellIndices: [0, 1]
    preassignedCellTypes: [V100-SWITCH, V100-SWITCH]
  - physicalNode: gpu-node-1
    physicalLeafCellIndices: [4, 5]
    preassignedCellTypes: ["", ""]
"""
    info = pod_bind_info({BIND_INFO_ANNOTATIONS[1]: hived})
    assert info is not None and info.gang is None and info.gpus == (4, 5)
    assert [p.gpus for p in info.placements] == [(0, 1), (4, 5)]
    assert info.placements[0].preassigned_cell_types == ("V100-SWITCH", "V100-SWITCH")
    old = hived.replace("leafCellIsolation", "gpuIsolation").replace(
        "physicalLeafCellIndices", "physicalGpuIndices"
    )
    assert decode_bind_info(old) == info  # HiveD before v0.3
    assert decode_isolation("4,5, 6") == (4, 5, 6)
    with pytest.raises(ValueError):
        decode_isolation("a,b")
    with pytest.raises(ValueError, match="leafCellIsolation"):
        decode_bind_info("node: x\nleafCellIsolation: nope\naffinityGroupBindInfo: []")


def node(
    name: str, *, ready: str = "True", cordoned: bool = False, cap: str | None = "8", alloc: str | None = "8"
) -> dict[str, Any]:
    status: dict[str, Any] = {
        "conditions": [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": ready}]
    }
    if cap is not None:
        status["capacity"] = {"nvidia.com/gpu": cap}
    if alloc is not None:
        status["allocatable"] = {"nvidia.com/gpu": alloc}
    return {"metadata": {"name": name}, "spec": {"unschedulable": cordoned}, "status": status}


def test_node_health_extraction() -> None:
    ok = node_health(node("n"))
    assert ok.healthy and ok.healthy_gpus(8) is None
    assert not node_health(node("n", ready="False")).healthy
    assert not node_health(node("n", ready="Unknown")).healthy
    assert not node_health(node("n", cordoned=True)).healthy
    assert not node_health({"metadata": {"name": "n"}}).healthy  # no Ready condition yet
    short = node_health(node("n", alloc="6"))
    assert short.healthy and short.missing_gpus == 2 and short.healthy_gpus(8) == 6
    assert node_health(node("n", cap=None, alloc=None)).healthy_gpus(8) is None


def bound_pods(s: Any, binder: MemoryBinder, pods: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pods as the API server would show them after our Bindings: nodeName + annotations."""
    out = []
    for p in pods:
        b = binder.bound.get(p["metadata"]["uid"])
        q = {
            **p,
            "metadata": {**p["metadata"], "annotations": dict(p["metadata"]["annotations"])},
            "spec": dict(p["spec"]),
        }
        if b is not None:
            q["metadata"]["annotations"].update(b.annotations)
            q["spec"]["nodeName"] = b.node
            q["status"] = {"phase": "Running"}
        out.append(q)
    return out


def test_recovery_rebuilds_every_gang_from_bound_pods_and_keeps_open_slots_reserved() -> None:
    async def go() -> None:
        binder = MemoryBinder()
        s = scheduler(binder)
        text = (
            '{"virtualCluster": "vision", "priority": 100, "leafCellNumber": 8, '
            '"affinityGroup": {"name": "x", '
            '"members": [{"podNumber": 4, "leafCellNumber": 8, "taskRole": "worker"}]}}'
        )
        gang = [
            pod(
                f"w{i}",
                f"llm-worker-{i}",
                "ml",
                text,
                annotations=fc_annotations("ml", "llm", "0_a", "worker", i),
            )
            for i in range(4)
        ]
        singles = [pod(f"s{i}", f"nb-{i}", "nlp", spec("nlp", 2)) for i in range(3)]
        done = pod("d0", "done", "nlp", spec("nlp", 1))
        for p in [*gang[:3], *singles, done]:  # one gang member never arrives
            await place(s, p)
        api = bound_pods(s, binder, [*gang, *singles, done])
        api[-1]["status"] = {"phase": "Succeeded"}
        fresh = Core(example().spec)
        report = recover(fresh, api, now=0.0, namespace_vcs={"ml": "vision"})
        assert report.pods == 6 and report.open_slots == 1 and not report.skipped
        assert sorted(report.gangs) == sorted(["ml/llm/0_a", "nlp/pod:nb-0", "nlp/pod:nb-1", "nlp/pod:nb-2"])
        for name in report.gangs:
            before, after = s.core.gang(name), fresh.gang(name)
            assert before is not None and after is not None
            assert s.core.placement_of(before).pods == fresh.placement_of(after).pods
        assert fresh.open_slots("ml/llm/0_a", 8, "worker/3") == s.core.open_slots("ml/llm/0_a", 8, "worker/3")
        assert violations(fresh) == []

    run(go())


def test_recovery_skips_pods_it_cannot_read_and_says_why() -> None:
    p = pod("u", "p", "nlp", spec("nlp", 2))
    p["spec"]["nodeName"] = "a100-r1-n1"
    report = recover(Core(example().spec), [p], now=0.0)
    assert report.pods == 0 and report.skipped and "annotation" in report.skipped[0][1]
    p["metadata"]["annotations"][ISOLATION_ANNOTATIONS[1]] = "0,1"  # a HiveD pod without bind info
    fresh = Core(example().spec)
    report = recover(fresh, [p], now=0.0)
    assert report.pods == 1 and fresh.gang("nlp/pod:p") is not None


BINDING = r"/pods/[^/]+/binding$"


def apiserver(pods: Sequence[dict[str, Any]] = (), nodes: Sequence[dict[str, Any]] = ()) -> FakeKube:
    """The in-memory API server holding these pods and nodes; every request recorded."""
    kube = FakeKube(record=True)
    for n in nodes:
        kube.server.put(f"/api/v1/nodes/{n['metadata']['name']}", n)
    for p in pods:
        kube.server.put(pod_path(p["metadata"]["namespace"], p["metadata"]["name"]), p)
    return kube


def test_kube_binder_posts_the_binding_and_accepts_a_conflict_on_the_same_node() -> None:
    async def go() -> None:
        kube = apiserver([{"metadata": {"uid": "u", "name": "p", "namespace": "ml"}, "spec": {}}])
        binder = KubeBinder(kube)
        target = BindTarget("ml", "p", "u")
        await binder.bind(target, "n1", {"a": "b"})
        method, path, body = kube.calls[0]
        assert (method, path) == ("POST", "/api/v1/namespaces/ml/pods/p/binding")
        assert body == binding_body(target, "n1", {"a": "b"})
        assert body["metadata"]["uid"] == "u" and body["target"] == {
            "apiVersion": "v1",
            "kind": "Node",
            "name": "n1",
        }
        await binder.bind(target, "n1", {})  # a 409, already there: success
        with pytest.raises(BindError):
            await binder.bind(target, "n2", {})
        kube.inject(Fault("POST", BINDING, "error", status=500))
        with pytest.raises(BindError, match="refused"):
            await binder.bind(target, "n1", {})

    run(go())


def test_cluster_sync_start_recovers_then_follows_pod_and_node_events() -> None:
    async def go() -> None:
        binder = MemoryBinder()
        s = scheduler(binder)
        pods = [pod(f"u{i}", f"w-{i}", "vision", spec("vision", 8, 2, "vision/two")) for i in range(2)]
        for p in pods:
            await place(s, p)
        api = bound_pods(s, binder, pods)
        names = list(s.core.topo.node_names)
        kube = apiserver(api, [node(n) for n in names[1:]])
        service = kube_service(example(), kube)
        k = service.scheduler
        assert not k.ready
        sync = ClusterSync(k, kube)
        k.evictor = sync.evict
        await sync.start()
        assert k.ready and k.core.gang("vision/two") is not None
        assert k.core.node_health(names[0]) == tuple(range(8))  # not listed: bad until it shows up
        await sync.on_node("ADDED", node(names[0]))
        assert k.core.node_health(names[0]) == ()
        await sync.on_node("MODIFIED", node(names[0], alloc="7"))
        assert k.core.node_health(names[0]) == (7,)
        await sync.on_pod("DELETED", api[0])
        gang = k.core.gang("vision/two")
        assert gang is not None and gang.slot_of("u0") is None
        finished = {**api[1], "status": {"phase": "Succeeded"}}
        await sync.on_pod("MODIFIED", finished)
        assert k.core.gang("vision/two") is None  # every member gone
        await sync.relist_pods([])
        assert violations(k.core) == []

    run(go())


def test_kube_mode_bind_falls_back_to_reading_the_pod() -> None:
    async def go() -> None:
        p = pod("u1", "solo", "nlp", spec("nlp", 2))
        kube = apiserver([p])
        service = kube_service(example(), kube)
        s = service.scheduler
        s.ready = True
        r = await s.filter(args(p))
        s.forget_pod("u1")
        assert await s.bind(bind_args(p, r["NodeNames"][0])) == {"Error": ""}
        post = [c for c in kube.calls if c[0] == "POST"]
        assert post and post[-1][1].endswith("/pods/solo/binding")
        body = post[-1][2]
        assert body is not None and ISOLATION_ANNOTATIONS[0] in body["metadata"]["annotations"]

    run(go())


def test_recovery_keeps_a_rack_sized_gang_guaranteed() -> None:
    async def go() -> None:
        binder = MemoryBinder()
        s = scheduler(binder)
        pods = [pod(f"w{i}", f"w-{i}", "vision", spec("vision", 8, 4, "vision/rack")) for i in range(4)]
        for p in pods:
            await place(s, p)
        fresh = Core(example().spec)
        recover(fresh, bound_pods(s, binder, pods), now=0.0)
        gang = fresh.gang("vision/rack")
        assert gang is not None and gang.priority == 0 and not gang.history

    run(go())


def test_recovery_puts_a_framework_shaped_gang_back_under_its_own_name() -> None:
    """A FrameworkController pod without an affinity group gets its gang's shape from the Framework
    object, which recovery does not read: the bind info names the gang it was placed in, and the
    pods must be adopted into that gang, not into one-pod gangs named after each pod."""

    async def go() -> None:
        binder = MemoryBinder()
        text = '{"virtualCluster": "research", "priority": 100, "leafCellNumber": 2}'
        template = {
            "metadata": {"annotations": {"topogang.io/pod-scheduling-spec": text}},
            "spec": {
                "containers": [
                    {"name": "c", "resources": {"limits": {"topogang.io/pod-scheduling-enable": "1"}}}
                ]
            },
        }
        fw = {"spec": {"taskRoles": [{"name": "worker", "taskNumber": 3, "task": {"pod": template}}]}}

        async def framework(namespace: str, name: str) -> Mapping[str, Any] | None:
            return fw if (namespace, name) == ("research", "fw") else None

        s = scheduler(binder, framework_lookup=framework)
        pods = [
            pod(
                f"w{i}",
                f"fw-worker-{i}",
                "research",
                text,
                annotations=fc_annotations("research", "fw", "0_a", "worker", i),
            )
            for i in range(3)
        ]
        for p in pods[:2]:  # the third member is not bound yet
            await place(s, p)
        placed = s.core.gang("research/fw/0_a")
        assert placed is not None and len(placed.slots) == 3
        fresh = Core(example().spec)
        report = recover(fresh, bound_pods(s, binder, pods), now=0.0)
        assert report.gangs == ["research/fw/0_a"] and report.pods == 2 and report.open_slots == 1
        gang = fresh.gang("research/fw/0_a")
        assert gang is not None and fresh.gang("research/fw-worker-0") is None
        assert s.core.placement_of(placed).pods == fresh.placement_of(gang).pods
        assert sorted(str(sl.pod_uid) for sl in gang.slots if sl.pod_uid) == ["w0", "w1"]
        assert violations(fresh) == []

    run(go())


def test_a_binding_whose_reply_is_lost_counts_as_bound_when_the_pod_shows_it() -> None:
    """A timed-out Binding may have been applied: if the slot went back, the next member could be
    given the same GPUs while this pod already runs on them. The binder reads the pod back."""

    async def go() -> None:
        pods = [pod(f"u{i}", f"w-{i}", "nlp", spec("nlp", 4, 2, "nlp/pair")) for i in range(2)]
        pods.append(pod("u2", "solo", "nlp", spec("nlp", 1)))
        kube = apiserver(pods)
        kube.inject(Fault("POST", BINDING, "lost-reply", count=2))  # applied, but no reply
        s = kube_service(example(), kube).scheduler
        s.ready = True
        r = await s.filter(args(pods[0]))
        node = r["NodeNames"][0]
        assert await s.bind(bind_args(pods[0], node)) == {"Error": ""}
        gang = s.core.gang("nlp/pair")
        assert gang is not None and gang.slot_of("u0") is not None
        r = await s.filter(args(pods[1]))
        assert await s.bind(bind_args(pods[1], r["NodeNames"][0])) == {"Error": ""}
        bound = [kube.server.at(pod_path("nlp", f"w-{i}")) for i in range(2)]
        gpus = [p["metadata"]["annotations"][ISOLATION_ANNOTATIONS[0]] for p in bound]
        assert gpus[0] != gpus[1] and violations(s.core) == []
        kube.inject(Fault("POST", BINDING, "timeout"))  # never arrived: the bind fails, its slot goes back
        r = await s.filter(args(pods[2]))
        b = await s.bind(bind_args(pods[2], r["NodeNames"][0]))
        solo = s.core.gang("nlp/pod:solo")
        assert "got no answer" in b["Error"] and "timed out" in b["Error"]
        assert solo is not None and solo.slot_of("u2") is None

    run(go())


def test_framework_reads_are_forgotten_once_stale(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every Framework read is cached for FRAMEWORK_TTL; entries past it must go, or every
    framework ever scheduled stays in memory with its whole object."""
    monkeypatch.setattr(kube_service_module, "REPEAT_SECONDS", 0.001)  # the sweep's period

    async def go() -> None:
        clock = Clock()
        service = kube_service(example(), apiserver(), clock=clock)
        lookup = service.scheduler.framework_lookup
        assert lookup is not None and lookup.__closure__ is not None
        cache = lookup.__closure__[lookup.__code__.co_freevars.index("frameworks")].cell_contents
        await lookup("ml", "a")
        await lookup("ml", "b")
        assert len(cache) == 2
        sweep = next(fn for fn in service.background if getattr(fn, "__name__", "") == "forget_old_events")
        task = asyncio.create_task(sweep())
        await asyncio.sleep(0.02)
        assert len(cache) == 2  # still fresh
        clock.t += kube_service_module.FRAMEWORK_TTL + 1
        await asyncio.sleep(0.02)
        task.cancel()
        assert cache == {}

    run(go())


def test_a_relist_releases_pods_bound_and_deleted_while_the_watch_was_down() -> None:
    """kube-scheduler keeps scheduling while the extender's pod watch is down: a pod filtered,
    bound and deleted in that time never reaches the watch, so no DELETED comes for it. The next
    list must release its GPUs (and forget it), not only those of pods the watch had seen."""

    async def go() -> None:
        kube = apiserver(nodes=[node(n) for n in Core(example().spec).topo.node_names])
        service = kube_service(example(), kube)
        s = service.scheduler
        sync = ClusterSync(s, kube)
        await sync.start()
        gone, alive, waiting = (pod(f"u{i}", f"p-{i}", "nlp", spec("nlp", 2)) for i in range(3))
        for p in (gone, alive):
            kube.server.put(pod_path("nlp", p["metadata"]["name"]), p)
            r = await s.filter(args(p))
            assert await s.bind(bind_args(p, r["NodeNames"][0])) == {"Error": ""}
            p["spec"]["nodeName"] = r["NodeNames"][0]
        await s.filter(args(waiting))  # filtered, never bound
        # a task shaped by a Framework object not readable yet: its request is read afresh each time
        # (never cached), yet it holds its slot; before, a relist could not name it and kept its GPUs
        task = pod(
            "u7", "fw-worker-0", "nlp", spec("nlp", 2), annotations=fc_annotations("nlp", "fw", "0_a", "w", 0)
        )
        kube.server.put(pod_path("nlp", "fw-worker-0"), task)
        r = await s.filter(args(task))
        assert await s.bind(bind_args(task, r["NodeNames"][0])) == {"Error": ""}
        assert s.core.holds_slot("u7") and s.cached("u7") is None
        kube.server.forget(pod_path("nlp", "fw-worker-0"))
        finished = {**gone, "metadata": {**gone["metadata"], "uid": "u9"}, "status": {"phase": "Succeeded"}}
        await sync.on_pod("MODIFIED", finished)  # a pod the watch saw finish
        assert "u9" in sync.done and not sync.live.keys() - {"u9"}
        kube.server.forget(pod_path("nlp", "p-0"))  # deleted in the outage; p-1 came after the list
        await sync.relist_pods([])
        assert s.core.gang("nlp/pod:p-0") is None and s.cached("u0") is None
        assert s.core.gang("nlp/pod:fw-worker-0") is None and not s.core.holds_slot("u7")
        assert s.core.gang("nlp/pod:p-1") is not None and s.cached("u1") is not None
        assert s.cached("u2") is None and "u2" not in s.gang_ledger.pods  # only remembered: forgotten
        assert not sync.done and not sync.live
        assert violations(s.core) == []

    run(go())


def test_a_conflict_on_the_same_node_with_other_gpus_is_not_success() -> None:
    """A 409 (or a lost reply) counts as success only when the pod is there by this very decision:
    on another GPU of the same node, the slot being bound would be held for a pod running elsewhere."""

    async def go() -> None:
        annotations = {ISOLATION_ANNOTATIONS[0]: "3"}
        meta = {"uid": "u", "name": "p", "namespace": "ml", "annotations": annotations}
        there: dict[str, Any] = {"metadata": meta, "spec": {"nodeName": "n1"}}
        kube = apiserver([there])  # a Binding of a bound pod: 409
        binder, target = KubeBinder(kube), BindTarget("ml", "p", "u")
        await binder.bind(target, "n1", {ISOLATION_ANNOTATIONS[0]: "3"})  # the same decision again
        with pytest.raises(BindError, match="refused"):
            await binder.bind(target, "n1", {ISOLATION_ANNOTATIONS[0]: "0"})

    run(go())


def test_recovery_keeps_an_earlier_placement_being_evicted_apart() -> None:
    """A gang placed again while a member of its expired placement is still terminating has pods of
    two placements under one name. Recovery restores the current one (its open slot reserved) and
    keeps the terminating pod's GPUs held apart, until it is gone: merged, the gang had a slot
    too many, and the old pod's GPUs could be handed out while it still ran."""

    async def go() -> None:
        binder, clock = MemoryBinder(), Clock()
        s = scheduler(binder, clock, ttl_seconds=30.0)
        text = spec("nlp", 4, 2, "nlp/pair")
        old, new = pod("a", "pair-0", "nlp", text), pod("b", "pair-0", "nlp", text)
        await place(s, old)
        clock.t += 31
        await s.expire()  # old is evicted: it terminates while the gang places again
        clock.t += 30  # an expired gang is placed again one TTL later
        await place(s, new)
        api = bound_pods(s, binder, [old, new])
        api[0]["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
        fresh = Core(example().spec)
        report = recover(fresh, api, now=0.0, namespace_vcs={"nlp": "nlp"})
        assert violations(fresh) == [] and report.pods == 2, report.lines()
        gang = fresh.gang("nlp/pair")
        current = s.core.gang("nlp/pair")
        assert gang is not None and current is not None
        assert fresh.placement_of(gang).pods == s.core.placement_of(current).pods
        assert [sl.pod_uid for sl in gang.slots].count("b") == 1 and len(gang.slots) == 2
        held = fresh.reservations.by_id[fresh.reservations.pod_gang["a"]]
        assert held is not gang and held.evicting and held.deadline is None
        fresh.release_pod("a", 1.0)  # gone at last: its GPUs are free, the gang is untouched
        assert fresh.reservations.by_id.get(held.id) is None and fresh.gang("nlp/pair") is gang
        assert violations(fresh) == []

    run(go())


def test_a_finished_pod_is_not_bound_and_its_deletion_clears_what_a_late_call_left() -> None:
    """A stale bind or filter can reach a pod that already finished (it was released then). The
    bind is refused; and when the pod is deleted, whatever such a call left behind goes too."""

    async def go() -> None:
        done = pod("u1", "job-0", "nlp", spec("nlp", 2))
        done["spec"]["nodeName"] = "a100-r1-n1"
        done["status"] = {"phase": "Succeeded"}
        kube = apiserver([done], [node(n) for n in Core(example().spec).topo.node_names])
        s = kube_service(example(), kube).scheduler
        sync = ClusterSync(s, kube)
        await sync.start()
        await sync.on_pod("MODIFIED", done)
        assert "u1" in sync.done
        b = await s.bind(bind_args(done, "a100-r1-n1"))
        assert "finished" in b["Error"] and not s.core.reservations.pod_gang and s.cached("u1") is None
        await s.filter(args(done))  # a stale filter: remembered again
        assert s.cached("u1") is not None
        await sync.on_pod("DELETED", done)
        assert s.cached("u1") is None and "u1" not in s.gang_ledger.pods and not sync.done

    run(go())


def test_recovery_reserves_nothing_for_a_gang_whose_pods_are_all_being_deleted() -> None:
    """An expired gang's bound members are evicted and terminate for a while; its open slots were
    let go and may be someone else's by now. After a restart then, those pods keep their GPUs until
    they are gone, but no reservation comes back for the slots no pod holds."""

    async def go() -> None:
        binder, clock = MemoryBinder(), Clock()
        s = scheduler(binder, clock, ttl_seconds=30.0)
        half = pod("a", "pair-0", "nlp", spec("nlp", 4, 2, "nlp/pair"))
        await place(s, half)
        clock.t += 31
        await s.expire()  # pair-0 is evicted; the other half of the node is free again
        other = pod("b", "other", "nlp", spec("nlp", 4))
        _, node = await place(s, other)
        api = bound_pods(s, binder, [half, other])
        api[0]["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
        assert api[0]["spec"]["nodeName"] == node  # the very GPUs pair's open slot had
        fresh = Core(example().spec)
        report = recover(fresh, api, now=0.0, namespace_vcs={"nlp": "nlp"})
        assert violations(fresh) == [] and report.pods == 2 and report.open_slots == 0, report.lines()
        assert fresh.gang("nlp/pair") is None and fresh.gang("nlp/pod:other") is not None
        held = fresh.reservations.by_id[fresh.reservations.pod_gang["a"]]
        assert held.evicting and held.name.startswith("nlp/pair/evicted/")

    run(go())
