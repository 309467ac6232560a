"""A Soft-timeout gang (a PodGroup's) that a preemption is taking is not softened meanwhile
(`Conventions.soften` lets the gang go and adopts its bound members back): letting it go freed the
GPUs of its running pods, they passed to the waiting preemptor, and the running pods were then on
GPUs the core had given the preemptor."""

from __future__ import annotations

from extender.conventions.edge import Conventions
from tests.topology.fixtures import gang, rack_cluster, run
from topology.asks import MemberAsk
from topology.core import Core
from topology.decisions import Preemption
from topology.invariants import violations

VICTIM = gang("ns/victim", "a", (2, 8), priority=0, ttl_seconds=5000.0)
OWNER = gang("ns/owner", "a", (2, 8), priority=10)


def test_softening_a_victim_does_not_hand_its_running_pods_gpus_to_the_preemptor() -> None:
    core = Core(rack_cluster(racks=1, vcs={"a": [("NODE", 2)]}))
    run(core, VICTIM, "v")
    got = core.preempt_member(MemberAsk(OWNER, "u1", 8), 0.0)
    assert isinstance(got.got, Preemption) and len(got.got.victims) == 2
    core.release_pod(got.got.victims[0].pod_uid, 1.0)  # one victim pod gone, one runs
    running = got.got.victims[1].pod_uid
    v = core.gang("ns/victim")
    assert v is not None
    Conventions(clock=lambda: 2.0).soften(core, v, 2.0)  # its Soft timeout passed
    owner = core.gang("ns/owner")
    assert owner is not None
    leaves = {leaf for s in owner.slots for leaf in s.leaves if leaf not in owner.pending}
    assert core.gang_of_pod(running) is not None, (
        f"pod {running} still runs, but its gang is gone and the preemptor holds {len(leaves)} GPUs "
        f"(pending {len(owner.pending)})"
    )
    assert violations(core) == []
