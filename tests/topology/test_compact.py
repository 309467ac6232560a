"""A guaranteed multi-node gang that opted in to guests (`promote_when_quota`) takes one rack over a
young plain guest rather than free nodes in two racks (`topology/compact.py`); a guest that has run
long, or a gang that did not opt in (HiveD's rule), keeps the free placement across racks."""

from __future__ import annotations

from typing import Any

import pytest

from tests.topology.fixtures import gang, rack_cluster
from topology.asks import FilterAsk, MemberAsk, Waits
from topology.core import Core
from topology.decisions import AdoptedPod, GangPlacement, GangRequest, Preemption, Wait, WaitCode
from topology.invariants import violations
from topology.room import MIN_LOSS_HOURS
from topology.whatif import what_if

EIGHT = tuple(range(8))
YOUNG = 600.0  # the guest has run 10 min: 8 GPUs x 1/6 h, under the threshold
OLD = 3 * 3600.0  # 3 h: 24 GPU-hours, over it


def crowded() -> Core:
    """Two racks of 4 nodes; VC a owns 2 nodes, b 6. b runs on 5 nodes, and a plain guest of b's
    on r0-n2; free: r0-n3 and r1-n3, one node in each rack."""
    core = Core(rack_cluster(racks=2, vcs={"a": [("NODE", 2)], "b": [("NODE", 6)]}))
    for node in ("r0-n0", "r0-n1", "r1-n0", "r1-n1", "r1-n2"):
        core.adopt(gang(f"b-{node}", "b", (1, 8)), [AdoptedPod(f"u-{node}", node, EIGHT)], 0.0)
    core.adopt(gang("guest", "b", (1, 8), priority=-1), [AdoptedPod("u-guest", "r0-n2", EIGHT)], 0.0)
    assert violations(core) == []
    return core


def pair(**kw: object) -> GangRequest:
    return gang("pair", "a", (2, 8), **kw)


def test_the_times_lie_on_both_sides_of_the_threshold() -> None:
    whole_free = 2 / 8  # of the cluster's nodes, when `pair` asks
    threshold = MIN_LOSS_HOURS * (1 - whole_free)
    assert 8 * YOUNG / 3600 < threshold < 8 * OLD / 3600


def test_an_opted_in_gang_takes_one_rack_over_a_young_guest() -> None:
    core = crowded()
    req = pair(promote_when_quota=True)
    got = core.reserve(req, YOUNG)
    assert isinstance(got, Wait) and got.reason.code is WaitCode.PREEMPTIBLE
    assert {v.gang for v in got.victims} == {"guest"} and "one cell" in got.reason.message
    assert core.gang("pair") is None  # the filtering phase reserves nothing
    taken = core.preempt(req, YOUNG)
    assert isinstance(taken, Preemption) and {v.gang for v in taken.victims} == {"guest"}
    g = core.gang("pair")
    assert g is not None and set(core.placement_of(g).nodes) == {"r0-n2", "r0-n3"}
    core.delete_gang("guest")  # the guest's pod is gone
    placed = core.reserve(req, YOUNG + 1.0)
    assert isinstance(placed, GangPlacement) and set(placed.nodes) == {"r0-n2", "r0-n3"}
    assert violations(core) == []


def test_a_guest_that_has_run_long_keeps_running_and_the_gang_spans_racks() -> None:
    core = crowded()
    got = core.reserve(pair(promote_when_quota=True), OLD)
    assert isinstance(got, GangPlacement) and set(got.nodes) == {"r0-n3", "r1-n3"}
    assert core.gang("guest") is not None


def test_without_the_opt_in_the_free_room_is_taken_as_hived_takes_it() -> None:
    core = crowded()
    got = core.reserve(pair(), YOUNG)
    assert isinstance(got, GangPlacement) and set(got.nodes) == {"r0-n3", "r1-n3"}
    again = crowded().preempt(pair(), YOUNG)
    assert isinstance(again, GangPlacement) and set(again.nodes) == {"r0-n3", "r1-n3"}


def test_a_gang_already_in_one_rack_is_left_alone() -> None:
    core = crowded()
    core.delete_gang("b-r1-n2")  # now rack 1 has two free nodes
    got = core.reserve(pair(promote_when_quota=True), YOUNG)
    assert isinstance(got, GangPlacement) and set(got.nodes) == {"r1-n2", "r1-n3"}
    assert core.gang("guest") is not None


def test_a_filter_that_preempts_takes_the_closer_plan_it_found_without_a_second_what_if(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Filter-time preemption: the filtering phase found the plan (a what-if placement), and the
    preempting phase of the same call applies it rather than placing the gang in a what-if again."""
    core = crowded()
    asked: list[str] = []

    def counted(cluster: Any) -> Any:
        asked.append("what-if")
        return what_if(cluster)

    monkeypatch.setattr("topology.compact.what_if", counted)
    req = pair(promote_when_quota=True)
    got = core.filter(FilterAsk(MemberAsk(req, "u-pair-0", 8), preempt=True), YOUNG)
    assert isinstance(got.outcome, Waits) and got.outcome.preempted is not None
    assert {v.gang for v in got.outcome.preempted.victims} == {"guest"}
    assert asked == ["what-if"]
    g = core.gang("pair")
    assert g is not None and set(core.placement_of(g).nodes) == {"r0-n2", "r0-n3"}
    assert violations(core) == []
