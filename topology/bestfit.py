"""Best-fit lookup of nodes by a small integer key (free GPUs), in O(keys) instead of O(nodes).

Placement asks the same question on almost every decision: "which node of this VC has the fewest
free GPUs that is still at least k?". Scanning and sorting every node answers it in O(n log n); here
each (group, key) has a min-heap of node ids, updated lazily: a node is pushed when its key changes,
and stale entries are dropped when they surface. Ties go to the lowest node id, so answers depend
only on the state, never on insertion order.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator


class BestFitIndex:
    def __init__(self) -> None:
        self._key: dict[int, dict[int, int]] = {}
        self._heaps: dict[int, dict[int, list[int]]] = {}
        self._pushes: dict[int, int] = {}  # pushes per group since its heaps were last rebuilt

    def _rebuild(self, group: int) -> None:
        """Heaps of the valid entries only. Stale entries are dropped lazily when they surface, but
        one that never surfaces (a node whose key keeps changing below its heap's head) would stay
        forever: a busy cluster grew millions of them. Rebuilding once pushes outnumber the nodes
        keeps each group's heaps within a small multiple of its nodes, and changes no answer
        (`first` yields the valid nodes of each key in id order, however the heap holds them)."""
        heaps: dict[int, list[int]] = {}
        for node, key in self._key.get(group, {}).items():
            heaps.setdefault(key, []).append(node)
        for h in heaps.values():
            heapq.heapify(h)
        self._heaps[group] = heaps
        self._pushes[group] = 0

    def compacted(self) -> BestFitIndex:
        """A copy holding only valid entries (what `topology.snapshot` copies)."""
        out = BestFitIndex()
        out._key = {g: keys.copy() for g, keys in self._key.items()}
        for g in out._key:
            out._rebuild(g)
        return out

    def update(self, group: int, node: int, key: int) -> None:
        """Record `node`'s current key in `group` (key 0 = not a candidate)."""
        keys = self._key.setdefault(group, {})
        if keys.get(node, 0) == key:
            return
        if key:
            keys[node] = key
            heapq.heappush(self._heaps.setdefault(group, {}).setdefault(key, []), node)
            pushes = self._pushes.get(group, 0) + 1
            self._pushes[group] = pushes
            if pushes > 4 * len(keys) + 64:
                self._rebuild(group)
        else:
            keys.pop(node, None)

    def key(self, group: int, node: int) -> int:
        return self._key.get(group, {}).get(node, 0)

    def entries(self, group: int) -> dict[int, int]:
        """Every node of `group` with its key (a copy; for the invariant checks)."""
        return dict(self._key.get(group, {}))

    def first(self, group: int, keys: Iterable[int]) -> Iterator[int]:
        """Nodes in `keys` order, lowest id first within a key; each valid node once per key.

        Lazy: a caller that stops after a few nodes pays for those few, not for sorting every
        node of a key (thousands at 12,500 nodes). The walk reads a heap in place, so the index
        must not change while it runs (every caller compares nodes, then acts after the loop):
        a change is an error, as for a dict changed during iteration."""
        current = self._key.get(group, {})
        heaps = self._heaps.get(group, {})
        for k in keys:
            h = heaps.get(k)
            if not h:
                continue
            # drop stale heads so the heap stays small, then walk what is left in order
            while h and current.get(h[0]) != k:
                heapq.heappop(h)
            if not h:
                continue
            yield from _in_order(h, current, k, self._pushes, group)


def _in_order(
    h: list[int], current: dict[int, int], k: int, pushes: dict[int, int], group: int
) -> Iterator[int]:
    """The valid entries of heap `h` (nodes whose key is still `k`) in ascending order, each once,
    without changing `h`: a frontier of heap positions, smallest node first, costs O(log) per node
    taken. A node pushed twice with the same key surfaces twice in a row and is yielded once."""
    size, before = len(h), pushes.get(group, 0)
    frontier = [(h[0], 0)]
    last = -1
    while frontier:
        node, i = heapq.heappop(frontier)
        left = 2 * i + 1
        if left < size:
            heapq.heappush(frontier, (h[left], left))
            if left + 1 < size:
                heapq.heappush(frontier, (h[left + 1], left + 1))
        if node != last and current.get(node) == k:
            last = node
            yield node
            if len(h) != size or pushes.get(group, 0) != before:
                raise RuntimeError("BestFitIndex changed while one of its walks was running")
