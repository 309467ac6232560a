"""The free pool's cells at node level and above, by how many of their leaves are used.

A new quota cell is bound from the free pool in an order that depends on how used each pool cell
is (`buddy.binding_order`: the least used node first, the most used rack first). Building that
order from the whole pool level on each ask cost a scan of thousands of cells at 12,500 nodes;
here each pool cell's used count is kept as the pool and the leaves change (`CellState` calls
`track`), in the best-fit index's lazy heaps, so the order is read a cell at a time. Cells below
node level are not kept: placement reads those levels of the pool directly.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from topology.bestfit import BestFitIndex
from topology.model import Topology


class PoolOrder:
    def __init__(self, topo: Topology) -> None:
        self.topo = topo
        self._index = BestFitIndex()  # group: (chain, level); key: used leaves + 1

    @staticmethod
    def _group(chain: int, level: int) -> int:
        return chain * 1024 + level  # a cell tree is never 1,024 levels deep

    def track(self, c: int, free: int | None) -> None:
        """Cell `c` is in the pool with `free` free leaves, or (None) no longer in the pool."""
        topo = self.topo
        chain, level = topo.cell_chain[c], topo.level[c]
        if level >= topo.chains[chain].node_level:
            key = 0 if free is None else topo.leaf_count[c] - free + 1
            self._index.update(self._group(chain, level), c, key)

    def by_used(self, chain: int, level: int, used: Iterable[int]) -> Iterator[int]:
        """The pool cells of `level` whose used leaves are each of `used` in turn, lowest id first
        within one count. Lazy; the pool must not change while it runs."""
        return self._index.first(self._group(chain, level), (u + 1 for u in used))

    def kept(self) -> dict[int, int]:
        """Every pool cell kept, with its used leaves (for the invariant checks)."""
        out: dict[int, int] = {}
        for ch in self.topo.chains:
            for level in range(ch.node_level, ch.top_level + 1):
                for c, key in self._index.entries(self._group(ch.index, level)).items():
                    out[c] = key - 1
        return out

    def compacted(self) -> PoolOrder:
        """A copy holding only valid entries (what `topology.snapshot` copies)."""
        out = PoolOrder(self.topo)
        out._index = self._index.compacted()
        return out
