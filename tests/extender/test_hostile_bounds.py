"""Memory bounded by the cluster, not by what callers send: every cache keyed by request content holds
at most its budget in bytes, whatever stream of distinct inputs arrives; and the untrusted readers
refuse what would otherwise crash or stall a parser."""

from __future__ import annotations

import json
import re

import pytest

from config.from_nodes import natural_key
from config.untrusted import SPEC_LIMITS, Limits, UntrustedError, read_json, read_yaml, whole_number
from extender.conventions.yunikorn import task_groups
from extender.gangs import ledger_status, podspec
from extender.gangs.barrier import settings_from_env
from extender.gangs.bindinfo import decode_isolation
from extender.gangs.ledger_records import attempt_id, newer
from extender.http import paging, wire
from extender.http.nodelists import NODE_LIST_BYTES, NodeLists
from extender.http.podcache import PodCache
from tests.extender.helpers import args, pod, run, scheduler, spec
from topology.decisions import UserError


def test_the_spec_cache_stays_within_its_bytes_for_large_distinct_specs() -> None:
    podspec._specs.clear()
    filler = "x" * 60_000
    for i in range(300):  # 300 distinct ~60 KB specs: 18 MB of text, 54 MB of documents if all kept
        text = json.dumps({"virtualCluster": "vision", "leafCellNumber": 1, "note": f"{i}{filler}"})
        assert podspec.parse_spec(text)["note"].startswith(str(i))
    assert podspec._specs.size <= podspec.SPEC_CACHE_BYTES
    assert 0 < len(podspec._specs) < 300


def test_the_gang_part_cache_stays_within_its_bytes_for_many_distinct_gangs() -> None:
    podspec._parts.clear()
    members = [{"podNumber": 2_000, "leafCellNumber": 1, "taskRole": f"r{r}"} for r in range(5)]
    for i in range(40):  # 40 gangs of 10,000 named slots each: ~40 MB of slot keys if all were kept
        group = {"name": f"g{i}", "members": members}
        text = json.dumps({"virtualCluster": "v", "leafCellNumber": 1, "affinityGroup": group})
        got = podspec.pod_request(pod("u", "p", "vision", text), "u", "vision", "p", max_pods=20_000)
        assert got.request.slot_keys is not None and len(got.request.slot_keys) == 10_000
    assert podspec._parts.size <= podspec.SPEC_CACHE_BYTES
    assert 0 < len(podspec._parts) < 40


def test_a_spec_over_the_size_limit_is_refused_before_it_is_parsed() -> None:
    text = "note: " + "x" * SPEC_LIMITS.max_bytes
    with pytest.raises(UserError, match=f"bytes; at most {SPEC_LIMITS.max_bytes}"):
        podspec.parse_spec(text)


def test_node_lists_are_remembered_within_their_bytes() -> None:
    lists = NodeLists()
    for i in range(8):  # eight distinct 20,000-name lists: ~35 MB if all were kept
        names = [f"list{i}-node-{j}" for j in range(20_000)]
        parsed = wire.parse_extender_args({"Pod": pod("u"), "NodeNames": names}, lists)
        assert list(parsed.names) == names
    kept = sum(n.cost for n in lists._node_lists.values())
    assert 0 < kept <= NODE_LIST_BYTES
    assert len(lists._node_lists) < 8
    huge = [f"huge-{j}" for j in range(100_000)]  # one list over half the budget: used, not kept
    assert wire.parse_extender_args({"Pod": pod("u"), "NodeNames": huge}, lists).names == tuple(huge)
    assert tuple(huge) not in lists._node_lists


def test_the_pod_request_cache_evicts_by_bytes_and_keeps_its_indexes_in_step() -> None:
    async def go() -> None:
        s = scheduler()
        s.pods = PodCache(64 * 1024, 10_000)  # a small budget: ~60 requests
        for i in range(300):
            await s.filter(args(pod(f"u{i}", f"p{i}", "vision", spec("vision", 1, 3, f"vision/g{i % 7}"))))
        assert s.pods._pods.size <= 64 * 1024 and len(s.pods) < 300
        cached = set(s.pods.uids())
        indexed = {u for uids in s.pods._gang_pods.values() for u in uids}
        assert indexed == cached
        assert set(s.pods._uid_by_name.values()) == cached

    run(go())


def test_a_cached_request_does_not_keep_its_spec_text() -> None:
    async def go() -> None:
        s = scheduler()
        text = spec("vision", 1, 3, "vision/t") + " " * 50_000
        await s.filter(args(pod("u-t", "t", "vision", text)))
        held = s.pods._pods.get("u-t")
        assert held is not None and held.spec_key == (len(text), hash(text))
        assert not any(isinstance(v, str) and len(v) > 1000 for v in (held.spec_key or ()))

    run(go())


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("[" * 50_000 + "]" * 50_000, "bytes; at most"),
        ("a: " + "[" * 9 + "]" * 9, "nested more than 8 levels deep"),
        ("&a [*a]", "anchors"),
        ("a: *b", "aliases"),
        ("a: !!str b", "tags"),
        ("a: 1\na: 2", "duplicate key 'a' at line 2 (first at line 1)"),
        ("? [a]\n: b", "mapping keys must be plain text"),
        ("a: b\n---\nc: d", "expected a single document"),
        ("a: \x00", "special characters are not allowed"),
        ('a: "\\ud800"', "a: is not valid Unicode"),
    ],
)
def test_the_spec_reader_refuses_what_hived_specs_never_need(text: str, reason: str) -> None:
    with pytest.raises(UntrustedError, match=re.escape(reason)):
        read_yaml(text, SPEC_LIMITS)


def test_the_spec_reader_reads_text_as_go_would() -> None:
    doc = read_yaml('a: 007\nb: on\nc: ~\nd: "~"\ne:\nf: "\\ud83d\\ude00"\n', SPEC_LIMITS)
    assert doc == {"a": "007", "b": "on", "c": None, "d": "~", "e": None, "f": "\U0001f600"}


def test_json_annotations_nested_past_their_limit_are_user_errors_not_recursion() -> None:
    with pytest.raises(UntrustedError, match="nested more than 32 levels deep"):
        read_json("[" * 500 + "]" * 500, Limits(max_bytes=10_000, max_depth=32))
    with pytest.raises(UserError, match=r"not JSON|nested more than"):
        task_groups("[" * 100_000 + "]" * 100_000)


# what `str.isdigit` calls digits and `int` refuses: a superscript two, 5,000 nines; and an
# Arabic-Indic three, which `int` reads, but no caller writes a number that way
ODD_DIGITS = ["\u00b2", "1\u00b2", "9" * 5000, "\u0663"]


@pytest.mark.parametrize(
    "text", ODD_DIGITS, ids=["superscript", "digit-superscript", "5000-digits", "arabic"]
)
def test_digits_int_refuses_are_no_number_to_any_reader(text: str) -> None:
    """Each reader of a number a tenant or a caller writes takes plain ASCII digits of a bounded
    length, and anything else as what it does with any text that is no number: never a ValueError
    out of `int` (an attempt UID's "²_x" was an HTTP 500 and stopped its framework's filters)."""
    assert whole_number(text) is None
    assert attempt_id(f"{text}_cm") is None
    assert newer("2_b", f"{text}_cm") and newer(f"{text}_cm", "2_b")  # the latest seen wins
    with pytest.raises(paging.PageError, match=r"limit: .* is not a positive whole number"):
        paging.parse({"limit": text})
    with pytest.raises(ValueError, match="not a comma-separated list of GPU indices"):
        decode_isolation(f"0,{text}")
    assert ledger_status._task_of(f"worker/{text}", None) == (None, None)
    assert isinstance(podspec.positive_quantity(text), bool)
    assert natural_key(f"n{text}")
    env = {"FC_FRAMEWORK_NAMESPACE": "ns", "FC_FRAMEWORK_NAME": "fw", "FC_TASK_INDEX": text}
    assert settings_from_env(env).task_index is None
