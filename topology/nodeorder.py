"""Nodes of a chain in the order a whole-node pod of a multi-node gang should look at them.

`Placer._fill_nodes` keeps the node whose choice key `(unused, level, new, own, ..., cell)` is
least, and can tell from a node's counters alone a bound below which no choice on it can go:
`(unused, fit level, what must be newly bound, own free leaves, node cell)` for a pod that fills a
node. Visiting the nodes in order of that bound lets the search stop at the first node whose bound
is above the best key found, instead of walking every node of the domain; on a 12,500-node chain
that walk was most of a multi-node decision. The order comes from the best-fit index the state
already keeps (`CellState.nodes_by_free`: a VC's nodes by its free leaves, the opportunistic view
by free leaves with a penalty for nodes running guaranteed work), so nothing new is maintained on
the leaf path. The answer is the same as the walk's: keys are unique (they end with a cell id), and
every node not visited has a bound, and so a key, above the one kept.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator

from topology.state import NO_OWNER, CellState


def whole_node_order(
    st: CellState,
    owner: int,
    chain: int,
    domain: int,
    size: int,
    used: set[int],
    with_quota: bool,
) -> Iterator[int]:
    """The nodes inside cell `domain` (-1: the whole chain) that may take a pod of `size` leaves,
    in ascending order of `(n not in used, new leaves to bind, own free leaves, node id)`.

    Nodes already used by the gang come first (in id order). Then the unused ones with room of
    their own (best fit: least room first), and, when the owner still has unbound quota on the
    chain (`with_quota`), the ones that would need `size - own` leaves bound, fewest first. A node
    that could not get the room it lacks (no quota to bind, or too few free-pool leaves in it) can
    take nothing and is left out."""
    topo = st.topo
    cell_chain, node_cell = topo.cell_chain, topo.node_cell
    nodes = topo.nodes_in_chain(chain) if domain < 0 else topo.nodes_within(domain)
    if not nodes:
        return
    if domain < 0:
        lo, hi = 0, len(node_cell)  # the chain check below is all it takes
    else:
        lo, hi = nodes[0], nodes[-1] + 1

    def inside(n: int) -> bool:
        return lo <= n < hi and cell_chain[node_cell[n]] == chain

    yield from sorted(n for n in used if inside(n))
    top = topo.chain_node_max[chain]
    index = st.nodes_by_free
    if owner == NO_OWNER:
        group, pen = st.opp_group(chain), st.opp_penalty
        for own in range(size, top + 1):
            # a node's opportunistic key is its free leaves, plus the penalty when it runs
            # guaranteed work: both keys hold nodes with `own` free leaves
            for n in heapq.merge(index.first(group, (own,)), index.first(group, (own + pen,))):
                if inside(n) and n not in used:
                    yield n
        return  # an opportunistic pod binds nothing: a node without room is no candidate
    for own in range(size, top + 1):
        for n in index.first(owner, (own,)):
            if inside(n) and n not in used:
                yield n
    if not with_quota:
        return
    # a node short of room gains leaves only by binding free-pool cells inside it (or the pool cell
    # around it), so one with fewer pool leaves than it lacks cannot take the pod: most nodes of a
    # shared cluster are bound to other VCs, and skipping them here saves planning a bind on each
    pool_leaves = st.pool_leaves
    for own in range(min(size, top + 1) - 1, 0, -1):
        for n in index.first(owner, (own,)):
            if inside(n) and n not in used and pool_leaves[node_cell[n]] >= size - own:
                yield n
    owned = st.owned_free[owner]
    for n in nodes:
        if pool_leaves[node_cell[n]] >= size and n not in owned and n not in used:
            yield n
