"""A hot reload (`topology.reconfigure`) while a preemptor waits for a victim gang, one of whose
pods already went while the others run (kube-scheduler deletes them one by one): the preemption is
reserved again over the adopted victim, which stays closed to new pods, and the preemptor gets its
GPUs once the last victim pod goes. It was dropped, and a re-created victim pod then bound on the
GPUs the preemptor waited for."""

from __future__ import annotations

from tests.topology.fixtures import gang, rack_cluster, run
from topology.asks import MemberAsk
from topology.core import Core
from topology.decisions import Bind, Preemption, UserError
from topology.invariants import violations
from topology.reconfigure import reconfigure

VICTIM = gang("ns/victim", "a", (2, 8), priority=0, ttl_seconds=5000.0)
OWNER = gang("ns/owner", "a", (2, 8), priority=10)


def _half_preempted() -> tuple[Core, Preemption]:
    core = Core(rack_cluster(racks=1, vcs={"a": [("NODE", 2)]}))
    run(core, VICTIM, "v")
    got = core.preempt_member(MemberAsk(OWNER, "u1", 8), 0.0)
    assert isinstance(got.got, Preemption) and len(got.got.victims) == 2
    core.release_pod(got.got.victims[0].pod_uid, 1.0)
    return core, got.got


def test_after_a_reload_the_victim_stays_closed_while_the_preemptor_waits() -> None:
    core, got = _half_preempted()
    new, report = reconfigure(core, core.spec, 2.0)  # an edit that changes nothing for these gangs
    assert violations(new) == []
    assert new.gang("ns/owner") is not None, f"the preemption was dropped: {report.lines()}"
    try:
        d = new.schedule(VICTIM, "v-new", 8, 3.0)  # its job controller re-creates the victim pod
    except UserError:
        d = None
    assert not isinstance(d, Bind), f"a victim pod bound on GPUs the preemptor waited for: {d}"
    new.release_pod(got.victims[1].pod_uid, 4.0)  # the last victim pod goes
    owner = new.gang("ns/owner")
    assert owner is not None and not owner.pending and violations(new) == []
