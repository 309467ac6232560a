"""A gang a waiting preemptor names as its victim (HiveD's BeingPreempted group) takes no new pod:
neither a pod its job controller re-creates for a victim pod that went, nor one that never came. Its
slots stay its own, closed, until every victim pod is gone (the GPUs then pass to the preemptor) or
the preemption ends (outbid, its pods deleted, its TTL), when they open to the victim again. Closed
so, they do not count against the victim's namespace's `maxReservedGpus`: another namespace's
preemption must not hold that namespace's gangs back."""

import pytest

from tests.topology.fixtures import gang, rack_cluster, run
from topology.asks import FilterAsk, MemberAsk, ReserveLimit, Slots
from topology.core import Core
from topology.decisions import Bind, Preemption, UserError
from topology.invariants import violations


def test_a_victims_pod_gone_opens_no_slot_and_counts_nothing() -> None:
    core = Core(rack_cluster(racks=1, vcs={"a": [("NODE", 2)], "b": [("NODE", 2)]}))
    guest = gang("other/guest", "b", (3, 8), priority=-1)
    run(core, guest, "o")
    first = core.filter(FilterAsk(MemberAsk(gang("ns/first", "a", (1, 8)), "f0", 8)), 0.0)
    assert isinstance(first.outcome, Slots)
    got = core.preempt_member(MemberAsk(gang("ns/owner", "a", (1, 8)), "u1", 8), 0.0)
    assert isinstance(got.got, Preemption) and got.got.victims
    owner = core.gang("ns/owner")
    assert owner is not None
    waits_for = set(owner.pending)
    core.release_pod(got.got.victims[0].pod_uid, 1.0)  # the first victim is gone, two still run
    assert owner.pending == waits_for  # HiveD hands the cells over when the whole group is gone
    assert core.reservations.unclaimed_leaves("other", core.being_preempted) == 0
    ask = MemberAsk(guest, "o-new", 8)  # its job controller re-creates the pod
    out = core.filter(FilterAsk(ask, limit=ReserveLimit("other", 8, "k")), 2.0).outcome
    assert isinstance(out, Slots) and out.slots == ()
    assert violations(core) == []
    for v in got.got.victims[1:]:
        core.release_pod(v.pod_uid, 3.0)
    assert core.gang("other/guest") is None
    assert not owner.pending and violations(core) == []


VICTIM_TTL = 5000.0  # longer than the preemptor's: its TTL ends the preemption, not the victim


def _half_preempted() -> tuple[Core, Preemption]:
    """A 2-pod victim filling its VC's two nodes, a preemptor of higher priority, one victim pod gone."""
    core = Core(rack_cluster(racks=1, vcs={"a": [("NODE", 2)]}))
    run(core, gang("ns/victim", "a", (2, 8), priority=0, ttl_seconds=VICTIM_TTL), "v")
    got = core.preempt_member(MemberAsk(gang("ns/owner", "a", (2, 8), priority=10), "u1", 8), 0.0)
    assert isinstance(got.got, Preemption) and len(got.got.victims) == 2
    core.release_pod(got.got.victims[0].pod_uid, 1.0)  # kube-scheduler deleted the victim on one node
    return core, got.got


def test_a_victims_pod_waits_while_the_preemption_runs() -> None:
    core, _ = _half_preempted()
    victim = gang("ns/victim", "a", (2, 8), priority=0, ttl_seconds=VICTIM_TTL)
    with pytest.raises(UserError, match="is being preempted: no new pod of it binds"):
        core.schedule(victim, "v-new", 8, 2.0)
    assert violations(core) == []


def test_a_preemption_called_off_gives_the_victim_its_slot_back() -> None:
    for call_off in ("deleted", "expired"):
        core, _ = _half_preempted()
        if call_off == "deleted":
            core.delete_gang("ns/owner")  # every pod of the preemptor deleted
            now = 2.0
        else:
            assert [r.gang for r in core.expire(1000.0)] == ["ns/owner"]
            now = 1000.0
        victim = gang("ns/victim", "a", (2, 8), priority=0, ttl_seconds=VICTIM_TTL)
        assert isinstance(core.schedule(victim, "v-new", 8, now), Bind), call_off  # whole again
        g = core.gang("ns/victim")
        assert g is not None and all(s.pod_uid is not None for s in g.slots), call_off
        assert violations(core) == []


def test_a_victims_slot_no_pod_ever_claimed_stays_shut() -> None:
    core = Core(rack_cluster(racks=1, vcs={"a": [("NODE", 1)]}))
    victim = gang("ns/victim", "a", (2, 4), priority=0)  # fills the VC's one node
    assert isinstance(core.schedule(victim, "v0", 4, 0.0), Bind)  # one of its two pods bound
    got = core.preempt_member(MemberAsk(gang("ns/owner", "a", (1, 8), priority=10), "u1", 8), 1.0)
    assert isinstance(got.got, Preemption) and [v.pod_uid for v in got.got.victims] == ["v0"]
    try:
        d = core.schedule(victim, "v1", 4, 2.0)  # its second pod comes at last
    except UserError:
        d = None
    assert not isinstance(d, Bind), f"a victim's pod bound on GPUs the preemptor waits for: {d}"
    assert violations(core) == []
