"""A namespace's gang being preempted by another's does not hold that namespace's next gang back
under `maxReservedGpus`: the filter's own check (`asks.held_back`) leaves the closed slots out."""

from tests.topology.fixtures import gang, rack_cluster, run
from topology.asks import FilterAsk, MemberAsk, ReserveLimit
from topology.core import Core
from topology.decisions import Preemption, WaitCode


def test_the_limit_check_leaves_a_victims_closed_slot_out() -> None:
    core = Core(rack_cluster(racks=1, vcs={"a": [("NODE", 2)], "b": [("NODE", 2)]}))
    run(core, gang("other/guest", "b", (3, 8), priority=-1), "o")
    core.filter(FilterAsk(MemberAsk(gang("ns/first", "a", (1, 8)), "f0", 8)), 0.0)
    got = core.preempt_member(MemberAsk(gang("ns/owner", "a", (1, 8)), "u1", 8), 0.0)
    assert isinstance(got.got, Preemption) and got.got.victims
    core.release_pod(got.got.victims[0].pod_uid, 1.0)  # one slot of other/guest unclaimed, closed
    nxt = MemberAsk(gang("other/next", "b", (1, 8)), "n0", 8)
    out = core.filter(FilterAsk(nxt, limit=ReserveLimit("other", 8, "k")), 2.0).outcome
    wait = getattr(out, "wait", out)
    assert getattr(getattr(wait, "reason", None), "code", None) is not WaitCode.TENANT_LIMIT, out
