"""A preemption victim's pod that goes leaves its slot closed: the victim's namespace's bound does
not count it as reserved unbound (another namespace's preemption must not hold this namespace's
gangs back), and no new pod of the victim gang binds onto GPUs the preemptor waits for."""

from tests.topology.fixtures import gang, rack_cluster, run
from topology.asks import FilterAsk, MemberAsk, ReserveLimit, Slots
from topology.core import Core
from topology.decisions import Preemption
from topology.invariants import violations


def test_a_victims_pod_gone_opens_no_slot_and_counts_nothing() -> None:
    core = Core(rack_cluster(racks=1, vcs={"a": [("NODE", 2)], "b": [("NODE", 2)]}))
    guest = gang("other/guest", "b", (3, 8), priority=-1)
    run(core, guest, "o")
    first = core.filter(FilterAsk(MemberAsk(gang("ns/first", "a", (1, 8)), "f0", 8)), 0.0)
    assert isinstance(first.outcome, Slots)
    got = core.preempt_member(MemberAsk(gang("ns/owner", "a", (1, 8)), "u1", 8), 0.0)
    assert isinstance(got.got, Preemption) and got.got.victims
    waiting = core.gang("ns/owner")
    assert waiting is not None
    before = len(waiting.pending)
    core.release_pod(got.got.victims[0].pod_uid, 1.0)  # the first victim is gone, two still run
    assert len(waiting.pending) == before - 8  # its GPUs passed to the preemptor at once
    assert core.reservations.unclaimed_leaves("other") == 0
    ask = MemberAsk(guest, "o-new", 8)  # its job controller re-creates the pod
    out = core.filter(FilterAsk(ask, limit=ReserveLimit("other", 8, "k")), 2.0).outcome
    assert isinstance(out, Slots) and out.slots == ()
    assert violations(core) == []
    for v in got.got.victims[1:]:
        core.release_pod(v.pod_uid, 3.0)
    assert core.gang("other/guest") is None
    owner = core.gang("ns/owner")
    assert owner is not None and not owner.pending and violations(core) == []
