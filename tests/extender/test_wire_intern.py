"""Node lists are shared between requests: equal lists give one tuple and one set, and a bad list is
still rejected with the offending item named."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from extender import wire


def body(names: list[Any]) -> object:
    return orjson.loads(
        orjson.dumps({"Pod": {"metadata": {"uid": "u", "name": "p"}}, "NodeNames": names})
    )  # fresh strings, as from the wire


def test_equal_node_lists_share_one_tuple_and_one_set() -> None:
    names = [f"node-{i}" for i in range(50)]
    a = wire.parse_extender_args(body(names)).names
    b = wire.parse_extender_args(body(names)).names
    assert a == tuple(names) and a is b
    assert wire.node_set(a) is wire.node_set(b) == frozenset(names)
    other = wire.parse_extender_args(body(names[:-1])).names
    assert other is not a and wire.node_set(other) == frozenset(names[:-1])
    assert wire.node_set(list(names)) == frozenset(names)  # not interned: a plain set


def test_old_lists_are_forgotten() -> None:
    first = wire.parse_extender_args(body(["x-0"])).names
    for i in range(1, wire.NODE_LISTS + 2):
        wire.parse_extender_args(body([f"x-{i}"]))
    again = wire.parse_extender_args(body(["x-0"])).names
    assert again == first and again is not first
    assert len(wire._node_lists) <= wire.NODE_LISTS and len(wire._by_id) == len(wire._node_lists)


@pytest.mark.parametrize(
    ("names", "path"),
    [(["a", 3], "NodeNames[1]"), (["a", {"x": 1}], "NodeNames[1]"), (["", "b"], "NodeNames[0]")],
)
def test_bad_names_are_still_rejected(names: list[Any], path: str) -> None:
    wire.parse_extender_args(body(["a", "b"]))  # a good list in the cache changes nothing
    with pytest.raises(wire.WireError) as err:
        wire.parse_extender_args(body(names))
    assert err.value.path == path
