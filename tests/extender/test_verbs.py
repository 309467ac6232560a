"""The four verbs against a real core, driven the way kube-scheduler drives them (no HTTP)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Mapping
from typing import Any

import pytest

from extender.gangs.bindinfo import BIND_INFO_ANNOTATIONS, ISOLATION_ANNOTATIONS, decode_bind_info
from extender.gangs.disruption import Disruption
from extender.http import views, wire
from extender.http.ports import BindError, BindTarget
from extender.http.verbs import Scheduler
from extender.standalone import MemoryBinder
from tests.extender.helpers import (
    Clock,
    args,
    bind_args,
    fc_annotations,
    nodes,
    place,
    pod,
    run,
    scheduler,
    spec,
)
from topology.invariants import snapshot, violations


async def nlp_full_of_low_gangs() -> tuple[Scheduler, list[str]]:
    """A scheduler preempting at filter time, nlp full with three priority-0 one-pod gangs, and the
    list its evictions are recorded in."""
    evicted: list[str] = []

    async def evict(uids: Any, why: Disruption) -> None:
        evicted.extend(uids)

    s = scheduler(evictor=evict, preempt_on_filter=True)
    for i in range(3):
        await place(s, pod(f"low{i}", f"low-{i}", "nlp", spec("nlp", 8, priority=0)))
    return s, evicted


def test_gang_members_in_random_order_each_get_a_node_of_the_gang() -> None:
    async def go() -> None:
        s = scheduler()
        pods = [pod(f"u{i}", f"w-{i}", "vision", spec("vision", 8, 4, "vision/llm")) for i in range(4)]
        random.Random(7).shuffle(pods)
        bound = []
        for p in pods:
            r, node = await place(s, p)
            assert node is not None
            assert node in r["NodeNames"]
            # the rejected nodes are not named: kube-scheduler reads reasons only when none passes
            assert r["FailedNodes"] == {} and r["FailedAndUnresolvableNodes"] == {}
            bound.append(node)
        gang = s.core.gang("vision/llm")
        assert gang is not None
        assert sorted(bound) == sorted(p.node for p in s.core.placement_of(gang).pods)
        assert len(set(bound)) == 4
        assert violations(s.core) == []

    run(go())


def test_filter_answers_only_requested_names_and_explains_the_others() -> None:
    async def go() -> None:
        s = scheduler()
        names = [*nodes()[:6], "not-a-node"]
        p = pod("u1", "a", "vision", spec("vision", 8, 2, "vision/pair"))
        r = await s.filter(args(p, names))
        assert set(r["NodeNames"]) <= set(names)
        assert r["NodeNames"]
        # the second member's slot node is not among the nodes kube-scheduler still offers: every
        # node is then explained, the unknown one as such
        gang = s.core.gang("vision/pair")
        assert gang is not None
        rest = [n for n in names if n not in r["NodeNames"]]
        r2 = await s.filter(args(pod("u2", "b", "vision", spec("vision", 8, 2, "vision/pair")), rest))
        assert r2["NodeNames"] == []
        assert "not in the cluster config" in r2["FailedAndUnresolvableNodes"]["not-a-node"]
        assert "kube-scheduler's own filters rejected" in r2["FailedAndUnresolvableNodes"][rest[0]]
        assert set(r2["FailedNodes"]) | set(r2["FailedAndUnresolvableNodes"]) == set(rest)
        gang = s.core.gang("vision/pair")
        assert gang is not None and set(s.core.placement_of(gang).nodes) <= set(
            names
        )  # suggested nodes honoured

    run(go())


def test_prioritize_gives_ten_to_the_rank_slot_of_a_framework_task() -> None:
    async def go() -> None:
        s = scheduler()
        doc = (
            '{"virtualCluster": "vision", "leafCellNumber": 8, "affinityGroup": {"name": "x", '
            '"members": [{"podNumber": 4, "leafCellNumber": 8, "taskRole": "worker"}]}}'
        )
        pods = [
            pod(
                f"u{i}",
                f"fw-worker-{i}",
                "vision",
                doc,
                annotations=fc_annotations("vision", "fw", "0_a", "worker", i),
            )
            for i in range(4)
        ]
        for i in (2, 0, 3, 1):
            r, node = await place(s, pods[i])
            assert node in r["NodeNames"]  # a named slot: exactly one node
        gang = s.core.gang("vision/fw/0_a")
        assert gang is not None
        by_key = {sl.key: sl.pod_uid for sl in gang.slots}
        assert by_key == {f"worker/{i}": f"u{i}" for i in range(4)}
        order = [p.node for p in s.core.placement_of(gang).pods]
        assert order == sorted(order)  # rank order = topology order

    run(go())


def test_prioritize_steers_concurrent_members_to_different_slots() -> None:
    async def go() -> None:
        s = scheduler()
        a = pod("ua", "a", "vision", spec("vision", 8, 3, "vision/three"))
        b = pod("ub", "b", "vision", spec("vision", 8, 3, "vision/three"))
        ra = await s.filter(args(a))
        rb = await s.filter(args(b))
        assert len(ra["NodeNames"]) == 3 and ra["NodeNames"] == rb["NodeNames"]
        sa = await s.prioritize(args(a, ra["NodeNames"]))
        sb = await s.prioritize(args(b, rb["NodeNames"]))
        top = {max(x, key=lambda h: h["Score"])["Host"] for x in (sa, sb)}
        assert len(top) == 2
        assert all(0 <= h["Score"] <= 10 for h in sa + sb)

    run(go())


def test_bind_writes_the_decision_as_annotations_and_is_idempotent() -> None:
    async def go() -> None:
        binder = MemoryBinder()
        s = scheduler(binder)
        p = pod("u1", "solo", "nlp", spec("nlp", 4))
        _, node = await place(s, p)
        assert node is not None
        ann = binder.bound["u1"].annotations
        gpus = ann[ISOLATION_ANNOTATIONS[0]]
        assert gpus == ann[ISOLATION_ANNOTATIONS[1]] and len(gpus.split(",")) == 4
        info = decode_bind_info(ann[BIND_INFO_ANNOTATIONS[0]])
        assert info.node == node and info.gang == "nlp/pod:solo" and len(info.placements) == 1
        before = snapshot(s.core)
        assert await s.bind(bind_args(p, node)) == {"Error": ""}  # duplicate bind
        r = await s.filter(args(p))  # filter after bind: its own node, nothing changes
        assert r["NodeNames"] == [node]
        assert snapshot(s.core) == before
        other = next(n for n in nodes() if n != node)
        err = (await s.bind(bind_args(p, other)))["Error"]
        assert "already holds slot" in err
        assert snapshot(s.core) == before

    run(go())


def test_bind_without_filter_and_with_a_stale_uid_are_refused_without_change() -> None:
    async def go() -> None:
        s = scheduler()
        before = snapshot(s.core)
        err = (await s.bind(wire.BindingArgs("ghost", "vision", "g-1", nodes()[0])))["Error"]
        assert "without a scheduling placement" in err
        p = pod("u1", "w", "vision", spec("vision", 8, 2, "vision/two"))
        r = await s.filter(args(p))
        assert r["NodeNames"]
        mid = snapshot(s.core)
        err = (await s.bind(wire.BindingArgs("w", "vision", "u-old", r["NodeNames"][0])))["Error"]
        assert "stale PodUID" in err
        assert snapshot(s.core) == mid != before

    run(go())


class FailingBinder:
    def __init__(self) -> None:
        self.calls = 0

    async def bind(self, target: BindTarget, node: str, annotations: Mapping[str, str]) -> None:
        self.calls += 1
        raise BindError("apiserver says no")


def test_a_failed_binding_gives_the_slot_back() -> None:
    async def go() -> None:
        binder = FailingBinder()
        s = scheduler(binder)
        a = pod("ua", "a", "vision", spec("vision", 8, 2, "vision/two"))
        b = pod("ub", "b", "vision", spec("vision", 8, 2, "vision/two"))
        s.binder = MemoryBinder()
        await place(s, a)
        s.binder = binder
        r = await s.filter(args(b))
        err = (await s.bind(bind_args(b, r["NodeNames"][0])))["Error"]
        assert "apiserver says no" in err and binder.calls == 1
        gang = s.core.gang("vision/two")
        assert gang is not None and gang.slot_of("ub") is None
        assert len(s.core.open_slots("vision/two", 8)) == 1
        assert violations(s.core) == []

    run(go())


def test_a_gang_too_big_for_its_quota_waits_with_its_reason_on_every_node() -> None:
    async def go() -> None:
        s = scheduler()
        p = pod("u1", "big", "research", spec("research", 8, 3, "research/big"))
        r = await s.filter(args(p))
        assert r["NodeNames"] == [] and r["Error"] == ""
        assert set(r["FailedAndUnresolvableNodes"]) == set(nodes())  # bigger than the whole quota
        text = r["FailedAndUnresolvableNodes"][nodes()[0]]
        assert "[InsufficientQuota]" in text and "research/big" in text and "never run" in text
        groups = views.affinity_groups(s.core, s.waiting, s.clock())
        assert groups[0]["status"]["state"] == "Waiting"
        assert groups[0]["status"]["waitReason"]["code"] == "InsufficientQuota"

    run(go())


def test_a_waiting_gang_whose_pods_are_all_deleted_waits_no_more() -> None:
    async def go() -> None:
        s = scheduler()
        a, b = (pod(u, u, "research", spec("research", 8, 3, "research/big")) for u in ("u1", "u2"))
        for p in (a, b):
            await s.filter(args(p))
        await s.pod_gone("u1")
        assert [g["metadata"]["name"] for g in views.affinity_groups(s.core, s.waiting, s.clock())] == [
            "research/big"
        ]  # u2 still waits
        assert s.gang_ledger.records.keys() == {"research/big"}
        await s.pod_gone("u2")
        assert (
            views.affinity_groups(s.core, s.waiting, s.clock()) == []
            and views.state_snapshot(s.core, s.waiting, s.ready).gangs_by_phase["Waiting"] == 0
        )
        assert s.gang_ledger.records == {}

    run(go())


def test_a_waiting_guaranteed_gang_lists_nodes_where_preemption_may_help() -> None:
    async def go() -> None:
        s = scheduler()
        for i in range(3):
            await place(s, pod(f"low{i}", f"low-{i}", "nlp", spec("nlp", 8, priority=0)))
        p = pod("hi", "hi", "nlp", spec("nlp", 8, priority=500))
        r = await s.filter(args(p))
        assert r["NodeNames"] == [] and r["FailedNodes"]
        assert all("waits [" in v for v in r["FailedNodes"].values())
        victims_in = {n: {"Pods": [{"UID": "low0"}], "NumPDBViolations": 0} for n in r["FailedNodes"]}
        pre = await s.preempt(wire.parse_preemption_args({"Pod": p, "NodeNameToMetaVictims": victims_in}))
        meta = pre["NodeNameToMetaVictims"]
        if meta is not None:  # the core names whole lower-priority gangs
            uids = {v["UID"] for m in meta.values() for v in m["Pods"]}
            assert uids <= {"low0", "low1", "low2"} and uids
            assert all(m["Pods"] and m["NumPDBViolations"] == 0 for m in meta.values())
        assert violations(s.core) == []

    run(go())


def test_pods_that_do_not_opt_in_pass_through_untouched() -> None:
    async def go() -> None:
        s = scheduler()
        p = pod("u1", "web", "default", None, enabled=False)
        r = await s.filter(args(p))
        assert r["NodeNames"] == nodes() and r["Error"] == ""
        scores = await s.prioritize(args(p))
        assert {h["Score"] for h in scores} == {0}
        assert s.core.gangs() == []

    run(go())


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ('{"leafCellNumber": 1}', "virtualCluster"),
        ('{"virtualCluster": "nope", "leafCellNumber": 1}', "virtualCluster"),
        ('{"virtualCluster": "vision", "leafCellNumber": 0}', "leafCellNumber"),
        ('{"virtualCluster": "vision", "leafCellNumber": 16}', "leafCellNumber"),
        ('{"virtualCluster": "vision", "leafCellNumber": 1, "priority": 2000}', "priority"),
        ("virtualCluster: [", "pod-scheduling-spec"),
    ],
)
def test_bad_specs_come_back_as_filter_errors_naming_the_field(text: str, field: str) -> None:
    async def go() -> None:
        s = scheduler()
        r = await s.filter(args(pod("u1", "bad", "default", text)))
        assert r["Error"].startswith("topogang: User Error: [u1(default/bad)]")
        assert field in r["Error"]
        assert r["NodeNames"] is None
        assert s.core.gangs() == []

    run(go())


def test_not_ready_answers_an_error() -> None:
    async def go() -> None:
        s = scheduler()
        s.ready, s.not_ready_reason = False, "recovering"
        r = await s.filter(args(pod("u1", "a", "vision", spec())))
        assert "not ready: recovering" in r["Error"]

    run(go())


def test_reservations_expire_and_evict_bound_members() -> None:
    async def go() -> None:
        clock = Clock()
        evicted: list[str] = []

        async def evict(uids: Any, why: Disruption) -> None:
            evicted.extend(uids)

        s = scheduler(clock=clock, ttl_seconds=30.0, evictor=evict)
        empty = snapshot(s.core)
        await place(s, pod("u0", "w-0", "vision", spec("vision", 8, 2, "vision/two")))
        clock.t += 31
        released = await s.expire()
        assert [r.gang for r in released] == ["vision/two"]
        assert evicted == ["u0"]
        assert s.core.gang("vision/two") is None and violations(s.core) == []
        await s.pod_gone("u0")  # the evicted member is gone: now its GPUs are free
        assert snapshot(s.core) == empty

    run(go())


def test_evicted_members_keep_their_gpus_until_their_pods_are_gone() -> None:
    """An expired or superseded gang's bound members are evicted, but a pod runs until it is gone
    (its grace period): its GPUs must not be given to another gang meanwhile."""

    async def go() -> None:
        clock = Clock()
        evicted: list[str] = []

        async def evict(uids: Any, why: Disruption) -> None:
            evicted.extend(uids)

        s = scheduler(clock=clock, ttl_seconds=30.0, evictor=evict)
        empty = snapshot(s.core)
        _, node = await place(s, pod("u0", "w-0", "nlp", spec("nlp", 8, 2, "nlp/two")))
        assert node is not None
        clock.t += 31
        await s.expire()
        await asyncio.sleep(0)
        assert evicted == ["u0"] and s.core.gang("nlp/two") is None
        other = pod("u1", "solo", "nlp", spec("nlp", 8))
        r = await s.filter(args(other, [node]))
        assert r["NodeNames"] == [], r  # u0 still runs on every GPU of that node
        ann = fc_annotations("nlp", "tf", "0_a", "worker", 0)
        fc = [
            pod(
                f"f{i}",
                f"tf-worker-{i}",
                "nlp",
                spec("nlp", 8, 2, "tf"),
                annotations={**ann, "FC_TASK_INDEX": str(i)},
            )
            for i in range(2)
        ]
        _, fc_node = await place(s, fc[0])
        newer = {
            **fc[1],
            "metadata": {
                **fc[1]["metadata"],
                "annotations": {
                    **fc[1]["metadata"]["annotations"],
                    **fc_annotations("nlp", "tf", "1_b", "worker", 1),
                },
            },
        }
        await s.filter(args(newer))  # a new attempt supersedes the old one, whose member is evicted
        await asyncio.sleep(0)
        assert evicted == ["u0", "f0"] and s.core.gang("nlp/tf/0_a") is None
        assert "f0" in s.core.reservations.pod_gang and violations(s.core) == []
        assert fc_node is not None and (await s.filter(args(other, [fc_node])))["NodeNames"] == []
        await s.pod_gone("u0")
        await s.pod_gone("f0")
        assert (await s.filter(args(other, [node])))["NodeNames"] == [node]
        await s.pod_gone("u1")
        for g in s.core.gangs():  # the newer attempt's reservation
            s.core.delete_gang(g.name)
        assert snapshot(s.core) == empty

    run(go())


def test_pod_lookup_lets_bind_work_without_a_filter_in_this_process() -> None:
    async def go() -> None:
        p = pod("u1", "solo", "nlp", spec("nlp", 2))

        async def lookup(ns: str, name: str) -> Mapping[str, Any] | None:
            return p if (ns, name) == ("nlp", "solo") else None

        s = scheduler(pod_lookup=lookup)
        r = await s.filter(args(p))
        node = r["NodeNames"][0]
        s.forget_pod("u1")  # as after a restart between filter and bind
        assert await s.bind(bind_args(p, node)) == {"Error": ""}
        err = (await s.bind(wire.BindingArgs("solo", "nlp", "u-other", node)))["Error"]
        assert "stale PodUID" in err

    run(go())


def test_a_deleted_member_frees_its_slot_for_the_retry() -> None:
    async def go() -> None:
        s = scheduler()
        a = pod("ua", "a", "vision", spec("vision", 8, 2, "vision/two"))
        b = pod("ub", "b", "vision", spec("vision", 8, 2, "vision/two"))
        _, na = await place(s, a)
        await place(s, b)
        await s.pod_gone("ua")
        retry = pod("ua2", "a", "vision", spec("vision", 8, 2, "vision/two"))
        _, node = await place(s, retry)
        assert node == na
        assert violations(s.core) == []

    run(go())


def test_a_gang_whose_pods_are_all_deleted_before_binding_lets_its_cells_go_at_once() -> None:
    """A job deleted before it started: its reservation goes with its last pod, not at its TTL;
    while one of its pods is still around (filtered, not bound) the reservation stays."""

    async def go() -> None:
        s = scheduler()
        a = pod("ua", "a", "vision", spec("vision", 8, 2, "vision/two"))
        b = pod("ub", "b", "vision", spec("vision", 8, 2, "vision/two"))
        assert (await s.filter(args(a)))["NodeNames"]
        assert (await s.filter(args(b)))["NodeNames"]
        await s.pod_gone("ua")
        assert s.core.gang("vision/two") is not None  # b may still bind
        await s.pod_gone("ub")
        assert s.core.gang("vision/two") is None
        assert s.core.gangs() == []  # nothing held: its cells are free for the next job
        assert violations(s.core) == []
        # a gang with a member bound is not abandoned when its pending pod goes
        c = pod("uc", "c", "vision", spec("vision", 8, 2, "vision/three"))
        d = pod("ud", "d", "vision", spec("vision", 8, 2, "vision/three"))
        _, node = await place(s, c)
        assert node is not None
        assert (await s.filter(args(d)))["NodeNames"]
        await s.pod_gone("ud")
        assert s.core.gang("vision/three") is not None

    run(go())


def test_a_preemptor_whose_pods_are_all_deleted_is_cancelled() -> None:
    """Deleting every pending pod of a preemptor cancels its preemption: it holds nothing once its
    victims (evicted already) are gone, instead of keeping their cells until its TTL."""

    async def go() -> None:
        s, evicted = await nlp_full_of_low_gangs()
        hi = pod("hi", "hi", "nlp", spec("nlp", 8, priority=600))
        await s.filter(args(hi))
        await asyncio.sleep(0)
        request = s.cached("hi")
        assert request is not None
        g = s.core.gang(request.gang)
        assert g is not None and g.phase.value == "Preempting" and evicted
        await s.pod_gone("hi")  # the job is deleted while its victims are still terminating
        assert s.core.gang(g.name) is None and violations(s.core) == []
        for uid in evicted:
            await s.pod_gone(uid)
        left = {x.name for x in s.core.gangs()}
        assert left == {f"nlp/pod:low-{i}" for i in range(3)} - {f"nlp/pod:low-{u[3:]}" for u in evicted}
        assert violations(s.core) == []

    run(go())


def test_filter_time_preemption_evicts_whole_victim_gangs_and_reserves() -> None:
    async def go() -> None:
        s, evicted = await nlp_full_of_low_gangs()
        never = pod("calm", "calm", "nlp", spec("nlp", 8, priority=500))
        never["spec"]["preemptionPolicy"] = "Never"
        r = await s.filter(args(never))
        assert r["NodeNames"] == [] and evicted == []  # the pod refuses to preempt
        p = pod("hi", "hi", "nlp", spec("nlp", 8, priority=600))
        r = await s.filter(args(p))
        await asyncio.sleep(0)  # the eviction runs in the background
        assert r["NodeNames"] == [] and r["FailedNodes"] == {}  # the extender evicts; kube-scheduler need not
        assert "[Preempting]" in next(iter(r["FailedAndUnresolvableNodes"].values()))
        assert evicted and set(evicted) <= {"low0", "low1", "low2"}
        for uid in evicted:
            await s.pod_gone(uid)
        _, node = await place(s, p)
        assert node is not None
        assert violations(s.core) == []

    run(go())


def test_a_bind_onto_a_gang_still_waiting_for_its_victims_is_refused() -> None:
    """A bind can come without a filter that passed for this reservation (an answer about an
    earlier reservation of the gang's name, a retried or stale bind): while the gang waits for its
    victims to go, their pods still run on its GPUs, so no Binding may be written there (the soak
    found two pods on one GPU this way)."""

    async def go() -> None:
        s, evicted = await nlp_full_of_low_gangs()
        p = pod("hi", "hi", "nlp", spec("nlp", 8, priority=600))
        r = await s.filter(args(p))
        await asyncio.sleep(0)  # the eviction runs in the background
        assert r["NodeNames"] == [] and evicted
        [g] = [g for g in s.core.gangs() if g.pending]
        node = s.core.placement_of(g).pods[0].node
        assert (await s.prioritize(args(p, [node])))[0]["Score"] == 0  # no slot to offer yet
        b = await s.bind(bind_args(p, node))
        assert "preempted pods" in b["Error"], b
        assert isinstance(s.binder, MemoryBinder) and "hi" not in s.binder.bound
        assert "hi" not in s.core.reservations.pod_gang and violations(s.core) == []
        for uid in evicted:
            await s.pod_gone(uid)
        assert await s.bind(bind_args(p, node)) == {"Error": ""}
        assert violations(s.core) == []

    run(go())


def test_promises_of_gangs_the_core_let_go_by_itself_are_dropped() -> None:
    """Prioritize promises a slot to a pod for a few seconds. A reservation outbid by a preemptor
    goes inside the core, without the scheduler hearing of it: its promises must still go."""

    async def go() -> None:
        clock = Clock()
        s = scheduler(clock=clock)
        low = pod("l0", "low-0", "nlp", spec("nlp", 8, 3, "nlp/low", priority=0))
        r = await s.filter(args(low))  # reserves every nlp node, promises a slot to low-0
        assert r["NodeNames"] and len(s.promises)
        high = pod("h0", "high", "nlp", spec("nlp", 8, priority=100))
        await s.preempt(wire.parse_preemption_args({"Pod": high, "NodeNameToMetaVictims": {}}))
        assert s.core.gang("nlp/low") is None  # outbid: it ran nothing, so it simply went
        clock.t += 60
        await s.expire()
        assert len(s.promises) == 0

    run(go())


class RefusingBinder(MemoryBinder):
    """Refuses the Bindings of the pods in `refuse`."""

    def __init__(self, refuse: set[str]) -> None:
        super().__init__()
        self.refuse = refuse

    async def bind(self, target: BindTarget, node: str, annotations: Mapping[str, str]) -> None:
        if target.uid in self.refuse:
            raise BindError("refused")
        await super().bind(target, node, annotations)


def test_a_failed_bind_gives_the_slot_back_without_renewing_the_reservation() -> None:
    """A Binding that fails is no member leaving: the reservation keeps its deadline (or a gang
    kept failing its last bind would stay half-bound for good), and a failed first member does not
    give the whole reservation up."""

    async def go() -> None:
        clock = Clock()
        s = scheduler(RefusingBinder({"u1", "v0"}), clock, ttl_seconds=30.0)
        text = spec("nlp", 4, 2, "nlp/pair")
        await place(s, pod("u0", "w-0", "nlp", text))
        gang = s.core.gang("nlp/pair")
        assert gang is not None and gang.deadline == 1030.0
        clock.t += 20
        second = pod("u1", "w-1", "nlp", text)
        r = await s.filter(args(second))
        assert "refused" in (await s.bind(bind_args(second, r["NodeNames"][0])))["Error"]
        assert gang.slot_of("u1") is None and gang.deadline == 1030.0
        alone = pod("v0", "solo", "nlp", spec("nlp", 1))
        r = await s.filter(args(alone))
        assert "refused" in (await s.bind(bind_args(alone, r["NodeNames"][0])))["Error"]
        kept = s.core.gang("nlp/pod:solo")
        assert kept is not None and kept.deadline == 1050.0  # still reserved, with its own deadline
        clock.t += 11
        assert {r.gang for r in await s.expire()} == {"nlp/pair"}
        assert violations(s.core) == []

    run(go())


def test_a_waiting_gang_with_pods_still_waits_after_its_ttl_in_inspect_and_the_ledger() -> None:
    """Standalone retries nothing: the gang once vanished from /v1/inspect and the UI after its TTL
    while /v1/gangs still listed it as Pending. Both now keep it until its pods are gone."""

    async def go() -> None:
        clock = Clock()
        s = scheduler(clock=clock, ttl_seconds=30.0)
        p = pod("u1", "big", "research", spec("research", 8, 3, "research/big"))
        await s.filter(args(p))
        clock.t += 3 * 30.0
        await s.expire()
        names = [g["metadata"]["name"] for g in views.affinity_groups(s.core, s.waiting, s.clock())]
        assert names == ["research/big"]
        (rec,) = s.gang_ledger.all(s.core)
        assert s.gang_ledger.status(s.core, rec, s.waiting_of)["phase"] == "Pending"
        await s.pod_gone("u1")
        clock.t += 3 * 30.0
        await s.expire()
        assert views.affinity_groups(s.core, s.waiting, s.clock()) == []

    run(go())
