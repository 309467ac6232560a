"""Hostile requests for every route of a standalone extender, and what every reply must satisfy.

What a tenant who can create pods and reach the extender's port can send: deep YAML and JSON, YAML
aliases, alias bombs, anchors, tags and merge keys, NUL and control characters, lone surrogates written
as JSON escapes inside YAML, emoji names, huge numbers and strings just under and over the limits, wrong
types everywhere, duplicate keys, many distinct UIDs, forged FrameworkController identities, hostile
convention labels (PodGroup, Volcano, YuniKorn, Spark, Workload), odd paths, query strings and methods,
and raw bytes that are not HTTP at all.

The generators draw every choice from a `Source`, so the same code serves hypothesis (which shrinks a
failure to its smallest draws) and a seeded `random.Random` (`make fuzz`, reproducible from its seed).
Each reply is checked for what must hold whatever the input (`violations`): no 5xx, JSON (except the
page and its assets under `/ui` and `/metrics`' text), an answer within `HANG_SECONDS`. Around a run,
`place_baseline` binds two gangs at the highest priority (one FrameworkController gang, one plain
affinity group) that no request can legitimately move, and `placed_state` reads what must be unchanged
at the end: the placed affinity groups and the ledger's placed records.

A FrameworkController pod of a *newer* attempt, in the framework's own namespace, supersedes the older
attempt by design (FrameworkController retried the job); only FrameworkController can create such a
pod, so the generators forge newer attempts only from another namespace, and same or older attempts
from any.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar
from urllib.parse import quote, urlsplit

import httpx

from config.untrusted import SPEC_LIMITS
from extender.gangs.podspec import FC_ATTEMPT, FC_FRAMEWORK, FC_INDEX, FC_NAMESPACE, FC_ROLE

T = TypeVar("T")

ENABLE = "topogang.io/pod-scheduling-enable"
SPEC = "topogang.io/pod-scheduling-spec"
HIVED_SPEC = "hivedscheduler.microsoft.com/pod-scheduling-spec"
HANG_SECONDS = 10.0
NODES = tuple(f"a100-r{r}-n{n}" for r in (1, 2, 3) for n in (1, 2, 3, 4))
NAMESPACES = ("vision", "nlp", "research")
PLACED_PHASES = frozenset({"Reserved", "Binding", "Bound", "Ready"})
FC_PATH = "/apis/frameworkcontroller.microsoft.com/v1/namespaces/{ns}/frameworks/{name}"

# the baseline: gangs that hold GPUs before the fuzzing starts and must hold the same ones after it
BASE_PREFIX = "base-"
BASE_FRAMEWORK = ("vision", "fuzz-base", "1_base-attempt", "worker")
BASE_FC_UIDS = ("base-fc-0", "base-fc-1")
BASE_PLAIN = ("nlp", "base-plain", "base-plain-0")  # namespace, affinity group, pod UID
TOP = 1000  # no gang can preempt a gang of the highest priority


class Source(Protocol):
    """Where every choice comes from (hypothesis' draws, or a seeded `random.Random`)."""

    def pick(self, options: Sequence[T]) -> T: ...

    def number(self, low: int, high: int) -> int: ...


@dataclass(frozen=True, slots=True)
class Probe:
    """One request: over httpx, or as `raw` bytes on a fresh socket (what httpx cannot send)."""

    route: str
    method: str = "GET"
    path: str = "/"
    body: bytes | None = None
    headers: tuple[tuple[str, str], ...] = ()
    raw: bytes | None = None

    def describe(self, limit: int = 300) -> str:
        shown = self.raw if self.raw is not None else self.body
        head = f"{self.route}: {self.method} {self.path[:limit]}"
        return head if shown is None else f"{head} body={shown[:limit]!r} ({len(shown)} bytes)"


@dataclass(slots=True)
class Reply:
    status: int | None  # None: no answer (the connection closed, or nothing came in time)
    content_type: str
    body: bytes
    seconds: float
    error: str = ""


@dataclass(slots=True)
class Context:
    """What the generators remember between requests: a counter for fresh UIDs, and pods a filter
    passed (so that some binds are real binds)."""

    serial: itertools.count[int] = field(default_factory=itertools.count)
    filtered: list[tuple[str, str, str, str]] = field(default_factory=list)  # uid, ns, name, node
    # every UID a pod was sent with, in order (to delete at the end; a dict keeps a seeded run's order)
    uids: dict[str, None] = field(default_factory=dict)

    bound: dict[str, str] = field(default_factory=dict)  # the baseline's pods: UID -> node

    def fresh(self, prefix: str = "fz") -> str:
        return f"{prefix}-{next(self.serial)}"

    def heard(self, probe: Probe, reply: Reply) -> None:
        """A filter that passed a node: remember the pod for a later bind (bounded)."""
        if probe.route != "filter" or reply.status != 200 or probe.body is None:
            return
        try:
            doc, sent = json.loads(reply.body), json.loads(probe.body)
            meta = sent["Pod"]["metadata"]
            node = doc["NodeNames"][0]
            pod = (meta["uid"], meta["namespace"], meta["name"], node)
        except (ValueError, KeyError, IndexError, TypeError, RecursionError):
            return
        if all(isinstance(x, str) for x in pod):
            self.filtered.append(pod)
            del self.filtered[:-64]


def recall(src: Source, items: Sequence[T], otherwise: T) -> T:
    """One of `items` (what earlier replies taught), or `otherwise` when there are none yet. Always one
    draw of the same kind, so hypothesis sees the same shape of choices whatever the server said."""
    i = src.number(0, 1 << 16)
    return items[i % len(items)] if items else otherwise


# ------------------------------------------------------------------------------------------- text
EMOJI = "😀🚀👩‍👩‍👧‍👦🏳️‍🌈"
CONTROL = "\x00\x01\x07\x08\x0b\x0c\x1b\x7f\x85\u2028\u2029\ufeff\ufffe"


def hostile_text(src: Source, ctx: Context) -> str:
    """A name or value as a tenant might write it."""
    kind = src.pick(("plain", "emoji", "control", "long", "empty", "unicode", "path", "surrogate-pair"))
    if kind == "plain":
        return ctx.fresh("name")
    if kind == "emoji":
        return src.pick(EMOJI) * src.number(1, 40)
    if kind == "control":
        return "x" + src.pick(CONTROL) * src.number(1, 3) + "y"
    if kind == "long":
        return "n" * src.pick((253, 254, 4096, 70_000))
    if kind == "empty":
        return src.pick(("", " ", "\t", "\n"))
    if kind == "unicode":
        return src.pick(("Ωmega", "İstanbul", "ﬁ", "a\u0301", "𝔘𝔫𝔦", "日本語", "\u202eevil"))
    if kind == "path":
        return src.pick(("..", "../..", "a/b", "%2F", "?", "#", "\\", "a b"))
    return "😀"  # a pair, as json.dumps writes it: \ud83d\ude00


def near_limit(src: Source, limit: int, filler: str = "x") -> str:
    return filler * (limit + src.number(-16, 16))


# ------------------------------------------------------------------------------------------- specs
def valid_spec(
    src: Source, ctx: Context, *, role: str | None = None, group: str | None = None
) -> dict[str, Any]:
    """A spec that can be placed (often: the example cluster has room), so binds happen too."""
    leaves = src.pick((1, 2, 4, 8))
    pods = src.pick((1, 1, 2, 3))
    member: dict[str, Any] = {"podNumber": pods, "leafCellNumber": leaves}
    if role is not None:
        member["taskRole"] = role
    spec: dict[str, Any] = {
        "virtualCluster": src.pick(("vision", "nlp", "research", "")),
        "priority": src.pick((-1, 0, 1, 100, TOP - 1)),
        "leafCellNumber": leaves,
        "affinityGroup": {"name": group or ctx.fresh("fz-group"), "members": [member]},
    }
    if src.pick((False, True)):
        spec["affinityGroup"] = None
    if src.pick((False, False, True)):
        spec[src.pick(("gangReleaseEnable", "lazyPreemptionEnable", "ignoreK8sSuggestedNodes"))] = src.pick(
            (True, "yes", "maybe", 1, None)
        )
    return spec


def _nest(open_: str, close: str, depth: int, leaf: str = "1") -> str:
    return open_ * depth + leaf + close * depth


BILLION_LAUGHS = "\n".join(
    ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    + [f"{chr(98 + i)}: &{chr(98 + i)} [{','.join([f'*{chr(97 + i)}'] * 9)}]" for i in range(8)]
)

YAML_SPECS = (
    "&a [*a]",
    "a: &x {b: *x}",
    "virtualCluster: &v vision\nleafCellNumber: 1\nextra: *v",
    BILLION_LAUGHS,
    "!!python/object/apply:os.system ['true']",
    "virtualCluster: !!binary dmlzaW9u\nleafCellNumber: 1",
    "!foo {virtualCluster: vision, leafCellNumber: 1}",
    "virtualCluster: !!str vision\nleafCellNumber: !!int 1",
    "base: &b {leafCellNumber: 1}\n<<: *b\nvirtualCluster: vision",
    "<<: {virtualCluster: vision, leafCellNumber: 1}",
    "virtualCluster: vision\x00\nleafCellNumber: 1",
    'virtualCluster: "vis\\0ion"\nleafCellNumber: 1',
    'virtualCluster: "\\ud83d"\nleafCellNumber: 1',
    'virtualCluster: vision\nleafCellNumber: 1\naffinityGroup: {name: "\\ud83d\\ude00", members: '
    "[{podNumber: 1, leafCellNumber: 1}]}",
    'virtualCluster: vision\nleafCellNumber: 1\naffinityGroup: {name: "\\ude00\\ud83d", members: '
    "[{podNumber: 1, leafCellNumber: 1}]}",
    "virtualCluster: vision\nleafCellNumber: 1\nleafCellNumber: 8",
    "virtualCluster: vision\nleafCellNumber: 1\naffinityGroup: {name: g, name: h, members: []}",
    "virtualCluster: vision\nleafCellNumber: 1\naffinityGroup: {name: big, members: "
    "[{podNumber: 3000000, leafCellNumber: 1}]}",
    "virtualCluster: vision\nleafCellNumber: 99999999999999999999999",
    "virtualCluster: vision\nleafCellNumber: 1e400\npriority: -99999999999",
    "virtualCluster: vision\nleafCellNumber: .inf\npriority: .nan",
    "virtualCluster: [vision]\nleafCellNumber: {a: 1}",
    "virtualCluster: vision\nleafCellNumber: 1\naffinityGroup: [1, 2]",
    "virtualCluster: vision\nleafCellNumber: 1\naffinityGroup: {name: g, members: 5}",
    "virtualCluster: vision\nleafCellNumber: 1\naffinityGroup: {name: g, members: [{}, 1, [2]]}",
    "virtualCluster: vision\nleafCellNumber: 1\naffinityGroup: {name: {a: b}, members: [{podNumber: 1}]}",
    "{? [a, b] : c}",
    "? {a: 1}\n: b",
    "---\nvirtualCluster: vision\n---\nleafCellNumber: 1",
    "%YAML 1.1\n---\nvirtualCluster: vision\nleafCellNumber: 1",
    "virtualCluster: vision\nleafCellNumber: 1\n...\ngarbage: [",
    "\ufeffvirtualCluster: vision\nleafCellNumber: 1",
    "virtualCluster: vision\r\nleafCellNumber: 1\r",
    "virtualCluster: |\n  vision\nleafCellNumber: >-\n  1",
    "gpuType: A100\ngpuNumber: 2\nvirtualCluster: research",
    "virtualCluster: vision\npinnedCellId: '../../etc'\nleafCellNumber: 1",
    "virtualCluster: vision\nleafCellNumber: 1\naffinityGroup: {name: g, members: [{podNumber: 1, "
    "leafCellNumber: 1, taskRole: a}, {podNumber: 1, leafCellNumber: 1}]}",
    "",
    "~",
    "null",
    "[]",
    '"just text"',
    "{",
    "\t\t:",
)


def hostile_spec(src: Source, ctx: Context) -> str:
    """The scheduling-spec annotation's text."""
    kind = src.pick(
        (
            "valid",
            "valid",
            "forged",
            "mutated",
            "fixed",
            "deep-flow",
            "deep-map",
            "deep-block",
            "deep-json",
            "deep-field",
            "huge",
            "emoji",
        )
    )
    if kind == "valid":
        return json.dumps(valid_spec(src, ctx))
    if kind == "forged":  # a baseline gang's own spec: its gang's slots are all held
        return str(src.pick((fc_pod(0), plain_pod()))["metadata"]["annotations"][SPEC])
    if kind == "mutated":
        spec = valid_spec(src, ctx)
        target = spec if spec["affinityGroup"] is None or src.pick((False, True)) else spec["affinityGroup"]
        key = src.pick(sorted(target))
        target[key] = wrong_value(src, ctx)
        return json.dumps(spec)
    if kind == "fixed":
        return src.pick(YAML_SPECS)
    depth = src.pick((7, 8, 9, 100, 5_000, 50_000))
    if kind == "deep-flow":
        return _nest("[", "]", depth, "")
    if kind == "deep-map":
        return _nest("{a: ", "}", depth)
    if kind == "deep-block":
        depth = min(depth, 300)
        return "".join(f"{'  ' * i}k{i}:\n" for i in range(depth)) + "  " * depth + "v"
    if kind == "deep-json":
        return _nest('{"a": ', "}", depth)
    if kind == "deep-field":  # a valid spec but for one field nested past Python's own stack (once a 500)
        deep = _nest("[", "]", src.pick((9, 1_000, 3_000)), "")
        return '{"virtualCluster":"vision","leafCellNumber":1,"x":' + deep + "}"
    if kind == "huge":
        pad = near_limit(src, SPEC_LIMITS.max_bytes - 40)
        return f'{{"virtualCluster": "vision", "leafCellNumber": 1, "x": "{pad}"}}'
    name = src.pick(EMOJI) * src.number(1, 60)
    spec = valid_spec(src, ctx, group=name)
    return json.dumps(spec, ensure_ascii=src.pick((True, False)))


def wrong_value(src: Source, ctx: Context) -> Any:
    """A value of the wrong type, or of the right type but absurd."""
    return src.pick(
        (
            None,
            True,
            0,
            -1,
            3_000_000,
            10**30,
            1.5,
            "",
            "many",
            "1e400",
            [],
            [1, 2],
            {},
            {"a": [1]},
            hostile_text(src, ctx),
        )
    )


def json_bomb(src: Source) -> bytes:
    """JSON nested deeper than any reader should follow."""
    depth = src.pick((65, 200, 1_100, 100_000))
    return _nest(src.pick(('{"Pod": ', "[", '{"a": [')), src.pick(("}", "]", "]}")), depth).encode()


# ------------------------------------------------------------------------------------------- pods
def fc_annotations(src: Source, ctx: Context, pod_namespace: str) -> dict[str, str]:
    """FrameworkController identities: the baseline's (forged), stale, cross-namespace, or junk."""
    ns, fw, attempt, role = BASE_FRAMEWORK
    kind = src.pick(("same", "other-index", "older", "cross-newer", "junk", "own"))
    index = "0"
    if kind == "other-index":
        index = src.pick(("1", "2", "99", "-1", "1e3", "٣"))
    elif kind == "older":
        attempt = src.pick(("0_old", "0_base-attempt", "1_base-attempt"))
    elif kind == "cross-newer":
        # a newer attempt from the framework's own namespace is FrameworkController's real retry
        attempt = "0_stale" if pod_namespace == ns else src.pick(("2_forged", "9_forged", "forged"))
    elif kind == "junk":
        ns, fw, attempt, role = (hostile_text(src, ctx) for _ in range(4))
        index = src.pick(("0", "x", "", "99999999999999999999"))
    elif kind == "own":
        ns, fw, attempt, role = pod_namespace, ctx.fresh("fw"), "0_own", "worker"
    return {FC_NAMESPACE: ns, FC_FRAMEWORK: fw, FC_ATTEMPT: attempt, FC_ROLE: role, FC_INDEX: index}


def convention_labels(src: Source, ctx: Context) -> tuple[dict[str, Any], dict[str, Any]]:
    """Labels and annotations of the gang conventions topogang reads, with hostile values."""
    value = src.pick((ctx.fresh("grp"), hostile_text(src, ctx)))
    kind = src.pick(("podgroup", "legacy", "volcano", "yunikorn", "spark", "workload-none"))
    size = src.pick(("2", "0", "-1", "3000000", "x", "1e9", ""))
    if kind == "podgroup":
        return {"scheduling.x-k8s.io/pod-group": value}, {"topogang.io/min-member": size}
    if kind == "legacy":
        return {
            "pod-group.scheduling.sigs.k8s.io/name": value,
            "pod-group.scheduling.sigs.k8s.io/min-available": size,
        }, {}
    if kind == "volcano":
        return {}, {"scheduling.k8s.io/group-name": value, "topogang.io/gang-timeout-seconds": size}
    if kind == "yunikorn":
        groups = src.pick(
            (
                json.dumps([{"name": "tg", "minMember": 2, "minResource": {"nvidia.com/gpu": "1"}}]),
                json.dumps([{"name": "tg", "minMember": 3_000_000, "minResource": {"nvidia.com/gpu": 8}}]),
                json.dumps({"name": "tg"}),
                _nest("[", "]", src.pick((20, 40, 5_000)), ""),
                _nest('{"a": ', "}", src.pick((20, 40, 5_000))),
                "[" + ",".join(['{"name": "tg", "minMember": 1}'] * 2000) + "]",
                "not json",
                '[{"name": "\\ud83d", "minMember": 1}]',
                '[{"name": "tg", "minMember": 1, "minMember": 2}]',
            )
        )
        return {"applicationId": value}, {
            "yunikorn.apache.org/task-group-name": "tg",
            "yunikorn.apache.org/task-groups": groups,
            "yunikorn.apache.org/schedulingPolicyParameters": src.pick(
                ("gangSchedulingStyle=Soft", "placeholderTimeoutInSeconds=1e99", "=" * 50, "")
            ),
        }
    if kind == "spark":
        return {"spark-app-selector": value, "spark-role": src.pick(("driver", "executor", "x"))}, {
            "spark.executor.instances": size,
            "spark.dynamicAllocation.enabled": src.pick(("true", "false", "x")),
            "spark.executor.resource.gpu.amount": size,
        }
    return {"topogang.io/virtual-cluster": src.pick(("vision", "nope", hostile_text(src, ctx)))}, {
        "topogang.io/gang-scheduling-style": src.pick(("Soft", "Hard", "x"))
    }


def limits(src: Source) -> dict[str, Any]:
    return src.pick(
        (
            {ENABLE: "1"},
            {ENABLE: "1"},
            {ENABLE: 1},
            {ENABLE: "500m"},
            {ENABLE: "1e999"},
            {ENABLE: "0"},
            {ENABLE: True},
            {ENABLE: {"a": 1}},
            {"nvidia.com/gpu": "2"},
            {},
        )
    )


def hostile_pod(src: Source, ctx: Context) -> dict[str, Any]:
    """A Pod object, as kube-scheduler forwards whatever a tenant created."""
    uid_kind = src.pick(("fresh", "fresh", "fresh", "baseline", "recent", "odd"))
    if uid_kind == "baseline":
        uid: Any = src.pick((*BASE_FC_UIDS, BASE_PLAIN[2]))
    elif uid_kind == "recent":
        uid = recall(src, ctx.filtered, ("fz-none", "", "", ""))[0]
    elif uid_kind == "odd":
        uid = src.pick(("", 7, None, ["u"], hostile_text(src, ctx)))
    else:
        uid = ctx.fresh()
    namespace: Any = src.pick((*NAMESPACES, "evil", "", 5, hostile_text(src, ctx)))
    name: Any = src.pick((ctx.fresh("pod"), hostile_text(src, ctx), {"a": 1}))
    annotations: dict[str, Any] = {}
    labels: dict[str, Any] = {}
    if src.pick((True, True, True, False)):
        annotations[src.pick((SPEC, SPEC, HIVED_SPEC))] = hostile_spec(src, ctx)
    if src.pick((False, False, True)):
        annotations.update(fc_annotations(src, ctx, namespace if isinstance(namespace, str) else ""))
    if src.pick((False, False, True)):
        more_labels, more_annotations = convention_labels(src, ctx)
        labels.update(more_labels)
        annotations.update(more_annotations)
    if src.pick((False, False, False, True)):
        annotations[src.pick((SPEC, FC_INDEX, "x"))] = wrong_value(src, ctx)
    meta: dict[str, Any] = {"uid": uid, "name": name, "namespace": namespace}
    meta["annotations"] = annotations if src.pick((True, True, True, False)) else wrong_value(src, ctx)
    if labels:
        meta["labels"] = labels
    if isinstance(uid, str):
        ctx.uids[uid] = None
    container: dict[str, Any] = {"name": "main", "resources": {"limits": limits(src)}}
    spec: dict[str, Any] = {
        "containers": [container],
        "schedulerName": src.pick(("topogang", "default-scheduler")),
    }
    shape = src.pick(("ok", "ok", "ok", "workload", "no-containers", "odd-containers", "no-metadata"))
    if shape == "workload":
        spec[src.pick(("workloadRef", "schedulingGroup"))] = src.pick(
            ({"name": ctx.fresh("wl"), "podGroup": "pg"}, {"podGroupName": 7}, "x", {"name": {"a": 1}})
        )
    elif shape == "no-containers":
        del spec["containers"]
    elif shape == "odd-containers":
        spec["containers"] = src.pick(("x", [1], [{"resources": "x"}], [{"resources": {"limits": [ENABLE]}}]))
    pod: dict[str, Any] = {"metadata": meta, "spec": spec, "status": {"phase": "Pending"}}
    if shape == "no-metadata":
        del pod["metadata"]
    return pod


# ------------------------------------------------------------------------------------------- routes
def _json(doc: Any) -> bytes:
    """`doc` as JSON as Go or Python senders write it: anything outside ASCII (lone surrogates too) as
    `\\u` escapes."""
    return json.dumps(doc).encode()


def node_list(src: Source, ctx: Context) -> Any:
    kind = src.pick(("all", "all", "some", "unknown", "many", "dup", "odd"))
    if kind == "all":
        return list(NODES)
    if kind == "some":
        return [src.pick(NODES) for _ in range(src.number(1, 4))]
    if kind == "unknown":
        return [hostile_text(src, ctx) for _ in range(src.number(1, 5))]
    if kind == "many":  # many distinct names: the node-list caches are bounded in bytes
        return [f"{ctx.fresh('node')}-{i}" for i in range(src.pick((100, 20_000, 60_000)))]
    if kind == "dup":
        return [NODES[0]] * src.number(2, 50)
    return wrong_value(src, ctx)


def verb_probe(src: Source, ctx: Context, verb: str) -> Probe:
    path = f"/v1/extender/{verb}"
    kind = src.pick(("pod", "pod", "pod", "pod", "bytes", "bomb", "wrong-shape"))
    json_type = (("content-type", "application/json"),)  # past the 415 of the limits, to the parser
    if kind == "bytes":
        return Probe(verb, "POST", path, garbage(src, ctx), src.pick((json_type, ())))
    if kind == "bomb":
        return Probe(verb, "POST", path, json_bomb(src), json_type)
    if verb == "bind":
        body = bind_body(src, ctx)
    elif verb == "preempt":
        names = node_list(src, ctx)
        victims = {
            n: {
                "Pods": [{"UID": src.pick((*BASE_FC_UIDS, BASE_PLAIN[2], ctx.fresh()))}],
                "NumPDBViolations": 0,
            }
            for n in (names[:20] if isinstance(names, list) else [])
            if isinstance(n, str)
        }
        body = {"Pod": hostile_pod(src, ctx), "NodeNameToVictims": None, "NodeNameToMetaVictims": victims}
    else:
        nodes = node_list(src, ctx)
        body = {"Pod": hostile_pod(src, ctx), "Nodes": None, "NodeNames": nodes}
        if src.pick((False, False, False, True)):
            body["Nodes"] = {"Items": [{"metadata": {"name": n}} for n in NODES]}
            body["NodeNames"] = None
    if kind == "wrong-shape":
        key = src.pick(sorted(body))
        body[key] = wrong_value(src, ctx)
        if src.pick((False, True)):
            body = {k.lower(): v for k, v in body.items()}
    return Probe(verb, "POST", path, _json(body), (("content-type", "application/json"),))


def bind_body(src: Source, ctx: Context) -> dict[str, Any]:
    kind = src.pick(("filtered", "filtered", "baseline", "baseline-same", "random"))
    if kind == "filtered":
        uid, ns, name, node = recall(src, ctx.filtered, (ctx.fresh(), "vision", "never-filtered", NODES[0]))
        node = src.pick((node, node, src.pick(NODES)))
    elif kind in ("baseline", "baseline-same"):
        uid, ns, name = src.pick(
            ((BASE_FC_UIDS[0], "vision", "fuzz-base-worker-0"), (BASE_PLAIN[2], "nlp", "base-plain-0"))
        )
        if kind == "baseline":  # a bound pod again, onto any node
            node = src.pick(NODES)
        else:  # onto its own node (idempotent), or under another namespace
            node = ctx.bound.get(uid, NODES[0])
            ns = src.pick((ns, "evil"))
    else:
        uid, ns, name, node = (
            ctx.fresh(),
            src.pick(NAMESPACES),
            hostile_text(src, ctx),
            hostile_text(src, ctx),
        )
    return {"PodName": name, "PodNamespace": ns, "PodUID": uid, "Node": node}


def garbage(src: Source, ctx: Context) -> bytes:
    return src.pick(
        (
            b"",
            b"\x00" * 16,
            b"\xff\xfe\xfd",
            b"{",
            b"null",
            b"[]",
            b'"\\ud83d"',
            b'{"Pod": "\\udc00"}',
            b'{"Pod": {}, "Pod": 1}',
            b"NaN",
            b"1e999999",
            b"-" + b"9" * 5000,
            hostile_text(src, ctx).encode("utf-8", "surrogatepass"),
            b"\xef\xbb\xbf{}",
        )
    )


def explain_probe(src: Source, ctx: Context) -> Probe:
    kind = src.pick(("pod", "pod", "wrapped", "bytes", "bomb", "big"))
    if kind == "bytes":
        body = garbage(src, ctx)
    elif kind == "bomb":
        body = json_bomb(src)
    elif kind == "big":
        body = b'{"x": "' + near_limit(src, 1 << 20).encode() + b'"}'
    else:
        pod = hostile_pod(src, ctx)
        body = _json({"Pod": pod} if kind == "wrapped" else pod)
    return Probe("explain", "POST", "/v1/explain", body, (("content-type", "application/json"),))


def segment(src: Source, ctx: Context) -> str:
    """A path segment: a known name, or hostile text (percent-encoded, or invalid UTF-8 when encoded)."""
    known = (*NAMESPACES, "fuzz-base", "base-plain", BASE_FRAMEWORK[2], "vision/fuzz-base/1_base-attempt")
    kind = src.pick(("known", "known", "text", "raw"))
    if kind == "known":
        return quote(src.pick(known), safe="/" if src.pick((False, True)) else "")
    if kind == "text":
        return quote(hostile_text(src, ctx).encode("utf-8", "surrogatepass"), safe="")
    return src.pick(("%00", "%ED%A0%80", "%FF", "%", "%zz", "..", "%2e%2e", "a%2Fb", "~", "*"))


def query(src: Source, ctx: Context, keys: Sequence[str], values: Sequence[str]) -> str:
    parts = []
    for _ in range(src.number(0, 4)):
        value = src.pick((*values, quote(hostile_text(src, ctx).encode("utf-8", "surrogatepass"), safe="")))
        parts.append(f"{src.pick((*keys, 'x', ''))}={value}")
    if src.pick((False, False, True)):
        parts.append(src.pick(("%", "%zz", "a=%ED%A0%80", "&&&", "=", "a" * 5000)))
    return ("?" + "&".join(parts)) if parts else ""


PHASES = ("Pending", "Reserved", "Binding", "Bound", "Ready", "Broken", "Expired", "ready", "x", "")
TINY = ("0", "0.01", "0.05", "", "-1", "nan", "x", "1e-9")  # long-poll timeouts: tiny or invalid


def get_probe(src: Source, ctx: Context) -> Probe:
    route = src.pick(
        (
            "inspect",
            "gangs",
            "gang",
            "framework",
            "ui-state",
            "ui",
            "health",
            "metrics",
            "index",
            "standalone",
            "config",
        )
    )
    if route == "inspect":
        path = src.pick(
            (
                "/v1/inspect",
                "/v1/inspect/clusterstatus",
                "/v1/inspect/clusterstatus/physicalcluster",
                "/v1/inspect/clusterstatus/virtualclusters",
                "/v1/inspect/clusterstatus/virtualclusters/",
                "/v1/inspect/affinitygroups",
                "/v1/inspect/affinitygroups/",
            )
        )
        if src.pick((False, True)):
            path = src.pick(("/v1/inspect/clusterstatus/virtualclusters/", "/v1/inspect/affinitygroups/"))
            path += segment(src, ctx)
    elif route == "gangs":
        path = (
            "/v1/gangs"
            + src.pick(("", "/"))
            + query(src, ctx, ("namespace", "vc", "phase"), (*NAMESPACES, *PHASES))
        )
    elif route == "gang":
        keys = ("waitFor", "timeoutSeconds", "attempt", "resourceVersion")
        values = (*PHASES, *TINY, BASE_FRAMEWORK[2], "0", "99999999999999999999")
        q = query(src, ctx, keys, values)
        if "waitFor" in q or "resourceVersion" in q:  # a long poll: always with a tiny timeout, last
            q += ("&" if q else "?") + f"timeoutSeconds={src.pick(TINY[:3])}"
        path = f"/v1/gangs/{segment(src, ctx)}/{segment(src, ctx)}{q}"
    elif route == "framework":
        path = FC_PATH.format(ns=segment(src, ctx), name=segment(src, ctx))
    elif route == "ui-state":
        path = "/v1/ui/state" + query(
            src, ctx, ("token", "layout"), ("0", "1", "-1", "abc", "99999999999999999999")
        )
    elif route == "ui":
        path = src.pick(("/ui", "/ui/", "/ui/static/", "/ui/static/index.html", "/ui/static/app.js"))
        if src.pick((False, True)):
            path = "/ui/static/" + segment(src, ctx)
    elif route == "health":
        path = src.pick(("/healthz", "/readyz", "/healthz?x=1"))
    elif route == "metrics":
        path = src.pick(("/metrics", "/metrics?name[]=x"))
    elif route == "index":
        path = "/"
    elif route == "standalone":
        if src.pick((False, True)):
            return Probe("standalone", "GET", "/v1/standalone/bindings")
        uid = recall(src, tuple(ctx.uids), "") if src.pick((False, True)) else segment(src, ctx)
        uid = quote(uid, safe="%") if not uid.startswith(BASE_PREFIX) else ctx.fresh()
        return Probe(
            "standalone",
            "DELETE",
            f"/v1/standalone/pods/{uid}" + query(src, ctx, ("finished",), ("true", "1", "x")),
        )
    else:
        path = "/v1/config"
    headers = src.pick(
        ((), (("accept-encoding", "gzip"),), (("if-none-match", "*"),), (("range", "bytes=5-1"),))
    )
    return Probe(route, "GET", path, None, headers)


KNOWN_PATHS = (
    "/",
    "/healthz",
    "/metrics",
    "/v1/extender/filter",
    "/v1/extender/bind",
    "/v1/explain",
    "/v1/gangs",
    "/v1/ui/state",
    "/v1/config",
    "/ui",
    "/v1/standalone/bindings",
    "/v1/standalone/pods/x",
    "/v1/inspect",
)


def odd_probe(src: Source, ctx: Context) -> Probe:
    """Unknown paths, and methods a route does not take."""
    if src.pick((False, True)):
        path = src.pick(
            ("/nope", "/v2/extender/filter", "/v1/extender/", "/v1/extender/filter/", "//", "/..")
        )
        path += "/" + segment(src, ctx) if src.pick((False, True)) else ""
        return Probe("unknown", src.pick(("GET", "POST", "DELETE")), path, src.pick((None, b"{}")))
    method = src.pick(("PUT", "PATCH", "OPTIONS", "TRACE", "HEAD", "DELETE", "POST", "GET"))
    return Probe("methods", method, src.pick(KNOWN_PATHS), src.pick((None, b"{}", b"\x00")))


RAW = (
    b"FOO / HTTP/1.1\r\nHost: x\r\n\r\n",
    b"G\x00T / HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET\r\n\r\n",
    b"GET / HTTP/9.9\r\nHost: x\r\n\r\n",
    b"GET / FOO/1.1\r\n\r\n",
    b"/ GET HTTP/1.1\r\n\r\n",
    b"\r\n\r\n",
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 40 + b"\r\n\r\n",
    b"GET /\xff\xfe HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /healthz HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",
    b"GET /healthz HTTP/1.1\r\nHost: x\r\nX: \xff\x00\r\n\r\n",
    b"POST /v1/extender/filter HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n{}",
    b"POST /v1/extender/filter HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n{}",
    b"POST /v1/extender/filter HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
    b"POST /v1/extender/bind HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
    b"POST /v1/extender/bind HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
    b"Content-Length: 2\r\n\r\n{}",
    b"GET http://evil.example/healthz HTTP/1.1\r\nHost: x\r\n\r\n",
    b"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /healthz HTTP/1.0\r\n\r\n",
    b"GET /healthz\n\n",
    b"CONNECT 127.0.0.1:1 HTTP/1.1\r\nHost: x\r\n\r\n",
    b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
    b"GET /healthz HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
    b"GET /v1/gangs HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
    b"GET /healthz HTTP/1.1\r\nHost: x\r\nUpgrade: h2c\r\nConnection: Upgrade, HTTP2-Settings\r\n"
    b"HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n",
)


def raw_probe(src: Source, ctx: Context) -> Probe:
    kind = src.pick(("fixed", "fixed", "fixed", "long-line", "many-headers", "big-header", "method"))
    if kind == "fixed":
        data = src.pick(RAW)
    elif kind == "long-line":
        data = b"GET /" + b"a" * src.pick((8_000, 70_000)) + b" HTTP/1.1\r\nHost: x\r\n\r\n"
    elif kind == "many-headers":
        data = b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"X-A: 1\r\n" * src.pick((100, 5_000)) + b"\r\n"
    elif kind == "big-header":
        data = (
            b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * src.pick((8_000, 200_000)) + b"\r\n\r\n"
        )
    else:
        method = src.pick((b"FOO", b"GETT", b"get", b"G-T", b"\xe2\x98\x83", b"M" * 300, b""))
        data = method + b" /v1/extender/filter HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
    return Probe("raw", "RAW", "", raw=data)


VERBS = ("filter", "prioritize", "preempt", "bind")
FAMILIES: tuple[str, ...] = (*VERBS, "filter", "explain", "get", "get", "get", "odd", "raw")


def probe(src: Source, ctx: Context) -> Probe:
    """One request to some route (the verbs, where state can change, most often)."""
    family = src.pick(FAMILIES)
    if family in VERBS:
        return verb_probe(src, ctx, family)
    if family == "explain":
        return explain_probe(src, ctx)
    if family == "get":
        return get_probe(src, ctx)
    if family == "odd":
        return odd_probe(src, ctx)
    return raw_probe(src, ctx)


# ------------------------------------------------------------------------------------------- sending
def send(client: httpx.Client, url: str, p: Probe) -> Reply:
    """Send `p`; a reply of None status means no answer came (or not within `HANG_SECONDS`)."""
    t0 = time.monotonic()
    if p.raw is not None:
        return _send_raw(url, p.raw, t0)
    try:
        r = client.request(p.method, p.path, content=p.body, headers=dict(p.headers), timeout=HANG_SECONDS)
    except httpx.TimeoutException as exc:
        return Reply(None, "", b"", time.monotonic() - t0, f"timeout: {exc!r}")
    except httpx.TransportError as exc:
        return Reply(None, "", b"", time.monotonic() - t0, f"transport: {exc!r}")
    except httpx.InvalidURL:  # longer than httpx sends (64 KiB): the same request, written by hand
        head = f"{p.method} {p.path} HTTP/1.1\r\nHost: fuzz\r\nConnection: close\r\n"
        body = p.body or b""
        return _send_raw(url, head.encode() + f"Content-Length: {len(body)}\r\n\r\n".encode() + body, t0)
    return Reply(r.status_code, r.headers.get("content-type", ""), r.content, time.monotonic() - t0)


def _send_raw(url: str, data: bytes, t0: float) -> Reply:
    """Bytes on a fresh connection, then read one response (by its content-length) or until closed."""
    parts = urlsplit(url)
    buf = b""
    try:
        with socket.create_connection(
            (parts.hostname or "127.0.0.1", parts.port or 80), timeout=HANG_SECONDS
        ) as s:
            s.settimeout(HANG_SECONDS)
            with contextlib.suppress(OSError):  # the server may close on the first bad byte
                s.sendall(data)
                s.shutdown(socket.SHUT_WR)
            while True:
                if (head_end := buf.find(b"\r\n\r\n")) >= 0 and len(buf) >= head_end + 4 + _length(
                    buf[:head_end]
                ):
                    break
                if time.monotonic() - t0 > HANG_SECONDS:
                    raise TimeoutError
                chunk = s.recv(65536)
                if not chunk:
                    break
                buf += chunk
    except TimeoutError:
        return Reply(None, "", buf, time.monotonic() - t0, "timeout")
    except OSError as exc:
        if not buf:  # reset before any answer: the server refused the bytes outright
            return Reply(None, "", b"", time.monotonic() - t0, f"closed: {exc!r}")
    seconds = time.monotonic() - t0
    if not buf:
        return Reply(None, "", b"", seconds, "closed without an answer")
    head, _, body = buf.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    try:
        status = int(lines[0].split()[1])
    except (IndexError, ValueError):
        return Reply(None, "", buf, seconds, f"not an HTTP response: {lines[0][:80]!r}")
    ctype = ""
    for line in lines[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-type":
            ctype = v.strip().decode("latin-1")
    return Reply(status, ctype, body[: _length(head)] if _length(head) else body, seconds)


def _length(head: bytes) -> int:
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length" and v.strip().isdigit():
            return int(v.strip())
    return 0


# ------------------------------------------------------------------------------------------- checks
def violations(p: Probe, r: Reply) -> list[str]:
    """The kinds of violation in one reply: "hang", "5xx", "non-JSON" (and "no reply" over httpx)."""
    out = []
    if r.seconds > HANG_SECONDS or r.error.startswith("timeout"):
        out.append("hang")
    if r.status is None:
        # a raw request the server drops without a word is answered by the closed connection;
        # anything httpx can send deserves an answer
        if p.raw is None and "hang" not in out:
            out.append("no reply")
        return out
    if r.status >= 500:
        out.append("5xx")
    if not _json_exempt(p, r) and not _is_json(r):
        out.append("non-JSON")
    return out


def _json_exempt(p: Probe, r: Reply) -> bool:
    """The page and its assets (any status), Prometheus' text, and answers with no body (HEAD,
    redirects, 304)."""
    path = p.path.split("?", 1)[0]
    if path == "/metrics" and r.status == 200:
        return True
    if path == "/ui" or path.startswith("/ui/"):  # starlette's static files answer their own errors
        return True
    return not r.body and (p.method == "HEAD" or (r.status or 0) in (301, 302, 304, 307, 308))


def _is_json(r: Reply) -> bool:
    if r.content_type.split(";")[0].strip() != "application/json":
        return False
    if not r.body:
        return False
    try:
        json.loads(r.body)
    except ValueError:
        return False
    return True


# ------------------------------------------------------------------------------------------- state
def fc_pod(index: int) -> dict[str, Any]:
    ns, fw, attempt, role = BASE_FRAMEWORK
    spec = {
        "virtualCluster": "vision",
        "priority": TOP,
        "leafCellNumber": 8,
        "affinityGroup": {"name": fw, "members": [{"podNumber": 2, "leafCellNumber": 8, "taskRole": role}]},
    }
    annotations = {
        SPEC: json.dumps(spec),
        FC_NAMESPACE: ns,
        FC_FRAMEWORK: fw,
        FC_ATTEMPT: attempt,
        FC_ROLE: role,
        FC_INDEX: str(index),
    }
    return _pod(BASE_FC_UIDS[index], ns, f"{fw}-{role}-{index}", annotations)


def plain_pod() -> dict[str, Any]:
    ns, group, uid = BASE_PLAIN
    spec = {
        "virtualCluster": "nlp",
        "priority": TOP,
        "leafCellNumber": 4,
        "affinityGroup": {"name": group, "members": [{"podNumber": 1, "leafCellNumber": 4}]},
    }
    return _pod(uid, ns, uid, {SPEC: json.dumps(spec)})


def _pod(uid: str, ns: str, name: str, annotations: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"uid": uid, "name": name, "namespace": ns, "annotations": annotations},
        "spec": {"containers": [{"name": "main", "resources": {"limits": {ENABLE: "1"}}}]},
        "status": {"phase": "Pending"},
    }


def place_baseline(client: httpx.Client, ctx: Context) -> None:
    """Filter and bind the baseline gangs, as kube-scheduler would (`ctx.bound` learns their nodes);
    raises if any step fails."""
    for pod in (fc_pod(0), fc_pod(1), plain_pod()):
        got = client.post("/v1/extender/filter", json={"Pod": pod, "Nodes": None, "NodeNames": list(NODES)})
        doc = got.json()
        if got.status_code != 200 or not doc.get("NodeNames"):
            raise RuntimeError(f"baseline pod {pod['metadata']['uid']} was not placed: {doc}")
        meta = pod["metadata"]
        bind = {"PodName": meta["name"], "PodNamespace": meta["namespace"], "PodUID": meta["uid"]}
        bound = client.post("/v1/extender/bind", json={**bind, "Node": doc["NodeNames"][0]}).json()
        if bound.get("Error"):
            raise RuntimeError(f"baseline pod {meta['uid']} was not bound: {bound}")
        ctx.bound[meta["uid"]] = doc["NodeNames"][0]


def placed_state(client: httpx.Client) -> tuple[Any, Any]:
    """What no request may change: every placed affinity group, and the ledger's placed records
    (their resourceVersion aside: a read that refreshes a record may count as a change)."""
    groups = [
        g
        for g in client.get("/v1/inspect/affinitygroups/").json()["items"]
        if g["status"]["state"] != "Waiting"
    ]
    records = [
        {k: v for k, v in rec.items() if k != "resourceVersion"}
        for rec in client.get("/v1/gangs").json()["items"]
        if rec["phase"] in PLACED_PHASES
    ]
    key: Callable[[dict[str, Any]], str] = lambda d: json.dumps(d, sort_keys=True)  # noqa: E731
    return sorted(groups, key=key), sorted(records, key=key)


def forget_fuzz_pods(client: httpx.Client, ctx: Context) -> None:
    """Tell the server every pod the fuzzing created is gone (as the API server would once the
    tenant's pods are deleted), so only gangs that were placed before it remain."""
    for uid in ctx.uids:
        if uid and not uid.startswith(BASE_PREFIX):
            path = f"/v1/standalone/pods/{quote(uid, safe='')}"
            send(client, str(client.base_url), Probe("cleanup", "DELETE", path))
