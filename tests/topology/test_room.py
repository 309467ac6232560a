"""Reclaim only when the cluster has no room: a guaranteed gang that opted in (`promote_when_quota`)
starts as a guest in free room rather than end running work in its VC's cells, and is promoted to
the priority it asked for once its VC has room."""

from __future__ import annotations

from tests.topology.fixtures import gang, rack_cluster
from tests.topology.test_promotion import start
from topology.core import Core
from topology.decisions import AdoptedPod, GangPlacement, Preemption, Wait, WaitCode
from topology.gangs import placement_of
from topology.invariants import violations
from topology.room import MIN_LOSS_HOURS, min_loss_hours, over_quota

# x (4 GPUs, started at 0) has run 3 h at LONG: 12 GPU-hours; 1 h at SHORT: 4 GPU-hours
LONG = 3 * 3600.0
SHORT = 3600.0


def crowded() -> tuple[Core, set[str]]:
    """One rack of 4 nodes; VC a owns 1 node, b 3. a runs 4 GPUs in its node and b's guest `x` the
    other 4 (placed last, when b's other guests filled the 3 pool nodes); then one guest of b's
    leaves, so a pool node has 4 free GPUs. Returns the core and a's node."""
    core = Core(rack_cluster(racks=1, vcs={"a": [("NODE", 1)], "b": [("NODE", 3)]}))
    mine = start(core, gang("a1", "a", (1, 4)), 0.0)
    for i in range(6):
        start(core, gang(f"b{i}", "b", (1, 4), priority=-1), 0.0)
    assert start(core, gang("x", "b", (1, 4), priority=-1), 0.0) == mine  # the guest in a's node
    core.delete_gang("b0")
    return core, mine


def test_the_times_lie_on_both_sides_of_the_threshold() -> None:
    assert 4 * SHORT / 3600.0 < MIN_LOSS_HOURS < 4 * LONG / 3600.0


def test_without_the_opt_in_the_gang_preempts_the_guest_in_its_cells() -> None:
    core, _ = crowded()
    got = core.reserve(gang("a2", "a", (1, 4)), LONG)
    assert isinstance(got, Wait) and got.reason.code is WaitCode.PREEMPTIBLE
    assert {v.gang for v in got.victims} == {"x"}


def test_an_opted_in_gang_starts_as_a_guest_in_free_room_and_the_guest_keeps_running() -> None:
    core, mine = crowded()
    got = core.reserve(gang("a2", "a", (1, 4), priority=10, promote_when_quota=True), LONG)
    assert isinstance(got, GangPlacement) and got.priority < 0
    assert not {p.node for p in got.pods} & mine  # in the free room, not in a's node
    assert core.gang("x") is not None and violations(core) == []
    g = core.gang("a2")
    assert g is not None and g.guest and "guest" in g.history[-1]
    # the preempting phase answers the same gang, and preempts nobody
    again = core.preempt(gang("a2", "a", (1, 4), priority=10, promote_when_quota=True), LONG + 1.0)
    assert isinstance(again, GangPlacement) and core.gang("x") is not None


def test_a_preemption_that_ends_no_work_is_taken_as_before() -> None:
    core, _ = crowded()
    # at the time x started (0.0) it has run for nothing: preempting it costs less than the risk
    got = core.reserve(gang("a2", "a", (1, 4), promote_when_quota=True), 0.0)
    assert isinstance(got, Wait) and got.reason.code is WaitCode.PREEMPTIBLE


def test_a_preemption_that_ends_less_than_the_threshold_is_taken_as_before() -> None:
    core, mine = crowded()
    req = gang("a2", "a", (1, 4), priority=10, promote_when_quota=True)
    got = core.reserve(req, SHORT)  # x would lose 4 GPU-hours: not worth the guest's risk
    assert isinstance(got, Wait) and got.reason.code is WaitCode.PREEMPTIBLE
    assert {v.gang for v in got.victims} == {"x"}
    taken = core.preempt(req, SHORT)  # the preempting phase ends x on a's node
    assert isinstance(taken, Preemption) and {v.gang for v in taken.victims} == {"x"}
    assert {v.node for v in taken.victims} <= mine
    g = core.gang("a2")
    assert g is None or not g.guest


def roomy() -> tuple[Core, set[str]]:
    """As `crowded`, on two racks (8 nodes): a owns 1 node, b 7; b's 14 guests fill the 7 pool nodes,
    so b's guest `x` lands in a's node beside a's own 4 GPUs; then 12 of those guests leave, and 6
    of the 8 nodes are wholly free. Returns the core and a's node."""
    core = Core(rack_cluster(racks=2, vcs={"a": [("NODE", 1)], "b": [("NODE", 7)]}))
    mine = start(core, gang("a1", "a", (1, 4)), 0.0)
    for i in range(14):
        start(core, gang(f"b{i}", "b", (1, 4), priority=-1), 0.0)
    assert start(core, gang("x", "b", (1, 4), priority=-1), 0.0) == mine
    for i in range(12):
        core.delete_gang(f"b{i}")
    return core, mine


def test_the_threshold_falls_with_the_share_of_wholly_free_nodes() -> None:
    req = gang("a2", "a", (1, 4), priority=10, promote_when_quota=True)
    core, _ = crowded()
    assert min_loss_hours(core, req) == MIN_LOSS_HOURS  # no node wholly free: the whole threshold
    core, _ = roomy()
    assert min_loss_hours(core, req) == MIN_LOSS_HOURS * 2 / 8  # 6 of 8 nodes wholly free
    assert min_loss_hours(Core(rack_cluster(racks=2)), req) == 0.0  # an idle cluster


def test_with_most_nodes_wholly_free_a_smaller_loss_starts_the_gang_as_a_guest() -> None:
    """x would lose 4 GPU-hours: under the whole threshold (a busy cluster preempts it, above), over
    the threshold of a cluster whose nodes are mostly wholly free, where a guest risks little."""
    core, mine = roomy()
    got = core.reserve(gang("a2", "a", (1, 4), priority=10, promote_when_quota=True), SHORT)
    assert isinstance(got, GangPlacement) and got.priority < 0
    assert not {p.node for p in got.pods} & mine
    assert core.gang("x") is not None and violations(core) == []
    # a loss under even the scaled threshold (x has run 15 minutes: 1 GPU-hour) is still preempted
    core, _ = roomy()
    got = core.reserve(gang("a2", "a", (1, 4), priority=10, promote_when_quota=True), SHORT / 4)
    assert isinstance(got, Wait) and got.reason.code is WaitCode.PREEMPTIBLE


def test_the_guest_is_promoted_to_the_priority_it_asked_for_when_its_vc_has_room() -> None:
    core, _ = crowded()
    got = core.reserve(gang("a2", "a", (1, 4), priority=10, promote_when_quota=True), LONG)
    assert isinstance(got, GangPlacement)
    for p in got.pods:
        core.claim("a2", f"a2-{p.slot}", len(p.gpu_indices), LONG, node=p.node)
    core.delete_gang("a1")  # a's node holds only x now: a's quota cell is given back
    g = core.gang("a2")
    assert g is not None and g.priority < 0  # another guest shares its node: not yet
    nodes = {s.node for s in g.slots}
    for other in core.gangs():  # that guest leaves, so binding the node hands nobody to a
        if other.name not in ("a2", "x") and {s.node for s in other.slots} & nodes:
            core.delete_gang(other.name)
    g = core.gang("a2")
    assert g is not None and g.priority == 10 and "promoted" in g.history[-1]
    assert violations(core) == []


def test_a_vc_running_its_quota_partly_as_guests_does_not_preempt_for_more() -> None:
    core, _ = crowded()
    got = core.reserve(gang("a2", "a", (1, 4), promote_when_quota=True), LONG)
    assert isinstance(got, GangPlacement) and got.priority < 0
    # a runs 4 GPUs in its node and 4 as a guest: its whole quota of 8; x is not preempted for more
    for req in (gang("a3", "a", (1, 4), promote_when_quota=True), gang("a3", "a", (1, 4))):
        assert isinstance(core.reserve(req, LONG + 10.0), Wait)
        assert isinstance(core.preempt(req, LONG + 10.0), Wait)
        assert core.gang("x") is not None and core.gang("a3") is None
    assert violations(core) == []


def test_a_guest_comes_back_a_guest_after_a_restart_and_still_counts_against_its_quota() -> None:
    """Its pods were bound through no quota cell (what the bind annotations record), so a restart
    adopts it as opportunistic: it is a guest again, and its VC does not preempt for more."""
    core, _ = crowded()
    got = core.reserve(gang("a2", "a", (1, 4), priority=10, promote_when_quota=True), LONG)
    assert isinstance(got, GangPlacement) and got.priority < 0
    fresh = Core(core.topo.spec)
    for other in core.gangs():  # every gang as its pods' bind annotations give it back
        placed = placement_of(core, other)
        pods = [
            AdoptedPod(f"{other.name}-{p.slot}", p.node, p.gpu_indices, cell_types=p.cell_types)
            for p in placed.pods
        ]
        fresh.adopt(other.request, pods, LONG)
    back = fresh.gang("a2")
    assert back is not None and back.guest and back.priority < 0
    assert over_quota(fresh, gang("a3", "a", (1, 4)), [])  # a runs its whole quota, 4 of it as a guest
    assert violations(fresh) == []
