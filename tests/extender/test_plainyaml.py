"""The plain-YAML reader gives what `yaml.safe_load` gives, or None and leaves the text to it."""

from __future__ import annotations

from typing import Any

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from extender.gangs.bindinfo import decode_bind_info, encode_bind_info
from extender.gangs.identity import one_pod_key
from extender.gangs.plainyaml import read_plain
from topology.decisions import GangPlacement, PodPlacement

# words YAML reads as something other than a string, numbers in other spellings, text that needs
# quoting, and plain words
TRICKY = [
    "yes", "No", "ON", "off", "null", "Null", "~", "true", "False", "1e3", "0x1F", "0o7", "1_000",
    "12:30", ".inf", "-.5", "+1", "007", "2026-11-24", "<<", "=", "a: b", "#c", "it's", '"q"', "-",
    "a b", "[x]", "{y}", "&a", "*a", "!t", "|", ">", "%", "@", "`", "",
    "a100-r001-n1", "vc02/job-1", "A100-NODE", "slot_key", "x.y", "_u", "worker/3", "on-call",
    "vc02/pod:job-1", "a:b", "a:", "a::b", "a:-b", "a:1", "x:20", "a: b:", "a:#b", "n:yes",
]  # fmt: skip
scalars = st.one_of(
    st.integers(-(10**12), 10**12),
    st.sampled_from(TRICKY),
    st.text(st.sampled_from("ab0-_./: #'\"\n\t"), max_size=8),
    st.none(),
    st.booleans(),
)
keys = st.one_of(
    st.sampled_from(["node", "slot", "gang", "yes", "on", "a b", "1", "k_2"]), st.text(max_size=4)
)
docs = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=4)),
    max_leaves=20,
)


def dumped(doc: Any) -> str:
    return str(yaml.dump(doc, Dumper=yaml.SafeDumper, default_flow_style=False, sort_keys=False))


@settings(max_examples=400, deadline=None)
@given(docs)
def test_a_dumped_document_reads_the_same_or_is_left_to_the_parser(doc: Any) -> None:
    text = dumped(doc)
    got = read_plain(text)
    assert got is None or got == yaml.safe_load(text)


@settings(max_examples=400, deadline=None)
@given(st.text(st.sampled_from("- :ab01\n '\"#[]{}\t&*!yesno"), max_size=60))
def test_any_text_reads_as_yaml_reads_it_or_is_left_to_the_parser(text: str) -> None:
    got = read_plain(text)
    if got is None:
        return
    assert got == yaml.safe_load(text)


def test_what_topogang_writes_is_read_without_the_parser() -> None:
    placement = GangPlacement(
        gang="vc02/job-e8c0fe10-4",
        vc="vc02",
        chain="A100-RACK",
        priority=-1,
        requested_priority=0,
        pods=(
            PodPlacement(0, "a100-r001-n1", (0, 1, 2, 3, 4, 5, 6, 7), "worker/0", ("A100-NODE",) * 8),
            PodPlacement(1, "a100-r001-n2", (0, 1, 2, 3, 4, 5, 6, 7), "worker/1", ("",) * 8),
        ),
        lca_level=4,
        nodes=("a100-r001-n1", "a100-r001-n2"),
    )
    text = encode_bind_info(placement, "a100-r001-n2", tuple(range(8)), 1, "worker/1")
    doc = read_plain(text)
    assert doc is not None
    assert doc == yaml.safe_load(text)
    info = decode_bind_info(text)
    assert info.gang == "vc02/job-e8c0fe10-4" and info.slot_key == "worker/1" and info.priority == 0
    assert [p.preassigned_cell_types for p in info.placements] == [("A100-NODE",) * 8, ("",) * 8]


def test_a_one_pod_gang_is_read_without_the_parser() -> None:
    """Most of a restart's pods are one-pod gangs, keyed `<namespace>/pod:<pod>`: when the reader
    left every colon to the parser, a restart at 80,000 GPUs spent most of its time in it."""
    gang = one_pod_key("vc02", "job-e8c0fe10-0")
    placement = GangPlacement(
        gang=gang,
        vc="vc02",
        chain="A100-RACK",
        priority=0,
        requested_priority=0,
        pods=(PodPlacement(0, "a100-r001-n1", (0, 1), None, ("A100-NODE",) * 2),),
        lca_level=2,
        nodes=("a100-r001-n1",),
    )
    text = encode_bind_info(placement, "a100-r001-n1", (0, 1), 0, None)
    doc = read_plain(text)
    assert doc is not None and doc == yaml.safe_load(text) and doc["gang"] == gang
    assert decode_bind_info(text).gang == gang


def test_texts_outside_the_plain_part_still_decode_through_the_parser() -> None:
    text = "node: 'n 1'\nleafCellIsolation: [0, 1]\naffinityGroupBindInfo: []\ngang: \"ns/yes\"\n"
    assert read_plain(text) is None
    info = decode_bind_info(text)
    assert (info.node, info.gpus, info.gang) == ("n 1", (0, 1), "ns/yes")


def test_a_word_longer_than_any_topogang_writes_is_left_to_the_parser() -> None:
    from extender.gangs.plainyaml import MAX_WORD

    long = "n" * (MAX_WORD + 1)
    text = f"node: {long}\nleafCellIsolation:\n- 0\naffinityGroupBindInfo: []\n"
    assert read_plain(text) is None  # the words it caches stay short, whatever a tenant writes
    assert decode_bind_info(text).node == long
    assert read_plain(text.replace(long, "n" * MAX_WORD)) is not None
