"""Promotion: an opted-in opportunistic gang becomes guaranteed in place once its VC has room."""

from __future__ import annotations

from tests.topology.fixtures import gang, rack_cluster
from topology.core import Core
from topology.decisions import Bind, GangPlacement, GangRequest
from topology.invariants import violations


def start(core: Core, req: GangRequest, at: float) -> set[str]:
    nodes = set()
    for m in req.members:
        for k in range(m.pod_number):
            d = core.schedule(req, f"{req.name}-{m.leaf_number}-{k}", m.leaf_number, at)
            assert isinstance(d, Bind), d
            nodes.add(d.node)
    assert violations(core) == []
    return nodes


def cluster() -> Core:
    return Core(rack_cluster(racks=1, vcs={"a": [("NODE", 1)], "b": [("NODE", 3)]}))


def test_an_opted_in_gang_is_promoted_when_its_vc_has_room() -> None:
    core = cluster()
    start(core, gang("a1", "a", (1, 8)), 0.0)  # a's whole quota
    where = start(core, gang("ao", "a", (1, 4), priority=-1, promote_when_quota=True), 1.0)
    core.delete_gang("a1")
    g = core.gang("ao")
    assert g is not None and g.priority == 0 and "promoted" in g.history[-1]
    assert violations(core) == []
    # b's whole quota still binds (the safety check held), without displacing the promoted gang
    b = start(core, gang("b1", "b", (3, 8)), 2.0)
    assert not b & where and core.gang("ao") is not None
    # a's next job runs beside it, in a's own node
    assert start(core, gang("a2", "a", (1, 4)), 3.0) == where


def test_a_gang_that_did_not_opt_in_stays_opportunistic() -> None:
    core = cluster()
    start(core, gang("a1", "a", (1, 8)), 0.0)
    start(core, gang("ao", "a", (1, 4), priority=-1), 1.0)
    core.delete_gang("a1")
    g = core.gang("ao")
    assert g is not None and g.priority < 0


def test_no_promotion_onto_a_node_other_gangs_share() -> None:
    core = cluster()
    start(core, gang("a1", "a", (1, 8)), 0.0)
    where = start(core, gang("ao", "a", (1, 4), priority=-1, promote_when_quota=True), 1.0)
    other = start(core, gang("bo", "b", (1, 4), priority=-1), 2.0)
    assert other == where  # best fit puts it beside ao
    core.delete_gang("a1")
    g = core.gang("ao")
    assert g is not None and g.priority < 0  # binding the node would hand bo to a
    core.delete_gang("bo")
    g = core.gang("ao")
    assert g is not None and g.priority == 0 and violations(core) == []
    placed = core.reserve(gang("a2", "a", (1, 4)), 3.0)
    assert isinstance(placed, GangPlacement)


def test_the_edge_learns_each_promotion_once_and_not_of_released_gangs() -> None:
    core = cluster()
    start(core, gang("a1", "a", (1, 8)), 0.0)
    start(core, gang("ao", "a", (1, 4), priority=-1, promote_when_quota=True), 1.0)
    assert core.take_promoted() == []
    core.delete_gang("a1")
    assert core.take_promoted() == ["ao"]
    assert core.take_promoted() == []  # taken: the edge keeps what it still has to write
    core = cluster()
    start(core, gang("a1", "a", (1, 8)), 0.0)
    start(core, gang("ao", "a", (1, 4), priority=-1, promote_when_quota=True), 1.0)
    core.delete_gang("a1")
    core.delete_gang("ao")  # released before the edge asked: nothing to write for it
    assert core.take_promoted() == []
