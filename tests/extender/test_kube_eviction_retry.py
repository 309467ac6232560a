"""A pod whose deletion fails (a 429 from API Priority and Fairness, a 5xx, no answer) is tried again
until it is gone: the core has moved it out of its gang already, so nothing else would ever end it
(`extender.kube.eviction_retry`). Only the leader tries; a pod deleted or replaced meanwhile is left
alone; the tries back off, to a cap, on the scheduler's clock."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path

import pytest

from config.against import CONFIRM_FILE, config_digest
from config.load import load_config
from extender.gangs import disruption
from extender.kube.client import pod_path
from extender.kube.eviction_retry import CAP, EvictionRetries, backoff
from extender.kube.leader import LeaseSettings
from extender.kube.pods import deleting
from extender.kube.service import kube_service
from extender.kube.sync import ClusterSync
from extender.standalone import EXAMPLE_CONFIG
from loadtest.kubefake import FakeKube, Fault
from tests.extender.helpers import Clock, example, run, spec
from tests.extender.test_kube_durable import NS, Running, cluster, start, submit, until
from tests.extender.test_kube_edge import apiserver, node
from tests.extender.test_kube_evictions import cluster as running_pods
from tests.extender.test_kube_evictions import evictions
from tests.extender.test_kube_reload_cells import REPAIRED, WITHOUT_RACK3, duo_on_rack3, owner
from tests.soak.layouts import layout_text

EXPIRED = "GangReservationExpired"


def deletes(kube: FakeKube, name: str) -> int:
    return sum(1 for method, path, _ in kube.calls if method == "DELETE" and path.endswith(f"/pods/{name}"))


def going(kube: FakeKube, namespace: str, name: str) -> bool:
    """Deleted: gone, or (a bound pod) given its deletionTimestamp, for the kubelet to stop."""
    pod = kube.server.get(pod_path(namespace, name))
    return pod is None or deleting(pod)


def clock_of(sync: ClusterSync) -> Clock:
    clock = sync.retries.clock
    assert isinstance(clock, Clock)
    return clock


@pytest.mark.parametrize(
    "fault",
    [
        Fault("DELETE", "/pods/pair-0$", "error", status=429),
        Fault("DELETE", "/pods/pair-0$", "error", status=503),
        Fault("DELETE", "/pods/pair-0$", "timeout"),
    ],
    ids=["429", "503", "no-answer"],
)
def test_an_expired_members_failed_deletion_is_tried_again_until_its_gpus_are_free(fault: Fault) -> None:
    async def go() -> None:
        kube, clock = cluster(), Clock()
        a = await start(kube, clock)
        node = await a.place(submit(kube, "p0", "pair-0", "nlp", spec("nlp", 8, 2, "nlp/pair")))
        g = a.s.core.gang("nlp/pair")
        assert g is not None and g.deadline is not None
        kube.inject(fault)
        clock.t = g.deadline + 1.0
        await a.s.expire()
        await asyncio.sleep(0.3)
        assert not going(kube, "nlp", "pair-0") and a.s.core.node_fill(node) == (0, 8)
        clock.t += 1.0  # the first backoff: the leader's loop tries again
        await until("the pod deleted", lambda: going(kube, "nlp", "pair-0"))
        assert kube.server.finalize(pod_path("nlp", "pair-0"))  # the kubelet has stopped it
        await until("its GPUs free", lambda: a.s.core.node_fill(node) == (8, 8))
        sync = owner(a.service, ClusterSync)
        assert a.s.core.gang_of_pod("p0") is None and len(sync.retries) == 0
        assert evictions(sync, EXPIRED, "not deleted") == 1 and evictions(sync, EXPIRED, "marked") == 1
        await a.stop()

    run(go())


def test_a_pod_deleted_by_someone_else_meanwhile_leaves_the_book_with_no_further_deletion() -> None:
    async def go() -> None:
        kube, sync, told = running_pods(("u1", "nlp", "w-1"), ("u2", "nlp", "w-2"))
        clock = clock_of(sync)
        kube.inject(Fault("DELETE", r"/pods/w-\d$", "error", status=429, count=2))
        await sync.evict(["u1", "u2"], disruption.reservation_expired())
        assert sorted(sync.retries.pending) == ["u1", "u2"]
        gone = copy.deepcopy(dict(sync.pods["u1"]))
        kube.server.delete(pod_path("nlp", "w-1"), None)
        await sync.on_pod("DELETED", gone)  # the watch brings its deletion
        assert sorted(sync.retries.pending) == ["u2"]
        kube.server.delete(pod_path("nlp", "w-2"), None)
        await sync.relist_pods([])  # its DELETED event missed: the relist no longer has it
        assert len(sync.retries) == 0
        clock.t += CAP
        assert await sync.retries.retry_due() == 0
        assert deletes(kube, "w-1") == 1 and deletes(kube, "w-2") == 1 and told == []

    run(go())


def test_a_pod_replaced_under_the_same_name_is_never_deleted() -> None:
    """Seen by the watch, the new pod takes the old one out of the book; not seen yet, the retry's
    UID precondition refuses (409) and the old one leaves the book all the same."""

    async def go() -> None:
        kube, sync, told = running_pods(("u1", "nlp", "w-1"), ("u3", "nlp", "w-3"))
        clock = clock_of(sync)
        kube.inject(Fault("DELETE", r"/pods/w-\d$", "error", status=503, count=2))
        await sync.evict(["u1", "u3"], disruption.not_whole("nlp/pair"))
        assert sorted(sync.retries.pending) == ["u1", "u3"]
        for new, name in (("u2", "w-1"), ("u4", "w-3")):
            kube.server.delete(pod_path("nlp", name), None)
            kube.server.put(
                pod_path("nlp", name),
                {"metadata": {"uid": new, "name": name, "namespace": "nlp"}, "status": {}},
            )
        replacement = kube.server.get(pod_path("nlp", "w-1"))
        assert replacement is not None
        await sync.on_pod("ADDED", copy.deepcopy(replacement))
        assert sorted(sync.retries.pending) == ["u3"]
        clock.t += CAP
        assert await sync.retries.retry_due() == 1
        assert len(sync.retries) == 0 and told == []
        assert deletes(kube, "w-1") == 1 and deletes(kube, "w-3") == 2
        for name, new in (("w-1", "u2"), ("w-3", "u4")):
            stored = kube.server.get(pod_path("nlp", name))
            assert stored is not None and stored["metadata"]["uid"] == new

    run(go())


def test_only_the_leader_tries_again() -> None:
    async def go() -> None:
        kube, clock = cluster(), Clock()
        lease = LeaseSettings(NS, "lead", lease_seconds=0.3, renew_deadline=0.2, retry_seconds=0.05)
        a = await start(kube, clock, lease=lease, identity="a")
        standby_kube = FakeKube(kube.server, record=True)
        b = Running(
            kube_service(example(), standby_kube, clock=clock, namespace=NS, lease=lease, identity="b")
        )
        await until("b synced, as standby", lambda: b.s.not_ready_reason.endswith("held by a"))
        submit(kube, "x", "x-0", "vision", spec("vision", 8))
        a_sync, b_sync = owner(a.service, ClusterSync), owner(b.service, ClusterSync)
        await until("both see it", lambda: "x" in a_sync.live and "x" in b_sync.live)
        why = disruption.preempted_by("vision/big")
        standby_kube.inject(Fault("DELETE", "/pods/x-0$", "error", status=429))
        await b_sync.evict(["x"], why)  # as if the standby had tried: its book is never worked
        assert list(b_sync.retries.pending) == ["x"]
        clock.t += CAP
        await asyncio.sleep(0.6)
        assert deletes(standby_kube, "x-0") == 1 and kube.server.get(pod_path("vision", "x-0")) is not None
        kube.inject(Fault("DELETE", "/pods/x-0$", "error", status=429))
        assert a.s.evictor is not None
        await a.s.evictor(["x"], why)  # the leader's: its loop tries again
        assert list(a_sync.retries.pending) == ["x"]
        clock.t += CAP
        await until("the leader's retry", lambda: kube.server.get(pod_path("vision", "x-0")) is None)
        await until("the standby's book emptied by its watch", lambda: len(b_sync.retries) == 0)
        assert deletes(standby_kube, "x-0") == 1
        await b.stop()
        await a.stop()

    run(go())


def test_the_tries_back_off_doubling_to_a_cap_on_the_injected_clock() -> None:
    async def go() -> None:
        kube, sync, told = running_pods(("u1", "nlp", "w-1"))
        clock = clock_of(sync)
        kube.inject(Fault("DELETE", "/pods/w-1$", "error", status=429, count=9))
        await sync.evict(["u1"], disruption.reservation_expired())
        delays = []
        for _ in range(9):
            retry = sync.retries.pending["u1"]
            delays.append(retry.due - clock.t)
            clock.t = retry.due - 0.001
            assert await sync.retries.retry_due() == 0  # not before its time
            clock.t = retry.due
            assert await sync.retries.retry_due() == 1
        assert delays == [1, 2, 4, 8, 16, 32, 60, 60, 60]
        assert kube.server.get(pod_path("nlp", "w-1")) is None and len(sync.retries) == 0
        assert deletes(kube, "w-1") == 10 and [uid for _, _, uid, _ in told] == ["u1"]
        marks = [b for m, p, b in kube.calls if m == "PATCH" and p.endswith("/status")]
        reasons = {c["reason"] for b in marks for c in (b or {})["status"]["conditions"] if "reason" in c}
        assert reasons == {EXPIRED}  # every try the same cause
        assert backoff(1000) == CAP

    run(go())


def test_the_loop_survives_a_failing_try_and_does_not_spin() -> None:
    async def go() -> None:
        _, sync, _ = running_pods(("u1", "nlp", "w-1"))
        clock = clock_of(sync)
        retries = EvictionRetries(sync, clock=clock)
        tries: list[float] = []

        async def broken(uid: str, namespace: str, name: str, why: disruption.Disruption) -> str:
            tries.append(clock.t)
            raise RuntimeError("a bug")

        retries.evict = broken  # type: ignore[method-assign]
        retries.failed("u1", "nlp", "w-1", disruption.reservation_expired())
        task = asyncio.create_task(retries.run())
        await asyncio.sleep(0.4)
        assert tries == []  # not due: the loop sleeps
        clock.t += 1.0
        await until("the try", lambda: len(tries) == 1)
        await asyncio.sleep(0.6)
        assert len(tries) == 1 and not task.done()  # failed, put back 2 s later on the clock
        assert retries.pending["u1"].attempts == 2 and retries.pending["u1"].due == clock.t + 2.0
        clock.t += 2.0
        await until("the next try", lambda: len(tries) == 2)
        assert not task.done()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(go())


def test_a_failed_eviction_of_a_pod_outside_the_config_is_tried_again(tmp_path: Path) -> None:
    """A whole gang with a pod on a node the config no longer has: when its other member goes, the
    pod outside leaves its index and is evicted. A failed deletion is kept by the retry book, and
    the leader's loop ends the pod."""

    async def go() -> None:
        s, _, api = await duo_on_rack3()
        path = tmp_path / "cluster.yaml"
        path.write_text(
            layout_text(EXAMPLE_CONFIG.read_text(encoding="utf-8"), WITHOUT_RACK3), encoding="utf-8"
        )
        (tmp_path / CONFIRM_FILE).write_text(config_digest(load_config(path)), encoding="utf-8")
        kube = apiserver(api, [node(n) for n in s.core.node_names()])
        clock = Clock()
        a = Running(kube_service(load_config(path), kube, clock=clock, namespace=NS))
        await until("ready", lambda: a.s.ready)
        outside = next(p for p in api if p["spec"]["nodeName"] == REPAIRED)
        name = outside["metadata"]["name"]
        held = next(p for p in api if p is not outside)["metadata"]["name"]
        # the API server sheds load: neither the mark nor the deletion is taken, so no event of the
        # pod's own will bring it back to the sync's attention
        kube.inject(Fault("PATCH", f"/pods/{name}/status$", "error", status=429))
        kube.inject(Fault("DELETE", f"/pods/{name}$", "error", status=429))
        kube.server.delete(pod_path("nlp", held), None)
        kube.server.finalize(pod_path("nlp", held))  # the held member is gone: the gang is not whole
        await until("the eviction tried", lambda: deletes(kube, name) == 1)
        await asyncio.sleep(0.3)
        assert not going(kube, "nlp", name)
        clock.t += 1.0
        await until("the eviction tried again", lambda: going(kube, "nlp", name))
        sync = owner(a.service, ClusterSync)
        assert len(sync.retries) == 0
        assert kube.server.finalize(pod_path("nlp", name))  # the kubelet has stopped it
        await until("the pod out of the index", lambda: sync.off_config.by_gang == {})
        await a.stop()

    run(go())
