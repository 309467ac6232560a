"""One Kubernetes node with cells in two chains (HiveD's design config: node 1.0.0.2 has a CT1 pair on
GPUs 8-9 and a DGX1-P100 board on GPUs 0-7): accounting and health are the node's, whole."""

from __future__ import annotations

from pathlib import Path

from config.load import load_config
from topology.core import Core
from topology.decisions import GangPlacement, GangRequest, Member
from topology.invariants import violations

DESIGN = Path(__file__).resolve().parents[1] / "conformance" / "hived" / "hivedscheduler.yaml"
NODE = "1.0.0.2"


def design() -> Core:
    return Core(load_config(DESIGN).spec)


def test_the_node_is_listed_once_with_the_gpus_of_both_chains() -> None:
    core = design()
    names = list(core.node_names())
    assert names.count(NODE) == 1 and len(names) == len(set(names)) == 20
    assert core.node_fill(NODE) == (10, 10)
    assert core.node_gpu_counts()[core.node_index()[NODE]] == 10
    assert sorted(core.topo.gpu_index[x] for x in core.topo.machine_leaves(NODE)) == list(range(10))
    assert {core.topo.chain_of(x).name for x in core.topo.machine_leaves(NODE)} == {
        "CT1-NODE",
        "3-DGX1-P100-NODE",
    }


def test_gangs_of_either_chain_land_on_the_node_and_are_counted_there() -> None:
    core = design()
    only = frozenset({NODE})
    p100 = GangRequest(
        "p100", "VC2", (Member(1, 4),), priority=1, leaf_type="DGX1-P100", suggested_nodes=only
    )
    ct1 = GangRequest("ct1", "VC1", (Member(1, 1),), priority=-1, leaf_type="CT1", suggested_nodes=only)
    a, b = core.reserve(p100, 0.0), core.reserve(ct1, 0.0)
    assert isinstance(a, GangPlacement) and isinstance(b, GangPlacement)
    assert [(p.node, max(p.gpu_indices) < 8) for p in a.pods] == [(NODE, True)]
    # opportunistic: any idle CT1 GPU, VC1's pinned GPU 8 included (as in HiveD)
    assert [(p.node, p.gpu_indices[0] in (8, 9)) for p in b.pods] == [(NODE, True)]
    assert core.node_fill(NODE) == (5, 10)
    assert violations(core) == []


def test_health_is_the_whole_node() -> None:
    core = design()
    core.set_node_health(NODE, False)
    assert sorted(core.node_health(NODE)) == list(range(10))
    assert core.node_fill(NODE) == (0, 10)
    core.set_node_health(NODE, True)
    assert core.node_fill(NODE) == (10, 10)
    core.set_node_health(NODE, True, healthy_gpus=8)  # device plugin: 2 of 10 GPUs missing
    assert sorted(core.node_health(NODE)) == [8, 9]  # the highest indices, which are CT1's
