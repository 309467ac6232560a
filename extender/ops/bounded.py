"""A least-recently-used cache bounded in bytes as well as in entries.

Every cache keyed by what a request carries (spec texts, pod requests, node lists) must be bounded by
what it holds, not only by how many entries it has: 4,096 entries of 256 KiB texts are a gigabyte. The
caller says what an entry costs (an estimate in bytes, the same each time for the same entry); an
entry larger than a quarter of the budget is not kept at all, so one huge input cannot flush the cache.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterator
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class ByteLRU(Generic[K, V]):
    __slots__ = ("_items", "max_bytes", "max_entries", "size")

    def __init__(self, max_bytes: int, max_entries: int) -> None:
        self.max_bytes = max_bytes
        self.max_entries = max_entries
        self.size = 0  # the sum of the kept entries' costs
        self._items: OrderedDict[K, tuple[V, int]] = OrderedDict()

    def get(self, key: K) -> V | None:
        got = self._items.get(key)
        if got is None:
            return None
        self._items.move_to_end(key)
        return got[0]

    def put(self, key: K, value: V, cost: int) -> list[tuple[K, V]]:
        """Keep `value`, dropping the least recently used entries to make room; answers what went
        (the new entry itself, when it is too large to keep), for callers that index their entries."""
        self.pop(key)
        if cost > self.max_bytes // 4:
            return [(key, value)]
        self._items[key] = (value, cost)
        self.size += cost
        gone: list[tuple[K, V]] = []
        while self.size > self.max_bytes or len(self._items) > self.max_entries:
            old_key, (old, old_cost) = self._items.popitem(last=False)
            self.size -= old_cost
            gone.append((old_key, old))
        return gone

    def pop(self, key: K) -> V | None:
        got = self._items.pop(key, None)
        if got is None:
            return None
        self.size -= got[1]
        return got[0]

    def clear(self) -> None:
        self._items.clear()
        self.size = 0

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __iter__(self) -> Iterator[K]:
        return iter(self._items)
