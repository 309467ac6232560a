"""Bad hardware, work-preserving reconfiguration and the explain API."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.topology.fixtures import CELL_TYPES, gang, rack_cluster, run
from topology.core import Core
from topology.decisions import AdoptedPod, Bind, GangPlacement, Preemption, Wait, WaitCode
from topology.explain import explain, fits_in_order
from topology.invariants import snapshot, violations
from topology.reconfigure import reconfigure


def test_placement_avoids_bad_gpus_and_nodes() -> None:
    core = Core(rack_cluster(racks=1, vcs={"a": [("NODE", 4)]}))
    core.set_node_health("r0-n0", healthy=False)
    core.set_node_health("r0-n1", healthy=True, bad_gpus=frozenset({0}))
    d = run(core, gang("g", "a", (1, 8)), "g")[0]
    assert d.node not in ("r0-n0", "r0-n1")
    small = run(core, gang("s", "a", (1, 2)), "s")[0]
    assert small.node != "r0-n0" and not (small.node == "r0-n1" and 0 in small.gpu_indices)


def test_allocatable_below_capacity_marks_surplus_gpus_bad() -> None:
    core = Core(rack_cluster(racks=2))
    core.set_node_health("r0-n2", healthy=True, healthy_gpus=6)
    assert core.node_health("r0-n2") == (6, 7)
    core.set_node_health("r0-n2", healthy=True)
    assert core.node_health("r0-n2") == ()


def test_allocated_gang_is_never_moved_off_a_bad_node() -> None:
    core = Core(rack_cluster(racks=2))
    d = run(core, gang("g", "a", (1, 8)), "g")[0]
    core.set_node_health(d.node, healthy=False)
    assert core.gang("g") is not None
    assert violations(core) == []
    core.release_pod(d.pod_uid, 1.0)
    core.set_node_health(d.node, healthy=True)
    assert violations(core) == []


def test_vc_whose_free_cells_map_only_to_a_bad_node_sees_bad_hardware() -> None:
    core = Core(rack_cluster(racks=1, vcs={"a": [("NODE", 3)], "b": [("NODE", 1)]}))
    run(core, gang("a-all", "a", (3, 8)), "a")
    free_node = next(
        n for n in core.topo.node_names if core.state.free[core.topo.node_cell[core.topo.node_index[n]]]
    )
    core.set_node_health(free_node, healthy=False)
    w = core.reserve(gang("b1", "b", (1, 4)), 0.0)
    assert isinstance(w, Wait) and w.reason.code is WaitCode.BAD_HARDWARE
    assert free_node in w.reason.message
    assert explain(core, gang("b1", "b", (1, 4)), 0.0)["doomed"]
    core.set_node_health(free_node, healthy=True)
    assert explain(core, gang("b1", "b", (1, 4)), 0.0)["doomed"] == []
    assert isinstance(core.schedule(gang("b1", "b", (1, 4)), "b1", 4, 0.0), Bind)


def test_explain_is_a_what_if_that_changes_nothing() -> None:
    core = Core(rack_cluster())
    run(core, gang("x", "a", (1, 8)), "x")
    before = snapshot(core)
    fits = explain(core, gang("q", "a", (2, 8)), 0.0)
    assert fits["fitsNow"] is True and len(fits["placement"]["pods"]) == 2
    nope = explain(core, gang("big", "b", (4, 8)), 0.0)
    assert nope["fitsNow"] is False and nope["reason"]["code"] == "InsufficientQuota"
    assert nope["chains"][0]["levels"][3]["cellType"] == "NODE"
    assert snapshot(core) == before and core.gang("q") is None


def test_reconfiguration_that_shrinks_a_vc_downgrades_the_overflow_and_keeps_the_rest() -> None:
    old = Core(rack_cluster(vcs={"a": [("NODE", 4)], "b": [("NODE", 2)]}))
    keep = run(old, gang("a-old", "a", (2, 8)), "k")
    more = run(old, gang("a-new", "a", (2, 8)), "m")
    other = run(old, gang("b-job", "b", (1, 4)), "o")
    smaller = rack_cluster(vcs={"a": [("NODE", 2)], "b": [("NODE", 2)]})
    new, report = reconfigure(old, smaller, now=10.0)
    assert violations(new) == []
    assert "a-new" in report.downgraded and "a-old" in report.kept and "b-job" in report.kept
    for binds, name in ((keep, "a-old"), (more, "a-new"), (other, "b-job")):
        g = new.gang(name)
        assert g is not None
        assert {(b.node, b.gpu_indices) for b in binds} == {
            (new.topo.node_names[s.node], tuple(new.topo.gpu_index[x] for x in s.leaves)) for s in g.slots
        }
        assert {b.pod_uid for b in binds} == {s.pod_uid for s in g.slots}
    assert new.gang("a-new").priority == -1  # type: ignore[union-attr]
    (impact,) = report.impacts  # the one gang that loses something: its guarantee, not a GPU
    assert (impact.gang, impact.vc, impact.gpus, impact.kept_gpus) == ("a-new", "a", 16, 16)
    assert impact.loses_guarantee and impact.lost_pods == () and report.loses_capacity
    _, same = reconfigure(old, rack_cluster(vcs={"a": [("NODE", 4)], "b": [("NODE", 2)]}), now=10.0)
    assert same.impacts == [] and not same.loses_capacity
    _, no_a = reconfigure(old, rack_cluster(vcs={"b": [("NODE", 2)]}), now=10.0)  # VC a is gone
    assert sorted((i.gang, i.loses_guarantee) for i in no_a.impacts) == [("a-new", True), ("a-old", True)]


def test_reconfiguration_reports_pods_on_removed_hardware() -> None:
    old = Core(rack_cluster(racks=2, vcs={"a": [("NODE", 2)]}))
    d = run(old, gang("g", "a", (1, 8), suggested_nodes=frozenset({"r1-n3"})), "g")[0]
    assert d.node == "r1-n3"
    new, report = reconfigure(old, rack_cluster(racks=1, vcs={"a": [("NODE", 2)]}), now=0.0)
    assert report.lost and new.gang("g") is None
    (impact,) = report.impacts
    assert (impact.gang, impact.gpus, impact.kept_gpus, impact.loses_guarantee) == ("g", 8, 0, False)
    assert impact.gone and impact.lost_pods == (d.pod_uid,) and "is gone: 8 of its 8 GPUs" in impact.text()
    assert violations(new) == []


def test_a_gang_not_whole_whose_placement_loses_hardware_is_let_go() -> None:
    """A reload that takes out nodes of a gang still waiting for members leaves it a placement it
    can never be whole in: it is let go as at its TTL, its running member evicted, and placed afresh
    when its members come back. A gang not whole on hardware that stays keeps its reservation; a
    whole gang cut the same way runs on (the admin confirmed the cut)."""
    old = Core(rack_cluster(racks=2, vcs={"a": [("NODE", 6)]}))
    waiting = gang("w", "a", (2, 8), suggested_nodes=frozenset({"r1-n2", "r1-n3"}))
    first = old.schedule(waiting, "w-0", 8, 0.0)
    assert isinstance(first, Bind) and first.node in ("r1-n2", "r1-n3")
    kept = gang("k", "a", (2, 8), suggested_nodes=frozenset({"r0-n0", "r0-n1"}))
    assert isinstance(old.schedule(kept, "k-0", 8, 0.0), Bind)
    whole = run(old, gang("g", "a", (1, 8), suggested_nodes=frozenset({"r1-n1"})), "g")[0]
    new, report = reconfigure(old, rack_cluster(racks=1, vcs={"a": [("NODE", 4)]}), now=0.0)
    assert report.evict == ["w-0"] and new.gang("w") is None
    assert "evicted (its gang not whole, its placement's hardware gone): pod w-0" in report.lines()
    by_gang = {i.gang: i for i in report.impacts}
    assert not by_gang["w"].whole and "it is let go and its running pods are evicted" in by_gang["w"].text()
    assert by_gang["g"].whole and "evicted" not in by_gang["g"].text() and whole.pod_uid not in report.evict
    k = new.gang("k")
    assert "k" not in by_gang and k is not None and [s.pod_uid for s in k.slots].count("k-0") == 1
    assert violations(new) == []


def test_adopt_rebuilds_a_gang_pod_by_pod_after_restart() -> None:
    core = Core(rack_cluster())
    req = gang("g", "a", (2, 8))
    first = core.adopt(req, [AdoptedPod("u1", "r0-n1", tuple(range(8)))], 0.0)
    assert len(first.pods) == 1
    second = core.adopt(req, [AdoptedPod("u2", "r0-n2", tuple(range(8)))], 0.0)
    assert len(second.pods) == 2
    g = core.gang("g")
    assert g is not None and g.phase.value == "Bound" and g.priority == 0
    assert violations(core) == []
    again = core.adopt(req, [AdoptedPod("u2", "r0-n2", tuple(range(8)))], 0.0)
    assert again == second


def test_adopt_takes_back_a_rack_cell_for_a_rack_sized_gang() -> None:
    spec = rack_cluster(racks=2, vcs={"a": [("", 1), ("NODE", 2)]})
    core = Core(spec)
    placed = run(core, gang("big", "a", (4, 8)), "big")
    assert set(placed[0].placement.pods[0].cell_types) == {"RACK"}
    pods = [AdoptedPod(b.pod_uid, b.node, b.gpu_indices) for b in placed]
    fresh = Core(spec)
    fresh.adopt(gang("big", "a", (4, 8)), pods, 0.0)  # no hints: the largest wholly covered cell
    g = fresh.gang("big")
    assert g is not None and g.priority == 0
    assert violations(fresh) == []
    hinted = Core(spec)
    hinted.adopt(
        gang("big", "a", (4, 8)),
        [AdoptedPod(b.pod_uid, b.node, b.gpu_indices, cell_types=("RACK",) * 8) for b in placed],
        0.0,
    )
    assert hinted.gang("big").priority == 0  # type: ignore[union-attr]


def test_unclaim_gives_the_slot_back_and_keeps_the_reservation() -> None:
    core = Core(rack_cluster())
    req = gang("g", "a", (1, 8))
    b = run(core, req, "g")[0]
    core.unclaim("g", b.pod_uid, 5.0)
    g = core.gang("g")
    assert g is not None and g.slots[0].pod_uid is None and g.deadline == 305.0
    assert violations(core) == []


def test_reconfiguration_with_the_same_cells_keeps_every_guarantee_on_the_same_quota_cells() -> None:
    """A reload that leaves the cells alone (an admin editing only the tenants) costs nothing. The
    small gang holds one of its VC's two node cells, the two-node gang the VC's rack cell. Adopted
    again without the quota cell types they hold, the two-node gang bound the VC's last node cell
    for its first node and found none for its second: it lost its guarantee, and the reload was
    refused as a capacity loss (found by the hostile soak once it reloaded its entitlements)."""
    spec = rack_cluster(racks=3, vcs={"a": [("", 1), ("NODE", 2)]})  # a rack free: a node may split one
    old = Core(spec)
    small = run(old, gang("small", "a", (1, 2)), "s")
    pair = run(old, gang("pair", "a", (2, 8)), "p")
    types = {
        name: {t for b in binds for t in b.placement.pods[0].cell_types}
        for name, binds in (("small", small), ("pair", pair))
    }
    assert types == {"small": {"NODE"}, "pair": {"RACK"}}
    new, report = reconfigure(old, spec, now=1.0)
    assert report.impacts == [] and not report.loses_capacity and report.downgraded == []
    for name in ("small", "pair"):
        before, after = old.gang(name), new.gang(name)
        assert before is not None and after is not None and after.priority == before.priority == 0
        assert old.placement_of(before).pods == new.placement_of(after).pods
    assert violations(new) == []


def test_reconfiguration_keeps_a_promoted_gang_promoted_and_a_downgraded_one_downgraded() -> None:
    """A promoted gang's request is opportunistic: adopted without the quota cells it holds, it came
    back opportunistic, a lost guarantee that made every reload a refused capacity loss. A lazily
    preempted gang came back marked as downgraded by the reconfiguration, not by its preemptor."""
    spec = rack_cluster(racks=1, vcs={"a": [("NODE", 2)]})
    old = Core(spec)
    full = run(old, gang("full", "a", (2, 8)), "f")
    run(old, gang("guest", "a", (1, 8), priority=-1, promote_when_quota=True), "g")
    for b in full:  # a's quota frees: the guest is promoted where it runs
        old.release_pod(b.pod_uid, 1.0)
    promoted = old.gang("guest")
    assert promoted is not None and promoted.priority == 0
    new, report = reconfigure(old, spec, now=2.0)
    assert report.impacts == [] and report.downgraded == []
    again = new.gang("guest")
    assert again is not None and (again.priority, again.owner) == (0, promoted.owner)
    assert violations(new) == []
    # its opt-in withdrawn since (its namespace lost the VC): what it was given stands, reload after
    # reload (before, the next reload found it opportunistic and was refused as a capacity loss)
    assert new.withdraw_promotion("guest") and not new.withdraw_promotion("guest")
    newer, report = reconfigure(new, spec, now=3.0)
    kept = newer.gang("guest")
    assert report.impacts == [] and kept is not None and (kept.priority, kept.owner) == (0, promoted.owner)
    assert not kept.request.promote_when_quota and violations(newer) == []
    # lazily preempted: it stays downgraded by its preemptor (and so is never promoted)
    old = Core(spec)
    for name in ("low", "low2"):
        run(old, gang(name, "a", (1, 8), lazy_preemption=True), name)
    assert not isinstance(old.preempt(gang("high", "a", (1, 8), priority=500), 1.0), Wait)
    low = old.gang("low")
    assert low is not None and (low.priority, low.downgraded_by) == (-1, "high")
    new, report = reconfigure(old, spec, now=2.0)
    assert report.impacts == [] and report.downgraded == []
    again = new.gang("low")
    assert again is not None and (again.priority, again.downgraded_by) == (-1, "high")
    assert violations(new) == []


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["a", "b"]), st.sampled_from([(1, 1), (1, 4), (1, 8), (2, 8), (3, 8)])),
        min_size=1,
        max_size=7,
    ),
    st.booleans(),
)
def test_fits_in_order_answers_as_placing_them_would_and_changes_nothing(
    asks: list[tuple[str, tuple[int, int]]], opportunistic: bool
) -> None:
    """The admission gate's what-if: each gang placed after the ones before it, the same answer as
    really placing them one after another, and afterwards the core exactly as it was (its state, its
    gangs, the ids it hands out next), whatever it held before."""
    core = Core(rack_cluster())
    run(core, gang("x", "a", (1, 8)), "x")
    reqs = [
        gang(f"g{i}", vc, size, priority=-1 if opportunistic and i % 2 else 0)
        for i, (vc, size) in enumerate(asks)
    ]
    before, ids, names = snapshot(core), core.reservations.last_id, [g.name for g in core.gangs()]
    got = fits_in_order(core, reqs, 1.0)
    assert snapshot(core) == before and core.reservations.last_id == ids
    assert [g.name for g in core.gangs()] == names and violations(core) == []
    for req, fits in zip(reqs, got, strict=True):
        placed = core.reserve(req, 1.0)
        assert isinstance(placed, GangPlacement) == fits, (req, placed)


def test_a_reload_keeps_an_evicting_gang_out_of_every_preemption() -> None:
    """A hold of GPUs topogang did not place (an unverified pod: the admin decides) and the pods of
    an evicted gang kept until gone are `evicting`: nothing preempts them. A reload, even of an
    unchanged config, must not turn them into plain opportunistic gangs a guaranteed gang may
    preempt (delete)."""
    spec = rack_cluster(racks=1, vcs={"a": [("NODE", 1)], "b": [("NODE", 3)]})
    old = Core(spec)
    held = gang("unverified:t/mystery", "", (1, 8), priority=-1)
    placed = old.adopt(
        held, [AdoptedPod("uid-u", "r0-n0", tuple(range(8)), "mystery", None, ())], 0.0, evicting=True
    )
    assert isinstance(placed, GangPlacement)
    for n in ("r0-n1", "r0-n2", "r0-n3"):  # the rest of the rack: VC b's
        b = gang(f"b/{n}", "b", (1, 8), suggested_nodes=frozenset({n}))
        run(old, b, n)
    ask = gang("a/train", "a", (1, 8), priority=10)
    assert not isinstance(old.preempt(ask, 0.0), Preemption)
    new, _report = reconfigure(old, spec, now=1.0)
    kept = new.gang("unverified:t/mystery")
    assert kept is not None and kept.evicting
    got = new.preempt(ask, 1.0)
    assert not isinstance(got, Preemption) or all(v.pod_uid != "uid-u" for v in got.victims), got
    assert violations(new) == []


def test_a_reload_that_takes_gpus_out_from_under_a_running_pod_keeps_it_in_its_slot() -> None:
    """A config edit that halves every node (the switch holds 1 GPU, not 2) under a whole one-pod
    gang on GPUs 0-7: the pod keeps the slot of the GPUs that remain. Matched on all eight, it
    matched no slot; the slot of GPUs 0-3 stood open with a TTL, and once it expired the next
    gang was placed on GPUs the pod still ran on."""
    old = Core(rack_cluster(racks=1, vcs={"a": [("NODE", 4)]}))
    (d,) = run(old, gang("g", "a", (1, 8), priority=10, suggested_nodes=frozenset({"r0-n0"})), "g")
    halved = replace(
        rack_cluster(racks=1, vcs={"a": [("NODE", 4)]}),
        cell_types=tuple(replace(t, child_number=1) if t.name == "SWITCH" else t for t in CELL_TYPES),
    )
    new, report = reconfigure(old, halved, now=0.0)
    assert any("4 of its 8 GPUs" in i.text() for i in report.impacts)
    kept = new.gang("g")
    assert kept is not None and new.holds_slot(d.pod_uid) and kept.deadline is None
    assert new.expire(10_000.0) == []
    assert new.node_fill("r0-n0") == (0, 4)  # GPUs 0-3 stay the running pod's
    assert violations(new) == []
