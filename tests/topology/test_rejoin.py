"""A view that let go a gang its owner kept (a standby whose watch lagged behind the leader's binds)
holds the member it had seen apart, as being evicted (`<gang>/evicted/<n>`), and adopts the gang
again from the member bound later, with the first member's GPUs counted lost. `Core.rejoin` moves
the first member back: one gang, whole, on the same GPUs, every counter as if it had never left."""

from __future__ import annotations

from tests.topology.fixtures import gang, rack_cluster
from topology.core import Core
from topology.decisions import AdoptedPod, GangPlacement
from topology.invariants import snapshot, violations
from topology.reservations import GangPhase


def _adopted(core: Core, name: str, uid: str) -> AdoptedPod:
    g = core.gang_of_pod(uid)
    assert g is not None
    s = g.slot_of(uid)
    assert s is not None
    topo = core.topo
    return AdoptedPod(
        uid,
        topo.node_names[s.node],
        tuple(topo.gpu_index[x] for x in s.leaves),
        uid,
        s.key,
        core.quota_cell_types(g, s.leaves),
    )


def _split() -> tuple[Core, Core, list[AdoptedPod]]:
    """The leader's core (gang g whole: p0 and p1 bound) and a standby's that saw p0 only, let g go
    and then saw p1 bound: g again, from p1 and g's recorded placement, p0 held apart."""
    spec = rack_cluster()
    req = gang("g", "a", (2, 4))
    leader = Core(spec)
    assert isinstance(leader.reserve(req, 0.0), GangPlacement)
    leader.claim("g", "p0", 4, 0.0, node=None)
    leader.claim("g", "p1", 4, 1.0, node=None)
    pods = [_adopted(leader, "g", "p0"), _adopted(leader, "g", "p1")]
    standby = Core(spec)
    standby.adopt(req, pods[:1], 0.0)
    standby.evict_gang("g", 5.0)  # its own expiry: p0 held apart until it is gone
    held = standby.gang_of_pod("p0")
    assert held is not None and held.name.startswith("g/evicted/")
    standby.adopt(req, pods, 6.0)  # p1's bind info: the gang again, p0's GPUs already held
    assert standby.gang_of_pod("p1") is standby.gang("g")
    return leader, standby, pods


def test_the_member_held_apart_rejoins_its_gang() -> None:
    leader, standby, _ = _split()
    assert standby.rejoin("g", "p0")
    g = standby.gang("g")
    assert g is not None and standby.gang_of_pod("p0") is g and standby.gang_of_pod("p1") is g
    assert g.phase is GangPhase.BOUND and g.deadline is None and g.lost == 0
    assert [x.name for x in standby.gangs()] == ["g"], "the gang held apart is gone"
    assert not violations(standby)
    assert standby.node_gpu_counts() == leader.node_gpu_counts()
    for core in (standby, leader):
        core.release_pod("p0", 7.0)
        core.release_pod("p1", 7.0)
    assert snapshot(standby) == snapshot(Core(rack_cluster())), "every GPU and count back as at the start"


def test_nothing_moves_when_the_gang_is_not_held_or_the_pod_is_not_its_own() -> None:
    _, standby, _ = _split()
    before = snapshot(standby)
    assert not standby.rejoin("other", "p0")  # no such gang
    assert not standby.rejoin("g", "p1")  # already its member
    assert not standby.rejoin("g", "nobody")
    standby.delete_gang("g")
    assert not standby.rejoin("g", "p0")  # the gang is not held
    assert standby.gang_of_pod("p0") is not None and not violations(standby)
    assert snapshot(standby) != before  # (the deletion itself changed the core)
