"""Pods the filter turned away for lack of room are marked once room frees, against the in-memory API
server: kube-scheduler moves an updated pod out of its unschedulable queue, so the mark is what
gets the pod filtered again when the extender's watch, not kube-scheduler's, sees the room free."""

from __future__ import annotations

import asyncio
from typing import Any

from extender.http.turned_away import Requeue, TurnedAway, waits_for_room
from extender.kube.client import pod_path
from extender.kube.requeue import ANNOTATION, Requeuer
from extender.ops.metrics import Metrics
from loadtest.kubefake import FakeKube
from loadtest.kubefake.client import Fault
from tests.extender.helpers import Clock, nodes, run, spec
from tests.extender.test_kube_durable import Running, cluster, start, submit, until
from tests.extender.test_kube_outside import OTHER, plain, put
from tests.extender.test_kube_promotion import NLP, gone
from topology.decisions import GangRequest, Member, WaitCode

# NLP: 24 GPUs of quota in the example config, three whole nodes


def mark_of(kube: FakeKube, ns: str, name: str) -> str | None:
    pod = kube.server.at(pod_path(ns, name))
    return (pod["metadata"].get("annotations") or {}).get(ANNOTATION)


async def turned_away(r: Running, p: dict[str, Any]) -> None:
    got = await r.verb("filter", p)
    assert not got["NodeNames"], got


async def fill_with_blockers(r: Running, kube: FakeKube) -> None:
    """A 3-pod gang of whole nodes of NLP placed: what a waiter of NLP is then turned away for."""
    text = spec(NLP, 8, 3, "nlp/blocker")
    for i in range(3):
        await r.place(submit(kube, f"b{i}", f"blocker-{i}", NLP, text))


def test_a_pod_turned_away_is_marked_once_when_the_watch_sees_room_free() -> None:
    async def go() -> None:
        kube, clock = cluster(), Clock()
        r = await start(kube, clock)
        await fill_with_blockers(r, kube)
        waiter = submit(kube, "w0", "waiter", NLP, spec(NLP, 8))
        await turned_away(r, waiter)  # nlp's quota is held by the blocker
        never = submit(kube, "n0", "never-0", NLP, spec(NLP, 8, 4, "nlp/never"))
        await turned_away(r, never)  # 32 GPUs, more than nlp's whole quota: no room will ever do
        assert r.s.requeue.counts() == (1, 0)

        gone(kube, "blocker-0")
        await until("the first blocker gone", lambda: not r.s.core.holds_slot("b0"))
        assert mark_of(kube, NLP, "waiter") is None  # the blocker's cells are still its gang's
        for i in (1, 2):
            gone(kube, f"blocker-{i}")
        await until("the waiter marked", lambda: mark_of(kube, NLP, "waiter") is not None)
        assert mark_of(kube, NLP, "never-0") is None
        assert r.s.requeue.counts() == (0, 0)
        metrics = (await r.http.get("/metrics")).text
        assert 'topogang_requeues_total{outcome="patched"} 1.0' in metrics

        # kube-scheduler filters it again: it fits now, and nothing is left to mark
        assert (await r.verb("filter", kube.server.at(pod_path(NLP, "waiter"))))["NodeNames"]
        assert r.s.requeue.counts() == (0, 0)
        await r.stop()

    run(go())


def test_a_pod_filtered_again_or_deleted_before_room_frees_is_not_marked() -> None:
    async def go() -> None:
        kube, clock = cluster(), Clock()
        r = await start(kube, clock)
        await fill_with_blockers(r, kube)
        first = submit(kube, "w0", "waiter", NLP, spec(NLP, 8))
        await turned_away(r, first)
        # deleted and created again under the same name: the new pod was never turned away
        gone(kube, "waiter")
        await until("the waiter forgotten", lambda: r.s.requeue.counts() == (0, 0))
        submit(kube, "w1", "waiter", NLP, spec(NLP, 8))
        for i in range(3):
            gone(kube, f"blocker-{i}")
        await until("the blocker released", lambda: r.s.core.gang("nlp/blocker") is None)
        assert mark_of(kube, NLP, "waiter") is None
        await r.stop()

    run(go())


def test_the_patch_names_the_uid_and_never_touches_a_pod_re_created_under_that_name() -> None:
    async def go() -> None:
        kube = FakeKube()
        submit(kube, "new-uid", "p", NLP, spec(NLP, 8))
        metrics = Metrics()
        book = Requeue()
        q = Requeuer(book, kube, metrics, wall=lambda: 5.0)
        assert await q.patch(TurnedAway(NLP, "p", "old-uid", "nlp/pod:p")) == "gone"
        assert mark_of(kube, NLP, "p") is None
        assert await q.patch(TurnedAway(NLP, "p", "new-uid", "nlp/pod:p")) == "patched"
        first = mark_of(kube, NLP, "p")
        assert await q.patch(TurnedAway(NLP, "p", "new-uid", "nlp/pod:p")) == "patched"
        assert first == "5000001" and mark_of(kube, NLP, "p") == "5000002"  # a new value each time
        assert await q.patch(TurnedAway(NLP, "absent", "u", "nlp/pod:absent")) == "gone"

    run(go())


def test_the_book_keeps_each_pod_once_and_a_slot_frees_only_its_own_gang() -> None:
    book = Requeue()
    a, b, c = (TurnedAway("ns", n, f"u-{n}", g) for n, g in (("a", "ns/x"), ("b", "ns/x"), ("c", "ns/y")))
    for p in (a, b, c):
        book.turned_away(p)
    book.freed("ns/x")  # a slot of gang x opened: only x's pods may use it
    assert book.counts() == (1, 2) and book.wake.is_set()
    book.turned_away(a)  # filtered again after that: it has seen the room
    assert book.counts() == (2, 1)
    book.freed()
    assert [p.name for p in book.take(2)] == ["b", "c"] and book.counts() == (0, 1)
    book.passed("u-a")
    assert book.counts() == (0, 0) and not book.wake.is_set()
    book.turned_away(c)
    book.keep_only({"u-a"})
    assert book.counts() == (0, 0)


def test_only_waits_that_room_can_end_are_kept() -> None:
    guaranteed = GangRequest("ns/g", "v", (Member(2, 8),), priority=1)
    opportunistic = GangRequest("ns/o", "v", (Member(2, 8),), priority=-1)
    assert waits_for_room(WaitCode.INSUFFICIENT_QUOTA, guaranteed, 16)
    assert not waits_for_room(WaitCode.INSUFFICIENT_QUOTA, guaranteed, 8)  # never, whatever frees
    assert waits_for_room(WaitCode.INSUFFICIENT_CAPACITY, opportunistic, 0)
    assert waits_for_room(WaitCode.PREEMPTING, guaranteed, 16)
    assert not waits_for_room(WaitCode.NO_SUGGESTED_NODE, guaranteed, 16)  # kube-scheduler's filters
    assert not waits_for_room(WaitCode.EXPIRED, guaranteed, 16)


def test_only_a_pod_the_api_server_has_as_the_body_names_it_can_be_marked() -> None:
    """Whoever reaches the filter names the pod in the body; a pod the API server does not have under
    that UID, namespace and name is answered as unknown and never recorded, so no release marks it."""

    async def go() -> None:
        kube, clock = cluster(), Clock()
        r = await start(kube, clock)
        await fill_with_blockers(r, kube)
        victim = submit(kube, "v0", "victim", "vision", spec("vision", 8))
        forged = submit(kube, "w0", "waiter", NLP, spec(NLP, 8))
        forged = {**forged, "metadata": {**forged["metadata"], "namespace": "vision", "name": "victim"}}
        got = await r.verb("filter", forged)
        assert not got["NodeNames"] and "not known" in str(got["Error"]), got
        assert r.s.requeue.counts() == (0, 0)
        for i in range(3):
            gone(kube, f"blocker-{i}")
        await until("the blocker released", lambda: r.s.core.gang("nlp/blocker") is None)
        assert mark_of(kube, "vision", "victim") is None and victim["metadata"]["uid"] == "v0"
        await r.stop()

    run(go())


def test_a_failed_patch_is_counted_and_the_others_are_still_marked() -> None:
    async def go() -> None:
        kube = FakeKube()
        for uid, name in (("u0", "slow"), ("u1", "denied"), ("u2", "fine")):
            submit(kube, uid, name, NLP, spec(NLP, 8))
        kube.inject(Fault("PATCH", "/slow$", "timeout"))
        kube.inject(Fault("PATCH", "/denied$", "error", status=403))
        metrics, book = Metrics(), Requeue()
        task = asyncio.create_task(Requeuer(book, kube, metrics, rate=1000.0).run())
        for uid, name in (("u0", "slow"), ("u1", "denied"), ("u2", "fine")):
            book.turned_away(TurnedAway(NLP, name, uid, f"nlp/pod:{name}"))
        book.freed()
        await until("the fine pod marked", lambda: mark_of(kube, NLP, "fine") is not None)
        assert mark_of(kube, NLP, "slow") is None and mark_of(kube, NLP, "denied") is None
        text = metrics.render().decode()
        assert 'topogang_requeues_total{outcome="failed"} 2.0' in text
        assert 'topogang_requeues_total{outcome="patched"} 1.0' in text
        task.cancel()

    run(go())


def test_gpus_coming_back_on_a_node_mark_the_pods_turned_away() -> None:
    """Every GPU is held by pods that are not topogang's: a topogang pod is turned away; one of them
    goes, its node's GPUs come back (no release of topogang's), and the pod is marked."""

    async def go() -> None:
        kube, clock = cluster(), Clock()
        r = await start(kube, clock)
        for i, node in enumerate(nodes()):
            put(kube, plain(f"other-{i}", node, 8))
        await until("every GPU held", lambda: all(r.s.core.node_fill(n)[0] == 0 for n in nodes()))
        waiter = submit(kube, "w0", "waiter", NLP, spec(NLP, 8))
        await turned_away(r, waiter)
        assert r.s.requeue.counts() == (1, 0)
        kube.server.delete(pod_path(OTHER, "other-0"), {"gracePeriodSeconds": 0})
        await until("the waiter marked", lambda: mark_of(kube, NLP, "waiter") is not None)
        await r.stop()

    run(go())
