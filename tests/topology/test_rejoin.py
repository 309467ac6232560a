"""A view that let go a gang its owner kept (a standby whose watch lagged behind the leader's binds)
holds the member it had seen apart, as being evicted (`<gang>/evicted/<n>`), and adopts the gang
again from the member bound later, with the first member's GPUs counted lost. `Core.rejoin` moves
the first member back: one gang, whole, on the same GPUs, every counter as if it had never left."""

from __future__ import annotations

from tests.topology.fixtures import gang, rack_cluster
from topology.core import Core
from topology.decisions import AdoptedPod, GangPlacement
from topology.invariants import snapshot, violations
from topology.reconfigure import reconfigure
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


def _split(gpus: int = 4) -> tuple[Core, Core, list[AdoptedPod]]:
    """The leader's core (gang g whole: p0 and p1 bound) and a standby's that saw p0 only, let g go
    and then saw p1 bound: g again, from p1 and g's recorded placement, p0 held apart."""
    spec = rack_cluster()
    req = gang("g", "a", (2, gpus))
    leader = Core(spec)
    assert isinstance(leader.reserve(req, 0.0), GangPlacement)
    leader.claim("g", "p0", gpus, 0.0, node=None)
    leader.claim("g", "p1", gpus, 1.0, node=None)
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


def _pods(p: GangPlacement) -> list[tuple[str, tuple[int, ...]]]:
    return [(x.node, tuple(x.gpu_indices)) for x in p.pods]


def test_a_pod_being_evicted_does_not_take_the_lost_slot_of_its_gang_placed_again_elsewhere() -> None:
    """A member rejoins only on GPUs its gang's adoption found held by another gang (`Gang.lost_at`).
    Here the leader let gang g go (its deadline passed with p1 not come; p0 evicted) and placed it again
    under the same name: one slot on the GPUs of the old slot p1 never came to (S1), one on GPUs X of
    another gang k's open slot that expired on the leader too, but that this standby, whose expiry
    runs `STANDBY_EXPIRY_LAG` behind, still holds. The standby adopts the new g from p1's bind info:
    S1 bound, X counted lost (already held). Its `made_whole` sees g at (part of) the placement listed
    when it kept p0's eviction (S0, S1), and the leader no longer lists g (p0' bound on X, the watch
    not there yet), so the edge calls rejoin(g, p0): p0, which the leader is evicting, takes g's
    lost slot on S0 without that rule; when k expires here and the watch shows p0' bound on X, p0'
    matches no slot, and this core holds X for nobody while p0' runs on it."""
    spec = rack_cluster()
    req = gang("ns/g", "a", (2, 4))
    leader = Core(spec)
    first = leader.reserve(req, 0.0)
    assert isinstance(first, GangPlacement)
    (n0, s0), (n1, s1) = _pods(first)
    standby = Core(spec)
    standby.adopt(req, [AdoptedPod("p0", n0, s0, "p0"), AdoptedPod("", n1, s1)], 0.0)
    # gang k: one member bound, its other slot X open; it expires on the leader with g
    kreq = gang("other/k", "a", (2, 4))
    kfirst = leader.reserve(kreq, 0.0)
    assert isinstance(kfirst, GangPlacement)
    (kn0, ks0), (nx, sx) = _pods(kfirst)
    standby.adopt(kreq, [AdoptedPod("kp", kn0, ks0, "kp"), AdoptedPod("", nx, sx)], 0.0)
    standby.evict_gang("ns/g", 5.0)  # the standby's own expiry of g: p0 held apart, its eviction kept
    # the leader's new g: S1 (p1 bound) and X (p0' about to bind); k still held here
    standby.adopt(req, [AdoptedPod("p1", n1, s1, "p1"), AdoptedPod("", nx, sx)], 6.0)
    g = standby.gang("ns/g")
    assert g is not None and g.lost == 1
    assert set(_pods(standby.placement_of(g))) <= {(n0, s0), (n1, s1)}, "made_whole would say yes"
    rejoined = standby.rejoin("ns/g", "p0")
    # k expires here too (its member evicted); the watch shows p0' bound on X
    standby.evict_gang("other/k", 7.0)
    standby.adopt(req, [AdoptedPod("p1", n1, s1, "p1"), AdoptedPod("p0x", nx, sx, "p0x")], 8.0)
    assert not violations(standby)
    assert not rejoined and standby.gang_of_pod("p0x") is g, (
        f"rejoin={rejoined}: p0 (being evicted) took g's lost slot on {n0} {s0}; p0' runs on {nx} {sx}, "
        f"which this core holds for nobody: {g.history[-1:]}"
    )


def test_a_reload_between_the_adoption_and_the_rejoin_keeps_where_the_slot_was_lost() -> None:
    """A standby sees the same reloads as the leader: a config edit (here the same spec) between the
    re-adoption of g (p0's slot lost, p0 held apart) and the standby's next `rejoin_kept` rebuilds
    every gang (`reconfigure`); g keeps where its slot was lost (`lost_at`), so p0 still rejoins."""
    leader, standby, _ = _split()
    g = standby.gang("g")
    assert g is not None and g.lost == 1 and g.lost_at, "recorded on the first adoption"
    new, report = reconfigure(standby, rack_cluster(), 6.5)
    assert not report.loses_capacity and not violations(new)
    g2 = new.gang("g")
    assert g2 is not None and g2.lost == 1, "the lost slot is still counted after the reload"
    assert new.rejoin("g", "p0"), f"the reload forgot where g's slot was lost: lost_at={g2.lost_at}"
    assert new.gang_of_pod("p0") is g2 and g2.phase is GangPhase.BOUND and g2.lost == 0
    assert [x.name for x in new.gangs()] == ["g"]
    assert not violations(new)
    assert new.node_gpu_counts() == leader.node_gpu_counts()


def test_a_rejoined_gang_spans_what_it_holds() -> None:
    """After the rejoin the gang holds both 8-GPU slots (two nodes), and its `lca_level` (what the
    views and the gang ledger's status show as `lcaCellType`) spans both, as the leader's does, not
    the one slot the adoption saw."""
    leader, standby, pods = _split(8)
    assert pods[0].node != pods[1].node
    assert standby.rejoin("g", "p0")
    lg, sg = leader.gang("g"), standby.gang("g")
    assert lg is not None and sg is not None and not violations(standby)
    assert sg.lca_level == lg.lca_level, (sg.lca_level, lg.lca_level)
