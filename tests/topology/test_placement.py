"""Placement rules of the core, one behaviour per test."""

from __future__ import annotations

import itertools

import pytest

from tests.topology.fixtures import gang, rack_cluster
from topology.core import Core
from topology.decisions import Bind, GangRequest, Member, UserError, Wait, WaitCode
from topology.invariants import snapshot, violations


def bind(core: Core, req: GangRequest, uid: str, gpus: int, now: float = 0.0) -> Bind:
    d = core.schedule(req, uid, gpus, now)
    assert isinstance(d, Bind), d
    assert violations(core) == []
    return d


def switch_of(core: Core, node: str, gpu: int) -> int:
    leaf = core.topo.leaf_of(node, gpu)
    assert leaf is not None
    return core.topo.parent[leaf]


def test_two_single_gpu_jobs_share_a_switch() -> None:
    core = Core(rack_cluster())
    a = bind(core, gang("j1", "a", (1, 1)), "p1", 1)
    b = bind(core, gang("j2", "a", (1, 1)), "p2", 1)
    assert a.node == b.node
    assert switch_of(core, a.node, a.gpu_indices[0]) == switch_of(core, b.node, b.gpu_indices[0])


def test_eight_gpu_job_takes_a_whole_node() -> None:
    core = Core(rack_cluster())
    bind(core, gang("small", "a", (1, 1)), "p0", 1)
    d = bind(core, gang("big", "a", (1, 8)), "p1", 8)
    assert d.gpu_indices == tuple(range(8))
    small_node = core.placement_of(core.reservations.by_name["small"]).nodes[0]
    assert d.node != small_node


def test_four_gpu_job_stays_in_one_half() -> None:
    core = Core(rack_cluster())
    bind(core, gang("one", "a", (1, 1)), "p0", 1)
    d = bind(core, gang("four", "a", (1, 4)), "p1", 4)
    assert d.gpu_indices in ((0, 1, 2, 3), (4, 5, 6, 7))


def test_opportunistic_job_stays_off_nodes_with_guaranteed_usage() -> None:
    core = Core(rack_cluster())
    g = bind(core, gang("g", "a", (1, 2)), "p0", 2)
    o = bind(core, gang("o", "b", (1, 2), priority=-1), "p1", 2)
    assert o.node != g.node
    assert core.state.used_guaranteed[core.topo.node_cell[core.topo.node_index[o.node]]] == 0


def test_multi_node_gang_stays_inside_one_rack() -> None:
    core = Core(rack_cluster(vcs={"a": [("NODE", 6)]}))
    bind(core, gang("warm", "a", (1, 8)), "w", 8)
    bind(core, gang("warm2", "a", (1, 8)), "w2", 8)
    bind(core, gang("warm3", "a", (1, 8)), "w3", 8)
    d = bind(core, gang("g3", "a", (3, 8)), "p0", 8)
    racks = {n.split("-")[0] for n in d.placement.nodes}
    assert len(racks) == 1 and len(d.placement.nodes) == 3


def test_gang_larger_than_quota_waits_with_reason_naming_vc_and_level() -> None:
    """The reason names the VC's own quota cells (b holds NODE and HALF cells, no RACK), the cell the
    gang needs, and that it can never run."""
    core = Core(rack_cluster())
    d = core.schedule(gang("huge", "b", (4, 8)), "p0", 8, 0.0)
    assert isinstance(d, Wait)
    r = d.reason
    assert r.code is WaitCode.INSUFFICIENT_QUOTA
    assert r.vc == "b" and r.level == 4 and r.cell_type == "NODE"  # b's largest quota cell
    assert r.needed == 32 and r.available == 24
    assert "VC b" in r.message and "its quota there: 2 NODE + 2 HALF cells" in r.message
    assert "needs 32 within one RACK" in r.message
    assert "more than VC b's whole quota of 24: it can never run" in r.message
    assert core.gangs() == []


def test_a_quota_wait_names_the_smallest_quota_cell_that_could_hold_the_gang() -> None:
    """A gang that fits the VC's quota but not its free part: the level is that of the quota cells it
    would come from, and nothing says it can never run."""
    core = Core(rack_cluster(vcs={"a": [("NODE", 1)], "b": [("", 1), ("NODE", 1)]}))
    bind(core, gang("a1", "a", (1, 8)), "w", 8)
    d = core.schedule(gang("more", "a", (1, 4)), "p0", 4, 0.0)
    assert isinstance(d, Wait) and d.reason.code is WaitCode.INSUFFICIENT_QUOTA
    assert (d.reason.level, d.reason.cell_type) == (4, "NODE")
    assert "its quota there: 1 NODE cell)" in d.reason.message and "never run" not in d.reason.message
    bind(core, gang("b1", "b", (4, 8)), "x", 8)
    bind(core, gang("b2", "b", (1, 8)), "y", 8)  # b's 40 GPUs are all in use
    d = core.schedule(gang("b3", "b", (4, 8)), "p1", 8, 0.0)
    assert isinstance(d, Wait) and d.reason.code is WaitCode.INSUFFICIENT_QUOTA
    assert (d.reason.level, d.reason.cell_type) == (5, "RACK")
    assert "1 RACK + 1 NODE cells" in d.reason.message and "never run" not in d.reason.message


def test_members_in_any_order_get_the_same_placement() -> None:
    req = gang("g", "a", (2, 4), (2, 2))
    pods = [("u1", 4), ("u2", 4), ("u3", 2), ("u4", 2)]
    seen = set()
    for perm in itertools.permutations(pods):
        core = Core(rack_cluster())
        bind(core, gang("other", "a", (1, 1)), "x", 1)
        got = {bind(core, req, uid, g).placement for uid, g in perm}
        assert len(got) == 1
        p = got.pop()
        seen.add(tuple(sorted((pp.node, pp.gpu_indices) for pp in p.pods)))
    assert len(seen) == 1


def test_gang_is_all_or_nothing() -> None:
    core = Core(rack_cluster(racks=1, vcs={"a": [("NODE", 4)]}))
    bind(core, gang("x", "a", (3, 8)), "p", 8)
    before = snapshot(core)
    d = core.schedule(gang("y", "a", (2, 8)), "q", 8, 0.0)
    assert isinstance(d, Wait)
    assert snapshot(core) == before


def test_release_frees_cells_and_merges_buddies() -> None:
    core = Core(rack_cluster())
    initial = snapshot(core)
    bind(core, gang("x", "a", (1, 1)), "p1", 1)
    bind(core, gang("y", "b", (2, 4)), "p2", 4)
    bind(core, gang("y", "b", (2, 4)), "p3", 4)
    for uid in ("p1", "p2", "p3"):
        core.release_pod(uid, 1.0)
        assert violations(core) == []
    assert core.gangs() == []
    assert snapshot(core) == initial


def test_vc_safety_survives_fragmentation_by_others() -> None:
    # b's sub-node HALF cells must not split the nodes a's NODE quota was promised
    core = Core(rack_cluster(racks=1, vcs={"a": [("NODE", 3)], "b": [("NODE.HALF", 2)]}))
    for i in range(2):
        bind(core, gang(f"b{i}", "b", (1, 1)), f"pb{i}", 1)
    for i in range(3):
        bind(core, gang(f"a{i}", "a", (1, 8)), f"pa{i}", 8)
    assert violations(core) == []


def test_sub_node_vc_cells_in_one_node_host_one_multi_gpu_pod() -> None:
    # HiveD treats each HALF cell as its own island; here two halves bound in one node host 8 GPUs
    core = Core(rack_cluster(racks=1, vcs={"a": [("NODE", 2)], "r": [("NODE.HALF", 2)]}))
    d = bind(core, gang("eight", "r", (1, 8)), "p", 8)
    assert d.gpu_indices == tuple(range(8))
    small = Core(rack_cluster(racks=1, vcs={"a": [("NODE", 2)], "r": [("NODE.HALF", 2)]}))
    bind(small, gang("two", "r", (1, 2)), "p1", 2)
    d2 = bind(small, gang("six", "r", (1, 6)), "p2", 6)
    assert d2.node == small.placement_of(small.reservations.by_name["two"]).nodes[0]


def test_suggested_nodes_are_honoured() -> None:
    core = Core(rack_cluster())
    d = bind(core, gang("s", "a", (1, 2), suggested_nodes=frozenset({"r1-n2"})), "p", 2)
    assert d.node == "r1-n2"
    w = core.schedule(gang("t", "a", (1, 2), suggested_nodes=frozenset({"nope"})), "q", 2, 0.0)
    assert isinstance(w, Wait) and w.reason.code is WaitCode.NO_SUGGESTED_NODE


def test_retried_member_takes_back_its_slot() -> None:
    core = Core(rack_cluster())
    req = gang("g", "a", (2, 8), slot_keys=("worker/0", "worker/1"))
    first = core.schedule(req, "uid-0", 8, 0.0, slot_key="worker/0")
    second = core.schedule(req, "uid-1", 8, 0.0, slot_key="worker/1")
    assert isinstance(first, Bind) and isinstance(second, Bind)
    core.release_pod("uid-0", 5.0)  # the pod failed; FrameworkController recreates it
    assert core.gang("g") is not None
    again = core.schedule(req, "uid-0b", 8, 6.0, slot_key="worker/0")
    assert isinstance(again, Bind)
    assert (again.node, again.gpu_indices, again.slot) == (first.node, first.gpu_indices, first.slot)
    assert violations(core) == []


def test_gang_release_frees_finished_members_early() -> None:
    core = Core(rack_cluster())
    req = gang("g", "a", (2, 4), gang_release=True)
    a = bind(core, req, "p1", 4)
    bind(core, req, "p2", 4)
    node = core.topo.node_cell[core.topo.node_index[a.node]]
    before = core.state.free[node]
    core.release_pod("p1", 1.0, finished=True)
    assert core.state.free[node] == before + 4
    assert core.gang("g") is not None
    assert violations(core) == []


def test_without_gang_release_finished_members_keep_their_gpus() -> None:
    core = Core(rack_cluster())
    req = gang("g", "a", (2, 4))
    a = bind(core, req, "p1", 4)
    bind(core, req, "p2", 4)
    node = core.topo.node_cell[core.topo.node_index[a.node]]
    before = core.state.free[node]
    core.release_pod("p1", 1.0, finished=True)
    assert core.state.free[node] == before


def test_unclaimed_reservation_expires_and_frees_everything() -> None:
    core = Core(rack_cluster())
    initial = snapshot(core)
    req = gang("g", "a", (3, 8), ttl_seconds=60.0)
    bind(core, req, "p1", 8, now=0.0)
    assert core.expire(59.0) == []
    released = core.expire(60.0)
    assert [r.gang for r in released] == ["g"] and released[0].evict_pod_uids == ("p1",)
    assert core.gang("g") is None and violations(core) == []
    held = core.gang_of_pod("p1")
    assert held is not None  # p1 runs until it is gone: so do its GPUs
    assert held.name.startswith("g/evicted/") and len(held.held_leaves()) == 8
    core.release_pod("p1", 61.0)
    assert snapshot(core) == initial and core.gangs() == []


def test_bound_gang_does_not_expire() -> None:
    core = Core(rack_cluster())
    req = gang("g", "a", (1, 8), ttl_seconds=1.0)
    bind(core, req, "p1", 8)
    assert core.expire(100.0) == []


def test_pinned_cell_used_only_by_pods_that_name_it() -> None:
    spec = rack_cluster(vcs={"a": [("NODE", 2)]}, pinned={"a": ["pin1"]}, pin_nodes={"r0-n3": "pin1"})
    core = Core(spec)
    d = bind(core, gang("p", "a", (1, 8), pinned_cell_id="pin1"), "u", 8)
    assert d.node == "r0-n3"
    for i in range(2):
        other = bind(core, gang(f"q{i}", "a", (1, 8)), f"v{i}", 8)
        assert other.node != "r0-n3"


@pytest.mark.parametrize(
    ("req", "field"),
    [
        (GangRequest("g", "nope", (Member(1, 1),)), "virtualCluster"),
        (GangRequest("g", "a", (Member(1, 1),), priority=1001), "priority"),
        (GangRequest("g", "a", (Member(1, 1),), priority=-2), "priority"),
        (GangRequest("g", "a", (Member(0, 1),)), "affinityGroup.members[0].podNumber"),
        (GangRequest("g", "a", (Member(1, 16),)), "leafCellNumber"),
        (GangRequest("g", "a", (Member(1, 1),), leaf_type="H100"), "leafCellType"),
        (GangRequest("g", "a", (Member(1, 1),), pinned_cell_id="x"), "pinnedCellId"),
        (GangRequest("", "a", (Member(1, 1),)), "affinityGroup.name"),
    ],
)
def test_bad_requests_name_the_field_and_change_nothing(req: GangRequest, field: str) -> None:
    core = Core(rack_cluster())
    before = snapshot(core)
    with pytest.raises(UserError) as err:
        core.schedule(req, "p", req.members[0].leaf_number, 0.0)
    assert err.value.field == field
    assert snapshot(core) == before


@pytest.mark.parametrize(
    ("req", "field"),
    [
        (GangRequest("", "a", (Member(1, 1),)), "affinityGroup.name"),
        (GangRequest("g", "a", (Member(1, 1),), slot_keys=("w/0", "w/1")), "slotKeys"),
        (GangRequest("g", "a", (Member(1, 1),), pinned_cell_id="x"), "pinnedCellId"),
    ],
)
def test_a_shape_validated_before_does_not_let_a_bad_request_through(req: GangRequest, field: str) -> None:
    """Validity is remembered per request shape; the name, and each field that differs, is still
    checked on every request."""
    core = Core(rack_cluster())
    bind(core, GangRequest("ok", "a", (Member(1, 1),)), "p0", 1)
    before = snapshot(core)
    with pytest.raises(UserError) as err:
        core.schedule(req, "p", 1, 0.0)
    assert err.value.field == field
    with pytest.raises(UserError, match="no member has leafCellNumber 2"):
        core.schedule(GangRequest("g2", "a", (Member(1, 1),)), "p", 2, 0.0)
    assert snapshot(core) == before


def test_pod_not_in_gang_members_is_rejected() -> None:
    core = Core(rack_cluster())
    with pytest.raises(UserError, match="no member has leafCellNumber 2"):
        core.schedule(gang("g", "a", (1, 4)), "p", 2, 0.0)


def test_same_inputs_same_decisions() -> None:
    def run() -> list[tuple[str, tuple[int, ...]]]:
        core = Core(rack_cluster())
        out = []
        for i, g in enumerate([1, 2, 4, 1, 8, 2, 1, 4]):
            d = core.schedule(gang(f"g{i}", "ab"[i % 2], (1, g)), f"p{i}", g, 0.0)
            if isinstance(d, Bind):
                out.append((d.node, d.gpu_indices))
        return out

    assert run() == run()


def test_claim_is_idempotent_and_rejects_wrong_node() -> None:
    core = Core(rack_cluster())
    req = gang("g", "a", (2, 8))
    placed = core.reserve(req, 0.0)
    assert not isinstance(placed, Wait)
    node = placed.pods[0].node
    b1 = core.claim("g", "p1", 8, 0.0, node=node)
    assert core.claim("g", "p1", 8, 0.0, node=node) == b1
    with pytest.raises(UserError):
        core.claim("g", "p1", 8, 0.0, node=placed.pods[1].node)
    with pytest.raises(UserError):
        core.claim("g", "p2", 8, 0.0, node=node)  # that node's only slot is taken
    assert violations(core) == []


def test_a_pod_holds_one_slot_of_one_gang() -> None:
    """A pod already holding a slot cannot claim one in another gang: its pod-to-gang entry would
    move, and its first slot would stay held after the pod is gone."""
    core = Core(rack_cluster())
    for name in ("g", "h"):
        assert not isinstance(core.reserve(gang(name, "a", (2, 1)), 0.0), Wait)
    core.claim("g", "p1", 1, 0.0)
    with pytest.raises(UserError, match="already holds a slot of gang g"):
        core.claim("h", "p1", 1, 0.0)
    assert violations(core) == []
    h = core.gang("h")
    assert h is not None and all(s.pod_uid is None for s in h.slots)
    h.slots[0].pod_uid = "p1"  # what the claim used to do: the invariants name it
    assert any("p1" in v for v in violations(core))
    h.slots[0].pod_uid = None
    core.release_pod("p1", 1.0)  # its only member gone: the gang goes, nothing stays held
    assert core.gang("g") is None and violations(core) == []
