"""A required topology level (`GangRequest.within_level`): the whole gang under one cell of that
level, or it waits; a level the cluster does not have is a user error naming the levels it has."""

from __future__ import annotations

import pytest

from tests.topology.fixtures import gang, rack_cluster
from topology.core import Core
from topology.decisions import Bind, GangPlacement, UserError, Wait
from topology.invariants import violations

OPP = -1  # opportunistic: no quota in the way, only free GPUs


def fragmented() -> Core:
    """Two racks, three of four nodes of each full: one free node per rack."""
    core = Core(rack_cluster(vcs={"a": [("NODE", 8)]}))
    for r in range(2):
        for n in range(3):
            fill = gang(f"fill-{r}-{n}", "a", (1, 8), priority=OPP, suggested_nodes=frozenset({f"r{r}-n{n}"}))
            d = core.schedule(fill, f"f{r}{n}", 8, 0.0)
            assert isinstance(d, Bind), d
    assert sorted(n for n in core.node_names() if core.node_fill(n)[0] == 8) == ["r0-n3", "r1-n3"]
    return core


def test_without_a_level_a_gang_spans_racks_when_no_rack_has_room() -> None:
    core = fragmented()
    d = core.reserve(gang("wide", "a", (2, 8)), 0.0)  # guaranteed: binds a's quota where it can
    assert isinstance(d, GangPlacement)
    assert {n.split("-")[0] for n in d.nodes} == {"r0", "r1"}
    assert violations(core) == []


def test_an_opportunistic_multi_node_gang_waits_for_one_rack() -> None:
    core = fragmented()
    d = core.reserve(gang("wide", "a", (2, 8), priority=OPP), 0.0)
    assert isinstance(d, Wait), d  # borrowed GPUs on two racks: it waits instead
    assert core.gang("wide") is None and violations(core) == []
    assert core.release_pod("f10", 1.0) is not None  # rack 1 now has two free nodes
    d = core.reserve(gang("wide", "a", (2, 8), priority=OPP), 2.0)
    assert isinstance(d, GangPlacement) and {n.split("-")[0] for n in d.nodes} == {"r1"}
    # a gang larger than a rack is not held to one
    empty = Core(rack_cluster(vcs={"a": [("NODE", 8)]}))
    big = empty.reserve(gang("big", "a", (5, 8), priority=OPP), 0.0)
    assert isinstance(big, GangPlacement) and {n.split("-")[0] for n in big.nodes} == {"r0", "r1"}


@pytest.mark.parametrize("level", ["rack", "RACK", "Rack"])
def test_a_rack_level_gang_waits_rather_than_span_racks(level: str) -> None:
    core = fragmented()
    d = core.reserve(gang("one-rack", "a", (2, 8), priority=OPP, within_level=level), 0.0)
    assert isinstance(d, Wait), d
    assert core.gang("one-rack") is None and violations(core) == []
    # once a rack has two free nodes, it binds there
    for n in range(2):
        released = core.release_pod(f"f1{n}", 1.0)
        assert released is not None
    d = core.reserve(gang("one-rack", "a", (2, 8), priority=OPP, within_level=level), 2.0)
    assert isinstance(d, GangPlacement), d
    assert {n.split("-")[0] for n in d.nodes} == {"r1"}


def test_a_node_level_gang_shares_one_node_or_waits() -> None:
    core = Core(rack_cluster())
    d = core.reserve(gang("pair", "a", (2, 4), within_level="hostname"), 0.0)
    assert isinstance(d, GangPlacement)
    assert len(set(d.nodes)) == 1
    d = core.reserve(gang("too-big", "a", (2, 8), within_level="node"), 0.0)
    assert isinstance(d, Wait), "16 GPUs never fit one 8-GPU node"


@pytest.mark.parametrize(
    ("level", "why"),
    [("zone", "no chain VC a may use"), ("half", "at or above node level"), ("switch", "RACK")],
)
def test_a_level_the_cluster_lacks_is_a_user_error_naming_its_levels(level: str, why: str) -> None:
    core = Core(rack_cluster())
    with pytest.raises(UserError) as err:
        core.reserve(gang("g", "a", (2, 8), within_level=level), 0.0)
    assert err.value.field == "withinLevel"
    assert why in err.value.message and "NODE, RACK" in err.value.message
    assert core.gangs() == []
