"""A leader that dies (or loses the Lease) with pods whose deletion failed takes its book along; the
pods carry the mark it wrote first, so the next lead takes them back and ends them
(`extender.kube.eviction_retry.EvictionRetries.inherit`). Only topogang's own mark counts: never
kube-scheduler's (the same reason, `PreemptionByScheduler`, for its preemptions), the taint
manager's, the Eviction API's, the kubelet's, nor a mark on a pod going or finished already."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from typing import Any

import pytest

from extender.gangs import disruption
from extender.gangs.disruption import Disruption
from extender.kube.client import pod_path
from extender.kube.eviction_retry import EvictionRetries
from extender.kube.leader import LeaseSettings
from extender.kube.pods import DISRUPTION_TARGET
from extender.kube.service import kube_service
from extender.kube.sync import ClusterSync
from loadtest.kubefake import FakeKube, Fault
from tests.extender.helpers import Clock, example, run, spec
from tests.extender.test_kube_durable import NS, Running, cluster, start, submit, until
from tests.extender.test_kube_eviction_retry import clock_of, deletes, going
from tests.extender.test_kube_evictions import cluster as running_pods
from tests.extender.test_kube_evictions import status_patches
from tests.extender.test_kube_reload_cells import owner

ALWAYS = 1_000  # a fault that outlasts the test


def mark(reason: str, message: str, status: str = "True") -> dict[str, Any]:
    return {
        "type": DISRUPTION_TARGET,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }


def conditions_of(kube: FakeKube, namespace: str, name: str) -> list[dict[str, Any]]:
    pod = kube.server.get(pod_path(namespace, name))
    assert pod is not None
    return list(pod["status"]["conditions"])


async def leading(retries: EvictionRetries) -> asyncio.Task[None]:
    """The book's loop, as a lead starts it."""
    task = asyncio.create_task(retries.run())
    await asyncio.sleep(0)
    return task


async def stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


@pytest.mark.parametrize("how", ["failover", "restart"])
def test_the_next_leader_ends_a_pod_its_predecessor_marked_but_could_not_delete(how: str) -> None:
    """The API server refuses the deletion of a preempted pod (429) and the leader dies. Its
    successor (a standby taking the Lease, or the same replica started again) has the pod as a
    running member of its gang (a standby never saw the preemption; a restart's recovery adopts
    it from its signed bind info): only the mark says it was let go, and the successor ends it."""

    async def go() -> None:
        kube, clock = cluster(), Clock()
        lease = (
            LeaseSettings(NS, "lead", lease_seconds=0.3, renew_deadline=0.2, retry_seconds=0.05)
            if how == "failover"
            else None
        )
        a = await start(kube, clock, lease=lease, identity="a")
        after = FakeKube(kube.server, record=True)
        b: Running | None = None
        if how == "failover":
            b = Running(kube_service(example(), after, clock=clock, namespace=NS, lease=lease, identity="b"))
            await until(
                "b synced, as standby", lambda: b is not None and b.s.not_ready_reason.endswith("by a")
            )
        node = await a.place(submit(kube, "x", "x-0", "vision", spec("vision", 8)))
        kube.inject(Fault("DELETE", "/pods/x-0$", "error", status=429, count=ALWAYS))
        assert a.s.evictor is not None
        await a.s.evictor(["x"], disruption.preempted_by("vision/big"))
        a_sync = owner(a.service, ClusterSync)
        assert list(a_sync.retries.pending) == ["x"] and not going(kube, "vision", "x-0")
        (marked,) = [c for c in conditions_of(kube, "vision", "x-0") if c["type"] == DISRUPTION_TARGET]
        await a.stop()  # the leader dies, its book with it

        if b is None:
            b = await start(after, clock)
            assert b.s.core.holds_slot("x")  # recovery adopted it back into its gang, blindly
        await until("the next leader ends it", lambda: going(kube, "vision", "x-0"), 10)
        assert deletes(after, "x-0") == 1
        assert status_patches(after) == []  # the mark it found is the one it keeps
        assert [c for c in conditions_of(kube, "vision", "x-0") if c["type"] == DISRUPTION_TARGET] == [marked]
        b_sync = owner(b.service, ClusterSync)
        assert kube.server.finalize(pod_path("vision", "x-0"))  # the kubelet has stopped it
        await until("its GPUs free", lambda: b.s.core.node_fill(node) == (8, 8))
        await until("the book empty", lambda: len(b_sync.retries) == 0)
        await b.stop()

    run(go())


CAUSES: list[Callable[[], Disruption]] = [
    lambda: disruption.preempted_by("nlp/big"),  # of the victim's namespace: the gang is named
    lambda: disruption.preempted_by("other/big"),  # of another: it is not
    disruption.reservation_expired,
    lambda: disruption.superseded("nlp/job-attempt-2"),
    lambda: disruption.not_whole("nlp/pair"),
    lambda: disruption.off_placement(disruption.OFF_PLACEMENT_WHY),
]


def test_every_cause_topogang_marks_with_is_taken_back_by_the_next_lead() -> None:
    """Marks written by the eviction itself, for each of topogang's causes: the next lead's book (a
    new one, empty) takes each pod back with the same cause, and ends it under the mark it has."""

    async def go() -> None:
        pods = [(f"u{i}", "nlp", f"w-{i}") for i in range(len(CAUSES))]
        kube, sync, told = running_pods(*pods)
        kube.inject(Fault("DELETE", r"/pods/w-\d+$", "error", status=503, count=len(pods)))
        for (uid, _, _), cause in zip(pods, CAUSES, strict=True):
            await sync.evict([uid], cause())
        assert sorted(sync.retries.pending) == sorted(uid for uid, _, _ in pods)
        for uid, ns, name in pods:  # the watch brings the marked pods
            stored = kube.server.get(pod_path(ns, name))
            assert stored is not None
            sync.pods[uid] = copy.deepcopy(stored)
        marks = len(status_patches(kube))
        successor = EvictionRetries(sync, clock=clock_of(sync))  # the old book is gone with its leader
        task = await leading(successor)
        await until("every pod ended", lambda: all(going(kube, ns, name) for _, ns, name in pods))
        await stop(task)
        assert len(successor) == 0 and len(status_patches(kube)) == marks  # no mark written again
        wanted = {uid: cause() for (uid, _, _), cause in zip(pods, CAUSES, strict=True)}
        assert sorted(uid for _, _, uid, _ in told) == sorted(wanted)
        for ns, _, uid, why in told:  # the same cause, and the same words for the pod's namespace
            assert why.reason == wanted[uid].reason
            assert why.message(ns) == wanted[uid].message(ns)

    run(go())


SCHEDULER = "PreemptionByScheduler"
TOPOGANG_PREEMPTION = "topogang: preempting to accommodate a higher priority pod group"
NOT_OURS: dict[str, dict[str, Any]] = {
    # kube-scheduler in topogang's own profile (schedulerName `topogang`), and in the default one
    "kube-scheduler": mark(SCHEDULER, "topogang: preempting to accommodate a higher priority pod"),
    "kube-scheduler-podgroup": mark(
        SCHEDULER, "topogang: preempting to accommodate a higher priority podgroup"
    ),
    "default-scheduler": mark(
        SCHEDULER, "default-scheduler: preempting to accommodate a higher priority pod"
    ),
    "taint-manager": mark("DeletionByTaintManager", "Taint manager: deleting due to NoExecute taint"),
    "eviction-api": mark("EvictionByEvictionAPI", "Eviction API: evicting"),
    "kubelet": mark("TerminationByKubelet", "Pod was terminated in response to imminent node shutdown."),
    "pod-gc": mark("DeletionByPodGC", "PodGC: node no longer exists"),
    "our-reason-their-words": mark("GangNotWhole", "someone: a member of its gang went"),
    # set back to False by the disruption controller (which drops the reason), or with it kept
    "reset": {"type": DISRUPTION_TARGET, "status": "False", "lastTransitionTime": "2026-01-01T00:02:00Z"},
    "false": mark("GangNotWhole", "topogang: a member of its gang went, so the gang is not whole", "False"),
}


def test_only_topogangs_own_true_mark_on_a_pod_still_running_is_taken_back() -> None:
    async def go() -> None:
        ours = {"u-ours": mark("GangReservationExpired", "topogang: its gang's reservation expired")}
        ours["u-ours-preempted"] = mark(SCHEDULER, TOPOGANG_PREEMPTION + " (big)")
        going_already = {"u-going": mark("GangNotWhole", "topogang: a member of its gang went")}
        finished = {
            "u-failed": mark(SCHEDULER, TOPOGANG_PREEMPTION),
            "u-succeeded": mark("GangAttemptSuperseded", "topogang: a newer attempt"),
        }
        marks = {**ours, **{f"u-{k}": v for k, v in NOT_OURS.items()}, **going_already, **finished}
        uids = [*marks, "u-unmarked"]
        kube, sync, told = running_pods(*((uid, "nlp", uid.removeprefix("u-")) for uid in uids))
        for uid, condition in marks.items():
            for pod in (sync.pods[uid], kube.server.get(pod_path("nlp", uid.removeprefix("u-")))):
                assert pod is not None
                pod["status"]["conditions"].append(copy.deepcopy(condition))
        for uid in going_already:
            sync.pods[uid]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:01Z"
        for uid, phase in (("u-failed", "Failed"), ("u-succeeded", "Succeeded")):
            sync.pods[uid]["status"]["phase"] = phase

        task = await leading(sync.retries)
        await until(
            "topogang's marked pods ended",
            lambda: all(going(kube, "nlp", u.removeprefix("u-")) for u in ours),
        )
        await asyncio.sleep(0.3)
        await stop(task)
        deleted = sorted(uid for uid in uids if deletes(kube, uid.removeprefix("u-")))
        assert deleted == sorted(ours)
        assert sorted((uid, why.reason) for _, _, uid, why in told) == sorted(
            (uid, condition["reason"]) for uid, condition in ours.items()
        )
        assert status_patches(kube) == []

    run(go())


def test_a_pod_the_book_keeps_already_keeps_its_backoff_when_the_lead_begins() -> None:
    async def go() -> None:
        kube, sync, _ = running_pods(("u1", "nlp", "w-1"))
        clock = clock_of(sync)
        kube.inject(Fault("DELETE", "/pods/w-1$", "error", status=429, count=ALWAYS))
        await sync.evict(["u1"], disruption.not_whole("nlp/pair"))
        stored = kube.server.get(pod_path("nlp", "w-1"))
        assert stored is not None
        sync.pods["u1"] = copy.deepcopy(stored)
        kept = sync.retries.pending["u1"]
        assert sync.retries.inherit() == 0 and sync.retries.pending["u1"] is kept
        clock.t += 0.5
        assert await sync.retries.retry_due() == 0  # not due before its backoff
        assert deletes(kube, "w-1") == 1

    run(go())
