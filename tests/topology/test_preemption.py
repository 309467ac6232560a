"""Priorities and gang-wide preemption in the core."""

from __future__ import annotations

from tests.topology.fixtures import gang, rack_cluster, run
from topology.core import Core
from topology.decisions import Bind, GangPlacement, Preemption, UserError, Wait, WaitCode
from topology.invariants import snapshot, violations


def kill(core: Core, victims: Preemption | Wait) -> None:
    for v in victims.victims:
        core.release_pod(v.pod_uid, 1.0)
    assert violations(core) == []


def one_rack(**vcs: list[tuple[str, int]]) -> Core:
    return Core(rack_cluster(racks=1, vcs=vcs))


def test_same_vc_lower_priority_is_preempted_whole() -> None:
    core = one_rack(a=[("NODE", 2)], b=[("NODE", 2)])
    low = run(core, gang("low", "a", (2, 8), priority=1), "low")
    hi = gang("hi", "a", (1, 8), priority=100)
    w = core.reserve(hi, 0.0)
    assert isinstance(w, Wait) and w.reason.code is WaitCode.PREEMPTIBLE
    assert {v.pod_uid for v in w.victims} == {b.pod_uid for b in low}  # gang-wide, both pods
    assert core.gang("hi") is None  # the filtering phase reserves nothing
    p = core.preempt(hi, 0.0)
    assert isinstance(p, Preemption) and len(p.victims) == 2
    assert violations(core) == []
    assert isinstance(core.schedule(hi, "h0", 8, 0.0), Wait)  # still waiting for the victims
    kill(core, p)
    d = core.schedule(hi, "h0", 8, 2.0)
    assert isinstance(d, Bind)
    assert violations(core) == []


def test_no_cross_vc_preemption_of_guaranteed_work() -> None:
    core = one_rack(a=[("NODE", 2)], b=[("NODE", 2)])
    run(core, gang("b-low", "b", (2, 8), priority=0), "b")
    run(core, gang("a-low", "a", (2, 8), priority=0), "a")
    hi = gang("b-hi", "b", (3, 8), priority=1000)  # more than b's quota: only a's nodes could help
    w = core.reserve(hi, 0.0)
    assert isinstance(w, Wait) and w.reason.code is not WaitCode.PREEMPTIBLE
    before = snapshot(core)
    assert isinstance(core.preempt(hi, 0.0), Wait)
    assert snapshot(core) == before


def test_opportunistic_victims_in_another_vc() -> None:
    core = one_rack(a=[("NODE", 2)], b=[("NODE", 2)])
    opp = run(core, gang("opp", "b", (4, 8), priority=-1), "opp")  # fills the cluster
    g = gang("a-job", "a", (1, 8), priority=0)
    w = core.reserve(g, 0.0)
    assert isinstance(w, Wait) and w.reason.code is WaitCode.PREEMPTIBLE
    p = core.preempt(g, 0.0)
    assert isinstance(p, Preemption)
    assert {v.pod_uid for v in p.victims} == {b.pod_uid for b in opp}
    kill(core, p)
    assert isinstance(core.schedule(g, "a0", 8, 1.0), Bind)


def test_opportunistic_gang_never_preempts() -> None:
    core = one_rack(a=[("NODE", 4)])
    run(core, gang("g", "a", (4, 8), priority=0), "g")
    o = gang("o", "a", (1, 1), priority=-1)
    w = core.reserve(o, 0.0)
    assert isinstance(w, Wait) and w.victims == ()
    assert isinstance(core.preempt(o, 0.0), Wait)


def test_outbidding_cancels_the_lower_preemptor() -> None:
    core = one_rack(a=[("NODE", 4)])
    run(core, gang("base", "a", (4, 8), priority=0), "base")
    mid = gang("mid", "a", (2, 8), priority=10)
    p1 = core.preempt(mid, 0.0)
    assert isinstance(p1, Preemption)
    top = gang("top", "a", (4, 8), priority=20)
    p2 = core.preempt(top, 0.0)
    assert isinstance(p2, Preemption)
    assert core.gang("mid") is None  # outbid and cancelled
    assert violations(core) == []
    kill(core, p2)
    assert isinstance(core.schedule(top, "t0", 8, 2.0), Bind)


def test_cancelled_preemption_restores_victims_cells_exactly() -> None:
    core = one_rack(a=[("NODE", 2)], b=[("NODE", 2)])
    run(core, gang("low", "a", (1, 8), priority=0), "low")
    run(core, gang("opp", "b", (2, 8), priority=-1), "opp")
    before = snapshot(core)
    hi = gang("hi", "a", (2, 8), priority=50)
    assert isinstance(core.preempt(hi, 0.0), Preemption)
    assert snapshot(core) != before
    core.delete_gang("hi")  # all its pending pods deleted
    assert snapshot(core) == before
    assert violations(core) == []


def test_preemptor_needing_a_bad_node_is_cancelled() -> None:
    core = one_rack(a=[("NODE", 4)])
    run(core, gang("low", "a", (4, 8), priority=0), "low")
    hi = gang("hi", "a", (1, 8), priority=10)
    p = core.preempt(hi, 0.0)
    assert isinstance(p, Preemption)
    node = p.victims[0].node
    core.set_node_health(node, healthy=False)
    got = core.reserve(hi, 1.0)  # the old reservation is cancelled and the gang is placed afresh
    assert core.gang("hi") is None or all(
        s.node != core.topo.node_index[node]
        for s in core.gang("hi").slots  # type: ignore[union-attr]
    )
    assert isinstance(got, Wait | GangPlacement)
    assert violations(core) == []


def test_lazy_preemption_keeps_victim_running_when_room_exists() -> None:
    # a's quota is full with a lazy low-priority job; the rack still has an idle node outside any VC use
    core = one_rack(a=[("NODE", 2)], b=[("NODE", 1)])
    low = run(core, gang("low", "a", (2, 8), priority=0, lazy_preemption=True), "low")
    hi = gang("hi", "a", (1, 8), priority=100)
    got = core.preempt(hi, 0.0)
    assert isinstance(got, GangPlacement)  # placed without killing anyone
    g = core.gang("low")
    assert g is not None and g.priority == -1 and g.downgraded_by == "hi"
    assert all(s.pod_uid is not None for s in g.slots)
    assert {b.pod_uid for b in low} == {s.pod_uid for s in g.slots}
    assert violations(core) == []


def test_lazy_preemption_reverts_when_the_preemptor_cannot_be_mapped() -> None:
    core = one_rack(a=[("NODE", 2)], b=[("NODE", 2)])
    run(core, gang("b-work", "b", (2, 8), priority=0), "b")
    run(core, gang("low", "a", (2, 8), priority=0, lazy_preemption=True), "low")
    before = snapshot(core)
    hi = gang("hi", "a", (3, 8), priority=100)  # more than a's quota: cannot be mapped at all
    assert isinstance(core.preempt(hi, 0.0), Wait)
    g = core.gang("low")
    assert g is not None and g.priority == 0 and g.downgraded_by is None
    assert snapshot(core) == before


def test_lazy_victim_is_preempted_for_real_when_no_room_remains() -> None:
    core = one_rack(a=[("NODE", 2)], b=[("NODE", 2)])
    run(core, gang("b-work", "b", (2, 8), priority=0), "b")
    low = run(core, gang("low", "a", (2, 8), priority=0, lazy_preemption=True), "low")
    hi = gang("hi", "a", (1, 8), priority=100)
    p = core.preempt(hi, 0.0)
    assert isinstance(p, Preemption)
    assert {v.pod_uid for v in p.victims} == {b.pod_uid for b in low}
    kill(core, p)
    assert isinstance(core.schedule(hi, "h", 8, 1.0), Bind)


def test_reservation_of_a_preemptor_expires() -> None:
    core = one_rack(a=[("NODE", 4)])
    run(core, gang("low", "a", (4, 8), priority=0), "low")
    before = snapshot(core)
    hi = gang("hi", "a", (1, 8), priority=10, ttl_seconds=30.0)
    assert isinstance(core.preempt(hi, 0.0), Preemption)
    released = core.expire(31.0)
    assert [r.gang for r in released] == ["hi"]
    assert snapshot(core) == before


def test_an_expiring_victim_keeps_its_running_pods_gpus_from_the_preemptor() -> None:
    """A half-bound victim's reservation expires while its bound pod is still being evicted: the
    pod runs until it is gone, so the preemptor must not get its GPUs before then (they used to pass
    to the preemptor at once, two pods on one GPU for the grace period)."""
    core = one_rack(a=[("NODE", 4)])
    low = gang("low", "a", (2, 8), priority=0, ttl_seconds=30.0)
    assert isinstance(core.schedule(low, "low-0", 8, 0.0), Bind)  # the other member never comes
    run(core, gang("fill", "a", (2, 8), priority=0), "fill")
    hi = gang("hi", "a", (2, 8), priority=100)
    p = core.preempt(hi, 1.0)
    assert isinstance(p, Preemption) and {v.pod_uid for v in p.victims} == {"low-0"}
    released = core.expire(31.0)
    assert [(r.gang, r.evict_pod_uids) for r in released] == [("low", ("low-0",))]
    g = core.gang("hi")
    assert g is not None and g.phase.value == "Preempting"  # still waiting for low-0 to go
    assert "low-0" in core.reservations.pod_gang and violations(core) == []
    assert isinstance(core.schedule(hi, "h0", 8, 32.0), Wait)
    core.release_pod("low-0", 40.0)
    assert g.phase.value == "Reserved" and violations(core) == []
    assert isinstance(core.schedule(hi, "h0", 8, 41.0), Bind)


def test_a_victims_node_missing_from_the_suggestions_does_not_cancel_the_preemption() -> None:
    """kube-scheduler counts the victims' GPUs until they are gone, so it leaves their nodes out of the
    suggested list: that must not cancel the preemption, while leaving out a node of a slot that
    waits for nobody still does (the pod's own constraints changed)."""
    from dataclasses import replace

    core = one_rack(a=[("NODE", 2)], b=[("NODE", 2)])
    run(core, gang("b", "b", (2, 8), priority=0), "b")
    run(core, gang("low", "a", (1, 8), priority=1), "low")
    hi = gang("hi", "a", (2, 8), priority=100)  # the one free node, and low's
    p = core.preempt(hi, 0.0)
    assert isinstance(p, Preemption)
    g = core.gang("hi")
    assert g is not None
    topo = core.topo
    victim_node = {topo.node_names[s.node] for s in g.slots if g.pending.intersection(s.leaves)}
    free_node = {topo.node_names[s.node] for s in g.slots if not g.pending.intersection(s.leaves)}
    everything = set(topo.node_names)
    assert len(victim_node) == len(free_node) == 1
    again = core.reserve(replace(hi, suggested_nodes=frozenset(everything - victim_node)), 1.0)
    assert isinstance(again, Wait) and again.reason.code is WaitCode.PREEMPTING
    assert core.gang("hi") is g
    core.reserve(replace(hi, suggested_nodes=frozenset(everything - free_node)), 1.0)
    assert core.gang("hi") is not g  # cancelled (and, here, placed afresh or waiting anew)
    assert violations(core) == []


def test_no_member_claims_a_slot_while_its_gang_waits_for_victims() -> None:
    """A bind straight to a preempting gang's node (kube-scheduler binding from an answer of an
    earlier reservation of that name, or a retried bind) must not claim a slot whose GPUs a victim
    still holds: the victim is still terminating on them. Filter already answers Wait for such a
    gang; the claim refuses too, and the slot is there to claim once the victims are gone."""
    core = one_rack(a=[("NODE", 4)])
    run(core, gang("low", "a", (4, 8), priority=0), "low")
    hi = gang("hi", "a", (1, 8), priority=10)
    p = core.preempt(hi, 0.0)
    assert isinstance(p, Preemption) and len(p.victims) == 4  # gang-wide: every pod of low
    g = core.gang("hi")
    assert g is not None and g.phase.value == "Preempting"
    node = core.topo.node_names[g.slots[0].node]
    try:
        core.claim("hi", "h0", 8, 1.0, node=node)
    except UserError as err:
        assert "preempted" in err.message
    else:
        raise AssertionError("a slot was claimed on GPUs a victim still holds")
    assert "h0" not in core.reservations.pod_gang and violations(core) == []
    assert core.open_slots("hi", 8) == []  # nothing for a filter or prioritize to offer either
    kill(core, p)
    assert g.phase.value == "Reserved"
    assert isinstance(core.claim("hi", "h0", 8, 2.0, node=node), Bind)
    assert violations(core) == []


def test_the_invariants_name_a_slot_claimed_over_a_victim() -> None:
    """`violations` catches a pod given GPUs still waiting for a victim to go (a double allocation
    the leaf marks alone do not show: the leaves stay the victim's)."""
    core = one_rack(a=[("NODE", 4)])
    run(core, gang("low", "a", (4, 8), priority=0), "low")
    assert isinstance(core.preempt(gang("hi", "a", (1, 8), priority=10), 0.0), Preemption)
    g = core.gang("hi")
    assert g is not None and violations(core) == []
    g.slots[0].pod_uid = "h0"  # what a claim that did not check the phase would leave
    core.reservations.pod_gang["h0"] = g.id
    assert any("still held by a victim" in v for v in violations(core)), violations(core)
