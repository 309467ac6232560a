"""The node lists kube-scheduler sends, remembered by the server that receives them.

kube-scheduler sends the same full node list with every filter and prioritize. Sharing one tuple
(and one frozenset, `node_set`) means a gang's request no longer keeps its own copy of 5,000 names
alive for the gang's lifetime (~0.4 MB each at 5,000 nodes), the list is checked and the set built
once instead of per call, and lookups keyed by it hit by identity. A repeat costs one tuple hash and
compare, in C; a body that ends with the very bytes of a list seen lately is not even decoded whole.

One `NodeLists` per server (the `Scheduler` owns the extender's): what it holds is bounded by
`NODE_LISTS` lists and a budget in bytes sized to the cluster (`budget_for`: a few copies of the
cluster's own list, however long the lists callers send), and it checks nothing itself:
`extender.http.wire` checks a list before it is shared, and only ever hands it lists it has checked.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

import orjson

T = TypeVar("T")
NODE_LISTS = 8  # distinct node lists remembered (kube-scheduler sends one, mostly)
# ...and what they may hold together: ~220 bytes a name (the text, the tuple, the set, the raw tail,
# `positions`), so one 70,000-node list fits; a larger list is checked and used, but not remembered
NODE_LIST_BYTES = 32 * 1024 * 1024
NAME_COST = 220
MIN_BUDGET = 4 * 1024 * 1024


def budget_for(nodes: int) -> int:
    """Bytes worth spending on node lists for a cluster of `nodes` nodes: room for eight lists of its
    own size (kube-scheduler sends one, or a few while nodes come and go), at least 4 MiB, at most
    `NODE_LIST_BYTES`. A list of names the cluster does not have is of no use to remember."""
    return max(MIN_BUDGET, min(NODE_LIST_BYTES, NODE_LISTS * (NAME_COST + 64) * nodes))


MIN_SHARED = 32  # shorter lists (prioritize's survivors) are not remembered

_KEY = b'"NodeNames":'


class _NodeList:
    """One node list as kube-scheduler sent it, and the same names as a set."""

    __slots__ = ("cost", "memo", "names", "set", "tail")

    def __init__(self, names: tuple[str, ...], cost: int) -> None:
        self.names = names
        self.cost = cost
        self.set = frozenset(names)
        self.tail: bytes | None = None  # the raw `"NodeNames":[...]}` it came in, if remembered
        self.memo: dict[int, tuple[weakref.ref[Any], Any]] = {}  # id(owner) -> (owner, value)


def _head(body: bytes, at: int) -> bytes | None:
    """The object before the trailing `"NodeNames":...` member, closed: `{..., "k": v}` or `{}`."""
    head = body[:at].rstrip()
    if head.endswith(b","):
        rest = head[:-1].rstrip()
        return None if rest.endswith(b"{") else rest + b"}"  # `{,` is not an object
    if head.endswith(b"{"):
        return head + b"}"
    return None


class NodeLists:
    """Checked node lists, most recently used last, with the raw bytes they came in."""

    def __init__(self, max_bytes: int = NODE_LIST_BYTES) -> None:
        self.max_bytes = max_bytes
        self._node_lists: OrderedDict[tuple[str, ...], _NodeList] = OrderedDict()
        self._by_id: dict[int, _NodeList] = {}  # id of an interned tuple (alive while in `_node_lists`)
        self._tails: dict[bytes, _NodeList] = {}  # the raw `"NodeNames":[...]}` ending a body -> its list
        self._pending: list[tuple[bytes, object]] = []  # (tail, decoded list) of the last body, until checked

    # ---------------------------------------------------------------------------------- bodies
    def known_body(self, body: bytes) -> dict[str, Any] | None:
        """kube-scheduler sends the same node list, byte for byte, at the end of every filter:
        decoding and re-checking it (and hashing 1,000 fresh strings to find its shared tuple) is
        most of a request's parsing. If the body ends with a remembered `"NodeNames":[...]}` and
        what comes before it is a valid object on its own, that member is the last key of the
        top-level object (a `,` or `{` before its quote opens the key; the final `}` closes the
        document), so the body decodes to that object plus `NodeNames` = the remembered list,
        exactly as a full decode would give (a repeated key keeps its last value). Anything else:
        None, and the caller decodes it all."""
        if not self._tails:
            return None
        at = body.rfind(_KEY)
        if at < 0:
            return None
        known = self._tails.get(body[at:])
        head = _head(body, at) if known is not None else None
        if known is None or head is None:
            return None
        try:
            doc = orjson.loads(head)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(doc, dict):
            return None
        doc["NodeNames"] = known.names
        return doc

    def note_body(self, body: bytes, doc: object) -> None:
        """After a full decode: if the body ends with its own top-level `NodeNames` array, keep those
        bytes until `share` has the list checked (then `known_body` can use them)."""
        self._pending.clear()
        if not isinstance(doc, dict):
            return
        value = doc.get("NodeNames")
        if not isinstance(value, list) or len(value) < MIN_SHARED:
            return
        at = body.rfind(_KEY)
        if at < 0 or _head(body, at) is None:
            return
        tail = body[at:]
        raw = tail[len(_KEY) :].rstrip()
        if not raw.endswith(b"}"):
            return
        try:
            same = orjson.loads(raw[:-1]) == value
        except orjson.JSONDecodeError:
            return
        if same:
            self._pending.append((tail, value))

    # ---------------------------------------------------------------------------------- lists
    def known(self, value: object) -> tuple[str, ...] | None:
        """The shared tuple itself, when `known_body` put it in place (checked when first seen)."""
        if not isinstance(value, tuple):
            return None
        got = self._by_id.get(id(value))
        if got is None or got.names is not value:
            return None
        if next(reversed(self._node_lists)) is not value:
            self._node_lists.move_to_end(value)
        return value

    def share(self, value: list[Any], check: Callable[[], tuple[str, ...]]) -> tuple[str, ...]:
        """The shared tuple for a node list: the one remembered when an equal list was checked
        before, else `check()`'s, remembered."""
        names = tuple(value)
        try:
            got = self._node_lists.get(names)
        except TypeError:  # an unhashable item: not a name; the check says where
            got = None
        if got is not None:  # the list kube-scheduler sent last time, checked then: ~15 us for 1,000
            if next(reversed(self._node_lists)) is not got.names:  # (moving re-hashes all the names)
                self._node_lists.move_to_end(got.names)
            got.tail = self._tail_of(value, got)
            return got.names
        return self._intern(check(), value)

    def _tail_of(self, value: object, got: _NodeList) -> bytes | None:
        """Remember the raw bytes `note_body` kept for this (now checked) list: one tail per list."""
        if not self._pending or self._pending[0][1] is not value:
            return got.tail
        tail = self._pending.pop()[0]
        if got.tail is not None and got.tail != tail:
            self._tails.pop(got.tail, None)
        self._tails[tail] = got
        return tail

    def _intern(self, names: tuple[str, ...], value: object) -> tuple[str, ...]:
        """Remember a checked node list: later requests with an equal list get this very tuple."""
        cost = NAME_COST * len(names) + sum(map(len, names))
        if cost > self.max_bytes // 2:
            self._pending.clear()
            return names
        got = self._node_lists[names] = _NodeList(names, cost)
        self._by_id[id(names)] = got
        got.tail = self._tail_of(value, got)
        total = sum(n.cost for n in self._node_lists.values())
        while len(self._node_lists) > NODE_LISTS or total > self.max_bytes:
            _, old = self._node_lists.popitem(last=False)
            total -= old.cost
            del self._by_id[id(old.names)]
            if old.tail is not None:
                self._tails.pop(old.tail, None)
        return names

    # ---------------------------------------------------------------------------------- answers
    def per_node_list(self, names: Sequence[str], owner: object, compute: Callable[[], T]) -> T:
        """`compute()`, remembered with an interned node list for `owner` (what else the value
        depends on, e.g. the topology; held weakly, so a replaced one is not kept alive). Touching
        1,000 names costs ~130 us on a busy server however tight the loop (cache misses on the
        strings), so an answer that depends only on the list is worth keeping. The value is shared:
        do not change it."""
        got = self._by_id.get(id(names))
        if got is None or got.names is not names:
            return compute()
        held = got.memo.get(id(owner))
        if held is not None and held[0]() is owner:
            return cast(T, held[1])
        value = compute()
        for key in [k for k, (ref, _) in got.memo.items() if ref() is None]:
            del got.memo[key]  # an owner gone (a core a reload replaced): its value goes with it
        got.memo[id(owner)] = (weakref.ref(owner), value)
        return value

    def positions(self, names: Sequence[str]) -> dict[str, int]:
        """Each name's index in the list (the first, for a name given twice); remembered with an
        interned list, so picking a few names out of 1,000 in the caller's order costs no scan."""

        def index() -> dict[str, int]:
            out: dict[str, int] = {}
            for i, n in enumerate(names):
                out.setdefault(n, i)
            return out

        return self.per_node_list(names, _NodeList, index)

    def node_set(self, names: Sequence[str]) -> frozenset[str]:
        """`frozenset(names)`, shared (and O(1)) for a node list this object interned."""
        got = self._by_id.get(id(names))
        if got is not None and got.names is names:
            return got.set
        return frozenset(names)
