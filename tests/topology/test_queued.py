"""A gang asked about with an older gang of its VC ahead of it (`FilterAsk.behind`, the edge's
`topogang.vcQueueing: StrictFIFO`) waits [Queued]: nothing is placed or preempted for it, while a
member of a gang already placed is answered as before."""

from __future__ import annotations

from typing import Any

from tests.topology.fixtures import gang, rack_cluster, run
from topology import inspect
from topology.asks import FilterAsk, MemberAsk, Slots, Waits
from topology.core import Core
from topology.decisions import GangPlacement, Preemption, Wait, WaitCode
from topology.invariants import violations


def picture(core: Core) -> Any:
    """Every cell's state and owner, and the gangs: what a decision that changes nothing keeps."""
    gangs = sorted((g.name, g.priority, len(g.slots)) for g in core.reservations.by_name.values())
    return inspect.physical_cluster(core), inspect.virtual_clusters(core), gangs


def test_a_gang_behind_an_older_one_waits_queued_and_nothing_changes() -> None:
    core = Core(rack_cluster())
    before = picture(core)
    ask = FilterAsk(MemberAsk(gang("late", "a", (1, 8)), "u1", 8), behind="gang ns/early")
    got = core.filter(ask, 0.0)
    assert isinstance(got.outcome, Waits)
    reason = got.outcome.wait.reason
    assert reason.code is WaitCode.QUEUED and reason.vc == "a" and "gang ns/early" in reason.message
    assert got.outcome.gang is None and got.outcome.vc_quota == 32
    assert core.gang("late") is None and picture(core) == before
    placed = core.filter(FilterAsk(ask.member), 0.0)  # nobody ahead: placed
    assert isinstance(placed.outcome, Slots)


def test_a_member_of_a_placed_gang_is_not_queued() -> None:
    core = Core(rack_cluster())
    req = gang("g", "a", (2, 8))
    assert isinstance(core.reserve(req, 0.0), GangPlacement)
    got = core.filter(FilterAsk(MemberAsk(req, "u2", 8), behind="gang ns/other"), 0.0)
    assert isinstance(got.outcome, Slots) and got.outcome.slots


def test_a_queued_gang_preempts_nobody() -> None:
    def guest_on_the_rack() -> Core:
        core = Core(rack_cluster(racks=1, vcs={"a": [("NODE", 2)], "b": [("NODE", 2)]}))
        run(core, gang("guest", "b", (4, 8), priority=-1), "o")  # the whole rack, as a guest
        return core

    req = gang("owner", "a", (1, 8))
    nobody_ahead = guest_on_the_rack().preempt_member(MemberAsk(req, "u1", 8), 0.0)
    assert isinstance(nobody_ahead.got, Preemption) and nobody_ahead.got.victims
    core = guest_on_the_rack()
    before = picture(core)
    got = core.preempt_member(MemberAsk(req, "u1", 8), 0.0, "gang ns/early")
    assert isinstance(got.got, Wait) and got.got.reason.code is WaitCode.QUEUED
    assert picture(core) == before and violations(core) == []
