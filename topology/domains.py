"""Where a multi-node gang's pods could go: the cells of one level, best fit first (the multi-node
search's first question, asked of every level from the gang's fit level up), and in a cell, the
first node a node-sized pod fills without binding anything.

A cell's room is what the owner holds free in it plus, when it has quota left to bind, the cell's
free-pool leaves (opportunistic gangs: the cell's free leaves). The level (~100 racks at 1,000
nodes) is read in one comprehension, each cell ranked by one int, room * cells + id: ints compare
far faster than (room, id) tuples, and the search mostly takes the first cell only, so the rest
is sorted only when it asks for a second.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from topology.ids import NO_OWNER
from topology.state import CellState


def ranked_cells(st: CellState, owner: int, chain: int, lvl: int, total: int, binds: bool) -> Iterator[int]:
    """The cells of `lvl` in `chain` with room for `total` leaves for `owner` (`binds`: it may bind
    free-pool leaves), least room first, then id."""
    topo = st.topo
    cells, n_cells = topo.chains[chain].cells_by_level[lvl], topo.n_cells
    if owner == NO_OWNER:
        free = st.free
        ranks = [v * n_cells + c for c in cells if (v := free[c]) >= total]
    else:
        cap: dict[int, int] = {}
        at, cell_chain = topo.nodes_at(lvl), topo.cell_chain
        for n, k in st.owned_free[owner].items():
            a = at[n]
            if a >= 0 and cell_chain[a] == chain:
                cap[a] = cap.get(a, 0) + k
        if binds:
            pool = st.pool_leaves
            ranks = [v * n_cells + c for c in cells if (v := pool[c]) >= total and c not in cap]
            # the few cells the owner holds leaves in: their room is both parts
            ranks += [v * n_cells + c for c, k in cap.items() if (v := k + pool[c]) >= total]
        else:
            ranks = [v * n_cells + c for c, v in cap.items() if v >= total]
    return _least_first(ranks, n_cells)


def _least_first(ranks: list[int], n: int) -> Iterator[int]:
    """The cells of `ranks` (room * n + id each) by least room, then id: the least one by `min`,
    the rest sorted only when the caller asks for a second."""
    if not ranks:
        return
    yield min(ranks) % n
    if len(ranks) > 1:
        ranks.sort()
        for r in ranks[1:]:
            yield r % n


def first_whole_node(
    st: CellState,
    nodes: Iterable[int],
    size: int,
    used: set[int],
    owned: dict[int, int] | None,
    suggested: frozenset[int] | None,
) -> int:
    """The first node of `nodes` not in `used` (and suggested) with `size` usable leaves (the
    owner's free ones, `owned`, or any free ones), or -1."""
    free, node_cell = st.free, st.topo.node_cell
    for n in nodes:
        if n in used or (suggested is not None and n not in suggested):
            continue
        if (free[node_cell[n]] if owned is None else owned.get(n, 0)) >= size:
            return n
    return -1
