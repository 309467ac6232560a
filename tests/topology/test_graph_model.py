"""The networkx graph is the model: the arrays placement reads are compiled from it and must give the
graph's answers; structure is checked on the graph at load; declared links break the tree's ties."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from config.load import ConfigError, load_config, load_config_text
from topology import graph as topograph
from topology.cluster import Cluster
from topology.core import Core
from topology.decisions import GangRequest, Member
from topology.explain import explain
from topology.layout import ExpandedCell
from topology.model import Topology
from topology.spec import CellTypeSpec, ClusterSpec, PhysicalCellSpec, VirtualCellSpec, VirtualClusterSpec
from topology.state import NO_OWNER

ROOT = Path(__file__).resolve().parents[2]
DGX1 = ROOT / "config" / "examples" / "dgx1-v100.yaml"


@st.composite
def clusters(draw: st.DrawFn) -> ClusterSpec:
    """1-2 chains of random depth and fan-out, the node level anywhere from the top down to just
    above the GPUs."""
    types: list[CellTypeSpec] = []
    tops: list[PhysicalCellSpec] = []
    node_id = 0
    for chain in range(draw(st.integers(1, 2))):
        depth = draw(st.integers(2, 4))  # levels above the GPU
        node_level = draw(st.integers(2, depth + 1))
        fan = [draw(st.integers(1, 3)) for _ in range(depth)]
        names = [f"C{chain}L{lvl}" for lvl in range(1, depth + 2)]
        names[0] = f"G{chain}"
        for lvl in range(2, depth + 2):
            types.append(
                CellTypeSpec(names[lvl - 1], names[lvl - 2], fan[lvl - 2], is_node_level=lvl == node_level)
            )

        def cell(lvl: int, node_level: int = node_level, fan: list[int] = fan) -> PhysicalCellSpec:
            nonlocal node_id
            if lvl == node_level:
                node_id += 1
                return PhysicalCellSpec(address=f"n{node_id}")
            return PhysicalCellSpec(children=tuple(cell(lvl - 1) for _ in range(fan[lvl - 2])))

        for _ in range(draw(st.integers(1, 3))):
            top = cell(depth + 1)
            tops.append(PhysicalCellSpec(names[-1], top.address, None, top.children))
    return ClusterSpec(tuple(types), tuple(tops))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=clusters(), data=st.data())
def test_arrays_give_the_graphs_answers(spec: ClusterSpec, data: st.DataObject) -> None:
    topo = Topology(spec)
    g = topo.graph
    assert g.number_of_nodes() == topo.n_cells
    cells = st.integers(0, topo.n_cells - 1)
    for c in range(topo.n_cells):
        assert topo.parent[c] == (topograph.parent(g, c) if topograph.parent(g, c) is not None else -1)
        assert list(topo.children[c]) == topograph.children(g, c)
        # which GPUs a cell holds
        assert list(topo.leaves[topo.leaf_lo[c] : topo.leaf_hi[c]]) == topograph.gpus_under(g, c)
    # which GPUs belong to which node
    for name in topo.machines:
        mine = sorted(x for x in g.nodes if g.nodes[x]["node"] == name and g.nodes[x]["level"] == 1)
        assert sorted(topo.machine_leaves(name)) == mine
    for _ in range(10):
        picked = data.draw(st.lists(cells, min_size=1, max_size=4))
        # lowest common level (span) and the cell itself
        assert topo.lca(picked) == topograph.lowest_common_cell(g, picked)
        assert topo.lca_level(picked) == topograph.span_level(g, picked)
        a, b = picked[0], picked[-1]
        common = topograph.lowest_common_cell(g, [a, b])
        if common is not None:
            hops = topo.level[common] - topo.level[a] + topo.level[common] - topo.level[b]
            assert topo.distance(a, b) == hops


def _cell(index: int, parent: int | None, level: int, node: str | None = "n") -> ExpandedCell:
    return ExpandedCell(index, parent, "T", f"L{level}", level, str(index), node, 0, None, f"p[{index}]")


def test_check_finds_a_level_that_skips() -> None:
    g = topograph.build([_cell(0, None, 3), _cell(1, 0, 1)], {})
    assert [p.path for p in topograph.check(g)] == ["p[1]"]
    assert "levels must step by one" in topograph.check(g)[0].message


def test_check_finds_a_cell_without_gpus_and_a_link_across_nodes() -> None:
    g = topograph.build([_cell(0, None, 2), _cell(1, None, 1, "x"), _cell(2, None, 1, "y")], {})
    g.add_edge(1, 2, kind=topograph.LINK, level=2)
    found = {(p.path, p.message) for p in topograph.check(g)}
    assert ("p[0]", "cell of type L2 has no GPUs below it") in found
    assert ("p[1]", "a link must join two GPUs of one node") in found


def test_check_finds_a_cell_with_two_parents() -> None:
    g = topograph.build([_cell(0, None, 2), _cell(1, None, 2), _cell(2, 0, 1)], {})
    g.add_edge(1, 2)
    assert topograph.check(g)[0].message == "the cells do not form a tree: a cell has two parents"


def test_dgx1_links_are_in_the_graph() -> None:
    topo = Topology(load_config(DGX1).spec)
    gpus = topo.machine_leaves("dgx1-01")
    by_index = {topo.gpu_index[x]: x for x in gpus}
    assert topograph.linked(topo.graph, by_index[0], by_index[4])
    assert not topograph.linked(topo.graph, by_index[0], by_index[5])
    assert all(len(topo.links[x]) == 4 for x in gpus)  # hybrid cube-mesh: 4 peers a GPU
    assert topograph.link_connected(topo.graph, [by_index[i] for i in (0, 1, 4, 5)])
    assert not topograph.link_connected(topo.graph, [by_index[i] for i in (0, 1, 6, 7)])


LINKS_CONFIG = """
physicalCluster:
  cellTypes:
    Q: {childCellType: V100, childCellNumber: 4}
    N: {childCellType: Q, childCellNumber: 2, isNodeLevel: true, nvlinks: %s}
  physicalCells:
  - {cellType: N, cellAddress: a}
virtualClusters:
  v: {virtualCells: [{cellType: N, cellNumber: 1}]}
"""


@pytest.mark.parametrize(
    ("links", "reason"),
    [
        ("[[0, 0]]", "links GPU 0 to itself"),
        ("[[0, 8]]", "GPU indexes must be 0..7"),
        ("[[0, 1], [1, 0]]", "the link 1-0 is listed twice"),
    ],
)
def test_bad_nvlinks_are_config_errors_naming_the_path(links: str, reason: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config_text(LINKS_CONFIG % links, "links.yaml")
    text = str(err.value)
    assert "links.yaml" in text and "physicalCluster.cellTypes.N.nvlinks[" in text and reason in text


def test_nvlinks_only_on_a_node_level_type() -> None:
    text = LINKS_CONFIG.replace(
        "Q: {childCellType: V100, childCellNumber: 4}",
        "Q: {childCellType: V100, childCellNumber: 4, nvlinks: [[0, 1]]}",
    )
    with pytest.raises(ConfigError) as err:
        load_config_text(text % "[]", "links.yaml")
    assert "physicalCluster.cellTypes.Q.nvlinks" in str(err.value) and "not node-level" in str(err.value)


def _one_node(links: tuple[tuple[int, int], ...]) -> ClusterSpec:
    types = (CellTypeSpec("Q", "V100", 4), CellTypeSpec("N", "Q", 2, is_node_level=True, links=links))
    vcs = (VirtualClusterSpec("v", (VirtualCellSpec(("N",), 1),)),)
    return ClusterSpec(types, (PhysicalCellSpec("N", "a"),), vcs)


CUBE_MESH: tuple[tuple[int, int], ...] = (
    (0, 1),
    (0, 2),
    (0, 3),
    (1, 2),
    (1, 3),
    (2, 3),
    (4, 5),
    (4, 6),
    (4, 7),
    (5, 6),
    (5, 7),
    (6, 7),
)
CUBE_MESH += ((0, 4), (1, 5), (2, 6), (3, 7))


@pytest.mark.parametrize(("links", "want"), [((), [2, 3, 4, 5]), (CUBE_MESH, [2, 3, 4, 6])])
def test_links_decide_what_the_tree_rates_the_same(
    links: tuple[tuple[int, int], ...], want: list[int]
) -> None:
    """GPUs 0, 1 and 7 busy: a 4-GPU pod takes 2 + 2 over the quads, and any 2 of 4, 5, 6 are the
    same to the tree, which takes the lowest. With the cube-mesh links, 6 (linked to 2) is taken
    so the pod's GPUs are connected by NVLink (2-3, 2-6, 4-6) instead of two separate pairs."""
    cluster = Cluster(_one_node(links))
    topo = cluster.topo
    by_index = {topo.gpu_index[x]: x for x in topo.machine_leaves("a")}
    cluster.state.allocate_leaves([by_index[i] for i in (0, 1, 7)], 1, -1)
    got = cluster.placer.place(NO_OWNER, 0, [4], 2, -1, None)
    assert isinstance(got, list)
    assert sorted(topo.gpu_index[x] for x in got[0]) == want
    assert topograph.link_connected(Topology(_one_node(CUBE_MESH)).graph, list(got[0])) == bool(links)


def test_explain_reports_the_graphs_span_and_links() -> None:
    core = Core(load_config(DGX1).spec)
    req = GangRequest("g", "cv", (Member(2, 4),))  # 2 pods of 4 GPUs
    doc = explain(core, req, 0.0)
    assert doc["fitsNow"] is True
    placement = doc["placement"]
    assert placement["lcaCellType"] == "DGX1-NODE" and placement["gpuHops"] == 4  # 2 pods, one node
    assert [p["nvlinked"] for p in placement["pods"]] == [True, True]  # each pod one quad
