"""Reclaim only when the cluster has no room: a guaranteed gang that opted in (`promote_when_quota`)
starts as a guest in free room rather than end running work in its VC's cells, or as a guest over
younger guests elsewhere when that ends less work, and is promoted to the priority it asked for once
its VC has room."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.topology.fixtures import gang, rack_cluster
from tests.topology.test_promotion import start
from tests.topology.test_state_machine import _records
from topology.core import Core
from topology.decisions import AdoptedPod, GangPlacement, Preemption, Wait, WaitCode
from topology.gangs import placement_of
from topology.invariants import violations
from topology.room import MIN_LOSS_HOURS, loss_of, min_loss_hours, over_quota

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


def full(young_at: float) -> tuple[Core, set[str], set[str]]:
    """As `crowded`, but the free room is taken again: b's guest `y` starts in it at `young_at`, so no
    GPU is free. Returns the core, a's node and y's node."""
    core, mine = crowded()
    return core, mine, start(core, gang("y", "b", (1, 4), priority=-1), young_at)


def test_with_no_free_room_an_opted_in_gang_starts_as_a_guest_over_a_younger_guest() -> None:
    """x in a's node has run 3 h (12 GPU-hours), y elsewhere 15 minutes (1 GPU-hour): a counted
    quota would reclaim y, the youngest borrower; a2 does too, and runs as a guest where y ran."""
    core, mine, ys = full(LONG - 900.0)
    req = gang("a2", "a", (1, 4), priority=10, promote_when_quota=True)
    got = core.reserve(req, LONG)
    assert isinstance(got, Wait) and got.reason.code is WaitCode.PREEMPTIBLE
    assert {v.gang for v in got.victims} == {"y"} and "as a guest" in got.reason.message
    taken = core.preempt(req, LONG)
    assert isinstance(taken, Preemption) and {v.gang for v in taken.victims} == {"y"}
    g = core.gang("a2")
    assert g is not None and g.guest and g.priority < 0 and "younger guests" in g.history[-1]
    assert core.gang("x") is not None and violations(core) == []
    core.release_pod(taken.victims[0].pod_uid, LONG)  # y's pod goes: a2 holds y's GPUs
    placed = core.reserve(req, LONG)
    assert isinstance(placed, GangPlacement) and placed.priority < 0
    assert {p.node for p in placed.pods} == ys and not ys & mine
    assert violations(core) == []


def test_without_the_opt_in_the_gang_reclaims_its_own_cells_though_a_younger_guest_runs_elsewhere() -> None:
    core, mine, _ = full(LONG - 900.0)
    taken = core.preempt(gang("a2", "a", (1, 4), priority=10), LONG)
    assert isinstance(taken, Preemption) and {v.gang for v in taken.victims} == {"x"}
    assert {v.node for v in taken.victims} <= mine


def test_a_reclaim_under_the_threshold_stays_in_the_vcs_cells() -> None:
    """At SHORT x would lose 4 GPU-hours, under the threshold: not worth the guest's risk, though y
    (started 15 minutes before) would lose less."""
    core, mine, _ = full(SHORT - 900.0)
    taken = core.preempt(gang("a2", "a", (1, 4), priority=10, promote_when_quota=True), SHORT)
    assert isinstance(taken, Preemption) and {v.gang for v in taken.victims} == {"x"}
    assert {v.node for v in taken.victims} <= mine
    g = core.gang("a2")
    assert g is not None and not g.guest and g.priority == 10


def test_a_guest_elsewhere_that_ran_longer_leaves_the_reclaim_in_the_vcs_cells() -> None:
    core, mine, _ = full(0.0)  # y has run as long as x: no cheaper way in
    taken = core.preempt(gang("a2", "a", (1, 4), priority=10, promote_when_quota=True), LONG)
    assert isinstance(taken, Preemption) and {v.gang for v in taken.victims} == {"x"}
    assert {v.node for v in taken.victims} <= mine


def busy(guests: list[tuple[int, float]]) -> Core:
    """Two racks: a owns 1 node and runs 4 GPUs there; b owns the rest and runs only guests, of
    (GPUs, start time) as drawn, in start order, as many as fit."""
    core = Core(rack_cluster(racks=2, vcs={"a": [("NODE", 1)], "b": [("NODE", 7)]}))
    start(core, gang("a1", "a", (1, 4)), 0.0)
    for i, (gpus, at) in enumerate(sorted(guests, key=lambda g: g[1])):
        req = gang(f"b{i}", "b", (1, gpus), priority=-1)
        if isinstance(core.reserve(req, at), GangPlacement):
            start(core, req, at)
    return core


@settings(max_examples=60, deadline=None)
@given(
    guests=st.lists(
        st.tuples(st.sampled_from([1, 2, 4, 8]), st.floats(0.0, LONG * 4)), min_size=10, max_size=40
    ),
    gpus=st.sampled_from([1, 2, 4]),
)
def test_a_gang_starting_as_a_guest_over_guests_ends_less_work_and_only_plain_guests(
    guests: list[tuple[int, float]], gpus: int
) -> None:
    """Whatever the guests and their ages: a2 goes in as a guest over other guests only when that
    ends less running work than its reclaim in a's cells would, its victims are plain guests on one
    node, and every guarantee holds."""
    now = LONG * 4 + 60.0
    asked = gang("a2", "a", (1, gpus), priority=10, promote_when_quota=True)
    core = busy(guests)
    got = core.preempt(asked, now)
    assert violations(core) == []
    g = core.gang("a2")
    if not isinstance(got, Preemption) or g is None or not g.guest:
        return
    victims = [core.gang(name) for name in sorted({v.gang for v in got.victims})]
    assert all(v is not None and v.priority < 0 and not v.guest for v in victims)
    assert len({v.node for v in got.victims}) == 1
    lost = loss_of(core, [v.id for v in victims if v is not None], now)
    plain = busy(guests)  # the same cluster; a gang that did not opt in reclaims a's cells
    own = plain.preempt(gang("a2", "a", (1, gpus), priority=10), now)
    assert isinstance(own, Preemption)
    theirs = [plain.gang(name) for name in sorted({v.gang for v in own.victims})]
    assert lost < loss_of(plain, [v.id for v in theirs if v is not None], now)


def test_a_guest_preempting_other_guests_comes_back_so_after_a_restart() -> None:
    """A restart while y's pod is still going: a2's persisted reservation is restored over y's GPUs
    (a plain guest, though of the same priority), still a guest, y still its victim."""
    core, _, ys = full(LONG - 900.0)
    req = gang("a2", "a", (1, 4), priority=10, promote_when_quota=True)
    assert isinstance(core.preempt(req, LONG), Preemption)
    fresh = Core(core.topo.spec)
    for other in core.gangs():
        if other.name != "a2":
            fresh.adopt(other.request, _records(core, other), LONG)
    g = core.gang("a2")
    assert g is not None
    assert isinstance(fresh.restore(req, _records(core, g), LONG, g.deadline), GangPlacement)
    back = fresh.gang("a2")
    assert back is not None and back.guest and back.priority < 0 and back.pending
    assert {fresh.reservations.by_id[v].name for v in back.victims} == {"y"}
    assert {fresh.topo.node_names[s.node] for s in back.slots} == ys
    assert violations(fresh) == []


def yielded() -> tuple[Core, set[str], set[str]]:
    """As `full`, then a2 (a's, opted in) goes in as a guest over the young y, in y's node: a guaranteed
    gang running as a guest. Returns the core, a's node and a2's node."""
    core, mine, ys = full(LONG - 900.0)
    req = gang("a2", "a", (1, 4), priority=10, promote_when_quota=True)
    taken = core.preempt(req, LONG)
    assert isinstance(taken, Preemption) and {v.gang for v in taken.victims} == {"y"}
    core.release_pod(taken.victims[0].pod_uid, LONG)
    assert start(core, req, LONG) == ys
    g = core.gang("a2")
    assert g is not None and g.guest and g.priority < 0
    return core, mine, ys


def test_a_reclaim_that_would_end_a_gang_running_as_a_guest_takes_free_room_instead() -> None:
    """Ten minutes on, b's guaranteed gang would end a2 (40 GPU-minutes, far under the threshold, and
    the cheapest victim in the pool b binds from). a2 went in as a guest so as not to end work; ending it
    now would make a's job queue again where its own cluster would have run it. With room in a's node
    (x has gone), b9 starts there as a guest instead, and a2 keeps running."""
    core, mine, ys = yielded()
    core.delete_gang("x")
    req = gang("b9", "b", (1, 4), priority=10, promote_when_quota=True)
    got = core.preempt(req, LONG + 600.0)
    assert isinstance(got, GangPlacement) and got.priority < 0
    assert {p.node for p in got.pods} == mine
    a2, b9 = core.gang("a2"), core.gang("b9")
    assert a2 is not None and a2.guest and b9 is not None and b9.guest
    assert {p.node for p in placement_of(core, a2).pods} == ys  # still running where it went in
    assert violations(core) == []


def test_with_no_other_way_in_the_reclaim_still_ends_the_gang_running_as_a_guest() -> None:
    """VC safety: with no free room and no plain guest that loses less, b's reclaim ends a2."""
    core, _, ys = yielded()
    req = gang("b9", "b", (1, 4), priority=10, promote_when_quota=True)
    taken = core.preempt(req, LONG + 600.0)
    assert isinstance(taken, Preemption) and {v.gang for v in taken.victims} == {"a2"}
    assert {v.node for v in taken.victims} <= ys
    assert violations(core) == []


def test_without_the_opt_in_the_reclaim_ends_the_gang_running_as_a_guest() -> None:
    core, _, _ = yielded()
    core.delete_gang("x")
    taken = core.preempt(gang("b9", "b", (1, 4), priority=10), LONG + 600.0)
    assert isinstance(taken, Preemption) and {v.gang for v in taken.victims} == {"a2"}
