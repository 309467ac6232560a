"""Victims that lose the least work, and quota cells bound where no opportunistic work runs."""

from __future__ import annotations

from tests.topology.fixtures import gang, rack_cluster
from topology.core import Core
from topology.decisions import Bind, GangRequest, Preemption, Wait, WaitCode
from topology.invariants import violations
from topology.victims import batches


def start(core: Core, req: GangRequest, at: float) -> list[Bind]:
    out = []
    for m in req.members:
        for k in range(m.pod_number):
            d = core.schedule(req, f"{req.name}-{m.leaf_number}-{k}", m.leaf_number, at)
            assert isinstance(d, Bind), d
            out.append(d)
    assert violations(core) == []
    return out


def nodes_of(binds: list[Bind]) -> set[str]:
    return {b.node for b in binds}


def test_batches_double_up_to_everything() -> None:
    assert list(batches(0)) == []
    assert list(batches(1)) == [1]
    assert list(batches(5)) == [1, 2, 4, 5]
    assert list(batches(8)) == [1, 2, 4, 8]


def test_the_preemptor_displaces_the_gang_that_has_run_least() -> None:
    core = Core(rack_cluster(racks=1, vcs={"a": [("NODE", 2)], "b": [("NODE", 2)]}))
    start(core, gang("a1", "a", (1, 8)), 0.0)
    old = start(core, gang("old", "b", (1, 8), priority=-1), 0.0)
    young = start(core, gang("young", "b", (1, 8), priority=-1), 100.0)
    start(core, gang("b1", "b", (1, 8)), 100.0)  # the cluster is full
    a2 = gang("a2", "a", (1, 8))
    w = core.reserve(a2, 200.0)
    assert isinstance(w, Wait) and w.reason.code is WaitCode.PREEMPTIBLE
    assert {v.pod_uid for v in w.victims} == {b.pod_uid for b in young}  # 100 s of work, not 200 s
    p = core.preempt(a2, 200.0)
    assert isinstance(p, Preemption) and {v.pod_uid for v in p.victims} == {b.pod_uid for b in young}
    assert core.gang("old") is not None and violations(core) == []
    del old


def test_a_new_quota_cell_is_bound_away_from_opportunistic_work() -> None:
    core = Core(rack_cluster(racks=1, vcs={"a": [("NODE", 1)], "b": [("NODE", 3)]}))
    opp = start(core, gang("opp", "b", (1, 1), priority=-1), 0.0)
    mine = start(core, gang("a1", "a", (1, 1)), 1.0)
    # a's node cell goes to a node without the opportunistic pod, which a could otherwise
    # displace later when it needs that node's GPUs
    assert nodes_of(mine) != nodes_of(opp)
    # a fills its node: nothing is displaced
    more = start(core, gang("a2", "a", (1, 7)), 2.0)
    assert nodes_of(more) == nodes_of(mine) and core.gang("opp") is not None


def test_binding_splits_the_used_rack_and_keeps_the_free_rack_whole() -> None:
    core = Core(rack_cluster(racks=2, vcs={"a": [("NODE", 2)], "b": [("NODE", 4)]}))
    opp = start(core, gang("opp", "b", (1, 2), priority=-1), 0.0)
    (rack_of_opp,) = {n.split("-")[0] for n in nodes_of(opp)}
    mine = start(core, gang("a1", "a", (1, 8)), 1.0)
    # a takes a free node of the rack the opportunistic pod already broke, not of the whole rack
    assert {n.split("-")[0] for n in nodes_of(mine)} == {rack_of_opp} and nodes_of(mine) != nodes_of(opp)
    # so b's 4-node gang still finds a whole rack
    whole = start(core, gang("b4", "b", (4, 8)), 2.0)
    assert len({n.split("-")[0] for n in nodes_of(whole)}) == 1


def test_cheaper_victims_never_buy_a_more_spread_preemptor() -> None:
    core = Core(rack_cluster(racks=2, vcs={"a": [("NODE", 2)], "b": [("NODE", 6)]}))

    def on(node: str, name: str, at: float, priority: int = 0) -> list[Bind]:
        return start(core, gang(name, "b", (1, 8), priority=priority, suggested_nodes=frozenset({node})), at)

    for n in ("r0-n1", "r0-n2", "r0-n3", "r1-n2", "r1-n3"):
        on(n, f"b-{n}", 0.0)
    dear = on("r1-n1", "dear", 0.0, priority=-1)  # has run longest
    on("r0-n0", "cheap", 90.0, priority=-1)  # freeing it alone would put a's gang across the racks
    a2 = gang("a2", "a", (2, 8))
    w = core.reserve(a2, 100.0)
    assert isinstance(w, Wait) and w.reason.code is WaitCode.PREEMPTIBLE
    assert {v.pod_uid for v in w.victims} == {b.pod_uid for b in dear}
    p = core.preempt(a2, 100.0)
    assert isinstance(p, Preemption)
    placed = core.gang("a2")
    assert placed is not None and {core.slot_place(s)[0] for s in placed.slots} == {"r1-n0", "r1-n1"}
    assert core.gang("cheap") is not None and violations(core) == []


def test_the_cheapest_node_is_found_when_the_cheapest_gangs_lie_apart() -> None:
    """Freeing the cheapest gangs in order frees both nodes at once; the placement alone would take
    the first, whose second gang has run long. The node-by-node comparison takes the cheap pair."""
    core = Core(rack_cluster(racks=1, vcs={"a": [("NODE", 1)], "b": [("NODE", 3)]}))

    def on(node: str, name: str, at: float, gpus: int, priority: int = -1) -> list[Bind]:
        return start(
            core, gang(name, "b", (1, gpus), priority=priority, suggested_nodes=frozenset({node})), at
        )

    on("r0-n2", "b-n2", 0.0, 8, priority=0)
    on("r0-n3", "b-n3", 0.0, 8, priority=0)
    dear = on("r0-n0", "dear", 0.0, 4)  # has run longest
    cheap = on("r0-n1", "cheap1", 27.0, 4) + on("r0-n1", "cheap2", 28.0, 4)
    on("r0-n0", "newest", 29.0, 4)  # the cheapest of all, beside the dear one
    a1 = gang("a1", "a", (1, 8))
    w = core.reserve(a1, 30.0)
    assert isinstance(w, Wait) and w.reason.code is WaitCode.PREEMPTIBLE
    assert {v.pod_uid for v in w.victims} == {b.pod_uid for b in cheap}
    p = core.preempt(a1, 30.0)
    assert isinstance(p, Preemption) and {v.pod_uid for v in p.victims} == {b.pod_uid for b in cheap}
    assert core.gang("dear") is not None and core.gang("newest") is not None
    assert violations(core) == [] and dear
