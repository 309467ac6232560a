"""The admission gate against the in-memory API server (`extender.kube.admission_gate`): a pod created
with `topogang.io/admission` stays gated exactly while its filter would answer `[Queued]` (its gang
behind an older gang of its VC), and is lifted once that gang is placed; every other gated pod (no
gang ahead, a bad spec, another scheduler's, BestEffortFIFO) is lifted at once. Who: only pods the
watch shows with the gate; what: that one gate, the others kept, with the pod's UID and
a UID precondition; the held pod's namespace is told why in an Event."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from extender.kube import admission_gate
from extender.kube.admission_gate import GATE, gated, lift_patch
from extender.kube.client import pod_path
from loadtest.kubefake import FakeKube
from tests.extender.helpers import Clock, run, spec
from tests.extender.test_kube_durable import Running, until
from tests.extender.test_kube_vc_order import NLP, cluster_on, reasons, start_on, submit
from topology.decisions import WaitCode

OTHER = {"name": "example.com/hold"}


def gate(kube: FakeKube, ns: str, name: str, *extra: dict[str, str]) -> None:
    """Put the gates on a pod as the admission policy does at its creation."""
    p = kube.server.at(pod_path(ns, name))
    p["spec"]["schedulingGates"] = [*extra, {"name": GATE}]
    kube.server.put(pod_path(ns, name), p)


def submit_gated(kube: FakeKube, uid: str, name: str, text: str, **kw: Any) -> dict[str, Any]:
    p = submit(kube, uid, name, text, **kw)
    p["spec"]["schedulingGates"] = [{"name": GATE}]
    return kube.server.put(pod_path(kw.get("ns", NLP), name), p)


def gates_of(kube: FakeKube, name: str, ns: str = NLP) -> list[str]:
    return [g["name"] for g in kube.server.at(pod_path(ns, name))["spec"].get("schedulingGates") or []]


async def held_gang(kube: FakeKube, r: Running) -> list[dict[str, Any]]:
    """nlp's 24 GPUs: one 8-GPU pod placed, a 3 x 8-GPU gang waiting for quota (it holds the VC)."""
    await r.place(submit(kube, "o0", "one", spec(NLP, 8)))
    big = [submit(kube, f"g{i}", f"big-{i}", spec(NLP, 8, 3, "nlp/big")) for i in range(3)]
    assert "[InsufficientQuota]" in await reasons(r, big[0])
    assert r.s.waiting["nlp/big"].holds
    return big


def test_a_gang_behind_an_older_one_stays_gated_until_that_gang_is_placed() -> None:
    async def go() -> None:
        clock = Clock()
        kube = cluster_on(clock)
        r = await start_on(kube, clock)
        big = await held_gang(kube, r)
        clock.t += 10.0
        small = [submit_gated(kube, f"s{i}", f"small-{i}", spec(NLP, 8, 2, "nlp/small")) for i in range(2)]
        await until("the held pods counted", lambda: r.s.metrics.admission_gated._value.get() == 2)
        await asyncio.sleep(0.1)
        assert all(GATE in gates_of(kube, f"small-{i}") for i in range(2))
        told = [e for e in kube.server.events if e["reason"] == "QueuedBehindOlderGang"]
        assert {e["involvedObject"]["name"] for e in told} == {"small-0", "small-1"}
        assert "gang nlp/big" in told[0]["message"], told[0]["message"]  # its own namespace: named
        # the filter agrees: a pod whose owner lifted the gate itself is answered [Queued]
        assert "[Queued]" in await reasons(r, small[0])

        kube.server.delete(
            pod_path(NLP, "one"), {"gracePeriodSeconds": 0}
        )  # room for big: placed, it holds nobody back
        await until("one gone", lambda: r.s.core.gang("nlp/pod:one") is None)
        for p in big:
            await r.place(kube.server.at(pod_path(NLP, p["metadata"]["name"])))
        await until("small lifted", lambda: not any(gates_of(kube, f"small-{i}") for i in range(2)))
        lifted = r.s.metrics.admission_lifts.labels("lifted")._value.get()
        assert lifted == 2, lifted
        await r.stop()

    run(go())


def test_gated_pods_that_wait_behind_nobody_go_at_once_and_keep_other_gates() -> None:
    """No gang ahead, a bad spec, a pod of another scheduler: lifted at once (the filter, or the other
    scheduler, answers them); another controller's gate stays; a pod without topogang's is untouched."""

    async def go() -> None:
        clock = Clock()
        kube = cluster_on(clock)
        r = await start_on(kube, clock)
        submit_gated(kube, "a0", "alone", spec(NLP, 8))
        bad = submit(kube, "b0", "bad", '{"virtualCluster": "nlp", "leafCellNumber": -3}')
        bad["spec"]["schedulingGates"] = [OTHER, {"name": GATE}]
        kube.server.put(pod_path(NLP, "bad"), bad)
        submit_gated(kube, "c0", "cpu-only", spec(NLP, 8), scheduler="default-scheduler")
        theirs = submit(kube, "t0", "theirs", spec(NLP, 8))
        theirs["spec"]["schedulingGates"] = [OTHER]
        kube.server.put(pod_path(NLP, "theirs"), theirs)
        await until(
            "lifted",
            lambda: (
                not gates_of(kube, "alone")
                and not gates_of(kube, "cpu-only")
                and GATE not in gates_of(kube, "bad")
            ),
        )
        assert gates_of(kube, "bad") == [OTHER["name"]] and gates_of(kube, "theirs") == [OTHER["name"]]
        assert r.s.core.gang("nlp/pod:alone") is None  # lifted, not placed: kube-scheduler's filter does that
        await r.place(kube.server.at(pod_path(NLP, "alone")))
        await r.stop()

    run(go())


def test_a_gated_pod_behind_a_gang_pending_at_a_restart_waits_for_that_gang() -> None:
    """After a restart the VC order comes back from the pending pods (`extender.kube.pending`): a pod
    created gated while no extender ran, behind them, keeps its gate; one of another VC goes."""

    async def go() -> None:
        clock = Clock()
        kube = cluster_on(clock)
        a = await start_on(kube, clock)
        await held_gang(kube, a)
        await a.stop()

        clock.t += 30.0
        submit_gated(kube, "l0", "late", spec(NLP, 8))
        submit_gated(kube, "v0", "vision-one", spec("vision", 8), ns="vision")
        b = await start_on(kube, clock)
        await until("vision-one lifted", lambda: not gates_of(kube, "vision-one", "vision"))
        await until("late counted as held", lambda: b.s.metrics.admission_gated._value.get() == 1)
        assert gates_of(kube, "late") == [GATE]
        assert b.s.waiting["nlp/big"].reason.code is WaitCode.UNASKED
        await b.stop()

    run(go())


def test_under_best_effort_fifo_nothing_stays_gated() -> None:
    async def go() -> None:
        clock = Clock()
        kube = cluster_on(clock)
        r = await start_on(kube, clock, best_effort=True)
        await r.place(submit(kube, "o0", "one", spec(NLP, 8)))
        big = [submit(kube, f"g{i}", f"big-{i}", spec(NLP, 8, 3, "nlp/big")) for i in range(3)]
        assert "[InsufficientQuota]" in await reasons(r, big[0])
        submit_gated(kube, "s0", "small", spec(NLP, 8))
        await until("small lifted", lambda: not gates_of(kube, "small"))
        await r.stop()

    run(go())


def test_the_lift_is_one_gate_of_one_pod_with_its_uid_as_precondition() -> None:
    """The patch names the pod's UID (a pod re-created under the same name is never touched) and
    writes the pod's gates without topogang's, every other one kept."""
    clock = Clock()
    kube = cluster_on(clock)
    p = submit_gated(kube, "u1", "x", spec(NLP, 8))
    p["spec"]["schedulingGates"] = [OTHER, {"name": GATE}]
    patch = lift_patch(p)
    assert patch == {
        "metadata": {"uid": "u1"},
        "spec": {"schedulingGates": [OTHER]},
    }
    assert lift_patch({**p, "spec": {"schedulingGates": [{"name": GATE}]}})["spec"] == {
        "schedulingGates": None
    }
    assert gated(p) and not gated({**p, "spec": {**p["spec"], "nodeName": "n1"}})
    assert not gated({"metadata": {"uid": "u"}, "spec": {"schedulingGates": [OTHER]}})


def test_a_vcs_gangs_go_while_its_quota_lasts_and_the_rest_wait_behind_the_first_that_does_not_fit() -> None:
    """nlp has 16 GPUs of quota left: of four 8-GPU gangs created gated, the two that the core's
    what-if places and the third (it waits for quota, holding the VC) are lifted; the fourth stays
    gated, not answered [Queued] by kube-scheduler at every cluster event, and is held behind the
    third once that waits. The what-if changed nothing: the gangs are placed where kube-scheduler's
    filters send them."""

    async def go() -> None:
        clock = Clock()
        kube = cluster_on(clock)
        r = await start_on(kube, clock)
        await r.place(submit(kube, "o0", "one", spec(NLP, 8)))
        four = []
        for i in range(4):
            clock.t += 1.0  # created one after another
            four.append(submit_gated(kube, f"q{i}", f"q-{i}", spec(NLP, 8)))
        await until("three lifted", lambda: not any(gates_of(kube, f"q-{i}") for i in range(3)))
        await asyncio.sleep(0.2)
        assert gates_of(kube, "q-3") == [GATE]
        for i in range(2):
            await r.place(kube.server.at(pod_path(NLP, f"q-{i}")))
        assert "[InsufficientQuota]" in await reasons(r, kube.server.at(pod_path(NLP, "q-2")))
        await until("q-3 held behind q-2", lambda: r.s.metrics.admission_gated._value.get() == 1)
        told = [e for e in kube.server.events if e["reason"] == "QueuedBehindOlderGang"]
        assert [e["involvedObject"]["name"] for e in told] == ["q-3"] and "gang nlp/pod:q-2" in told[0][
            "message"
        ]
        kube.server.delete(pod_path(NLP, "one"), {"gracePeriodSeconds": 0})
        await until("one gone", lambda: r.s.core.gang("nlp/pod:one") is None)
        await r.place(kube.server.at(pod_path(NLP, "q-2")))  # placed: it holds nobody back
        await until("q-3 lifted", lambda: not gates_of(kube, "q-3"))
        await r.stop()

    run(go())


def test_a_lifted_gang_that_ran_and_ended_between_two_passes_holds_nothing_back() -> None:
    """A gang lifted, placed, bound and gone before the keeper looked again is not taken for one
    still on its way (which the what-if would place again, keeping its VC's next gangs gated)."""

    async def go() -> None:
        clock = Clock()
        kube = cluster_on(clock)
        r = await start_on(kube, clock)
        await r.place(submit(kube, "o0", "one", spec(NLP, 8)))
        await r.place(submit(kube, "o1", "two", spec(NLP, 8)))
        submit_gated(kube, "b0", "brief", spec(NLP, 8))  # fits nlp's last 8 GPUs: lifted
        await until("brief lifted", lambda: not gates_of(kube, "brief"))
        await r.place(kube.server.at(pod_path(NLP, "brief")))
        kube.server.delete(pod_path(NLP, "brief"), {"gracePeriodSeconds": 0})
        await until("brief gone", lambda: r.s.core.gang("nlp/pod:brief") is None)
        await r.place(submit(kube, "o2", "three", spec(NLP, 8)))  # nlp's quota is all used again
        submit_gated(kube, "n0", "next", spec(NLP, 8))  # the first that does not fit: lifted, to wait
        await until("next lifted", lambda: not gates_of(kube, "next"), seconds=3.0)
        assert "[InsufficientQuota]" in await reasons(r, kube.server.at(pod_path(NLP, "next")))
        await r.stop()

    run(go())


def test_a_backlog_goes_through_the_what_if_a_slice_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """The what-if runs under the verbs' lock: a pass places at most `WHAT_IF_GANGS` gangs in it, and
    the next pass follows at once, so a backlog still goes without waiting for the periodic pass."""
    monkeypatch.setattr(admission_gate, "WHAT_IF_GANGS", 1)

    async def go() -> None:
        clock = Clock()
        kube = cluster_on(clock)
        r = await start_on(kube, clock)
        for i in range(3):
            clock.t += 1.0
            submit_gated(kube, f"k{i}", f"k-{i}", spec(NLP, 8))
        await until("all three lifted", lambda: not any(gates_of(kube, f"k-{i}") for i in range(3)), 1.5)
        await r.stop()

    run(go())


def test_a_keeper_that_cannot_judge_lets_every_gated_pod_go(monkeypatch: pytest.MonkeyPatch) -> None:
    """The gate is a shortcut: should the what-if fail, the keeper fails open, and the filter keeps
    the VC order as it does without a gate."""

    def broken(*args: object) -> list[bool]:
        raise RuntimeError("what-if broken")

    monkeypatch.setattr(admission_gate, "fits_in_order", broken)

    async def go() -> None:
        clock = Clock()
        kube = cluster_on(clock)
        r = await start_on(kube, clock)
        submit_gated(kube, "f0", "first", spec(NLP, 8))
        await until("first lifted all the same", lambda: not gates_of(kube, "first"))
        await r.place(kube.server.at(pod_path(NLP, "first")))
        await r.stop()

    run(go())


def test_the_book_keeps_the_order_the_watch_showed_the_gated_pods_in() -> None:
    """Pods created in the same second go in the order they were created, as kube-scheduler's queue
    takes them without a gate, not by name (which would group them by namespace)."""
    book = admission_gate.GatedPods()

    def gated_pod(uid: str, ns: str) -> dict[str, Any]:
        return {
            "metadata": {"uid": uid, "name": uid, "namespace": ns},
            "spec": {"schedulingGates": [{"name": GATE}]},
        }

    for uid, ns in (("u3", "vc-b"), ("u1", "vc-z"), ("u2", "vc-a")):
        book.saw("ADDED", gated_pod(uid, ns))
    assert sorted(book.seen, key=book.seen.__getitem__) == ["u3", "u1", "u2"]
    book.saw("MODIFIED", {**gated_pod("u3", "vc-b"), "spec": {}})  # lifted: it leaves the book
    book.listed([gated_pod("u2", "vc-a"), gated_pod("u4", "vc-a"), gated_pod("u1", "vc-z")])
    assert sorted(book.seen, key=book.seen.__getitem__) == ["u1", "u2", "u4"]
