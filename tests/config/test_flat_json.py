"""The flat-JSON reader gives what the hardened YAML reader gives, or None and leaves the text to it."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from config.untrusted import SPEC_LIMITS, Limits, UntrustedError, read_flat_json, read_yaml

# words YAML would read as something other than text if they were plain, and text needing quotes
TRICKY = [
    "yes", "No", "ON", "off", "null", "Null", "~", "true", "False", "1e3", "0x1F", "0o7", "1_000",
    "12:30", ".inf", "-.5", "+1", "007", "2026-11-24", "<<", "=", "a: b", "#c", "it's", '"q"', "-",
    "a b", "[x]", "{y}", "&a", "*a", "!t", "|", ">", "%", "@", "`", "", "\\", "tab\there", "é", "\u2028",
    "vc02/job-1", "worker/3",
]  # fmt: skip
scalars = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(TRICKY),
    st.text(st.sampled_from("ab0-_./: #'\"{}[],\\\n\t"), max_size=8),
    st.none(),
    st.booleans(),
)
keys = st.one_of(
    st.sampled_from(["virtualCluster", "yes", "on", "a b", "1", "", "null"]), st.text(max_size=4)
)
docs = st.dictionaries(
    keys,
    st.recursive(
        scalars,
        lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=4)),
        max_leaves=20,
    ),
    max_size=6,
)
STYLES = [
    lambda d: orjson.dumps(d).decode(),
    lambda d: json.dumps(d),
    lambda d: json.dumps(d, separators=(",", ":")),
    lambda d: json.dumps(d, separators=(" , ", " : ")),
    lambda d: json.dumps(d, ensure_ascii=False),
    lambda d: json.dumps(d, indent=1),
]


def yaml_reads(text: str, limits: Limits = SPEC_LIMITS) -> Any:
    try:
        return read_yaml(text, limits)
    except UntrustedError as err:
        return err


@settings(max_examples=500, deadline=None)
@given(docs, st.sampled_from(range(len(STYLES))))
def test_a_json_document_reads_as_the_yaml_reader_reads_it_or_is_left_to_it(doc: Any, style: int) -> None:
    text = STYLES[style](doc)
    got = read_flat_json(text, SPEC_LIMITS)
    if got is not None:
        assert got == yaml_reads(text)


@settings(max_examples=500, deadline=None)
@given(st.text(st.sampled_from('{}[]:, "ab01-.eE+tfnrulsx\\'), max_size=40))
def test_any_text_reads_as_the_yaml_reader_reads_it_or_is_left_to_it(text: str) -> None:
    got = read_flat_json("{" + text, SPEC_LIMITS)
    if got is not None:
        assert got == yaml_reads("{" + text)


def test_a_spec_as_tools_write_it_is_read_without_the_yaml_parser() -> None:
    spec = {
        "virtualCluster": "vc3",
        "priority": -1,
        "leafCellNumber": 8,
        "gangReleaseEnable": True,
        "lazyPreemptionEnable": False,
        "pinnedCellId": None,
        "affinityGroup": {"name": "vc3/job-1", "members": [{"podNumber": 4, "leafCellNumber": 8}]},
    }
    text = orjson.dumps(spec).decode()
    got = read_flat_json(text, SPEC_LIMITS)
    assert got == {
        **spec,
        "priority": "-1",
        "leafCellNumber": "8",
        "gangReleaseEnable": "true",
        "lazyPreemptionEnable": "false",
        "affinityGroup": {"name": "vc3/job-1", "members": [{"podNumber": "4", "leafCellNumber": "8"}]},
    }
    assert got == read_yaml(text, SPEC_LIMITS)


@pytest.mark.parametrize(
    "text",
    [
        '{"a": 1, "a": 2}',  # YAML's reader refuses a duplicate key, naming it
        '{"a": NaN}',
        '{"a": "\\u00e9"}',  # escapes
        '{"a":\t1}',
        '{"a": "é"}',
        "[1, 2]",
        '{"a": ' + "[" * 20 + "1" + "]" * 20 + "}",  # deeper than a spec may nest
        '{"a": 1',
        "{a: 1}",
    ],
)
def test_other_text_is_left_to_the_yaml_reader(text: str) -> None:
    assert read_flat_json(text, SPEC_LIMITS) is None


def test_a_duplicate_key_is_still_refused() -> None:
    with pytest.raises(UntrustedError, match="duplicate key"):
        read_yaml('{"a": 1, "a": 2}', SPEC_LIMITS)
