"""A gang a lazy preemption downgraded, rebuilt by a restart or a reload: it stays downgraded.

Only memory says a gang was downgraded (`Gang.downgraded_by`); what a restart reads from its pods
was written at bind, before the downgrade. Adopted again, it came back as any opportunistic gang
that opted in, promoted at the next release that freed its VC's quota, and a guest of its VC
(`room`), or on its VC's quota again when that fitted: a restart changed decisions. The edge keeps a
record of the downgrade and hands it back (`recovery.keep_downgraded`); a reload hands its own.
"""

from __future__ import annotations

from tests.topology.fixtures import gang, rack_cluster, run
from topology.core import Core
from topology.decisions import AdoptedPod, GangPlacement, GangRequest
from topology.invariants import snapshot, violations
from topology.reconfigure import reconfigure
from topology.recovery import keep_downgraded
from topology.reservations import Gang
from topology.room import over_quota
from topology.spec import ClusterSpec
from topology.state import NO_OWNER

SPEC = rack_cluster(racks=1, vcs={"a": [("NODE", 2)]})  # a's quota: two of the rack's four nodes
LOW = gang("low", "a", (2, 8), lazy_preemption=True, promote_when_quota=True)  # fills a's quota
HIGH = gang("high", "a", (1, 8), priority=500)


def records(core: Core, g: Gang) -> list[AdoptedPod]:
    """What a restart reads back for a gang from its pods' bind info, as written now."""
    return [
        AdoptedPod(f"{g.name}-{p.slot}", p.node, p.gpu_indices, None, p.key, p.cell_types)
        for p in core.placement_of(g).pods
    ]


def downgraded(spec: ClusterSpec = SPEC) -> tuple[Core, list[AdoptedPod]]:
    """`low` runs on a's quota, then `high` downgrades it lazily and runs. Also returns low's records
    as its pods' bind info has them: written at bind, naming the quota cells it held then."""
    core = Core(spec)
    run(core, LOW, "l")
    low = core.gang("low")
    assert low is not None
    at_bind = records(core, low)
    assert all(all(p.cell_types) for p in at_bind)
    assert isinstance(core.preempt(HIGH, 1.0), GangPlacement)
    run(core, HIGH, "h")
    assert (low.priority, low.downgraded_by, low.guest) == (-1, "high", False)
    return core, at_bind


def restarted(old: Core, low_records: list[AdoptedPod]) -> Core:
    """A restart: the gangs adopted from their pods, the highest priority first (`extender.kube.recovery`)."""
    new = Core(old.topo.spec)
    for g in sorted(old.gangs(), key=lambda g: -g.request.priority):
        new.adopt(g.request, low_records if g.name == "low" else records(old, g), 2.0)
    return new


def release(core: Core, name: str) -> None:
    g = core.gang(name)
    assert g is not None
    for s in g.slots:
        assert s.pod_uid is not None
        core.release_pod(s.pod_uid, 3.0)
    assert core.gang(name) is None


def test_adopted_opportunistic_it_stays_downgraded_and_is_not_promoted_when_quota_frees() -> None:
    old, at_bind = downgraded()
    release(old, "high")
    low = old.gang("low")
    assert low is not None and low.priority == -1  # HiveD's rule: not promoted without a restart

    for told in (False, True):
        core, at_bind = downgraded()
        new = restarted(core, at_bind)
        back = new.gang("low")
        assert back is not None and back.priority == -1  # its cells no longer fit: high holds them
        if told:
            assert keep_downgraded(new, "low", "high")
        release(new, "high")
        assert violations(new) == []
        if not told:  # what a restart did without the record: promoted, and a guest until then
            assert back.priority == 0 and new.take_promoted() == ["low"]
            continue
        assert (back.priority, back.downgraded_by, back.guest) == (-1, "high", False), back.history
        assert new.take_promoted() == []


def test_a_downgraded_gang_is_no_guest_counted_against_its_vcs_quota() -> None:
    core, at_bind = downgraded()
    new = restarted(core, at_bind)
    back = new.gang("low")
    assert back is not None and back.guest  # taken for a gang that started as a guest
    ask = gang("more", "a", (1, 8))
    assert over_quota(new, ask, []) != over_quota(core, ask, [])
    assert keep_downgraded(new, "low", "high")
    assert not back.guest and over_quota(new, ask, []) == over_quota(core, ask, [])


def test_adopted_on_its_quota_again_it_gives_the_quota_back_as_before_the_restart() -> None:
    """Its preemptor ended before the restart: its cells fit its VC again, and it came back
    guaranteed, holding the quota the downgrade gave back to its VC's other gangs."""
    core, at_bind = downgraded()
    release(core, "high")
    new = Core(SPEC)
    new.adopt(LOW, at_bind, 2.0)
    back = new.gang("low")
    assert back is not None and back.priority == 0 and back.owner != NO_OWNER
    assert keep_downgraded(new, "low", "high")
    assert (back.priority, back.owner, back.downgraded_by) == (-1, NO_OWNER, "high")
    assert snapshot(new) == snapshot(core) and violations(new) == []


def test_a_promotion_made_before_the_record_is_read_is_taken_back_untold() -> None:
    """A standby, or a start before it leads, adopts the gang from its pods and may promote it at a
    release before it reads the records: the promotion is undone before the edge is told of it."""
    core, at_bind = downgraded()
    new = restarted(core, at_bind)
    release(new, "high")
    back = new.gang("low")
    assert back is not None and back.priority == 0
    assert keep_downgraded(new, "low", "high")
    assert (back.priority, back.owner, back.downgraded_by) == (-1, NO_OWNER, "high")
    assert new.take_promoted() == [] and violations(new) == []


def test_no_gang_or_one_being_evicted_is_left_alone() -> None:
    core, _ = downgraded()
    assert not keep_downgraded(core, "nobody", "high")
    evicted = core.evict_gang("low", 2.0)
    assert evicted is not None
    (held,) = [g for g in core.gangs() if g.evicting]
    before = (held.priority, held.downgraded_by, len(held.history))
    assert not keep_downgraded(core, held.name, "someone else")
    assert (held.priority, held.downgraded_by, len(held.history)) == before


def test_a_reload_keeps_a_downgraded_gang_downgraded_and_no_guest() -> None:
    """A reload adopts every gang again: a downgraded one that opted in came back taken for a guest
    of its VC, counted against its quota, where it had not been before the reload."""
    old, _ = downgraded()
    new, report = reconfigure(old, SPEC, now=2.0)
    back = new.gang("low")
    assert back is not None and report.impacts == []
    assert (back.priority, back.downgraded_by, back.guest) == (-1, "high", False)
    ask = gang("more", "a", (1, 8))
    assert over_quota(new, ask, []) == over_quota(old, ask, [])
    # downgraded by the reload itself (a's quota shrinks): no guest either, as a restart reads it back
    shrunk = rack_cluster(racks=1, vcs={"a": [("NODE", 1)]})
    old = Core(SPEC)
    run(old, GangRequest("opt", "a", LOW.members, promote_when_quota=True), "o")
    new, report = reconfigure(old, shrunk, now=2.0)
    back = new.gang("opt")
    assert report.downgraded == ["opt"] and back is not None
    assert (back.priority, back.downgraded_by, back.guest) == (-1, "reconfiguration", False)
    assert violations(new) == []
