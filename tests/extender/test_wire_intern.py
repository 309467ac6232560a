"""Node lists are shared between requests: equal lists give one tuple and one set, and a bad list is
still rejected with the offending item named."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from extender.http import wire
from extender.http.nodelists import MIN_SHARED, NODE_LISTS, NodeLists

LISTS = NodeLists()  # as the server's (the Scheduler's)


def body(names: list[Any]) -> object:
    return orjson.loads(
        orjson.dumps({"Pod": {"metadata": {"uid": "u", "name": "p"}}, "NodeNames": names})
    )  # fresh strings, as from the wire


def many(prefix: str) -> list[str]:
    return [f"{prefix}-{i}" for i in range(MIN_SHARED)]


def test_equal_node_lists_share_one_tuple_and_one_set() -> None:
    names = [f"node-{i}" for i in range(50)]
    a = wire.parse_extender_args(body(names), LISTS).names
    b = wire.parse_extender_args(body(names), LISTS).names
    assert a == tuple(names) and a is b
    assert LISTS.node_set(a) is LISTS.node_set(b) == frozenset(names)
    other = wire.parse_extender_args(body(names[:-1]), LISTS).names
    assert other is not a and LISTS.node_set(other) == frozenset(names[:-1])
    assert LISTS.node_set(list(names)) == frozenset(names)  # not interned: a plain set
    few = ["a", "b"]  # prioritize's survivors: checked, not remembered
    assert wire.parse_extender_args(body(few), LISTS).names == ("a", "b")
    assert LISTS.node_set(wire.parse_extender_args(body(few), LISTS).names) == frozenset(few)


def test_old_lists_are_forgotten() -> None:
    first = wire.parse_extender_args(body(many("x-0")), LISTS).names
    for i in range(1, NODE_LISTS + 2):
        wire.parse_extender_args(body(many(f"x-{i}")), LISTS)
    again = wire.parse_extender_args(body(many("x-0")), LISTS).names
    assert again == first and again is not first
    assert len(LISTS._node_lists) <= NODE_LISTS and len(LISTS._by_id) == len(LISTS._node_lists)


@pytest.mark.parametrize(
    ("names", "path"),
    [(["a", 3], "NodeNames[1]"), (["a", {"x": 1}], "NodeNames[1]"), (["", "b"], "NodeNames[0]")],
)
def test_bad_names_are_still_rejected(names: list[Any], path: str) -> None:
    wire.parse_extender_args(body(["a", "b"]), LISTS)  # a good list in the cache changes nothing
    with pytest.raises(wire.WireError) as err:
        wire.parse_extender_args(body(names), LISTS)
    assert err.value.path == path


class Owner:
    """Something a derived value depends on (the topology, in the extender)."""


def test_values_derived_from_a_list_are_kept_per_owner_and_do_not_keep_it_alive() -> None:
    import gc
    import weakref

    names = wire.parse_extender_args(body(many("d")), LISTS).names
    calls: list[int] = []

    def compute() -> int:
        calls.append(1)
        return len(calls)

    a, b = Owner(), Owner()
    assert LISTS.per_node_list(names, a, compute) == 1
    assert LISTS.per_node_list(names, a, compute) == 1  # remembered
    assert LISTS.per_node_list(names, b, compute) == 2  # another owner, another value
    assert LISTS.per_node_list(list(names), a, compute) == 3  # not an interned list: always computed
    gone = weakref.ref(a)
    del a
    gc.collect()
    assert gone() is None


def test_positions_of_a_list() -> None:
    names = wire.parse_extender_args(body(many("p")), LISTS).names
    assert LISTS.positions(names) == {f"p-{i}": i for i in range(MIN_SHARED)}
    assert LISTS.positions(names) is LISTS.positions(names)  # remembered with the list
    assert LISTS.positions(["a", "b", "a"]) == {"a": 0, "b": 1}  # the first of a repeated name
