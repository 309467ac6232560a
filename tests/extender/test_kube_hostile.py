"""A hostile pod cannot block the cluster (issue 23, item 5): in Kubernetes mode, a pod whose
annotations are built to crash, stall or confuse a reader is skipped with a Warning Event saying
why, at start-up (listed, recovered) and in the watch, and every other pod is still scheduled.

Driven in-process against the in-memory API server (`loadtest.kubefake`): at start-up (a restart is a
new service over the same objects), and through the watch (it streams changes).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from config.untrusted import printable
from extender.gangs.bindinfo import BIND_INFO_ANNOTATIONS, ISOLATION_ANNOTATIONS, encode_bind_info
from extender.gangs.framework import FrameworkError, barrier_passed, task_role_statuses, with_ips_hidden
from extender.gangs.podspec import framework_task
from extender.kube.client import pod_path
from extender.kube.invalid import INVALID_BIND_INFO, INVALID_SPEC, invalid
from extender.kube.recovery import recover
from extender.kube.service import kube_service
from tests.extender.helpers import SPEC, Clock, example, fc_annotations, nodes, pod, run, spec
from tests.extender.test_kube_durable import NS, Running, cluster, start, until
from topology.core import Core
from topology.decisions import GangPlacement, PodPlacement
from topology.invariants import violations

DEEP = "[" * 50_000 + "]" * 50_000  # 100 KB, under the API server's 256 KiB: overflowed the C stack
NESTED = "[" * 30_000 + "]" * 30_000  # as deep, under the spec's size limit: refused for its depth
RECURSIVE = "&a [*a]"
LAUGHS = 'a: &a ["x","x","x","x","x","x","x","x","x"]\n' + "".join(
    f"{c}: &{c} [{','.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True)
)
NUL = '{"virtualCluster": "nlp", "leafCellNumber": 1}\x00'
SURROGATE = '{"virtualCluster": "\\ud800", "leafCellNumber": 1}'  # a JSON escape inside YAML
HOSTILE = {
    "huge": DEEP,
    "deep": NESTED,
    "recursive": RECURSIVE,
    "laughs": LAUGHS,
    "nul": NUL,
    "surrogate": SURROGATE,
}
# what each Event must name as the reason (the place inside the spec comes first, when there is one)
WHY = {
    "huge": "is 100000 bytes; at most 65536",
    "deep": "nested more than 8 levels deep",
    "recursive": "YAML anchors (&a) are not accepted",
    "laughs": "YAML anchors (&a) are not accepted",
    "nul": "#x0000",
    "surrogate": "virtualCluster: is not valid Unicode",
}


def warnings(events: Any, name: str) -> list[tuple[str, str]]:
    """(reason, message) of the Warning Events written about one pod."""
    return [
        (e["reason"], e["message"])
        for e in events
        if e["involvedObject"]["name"] == name and e["type"] == "Warning"
    ]


def assert_told(events: Any, name: str, reason: str, annotation: str, why: str) -> None:
    got = warnings(events, name)
    assert [r for r, _ in got] == [reason], got
    message = got[0][1]
    assert f"annotation {annotation}" in message and why in message, message
    assert len(message) <= 1024 and message.isprintable()
    message.encode("utf-8")  # a lone surrogate would raise here (and the Event would not be written)


def placed_elsewhere(name: str, uid: str, ns: str, node: str, gpus: tuple[int, ...]) -> dict[str, Any]:
    """A one-pod gang bound before this extender started, with the annotations its Binding wrote."""
    placement = GangPlacement(
        gang=f"{ns}/{name}",
        vc=ns,
        chain="A100-RACK",
        priority=0,
        requested_priority=0,
        pods=(PodPlacement(0, node, gpus, None),),
        lca_level=0,
        nodes=(node,),
    )
    p = pod(uid, name, ns, spec(ns, len(gpus)))
    info = encode_bind_info(placement, node, gpus, 0)
    p["metadata"]["annotations"].update({BIND_INFO_ANNOTATIONS[0]: info, ISOLATION_ANNOTATIONS[0]: "0,1"})
    p["spec"]["nodeName"] = node
    p["status"] = {"phase": "Running"}
    return p


def hostile_bound(uid: str, name: str) -> dict[str, Any]:
    """A bound pod whose owner rewrote its bind info (and spec) into a 50,000-deep sequence."""
    p = pod(uid, name, "nlp", DEEP)
    p["metadata"]["annotations"][BIND_INFO_ANNOTATIONS[0]] = DEEP
    p["spec"]["nodeName"] = nodes()[0]
    p["status"] = {"phase": "Running"}
    return p


# ---------------------------------------------------------------------------------- the judgement
@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_each_hostile_spec_is_named_with_its_annotation_place_and_reason(kind: str) -> None:
    got = invalid(pod("u", "p", "nlp", HOSTILE[kind]), namespace_vcs={"nlp": "nlp"})
    assert got is not None and got.reason == INVALID_SPEC and got.annotation == SPEC and not got.bound
    message = got.message()
    assert message.startswith(f"annotation {SPEC}") and WHY[kind] in message, message
    assert "does not schedule this pod" in message and message.isprintable()


def test_a_readable_spec_and_a_pod_without_one_are_not_judged() -> None:
    assert invalid(pod("u", "p", "nlp", spec("nlp", 2)), namespace_vcs={}) is None
    assert invalid(pod("u", "p", "nlp", None)) is None  # the conventions' (PodGroups, ...) to judge


def test_a_bound_pod_is_judged_by_its_bind_info() -> None:
    got = invalid(hostile_bound("u", "p"))
    assert got is not None and (got.reason, got.annotation, got.bound) == (
        INVALID_BIND_INFO,
        BIND_INFO_ANNOTATIONS[0],
        True,
    )
    assert "nested more than 32 levels deep" in got.message() and "cannot restore" in got.message()
    fine = placed_elsewhere("ok", "u2", "nlp", nodes()[0], (0, 1))
    fine["metadata"]["annotations"][SPEC] = DEEP  # read from its bind info: the spec is not needed
    assert invalid(fine) is None


def test_event_text_is_valid_printable_and_bounded() -> None:
    assert printable("a\x00b\ud800c", 100) == "a\\x00b\\ud800c"
    long = printable("x" * 5000, 600)
    assert len(long) == 600 and long.endswith("…")


def test_a_task_index_int_cannot_read_is_no_task() -> None:
    """`"²".isdigit()` is true and `int("²")` raises; so does a 5,000-digit index: both came out of
    every reader of a pod's FrameworkController identity (recovery, the ledger, the filter)."""
    for index in ("²", "9" * 5000):
        ann = {**fc_annotations("ml", "fw", "0_a", "worker", 0), "FC_TASK_INDEX": index}
        assert framework_task(pod("u", "p", "ml", annotations=ann)) is None


@pytest.mark.parametrize("number", [[1], {"a": 1}, "²", "9" * 5000, True])
def test_a_framework_with_an_ill_typed_task_number_is_a_framework_error(number: object) -> None:
    """A Framework is its owner's object: what `int()` would raise on must be a FrameworkError,
    which the barrier and the ledger's Framework route answer (and keep polling) on."""
    framework = {"spec": {"taskRoles": [{"name": "w", "taskNumber": number}]}}
    with pytest.raises(FrameworkError, match="taskNumber"):
        barrier_passed(framework)
    # ill-shaped parts read as absent: no tasks asked for, none ready
    assert barrier_passed({"spec": ["not", "a", "mapping"], "status": {"attemptStatus": "x"}})


def test_a_gzip_bomb_in_compressed_statuses_is_refused() -> None:
    import base64
    import gzip

    bomb = base64.b64encode(gzip.compress(b"[" + b" " * (80 * 1024 * 1024) + b"]")).decode()
    fw = {"status": {"attemptStatus": {"taskRoleStatusesCompressed": bomb}}}
    with pytest.raises(FrameworkError, match="expands to more than"):
        task_role_statuses(fw)
    odd: dict[str, Any] = {
        "spec": {},
        "status": {"attemptStatus": {"taskRoleStatuses": [{"taskStatuses": [{"index": {}}]}]}},
    }
    with pytest.raises(FrameworkError, match="index"):
        with_ips_hidden(odd, set())


# ---------------------------------------------------------------------------------- recovery
def test_recovery_skips_hostile_bound_pods_and_recovers_the_rest() -> None:
    names = nodes()
    good = placed_elsewhere("good", "g", "nlp", names[1], (0, 1))
    pods = [hostile_bound("h0", "bad-deep"), good]
    for i, text in enumerate((RECURSIVE, LAUGHS, NUL, SURROGATE)):
        p = pod(f"h{i + 1}", f"bad-{i}", "nlp", text)
        p["spec"]["nodeName"] = names[2]
        p["metadata"]["annotations"][ISOLATION_ANNOTATIONS[0]] = str(i)
        pods.append(p)
    odd = placed_elsewhere("odd", "o", "ml", names[3], (0, 1))
    odd["metadata"]["annotations"].update(fc_annotations("ml", "fw", "0_a", "worker", 0))
    odd["metadata"]["annotations"]["FC_TASK_INDEX"] = "²"
    pods.append(odd)
    core = Core(example().spec)
    report = recover(core, pods, now=0.0, namespace_vcs={"nlp": "nlp", "ml": "vision"})
    assert core.gang("nlp/good") is not None and core.gang("ml/odd") is not None
    assert sorted(k.split("(")[0] for k, _ in report.skipped) == ["h0", "h1", "h2", "h3", "h4"]
    assert violations(core) == []


# ---------------------------------------------------------------------------------- start-up
def test_hostile_pods_listed_at_start_are_told_why_and_the_extender_becomes_ready() -> None:
    async def go() -> None:
        kube, clock = cluster(), Clock()
        names = nodes()
        good = placed_elsewhere("good", "g", "nlp", names[1], (0, 1))
        kube.server.put(pod_path("nlp", "good"), good)
        for kind, text in HOSTILE.items():
            kube.server.put(pod_path("nlp", f"bad-{kind}"), pod(f"h-{kind}", f"bad-{kind}", "nlp", text))
        kube.server.put(pod_path("nlp", "bad-bound"), hostile_bound("hb", "bad-bound"))
        r = await asyncio.wait_for(start(kube, clock), 30)
        assert r.s.ready and r.s.core.gang("nlp/good") is not None  # the rest was recovered
        events = kube.server.events
        await until("every Event written", lambda: len(events) >= len(HOSTILE) + 1)
        for kind in HOSTILE:
            assert_told(events, f"bad-{kind}", INVALID_SPEC, SPEC, WHY[kind])
        assert_told(events, "bad-bound", INVALID_BIND_INFO, BIND_INFO_ANNOTATIONS[0], "32 levels deep")
        assert warnings(events, "good") == []
        # the filter refuses them with the same reason, and every other pod is still scheduled
        for kind in HOSTILE:
            got = await r.verb("filter", kube.server.at(pod_path("nlp", f"bad-{kind}")))
            assert WHY[kind] in got["Error"], got
        fresh = kube.server.put(pod_path("nlp", "fresh"), pod("f", "fresh", "nlp", spec("nlp", 8)))
        await r.place(fresh)
        assert r.s.core.gang("nlp/pod:fresh") is not None and violations(r.s.core) == []
        before = len(events)
        await r.stop()
        # told once per content: a restart tells again, but the same pod is not told twice by one run
        assert len([e for e in list(events)[:before] if e["involvedObject"]["name"] == "bad-deep"]) == 1

    run(go())


# ---------------------------------------------------------------------------------- the watch
class Watched:
    """A service over the in-memory API server, whose watches stream every change."""

    def __init__(self) -> None:
        self.kube = cluster()
        self.server = self.kube.server

    def create(self, p: dict[str, Any]) -> dict[str, Any]:
        m = p["metadata"]
        body = {**p, "metadata": {k: v for k, v in m.items() if k != "uid"}}
        return self.server.create(f"/api/v1/namespaces/{m['namespace']}/pods", body)

    def events(self) -> list[dict[str, Any]]:
        return list(self.server.events)

    async def caught_up(self) -> None:
        await until("the pod watch caught up", lambda: self.kube.caught_up("/api/v1/pods"))


def test_hostile_pods_created_after_start_do_not_stop_the_watch() -> None:
    async def go() -> None:
        w = Watched()
        r = Running(kube_service(example(), w.kube, clock=Clock(), namespace=NS))
        await until("ready", lambda: r.s.ready)
        await w.caught_up()
        for kind, text in HOSTILE.items():
            w.create(pod("", f"bad-{kind}", "nlp", text))
        w.create(hostile_bound("", "a-bad-bound"))
        # bound by another replica after the hostile ones: adopted only if the watch is still going
        w.create(placed_elsewhere("z-later", "", "nlp", nodes()[1], (0, 1)))
        await until("the later pod adopted", lambda: r.s.core.gang("nlp/z-later") is not None)
        await until("every Event written", lambda: len(w.events()) >= len(HOSTILE) + 1)
        for kind in HOSTILE:
            assert_told(w.events(), f"bad-{kind}", INVALID_SPEC, SPEC, WHY[kind])
        assert_told(w.events(), "a-bad-bound", INVALID_BIND_INFO, BIND_INFO_ANNOTATIONS[0], "32 levels deep")
        # the watch still follows pods: a new pod is scheduled, and its deletion frees its GPUs
        fresh = w.create(pod("", "fresh", "nlp", spec("nlp", 8)))
        await r.place(fresh)
        await w.caught_up()
        assert r.s.core.gang("nlp/pod:fresh") is not None
        w.server.delete("/api/v1/namespaces/nlp/pods/fresh", {"gracePeriodSeconds": 0})
        await until("the deleted pod released", lambda: r.s.core.gang("nlp/pod:fresh") is None)
        # an owner who fixes the spec gets the pod scheduled
        fixed = w.server.get("/api/v1/namespaces/nlp/pods/bad-deep")
        assert fixed is not None
        fixed["metadata"]["annotations"][SPEC] = spec("nlp", 2)
        w.server.replace("/api/v1/namespaces/nlp/pods/bad-deep", fixed)
        await w.caught_up()  # the verbs decide on the pod as the watch brings it, not on the body
        await r.place(fixed)
        assert violations(r.s.core) == []
        await r.stop()

    run(go())
