"""Each verb asks the core one question: a recording proxy on `Core` counts what a verb asks of it.

The edge once crossed into the core eight times per filter (the GPU count, the pod's gang, the node
index, the gang and a validation, the reservation, the gang again for the ledger, the open slots,
the gang again for the promises), three of them before the scheduler's lock. Now what the config
fixes is read when a core is installed, and every verb gets one answer that the reply, the gang
ledger and the promised slots all read. A verb that asks a second time fails here, naming what it
asked.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from extender.gangs.disruption import Disruption
from extender.http.ports import BindError, BindTarget
from extender.http.verbs import Scheduler
from extender.http.wire import parse_preemption_args
from extender.standalone import MemoryBinder
from tests.extender.helpers import args, bind_args, fc_annotations, nodes, pod, run, scheduler, spec
from topology.core import Core
from topology.invariants import violations

# read-only reads a verb may make besides its question, for the words of its answer: none today
WORDING: frozenset[str] = frozenset()


class Recording:
    """Stands in for a `Core`: every attribute asked of it is recorded, then served by the core."""

    def __init__(self, core: Core) -> None:
        self.__dict__["_core"] = core
        self.__dict__["asked"] = []

    def __getattr__(self, name: str) -> Any:
        self.__dict__["asked"].append(name)
        return getattr(self.__dict__["_core"], name)

    def take(self) -> list[str]:
        """What was asked since the last take, reads for wording left out."""
        got = [a for a in self.__dict__["asked"] if a not in WORDING]
        self.__dict__["asked"].clear()
        return got


def recorded(**kw: Any) -> tuple[Scheduler, Recording]:
    s = scheduler(**kw)
    rec = Recording(s.core)
    s.core = rec  # type: ignore[assignment]
    rec.take()  # installing reads what the config fixes, once per core: no verb's
    return s, rec


def asks(rec: Recording, verb: str) -> None:
    got = rec.take()
    assert got == [verb], f"the verb asked the core {got}, not once ({verb})"


def core_of(rec: Recording) -> Core:
    core = rec.__dict__["_core"]
    assert isinstance(core, Core)
    return core


def test_filter_prioritize_and_bind_each_ask_the_core_once() -> None:
    async def go() -> None:
        s, rec = recorded()
        text = spec("vision", 8, pods=2, group="pair")
        members = [pod(f"m{i}", f"m-{i}", "vision", text) for i in range(2)]
        for p in members:  # the first places the gang, the second is a member of a placed gang
            r = await s.filter(args(p))
            asks(rec, "filter")
            assert r["NodeNames"], r
            names = r["NodeNames"]
            await s.prioritize(args(p, names))
            asks(rec, "prioritize")
            assert await s.bind(bind_args(p, names[0])) == {"Error": ""}
            asks(rec, "bind")
        again = await s.filter(args(members[0]))  # a bound member filtered again: its own slot
        asks(rec, "filter")
        assert again["NodeNames"], again
        assert violations(core_of(rec)) == []

    run(go())


def test_a_wait_a_bad_request_and_an_unknown_node_list_each_ask_once() -> None:
    async def go() -> None:
        s, rec = recorded()
        big = pod("big", "big", "research", spec("research", 8, 3, "research/big"))
        r = await s.filter(args(big))
        asks(rec, "filter")
        assert r["NodeNames"] == [] and "[InsufficientQuota]" in str(r["FailedAndUnresolvableNodes"])
        assert s.gang_ledger.records["research/big"].never_fits  # the ledger read the answer's quota
        stray = pod("stray", "stray", "vision", spec("vision", 8))
        r = await s.filter(args(stray, ["no-such-node"]))
        asks(rec, "filter")
        assert r["NodeNames"] == [] and "not in the cluster config" in str(r)
        unknown_vc = pod("vc", "vc", "vision", spec("nowhere", 8))
        r = await s.filter(args(unknown_vc))
        asks(rec, "filter")
        assert "does not exist" in r["Error"], r

    run(go())


def test_a_bound_pod_asking_as_another_member_is_refused_in_one_ask_and_keeps_its_identity() -> None:
    async def go() -> None:
        s, rec = recorded()
        p = pod("u", "u", "vision", spec("vision", 8, pods=1, group="one"))
        r = await s.filter(args(p))
        assert await s.bind(bind_args(p, r["NodeNames"][0])) == {"Error": ""}
        rec.take()
        other = pod("u", "u", "vision", spec("vision", 8, pods=1, group="two"))
        r = await s.filter(args(other))
        asks(rec, "filter")
        assert "metadata.uid" in r["Error"], r
        cached = s.cached("u")
        assert cached is not None and cached.gang == "vision/one"  # the holder's request stays

    run(go())


def test_preempt_and_filter_time_preemption_each_ask_once() -> None:
    async def go() -> None:
        evicted: list[str] = []

        async def evict(uids: Any, why: Disruption) -> None:
            evicted.extend(uids)

        s, rec = recorded(evictor=evict, preempt_on_filter=True)
        for i in range(3):
            p = pod(f"low{i}", f"low-{i}", "nlp", spec("nlp", 8, priority=0))
            r = await s.filter(args(p))
            assert await s.bind(bind_args(p, r["NodeNames"][0])) == {"Error": ""}
        rec.take()
        hi = pod("hi", "hi", "nlp", spec("nlp", 8, priority=600))
        r = await s.filter(args(hi))
        asks(rec, "filter")
        await asyncio.sleep(0)
        assert evicted and "[Preempting]" in str(r["FailedAndUnresolvableNodes"])
        body: Mapping[str, Any] = {"Pod": hi, "NodeNameToVictims": {n: {"Pods": []} for n in nodes()}}
        await s.preempt(parse_preemption_args(dict(body)))
        asks(rec, "preempt_member")

    run(go())


@pytest.mark.parametrize("pending", [False, True])
def test_a_newer_framework_attempt_lets_the_older_go_in_its_one_ask(pending: bool) -> None:
    """One ask, even with the lock's hook set (the Kubernetes mode), unless the hook has GPUs
    waiting to be held as they free (an unverified pod's claim): then the release and the placement
    are two asks with the hook run between them (`extender.http.filtercall`), the one other split."""

    async def go() -> None:
        s, rec = recorded()
        text = spec("vision", 8, pods=2, group="fw")
        old = pod("a0", "a0", "vision", text, annotations=fc_annotations("vision", "fw", "1_a", "w", 0))
        await s.filter(args(old))
        core = core_of(rec)
        ran: list[tuple[bool, bool]] = []  # (the old gang is there, the new one is)
        s.lock.on_acquire = lambda: ran.append(
            (core.gang("vision/fw/1_a") is not None, core.gang("vision/fw/2_b") is not None)
        )
        s.lock.pending = lambda: pending
        rec.take()
        new = pod("b0", "b0", "vision", text, annotations=fc_annotations("vision", "fw", "2_b", "w", 0))
        r = await s.filter(args(new))
        got = rec.take()
        assert got == (["filter", "filter"] if pending else ["filter"]), got
        # the hook ran as the lock was taken (the old gang still there), and, when pending, once
        # more after the old gang was let go and before the new one was placed
        assert ran == ([(True, False), (False, False)] if pending else [(True, False)])
        assert r["NodeNames"], r
        assert core.gang("vision/fw/1_a") is None and core.gang("vision/fw/2_b") is not None

    run(go())


def test_a_failed_binding_gives_its_slot_back_with_one_more_ask() -> None:
    """The claim is made under the lock and the Binding written outside it, so a Binding that fails
    gives the slot back with a second question: the one verb path that asks twice."""

    class Failing(MemoryBinder):
        async def bind(self, target: BindTarget, node: str, annotations: Mapping[str, str]) -> None:
            raise BindError("the API server said no")

    async def go() -> None:
        s, rec = recorded(binder=Failing())
        p = pod("f", "f", "vision", spec("vision", 8, pods=2, group="fails"))
        r = await s.filter(args(p))
        rec.take()
        b = await s.bind(bind_args(p, r["NodeNames"][0]))
        assert "failed" in b["Error"], b
        assert rec.take() == ["bind", "unclaim"]
        assert not core_of(rec).holds_slot("f")

    run(go())


def test_a_requests_ranges_are_checked_once_per_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pod contract checks a request's ranges as it reads the pod; the core's question then
    checks only what depends on the config, so no range rule runs twice in one filter (it once ran
    in the pod contract and again in the core's validation). A later member of the gang, with the
    same spec, reads the gang's part its first member's read kept (`podspec._parts`): none."""
    from extender.gangs import podspec
    from topology import requests

    checked: list[int] = []
    real = requests.check_priority

    def counting(priority: int) -> None:
        checked.append(priority)
        real(priority)

    monkeypatch.setattr(requests, "check_priority", counting)
    monkeypatch.setattr(podspec, "check_priority", counting, raising=False)  # a rule of its own, if any

    async def go() -> None:
        s, rec = recorded()
        podspec._parts.clear()
        for i in range(2):  # the member that places the gang, then a member of the placed gang
            p = pod(f"r{i}", f"r-{i}", "vision", spec("vision", 8, pods=2, group="ranges", priority=7))
            checked.clear()
            r = await s.filter(args(p))
            asks(rec, "filter")
            assert r["NodeNames"] and checked == ([7] if i == 0 else []), checked

    run(go())
