"""`wire.loads` skips decoding a node list it has seen byte for byte, and is then indistinguishable
from a full decode: same arguments out, same errors, whatever the body looks like around the list."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from extender.http import wire
from extender.http.nodelists import NodeLists

LISTS = NodeLists()  # as the server's (the Scheduler's)

NAMES = [f"tail-node-{i}" for i in range(40)]
RAW = orjson.dumps(NAMES)
POD = b'{"metadata":{"uid":"u1","name":"p1","namespace":"ns"},"spec":{}}'


def full(body: bytes) -> object:
    """What the request means without any remembered list: a plain decode, then the parse."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return "not JSON"
    return outcome(doc)


def outcome(doc: object) -> object:
    try:
        a = wire.parse_extender_args(doc, LISTS)
    except wire.WireError as err:
        return ("WireError", err.path)
    return (a.pod.uid, a.pod.namespace, a.pod.name, a.names, a.nodes)


def fast(body: bytes) -> object:
    try:
        doc = wire.loads(body, LISTS)
    except wire.WireError:
        return "not JSON"
    return outcome(doc)


def warm() -> tuple[str, ...]:
    """kube-scheduler's usual body, twice: the second decode uses the remembered list."""
    body = b'{"Pod":' + POD + b',"Nodes":null,"NodeNames":' + RAW + b"}"
    first: tuple[str, ...] = wire.parse_extender_args(wire.loads(body, LISTS), LISTS).names
    doc = wire.loads(body.replace(b'"p1"', b'"p2"'), LISTS)
    assert isinstance(doc, dict)
    assert doc["NodeNames"] is first  # not decoded again
    assert wire.parse_extender_args(doc, LISTS).pod.name == "p2"
    return tuple(NAMES)


def test_the_usual_body_skips_the_list() -> None:
    names = warm()
    assert names == tuple(NAMES)


TAIL = b'"NodeNames":' + RAW + b"}"
BODIES = [
    b'{"Pod":' + POD + b',"Nodes":null,' + TAIL,
    b'{"Pod":' + POD + b',"k":"v\\",' + TAIL,  # the comma is inside a string: not JSON
    b'{"Pod":' + POD + b',"x\\"' + TAIL,  # the key is x"NodeNames
    b'{"Pod":' + POD + b',"NodeNames":' + RAW + b',"x\\"' + TAIL,
    b'{"Pod":' + POD + b',"X":{' + TAIL + b"}",  # nested: no top-level NodeNames
    b'{"NodeNames":["z"],"Pod":' + POD + b"," + TAIL,  # repeated key: the last counts
    b'{"Pod":' + POD + b',"nodenames":["q"],' + TAIL,  # another spelling first
    b'{"Pod":' + POD + b',"NodeNames":' + RAW + b"}}",  # one brace too many
    b"{" + TAIL,  # no Pod
    b"[1," + TAIL,
    b'{"Pod":[' + TAIL,
    b'{"Pod":' + POD + b",   \n" + TAIL,
    b'{"Pod":' + POD + b',"Nodes":null,' + TAIL[:-1] + b" }",
    b'{"Pod": ' + POD + b' , "NodeNames": ' + RAW + b" }\n",
    b'{"Pod":' + POD + b',"Nodes":null,' + TAIL + b"x",
    b'"text","NodeNames":' + RAW + b"}",
]


@pytest.mark.parametrize("body", BODIES)
def test_same_meaning_as_a_full_decode(body: bytes) -> None:
    warm()
    assert fast(body) == full(body)
    assert fast(body) == full(body)  # and again, with whatever the first call remembered


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from([b"{", b"}", b",", b'"', b"\\", b":", b"[", b"]", b"1", b" ", b'"k"', POD])),
    st.booleans(),
)
def test_arbitrary_bytes_before_a_known_tail(parts: list[bytes], brace: bool) -> None:
    warm()
    body = (b"{" if brace else b"") + b"".join(parts) + TAIL
    assert fast(body) == full(body)


def test_a_list_is_only_remembered_once_checked() -> None:
    bad: list[Any] = [*NAMES[:-1], ""]
    body = b'{"Pod":' + POD + b',"NodeNames":' + orjson.dumps(bad) + b"}"
    for _ in range(2):
        with pytest.raises(wire.WireError) as err:
            wire.parse_extender_args(wire.loads(body, LISTS), LISTS)
        assert err.value.path == f"NodeNames[{len(NAMES) - 1}]"
