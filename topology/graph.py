"""The physical topology as a networkx graph: the model every other view of the cluster is read from.

Vertices are the physical cells (integer ids, depth-first, as `topology.layout.expand` numbers
them) with their type, level, address, chain, Kubernetes node, GPU index and pinned-cell id.
Edges are of two kinds:

- `contains` (the default: an edge without data): parent cell to child cell, at the parent's level.
  These form the cell tree HiveD describes: a forest whose roots are the top-level cells and whose
  leaves are the GPUs. (No data per edge: at 12,500 nodes that is 190,000 dicts.)
- `link`: a direct GPU-to-GPU link (both directions), carrying the level of the cell it was
  declared on. They say what the tree cannot: the DGX-1's hybrid cube-mesh NVLink joins GPU 0 to
  GPU 4 though they sit in different quads, and not GPU 0 to GPU 5.

`Topology` (topology.model) compiles the flat arrays the hot path reads from this graph once per
config; the read side (explain, inspect, the UI) asks the graph for distances and spans through
the functions below. `check` is where structure is verified at load.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import networkx as nx

from topology.layout import ExpandedCell, Problem

CONTAINS = "contains"
LINK = "link"


def build(cells: Sequence[ExpandedCell], links: dict[str, tuple[tuple[int, int], ...]]) -> nx.DiGraph:
    """The graph of `cells` (as expanded from the spec) and the links each cell type declares
    (`links[type]`: pairs of GPU indexes inside one cell of that type)."""
    g = nx.DiGraph()
    for c in cells:
        g.add_node(
            c.index,
            type=c.cell_type,
            level=c.level,
            address=c.address,
            chain=c.chain,
            node=c.node,
            gpu=c.gpu_index,
            pinned=c.pinned_cell_id,
            path=c.config_path,
        )
    for c in cells:
        if c.parent is not None:
            g.add_edge(c.parent, c.index)  # `contains`, the default kind (no data: memory at scale)
    if links:
        for c in cells:
            pairs = links.get(c.cell_type)
            if not pairs:
                continue
            by_gpu = {g.nodes[x]["gpu"]: x for x in gpus_under(g, c.index)}
            for a, b in pairs:
                if a in by_gpu and b in by_gpu and a != b:
                    g.add_edge(by_gpu[a], by_gpu[b], kind=LINK, level=c.level)
                    g.add_edge(by_gpu[b], by_gpu[a], kind=LINK, level=c.level)
    return g


def children(g: nx.DiGraph, c: int) -> list[int]:
    return sorted(v for v, e in g.succ[c].items() if e.get("kind", CONTAINS) == CONTAINS)


def parent(g: nx.DiGraph, c: int) -> int | None:
    for u, e in g.pred[c].items():
        if e.get("kind", CONTAINS) == CONTAINS:
            return int(u)
    return None


def gpus_under(g: nx.DiGraph, c: int) -> list[int]:
    """The GPUs (level-1 cells) inside `c`, in id order."""
    out: list[int] = []
    stack = [c]
    while stack:
        x = stack.pop()
        kids = [v for v, e in g.succ[x].items() if e.get("kind", CONTAINS) == CONTAINS]
        if kids:
            stack.extend(kids)
        elif g.nodes[x]["level"] == 1:
            out.append(x)
    return sorted(out)


def check(g: nx.DiGraph) -> list[Problem]:
    """Structure the rest of the core relies on, in one pass over the edges: every cell has one
    parent at most and is exactly one level below it (so the cell tree is a forest: levels that
    drop along every edge leave no cycle, and every cell's way up ends at a top-level cell, so
    every GPU is reached from one), every cell without children is a GPU (level 1), and every
    link joins two GPUs of one node."""
    problems: list[Problem] = []
    nodes = g.nodes

    def at(c: int) -> str:
        return str(nodes[c]["path"])

    has_parent: set[int] = set()
    has_child: set[int] = set()
    for u, v, kind in g.edges(data="kind", default=CONTAINS):
        if kind == LINK:
            if nodes[u]["node"] is None or nodes[u]["node"] != nodes[v]["node"]:
                problems.append(Problem(at(u), "a link must join two GPUs of one node"))
            continue
        if v in has_parent:
            problems.append(Problem(at(v), "the cells do not form a tree: a cell has two parents"))
        has_parent.add(v)
        has_child.add(u)
        lu, lv = nodes[u]["level"], nodes[v]["level"]
        if lv != lu - 1:
            msg = f"cell at level {lv} inside a cell at level {lu}: levels must step by one"
            problems.append(Problem(at(v), msg))
    for c, level in g.nodes(data="level"):
        if c not in has_child and level != 1:
            problems.append(Problem(at(c), f"cell of type {nodes[c]['type']} has no GPUs below it"))
    return problems


def ancestors(g: nx.DiGraph, c: int) -> list[int]:
    """`c` and the cells containing it, lowest first."""
    out = [c]
    p = parent(g, c)
    while p is not None:
        out.append(p)
        p = parent(g, p)
    return out


# ------------------------------------------------------------------ the read side's questions
def lowest_common_cell(g: nx.DiGraph, cells: Iterable[int]) -> int | None:
    """The lowest cell containing all of `cells` (None when they lie under different top cells)."""
    common: set[int] | None = None
    for c in cells:
        up = set(ancestors(g, c))
        common = up if common is None else common & up
        if not common:
            return None
    if not common:
        return None
    return min(common, key=lambda x: (g.nodes[x]["level"], x))


def span_level(g: nx.DiGraph, cells: Sequence[int]) -> int:
    """The level of the lowest common cell of `cells` (a gang's GPUs, all of one chain); one
    above the chain's top when no cell holds them all (a gang spread over several top cells)."""
    a = lowest_common_cell(g, cells)
    if a is not None:
        return int(g.nodes[a]["level"])
    return int(g.nodes[ancestors(g, cells[0])[-1]]["level"]) + 1


def distance(g: nx.DiGraph, a: int, b: int) -> int:
    """Hops between two cells over the cell tree (up to their lowest common cell and down);
    -1 when they share none."""
    up_a, up_b = ancestors(g, a), ancestors(g, b)
    common = set(up_a) & set(up_b)
    if not common:
        return -1
    return min(up_a.index(x) + up_b.index(x) for x in common)


def linked(g: nx.DiGraph, a: int, b: int) -> bool:
    """Are two GPUs joined by a declared direct link?"""
    e = g.get_edge_data(a, b)
    return e is not None and e.get("kind") == LINK


def link_connected(g: nx.DiGraph, gpus: Sequence[int]) -> bool:
    """Do `gpus` reach each other over direct links among themselves (a pair: linked)?"""
    if len(gpus) < 2:
        return True
    sub = nx.Graph((u, v) for u in gpus for v in gpus if u < v and linked(g, u, v))
    return sub.number_of_nodes() == len(gpus) and bool(nx.is_connected(sub))


@dataclass(frozen=True, slots=True)
class Span:
    """How spread a set of GPUs is, as the read side shows it: the lowest cell holding them all
    (its level and type; level one above the chain's top and type None when none does), the
    largest number of hops between two of them over the cell tree, and whether they reach each
    other over declared direct links (None when their node declares none)."""

    level: int
    cell_type: str | None
    hops: int
    linked: bool | None


def span(g: nx.DiGraph, gpus: Sequence[int]) -> Span:
    """The `Span` of `gpus` (GPU cells of one chain)."""
    a = lowest_common_cell(g, gpus)
    level = span_level(g, gpus)
    # all GPUs sit at level 1: the farthest two go up to the common cell and down again
    hops = 2 * (level - 1) if len(set(gpus)) > 1 else 0
    has_links = any(e.get("kind") == LINK for x in gpus for e in g.succ[x].values())
    return Span(
        level=level,
        cell_type=None if a is None else str(g.nodes[a]["type"]),
        hops=hops,
        linked=link_connected(g, gpus) if has_links else None,
    )
