"""A gang a lazy preemption downgraded to opportunistic, across a restart of the extender.

Its pods keep asking for the priority they were created with, so what the extender writes down (bind
annotations, GangReservation objects) must rebuild that request after a restart; that the gang ran
without quota is recorded per GPU as empty quota cell types, and it must come back that way."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import pytest

from extender.gangs import reservation_objects as rsv
from extender.gangs.bindinfo import BIND_INFO_ANNOTATIONS, BindInfo, decode_bind_info
from extender.http.verbs import Scheduler
from extender.kube.recovery import recover
from extender.kube.reservation_sync import ReservationStore
from extender.standalone import MemoryBinder
from loadtest.kubefake import FakeKube
from tests.extender.helpers import args, bind_args, fc_annotations, place, pod, run, scheduler, spec
from tests.extender.test_kube_edge import bound_pods
from topology.invariants import violations
from topology.state import NO_OWNER

# research's quota is four 4-GPU halves: the lazy gang below fills it, and the preemptor of a
# higher priority then takes a half elsewhere while the lazy gang keeps running, downgraded
LAZY = '{"virtualCluster": "research", "priority": 10, "leafCellNumber": 4, "lazyPreemptionEnable": true}'
GANG = "research/fw/0_a"
HIGH = "research/pod:hi"
NS = "topogang-system"
WALL = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def framework_task(i: int) -> dict[str, Any]:
    """Task `i` of a FrameworkController framework of four: its spec does not name the gang (the
    Framework object does), so a restart rebuilds the gang's request from the bind info."""
    return pod(
        f"w{i}",
        f"fw-worker-{i}",
        "research",
        LAZY,
        annotations=fc_annotations("research", "fw", "0_a", "worker", i),
    )


async def framework(namespace: str, name: str) -> Mapping[str, Any] | None:
    """The Framework object, which gives the gang its four tasks while the extender runs; recovery
    does not read it."""
    template = {
        "metadata": {"annotations": {"topogang.io/pod-scheduling-spec": LAZY}},
        "spec": {
            "containers": [{"name": "c", "resources": {"limits": {"topogang.io/pod-scheduling-enable": "1"}}}]
        },
    }
    task_roles = [{"name": "worker", "taskNumber": 4, "task": {"pod": template}}]
    return {"spec": {"taskRoles": task_roles}} if (namespace, name) == ("research", "fw") else None


def extender(binder: MemoryBinder | None = None) -> Scheduler:
    return scheduler(binder, framework_lookup=framework, preempt_on_filter=True)


def info_of(binder: MemoryBinder, uid: str) -> BindInfo:
    return decode_bind_info(binder.bound[uid].annotations[BIND_INFO_ANNOTATIONS[0]])


async def downgraded_after_one_bind() -> tuple[Scheduler, MemoryBinder, list[dict[str, Any]]]:
    """Task 0 bound while the gang held research's quota; then the preemptor came and took a half
    elsewhere, downgrading the gang; then task 1 bound. Tasks 2 and 3 are still pending."""
    binder = MemoryBinder()
    s = extender(binder)
    tasks = [framework_task(i) for i in range(4)]
    await place(s, tasks[0])
    high = pod("h0", "hi", "research", spec("research", 4, priority=100))
    assert (await place(s, high))[1] is not None
    g = s.core.gang(GANG)
    assert g is not None and g.priority == -1 and g.downgraded_by == HIGH
    await place(s, tasks[1])
    return s, binder, [*tasks, high]


def test_a_downgraded_gang_records_its_requested_priority_and_no_quota_cell() -> None:
    async def go() -> None:
        _, binder, _ = await downgraded_after_one_bind()
        before, after = info_of(binder, "w0"), info_of(binder, "w1")
        assert before.gang == after.gang == GANG
        assert {t for p in before.placements for t in p.preassigned_cell_types} == {"A100-HALF"}
        # bound after the downgrade: still the priority its tasks ask for, on no quota cell
        assert after.priority == 10
        assert all(p.preassigned_cell_types == ("",) * len(p.gpus) for p in after.placements)
        high = info_of(binder, "h0")
        assert high.priority == 100
        assert {t for p in high.placements for t in p.preassigned_cell_types} == {"A100-HALF"}

    run(go())


@pytest.mark.parametrize("bound_after_first", [False, True])
def test_after_a_restart_the_downgraded_gang_is_opportunistic_and_its_pending_tasks_bind(
    bound_after_first: bool,
) -> None:
    """Whichever bound task recovery reads first, the gang comes back opportunistic on its GPUs
    under the request its tasks carry, its preemptor keeps the quota, and a pending task gets its
    slot instead of being refused as a gang of a different shape."""

    async def go() -> None:
        s, binder, pods = await downgraded_after_one_bind()
        api = bound_pods(s, binder, pods)
        if bound_after_first:
            api = [api[1], api[0], *api[2:]]
        binder2 = MemoryBinder()
        s2 = extender(binder2)
        report = recover(s2.core, api, now=s2.clock(), namespace_vcs={"research": "research"})
        assert sorted(report.gangs) == [GANG, HIGH] and report.open_slots == 2

        task = pods[2]
        r = await s2.filter(args(task))
        assert r["Error"] == "", r
        slot = [p.node for p in s2.core.open_slots(GANG, 4, "worker/2")]
        assert r["NodeNames"] == slot and len(slot) == 1
        assert await s2.bind(bind_args(task, slot[0])) == {"Error": ""}
        assert info_of(binder2, "w2").priority == 10

        g, old = s2.core.gang(GANG), s.core.gang(GANG)
        assert g is not None and old is not None
        assert g.priority == -1 and g.owner == NO_OWNER and g.request.priority == 10
        assert [(p.node, p.gpu_indices) for p in s2.core.placement_of(g).pods] == [
            (p.node, p.gpu_indices) for p in s.core.placement_of(old).pods
        ]
        h = s2.core.gang(HIGH)
        assert h is not None and h.priority == 100 and h.owner != NO_OWNER
        assert violations(s2.core) == []

    run(go())


def test_a_pending_reservation_downgraded_is_rewritten_and_restored_opportunistic() -> None:
    """A gang with no member bound yet lives only in its GangReservation object. Downgraded, the
    object must say so before the preemptor's is acted on: restored on research's quota, it would
    take the half its preemptor holds (or be refused, as its preemptor would be)."""

    async def go() -> None:
        kube = FakeKube()
        s = extender()
        store = ReservationStore(s, kube, NS, wall=lambda: WALL)
        low = spec("research", 4, 4, "research/low", priority=10, lazyPreemptionEnable=True)
        members = [pod(f"l{i}", f"low-{i}", "research", low) for i in range(4)]
        assert (await s.filter(args(members[0])))["NodeNames"]
        await store.flush_new()  # what the extender's routes do after every filter
        (written,) = kube.server.list(rsv.collection_path(NS))[0]
        assert {t for sl in written["spec"]["slots"] for t in sl["cellTypes"]} == {"A100-HALF"}

        high = pod("h0", "hi", "research", spec("research", 4, priority=100))
        assert (await s.filter(args(high)))["NodeNames"]
        await store.flush_new()
        g = s.core.gang("research/low")
        assert g is not None and g.priority == -1 and g.downgraded_by == HIGH
        objects = {o["spec"]["gang"]: o for o in kube.server.list(rsv.collection_path(NS))[0]}
        assert sorted(objects) == sorted([HIGH, "research/low"])
        assert objects["research/low"]["spec"]["priority"] == 10
        assert all(sl["cellTypes"] == ["", "", "", ""] for sl in objects["research/low"]["spec"]["slots"])

        s2 = extender()
        lines = await ReservationStore(s2, kube, NS, wall=lambda: WALL).restore()
        assert lines[0] == "restored 2 of 2 persisted gang reservations", lines
        back, h = s2.core.gang("research/low"), s2.core.gang(HIGH)
        assert back is not None and h is not None
        assert back.priority == -1 and back.owner == NO_OWNER and back.request.priority == 10
        assert back.downgraded_by == HIGH  # not promoted once whole, as it would not have been
        assert s2.core.placement_of(back).pods == s.core.placement_of(g).pods
        assert h.priority == 100 and h.owner != NO_OWNER
        assert violations(s2.core) == []
        r = await s2.filter(args(members[1]))
        assert r["Error"] == "" and r["NodeNames"], r
        assert set(r["NodeNames"]) <= {p.node for p in s2.core.open_slots("research/low", 4)}

    run(go())


def test_after_a_restart_a_whole_downgraded_gang_does_not_take_its_preemptors_quota_back() -> None:
    """All four tasks bound, then lazily downgraded by a higher-priority gang: nothing durable says
    so (its signed bind info still names the quota cells it held then), and recovery adopted gangs
    by name, so the victim, sorting first, took research's cells back and its preemptor came back
    opportunistic. Gangs are adopted by priority, the highest first."""

    async def go() -> None:
        binder = MemoryBinder()
        s = extender(binder)
        tasks = [framework_task(i) for i in range(4)]
        for t in tasks:
            assert (await place(s, t))[1] is not None
        high = pod("h0", "hi", "research", spec("research", 4, priority=100))
        assert (await place(s, high))[1] is not None
        victim = s.core.gang(GANG)
        assert victim is not None and victim.priority < 0 and victim.downgraded_by == HIGH
        assert GANG < HIGH  # the victim would be adopted first by name
        s2 = extender(MemoryBinder())
        recover(
            s2.core,
            bound_pods(s, binder, [*tasks, high]),
            now=s2.clock(),
            namespace_vcs={"research": "research"},
        )
        g, h = s2.core.gang(GANG), s2.core.gang(HIGH)
        assert h is not None and h.priority == 100 and h.owner != NO_OWNER
        assert g is not None and g.priority < 0 and g.owner == NO_OWNER
        assert violations(s2.core) == []

    run(go())


def test_a_downgrade_record_is_not_put_on_another_gang_of_that_name() -> None:
    """A gang's object outlives it until the next sync: a gang of the same name running elsewhere
    after the restart (its job submitted again) is not the one the record speaks of."""

    async def go() -> None:
        binder, kube = MemoryBinder(), FakeKube()
        s = extender(binder)
        store = ReservationStore(s, kube, NS, wall=lambda: WALL)
        tasks = [framework_task(i) for i in range(4)]
        for t in tasks:
            assert (await place(s, t))[1] is not None
        high = pod("h0", "hi", "research", spec("research", 4, priority=100))
        assert (await place(s, high))[1] is not None
        await store.flush_new()
        (record,) = [o for o in kube.server.list(rsv.collection_path(NS))[0] if o["spec"]["gang"] == GANG]
        assert record["metadata"]["annotations"][rsv.DOWNGRADED_BY] == HIGH
        api = bound_pods(s, binder, [*tasks, high])

        s2 = extender(MemoryBinder())
        recover(s2.core, api, now=s2.clock(), namespace_vcs={"research": "research"})
        lines = await ReservationStore(s2, kube, NS, wall=lambda: WALL).restore(api)
        g = s2.core.gang(GANG)
        assert g is not None and g.downgraded_by == HIGH, lines

        elsewhere = {
            **record["spec"],
            "slots": [{**sl, "node": "a100-r9-n9"} for sl in record["spec"]["slots"]],
        }
        kube.server.put(
            f"{rsv.collection_path(NS)}/{record['metadata']['name']}", {**record, "spec": elsewhere}
        )
        s3 = extender(MemoryBinder())
        recover(s3.core, api, now=s3.clock(), namespace_vcs={"research": "research"})
        lines = await ReservationStore(s3, kube, NS, wall=lambda: WALL).restore(api)
        g = s3.core.gang(GANG)
        assert g is not None and g.downgraded_by is None
        assert f"downgrade record of {GANG} not applied: the gang of that name runs elsewhere now" in lines

    run(go())
