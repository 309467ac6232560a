"""The physical topology: a networkx graph for structure, and flat arrays for the hot path.

The graph answers questions that are asked rarely (lowest common ancestor, distance, export); the
arrays (integer cell ids, parent/children, leaf ranges, node ids) are what placement reads on every
call, because walking networkx per filter call would dominate its latency. Both are built once per
config and never mutated: everything that changes lives in `topology.state`.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from typing import NamedTuple

import networkx as nx

from topology import graph as topograph
from topology.layout import TypeInfo, expand, type_infos
from topology.spec import ClusterSpec


class _Vertex(NamedTuple):
    """What the compile steps below read of one graph vertex."""

    cell: int
    chain: str
    node: str | None
    parent: int


@dataclass(frozen=True, slots=True)
class Chain:
    """All top-level cells of one type and everything below them.

    `level_types[l]` is the cell type at level l (1 = leaf); `child_number[l]` is how many level-(l−1)
    cells a level-l cell holds (0 for leaves)."""

    name: str
    index: int
    leaf_type: str
    top_level: int
    node_level: int
    level_types: tuple[str, ...]
    child_number: tuple[int, ...]
    leaf_count: tuple[int, ...]
    fit_level: tuple[int, ...]  # fit_level[k] = lowest level whose cells hold k leaves
    tops: tuple[int, ...]
    cells_by_level: tuple[tuple[int, ...], ...]


class Topology:
    """Immutable physical cluster. Cell ids are dense ints in depth-first order, so the leaves of a
    subtree are the contiguous slice `leaves[leaf_lo[c]:leaf_hi[c]]`."""

    def __init__(self, spec: ClusterSpec) -> None:
        self.spec = spec
        self.types: dict[str, TypeInfo] = type_infos(spec)
        layout = expand(spec, self.types)
        if layout.problems:
            first = layout.problems[0]
            raise ValueError(f"{first.path}: {first.message}")
        links = {t.name: t.links for t in spec.cell_types if t.links}
        # the model: every answer below is compiled from this graph, once per config
        graph = topograph.build(layout.cells, links)
        problems = topograph.check(graph)
        if problems:
            raise ValueError(f"{problems[0].path}: {problems[0].message}")
        self._compile(graph)
        # Kept only for the rare reads (explain's spans, distances): at 100,000 GPUs the graph is ~180 MiB
        # of dicts that every full garbage collection would walk (a restart's recovery took 3x as long
        # with it held), so it goes once compiled and is built again, from the same spec, when asked.
        self._graph: nx.DiGraph | None = None
        self._nodes_at: dict[int, list[int]] = {}

    @property
    def graph(self) -> nx.DiGraph:
        """The model's graph, as it was compiled from (rebuilt from the spec on the first read)."""
        if self._graph is None:
            layout = expand(self.spec, self.types)
            links = {t.name: t.links for t in self.spec.cell_types if t.links}
            self._graph = topograph.build(layout.cells, links)
        return self._graph

    def _compile(self, g: nx.DiGraph) -> None:
        """The flat arrays placement reads on every call, from the graph's vertices and edges."""
        n = g.number_of_nodes()
        self.n_cells = n
        attrs = [a for _, a in g.nodes(data=True)]  # added in id order, so listed in it
        self.address: list[str] = [a["address"] for a in attrs]
        self.cell_type: list[str] = [a["type"] for a in attrs]
        self.level: list[int] = [a["level"] for a in attrs]
        self.parent: list[int] = [-1] * n
        kids: list[list[int]] = [[] for _ in range(n)]
        self.links: list[frozenset[int]] = []
        link_sets: dict[int, set[int]] = {}
        for u, v, kind in g.edges(data="kind", default=topograph.CONTAINS):
            if kind == topograph.CONTAINS:
                self.parent[v] = u
                kids[u].append(v)
            else:
                link_sets.setdefault(u, set()).add(v)
        self.children: list[tuple[int, ...]] = [tuple(sorted(k)) for k in kids]
        # direct links per GPU (empty unless the config declares some): the tie-break's input
        self.has_links: bool = bool(link_sets)
        self.links = [frozenset(link_sets.get(c, ())) for c in range(n)] if link_sets else []
        # each cell and its ancestors, lowest first: every leaf change walks this path, and a loop
        # over a tuple is several times cheaper than chasing parent links (ids are depth-first, so
        # a parent's path exists before its children's)
        self.up: list[tuple[int, ...]] = []
        for cid, above in enumerate(self.parent):
            self.up.append((cid,) if above < 0 else (cid, *self.up[above]))
        self.pinned_id: list[str | None] = [a["pinned"] for a in attrs]
        cells = [_Vertex(c, attrs[c]["chain"], attrs[c]["node"], self.parent[c]) for c in range(n)]

        chain_names = sorted({c.chain for c in cells})
        self.chain_index: dict[str, int] = {name: i for i, name in enumerate(chain_names)}
        self.cell_chain: list[int] = [self.chain_index[c.chain] for c in cells]

        # leaves in depth-first order and each cell's slice of them
        self.leaves: list[int] = []
        self.leaf_lo = [0] * n
        self.leaf_hi = [0] * n
        self._number_leaves()

        # nodes: a node id is a node-level cell. One Kubernetes node may carry node-level cells of
        # several chains on disjoint GPUs (HiveD allows it), so a name can have several ids:
        # `node_parts[name]` lists them, `node_index[name]` is the first, and `machines` holds each
        # name once, in order of first appearance.
        self.node_names: list[str] = []
        self.node_cell: list[int] = []
        self.cell_node: list[int] = [-1] * n
        self.node_index: dict[str, int] = {}
        parts: dict[str, list[int]] = {}
        for c in cells:
            ti = self.types[self.cell_type[c.cell]]
            if ti.is_node_level:
                assert c.node is not None
                ni = len(self.node_names)
                self.node_index.setdefault(c.node, ni)
                parts.setdefault(c.node, []).append(ni)
                self.node_names.append(c.node)
                self.node_cell.append(c.cell)
                self.cell_node[c.cell] = ni
        for c in cells:
            if c.node is not None and c.parent >= 0 and self.cell_node[c.cell] < 0:
                self.cell_node[c.cell] = self.cell_node[c.parent]  # preorder: the parent is set
        self.node_parts: dict[str, tuple[int, ...]] = {name: tuple(ids) for name, ids in parts.items()}
        self.machines: list[str] = list(parts)
        self.machine_index: dict[str, int] = {name: i for i, name in enumerate(self.machines)}
        self.shared_nodes: bool = len(self.machines) != len(self.node_names)
        self.gpu_index: list[int] = [-1 if a["gpu"] is None else a["gpu"] for a in attrs]
        self.node_leaves: list[tuple[int, ...]] = [
            tuple(self.leaves[self.leaf_lo[nc] : self.leaf_hi[nc]]) for nc in self.node_cell
        ]
        self.leaf_count: list[int] = [self.leaf_hi[c] - self.leaf_lo[c] for c in range(n)]
        self.node_leaf_max = max((len(x) for x in self.node_leaves), default=0)
        self.leaf_pos: dict[int, int] = {leaf: i for i, leaf in enumerate(self.leaves)}

        self.chains: list[Chain] = [self._build_chain(name, i) for i, name in enumerate(chain_names)]
        self.chain_nodes: list[tuple[int, ...]] = [
            tuple(n for n, nc in enumerate(self.node_cell) if self.cell_chain[nc] == ch.index)
            for ch in self.chains
        ]
        self.chain_node_max: list[int] = [
            max((len(self.node_leaves[n]) for n in nodes), default=0) for nodes in self.chain_nodes
        ]
        self.chains_by_leaf_type: dict[str, tuple[int, ...]] = {}
        for ch in self.chains:
            self.chains_by_leaf_type.setdefault(ch.leaf_type, ())
            self.chains_by_leaf_type[ch.leaf_type] += (ch.index,)
        self.pinned_cells: dict[str, int] = {
            pid: c for c, pid in enumerate(self.pinned_id) if pid is not None
        }

    # ------------------------------------------------------------------ construction helpers
    def _number_leaves(self) -> None:
        n = self.n_cells
        # cells are in preorder: a subtree is the contiguous run of ids [c, end[c])
        end = [0] * n
        for c in range(n - 1, -1, -1):
            end[c] = max([c + 1, *(end[k] for k in self.children[c])])
        self.cell_end: list[int] = end
        is_leaf = [not self.children[c] for c in range(n)]
        prefix = [0] * (n + 1)
        for c in range(n):
            prefix[c + 1] = prefix[c] + (1 if is_leaf[c] else 0)
        self.leaves = [c for c in range(n) if is_leaf[c]]
        for c in range(n):
            self.leaf_lo[c] = prefix[c]
            self.leaf_hi[c] = prefix[end[c]]

    def _build_chain(self, name: str, index: int) -> Chain:
        top_ti = self.types[name]
        level_types: list[str] = [""] * (top_ti.level + 1)
        child_number = [0] * (top_ti.level + 1)
        leaf_count = [0] * (top_ti.level + 1)
        node_level = 0
        t: str | None = name
        while t is not None:
            ti = self.types[t]
            level_types[ti.level] = t
            child_number[ti.level] = ti.child_number
            leaf_count[ti.level] = ti.leaf_count
            if ti.is_node_level:
                node_level = ti.level
            t = ti.child_type
        by_level: list[list[int]] = [[] for _ in range(top_ti.level + 1)]
        tops: list[int] = []
        for c in range(self.n_cells):
            if self.cell_chain[c] == index:
                by_level[self.level[c]].append(c)
                if self.parent[c] == -1:
                    tops.append(c)
        fit_level = tuple(
            next((lvl for lvl in range(1, top_ti.level + 1) if leaf_count[lvl] >= k), top_ti.level + 1)
            for k in range(leaf_count[top_ti.level] + 1)
        )
        return Chain(
            fit_level=fit_level,
            name=name,
            index=index,
            leaf_type=top_ti.leaf_type,
            top_level=top_ti.level,
            node_level=node_level,
            level_types=tuple(level_types),
            child_number=tuple(child_number),
            leaf_count=tuple(leaf_count),
            tops=tuple(tops),
            cells_by_level=tuple(tuple(x) for x in by_level),
        )

    # ------------------------------------------------------------------ queries (hot path)
    def cells_within(self, c: int, level: int) -> list[int]:
        """Cells of `level` inside `c` (itself when at that level), in id order."""
        ids = self.chains[self.cell_chain[c]].cells_by_level[level]
        return list(ids[bisect_left(ids, c) : bisect_left(ids, self.cell_end[c])])

    def nodes_within(self, c: int) -> range:
        """Node indexes of the nodes inside (or containing) cell `c`."""
        ni = self.cell_node[c]
        if ni >= 0:
            return range(ni, ni + 1)
        return range(bisect_left(self.node_cell, c), bisect_left(self.node_cell, self.cell_end[c]))

    def nodes_in_chain(self, chain: int) -> tuple[int, ...]:
        return self.chain_nodes[chain]

    def ancestor_at(self, c: int, level: int) -> int:
        """The ancestor-or-self of `c` at `level`, or -1 above the top."""
        lv = self.level
        parent = self.parent
        while c >= 0 and lv[c] < level:
            c = parent[c]
        return c

    def nodes_at(self, level: int) -> list[int]:
        """Each node's ancestor-or-self at `level` (-1 above its chain's top), by node id: the
        multi-node search sums a VC's free leaves per rack over every node it holds, and a list
        index per node is several times cheaper than walking up from each (built once per level)."""
        table = self._nodes_at.get(level)
        if table is None:
            table = self._nodes_at[level] = [self.ancestor_at(nc, level) for nc in self.node_cell]
        return table

    # ------------------------------------------------------------------ queries (cold path)
    def ancestors(self, c: int) -> list[int]:
        """`c` and every cell above it, lowest first."""
        out = []
        while c >= 0:
            out.append(c)
            c = self.parent[c]
        return out

    def lca(self, cells: list[int]) -> int | None:
        """Lowest common ancestor of `cells` (None when they sit in different top-level cells)."""
        if not cells:
            return None
        parent, level, end = self.parent, self.level, self.cell_end
        a = cells[0]
        for c in cells[1:]:
            if a <= c < end[a]:  # already under `a` (cells are numbered subtree by subtree)
                continue
            while a != c:  # climb whichever is lower; cell levels make this a plain walk
                if a < 0 or c < 0:
                    return None
                if level[a] <= level[c]:
                    a = parent[a]
                else:
                    c = parent[c]
        return a

    def lca_level(self, cells: list[int]) -> int:
        """Level of the lowest common ancestor; one above the chain's top when there is none.

        Cells (a gang's leaves) on two or more nodes have the lca of those nodes: the climb starts
        from a cell per node, not per leaf."""
        nodes = set(map(self.cell_node.__getitem__, cells))
        if len(nodes) > 1 and -1 not in nodes:
            a = self.lca(list(map(self.node_cell.__getitem__, nodes)))
        else:
            a = self.lca(cells)
        if a is not None:
            return self.level[a]
        return self.chains[self.cell_chain[cells[0]]].top_level + 1

    def distance(self, a: int, b: int) -> int:
        """Hops between two cells over the cell tree (the graph's answer)."""
        return topograph.distance(self.graph, a, b)

    def span(self, leaves: list[int]) -> topograph.Span:
        """How spread `leaves` are (common cell, hops, direct links): the graph's answer, for the
        read side (explain, inspect, the UI)."""
        return topograph.span(self.graph, leaves)

    def leaf_of(self, node: str, gpu: int) -> int | None:
        for leaf in self.machine_leaves(node):
            if self.gpu_index[leaf] == gpu:
                return leaf
        return None

    def machine_leaves(self, node: str) -> tuple[int, ...]:
        """Every leaf of the Kubernetes node `node`, over all the chains it has cells in."""
        ids = self.node_parts.get(node, ())
        if len(ids) == 1:
            return self.node_leaves[ids[0]]
        return tuple(leaf for ni in ids for leaf in self.node_leaves[ni])

    def chain_of(self, c: int) -> Chain:
        return self.chains[self.cell_chain[c]]

    def total_leaves(self) -> int:
        return len(self.leaves)
