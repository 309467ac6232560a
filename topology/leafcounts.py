"""The counters a batch of leaves moves when they all turn used or all turn free.

Placement reads free leaves and usage per cell and each owner's free leaves per node from counters
kept incrementally (`topology.state`). Allocating or releasing a pod's leaves moves them in bulk:
the cells below a node per leaf, the node and every ancestor once per node, an owner's count once
per node, and a pod that fills a node moves each cell below it once, by its leaf count. A mixin of
`CellState`, which holds the counters these methods move.
"""

from __future__ import annotations

from collections.abc import Sequence

from topology.ids import NO_OWNER
from topology.model import Topology


class LeafCounts:
    topo: Topology
    free: list[int]
    bad_count: list[int]
    leaf_bad: list[bool]
    leaf_owner: list[int]
    owned_free: list[dict[int, int]]
    _below_node: list[tuple[int, ...]]

    def _count_leaves(self, leaves: Sequence[int], d_free: int, usage: list[int]) -> None:
        """The counters of leaves that all turned used (`d_free` -1) or all turned free (+1), with
        `usage` the one usage counter they leave or enter: the cells below a node per leaf, the
        node and its ancestors once per run of a node's leaves, each owner's free count once per
        node (what `_set_leaf` does leaf by leaf, in bulk: a pod's leaves share their node)."""
        if self._count_whole_node(leaves, d_free, usage):
            return
        topo = self.topo
        cell_node, below = topo.cell_node, self._below_node
        free, leaf_bad, leaf_owner = self.free, self.leaf_bad, self.leaf_owner
        d_use = -d_free
        owned: dict[tuple[int, int], int] = {}
        run_node = -1
        run_free = run_use = 0
        for leaf in leaves:
            node = cell_node[leaf]
            if node != run_node:
                if run_node >= 0:
                    self._count_above(run_node, run_free, usage, run_use)
                run_node, run_free, run_use = node, 0, 0
            cells = below[leaf]
            for c in cells:
                usage[c] += d_use
            run_use += d_use
            if not leaf_bad[leaf]:
                for c in cells:
                    free[c] += d_free
                run_free += d_free
                owner = leaf_owner[leaf]
                if owner != NO_OWNER:
                    owned[owner, node] = owned.get((owner, node), 0) + d_free
        if run_node >= 0:
            self._count_above(run_node, run_free, usage, run_use)
        for (owner, node), d in owned.items():
            self._owned_free_count(owner, node, d)

    def _count_whole_node(self, leaves: Sequence[int], d_free: int, usage: list[int]) -> bool:
        """`_count_leaves` for the leaves of one whole healthy node with one owner (the pod that
        fills a node, as most multi-node gangs' pods do), or False: each cell below the node moves
        by its leaf count at once rather than once per leaf under it (by slice when the node was
        wholly free: its cells then go from all free and unused to none free and all used)."""
        topo = self.topo
        node = topo.cell_node[leaves[0]] if leaves else -1
        if node < 0:
            return False
        nc = topo.node_cell[node]
        leaf_count = topo.leaf_count
        n = len(leaves)
        if n != leaf_count[nc] or self.bad_count[nc]:
            return False
        if len(set(map(topo.cell_node.__getitem__, leaves))) != 1:
            return False
        owners = set(map(self.leaf_owner.__getitem__, leaves))
        if len(owners) != 1:
            return False
        free, lo, hi = self.free, nc + 1, topo.cell_end[nc]
        if d_free < 0 and free[nc] == n:
            free[lo:hi] = [0] * (hi - lo)
            usage[lo:hi] = leaf_count[lo:hi]
        else:
            for c in range(lo, hi):
                k = leaf_count[c]
                usage[c] -= d_free * k
                free[c] += d_free * k
        self._count_above(node, d_free * n, usage, -d_free * n)
        owner = owners.pop()
        if owner != NO_OWNER:
            self._owned_free_count(owner, node, d_free * n)
        return True

    def _count_above(self, node: int, d_free: int, usage: list[int], d_use: int) -> None:
        """A run's sums on its node's cell and every ancestor."""
        free = self.free
        for c in self.topo.up[self.topo.node_cell[node]]:
            free[c] += d_free
            usage[c] += d_use

    def _owned_free_count(self, owner: int, node: int, delta: int) -> int:
        d = self.owned_free[owner]
        v = d.get(node, 0) + delta
        if v:
            d[node] = v
        else:
            d.pop(node, None)
        return v
