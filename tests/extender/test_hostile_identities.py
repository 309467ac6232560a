"""Identities a hostile tenant can forge or reuse: a second live pod with a bound task's identity, a
reused UID with another spec, a bind that fails half-way. None of them may take GPUs, corrupt the gang
ledger, or leave GPUs claimed."""

from __future__ import annotations

import json
from typing import Any

import pytest

from extender.http import verbs, wire
from extender.http.answers import VerbError
from tests.extender.helpers import args, bind_args, fc_annotations, place, pod, run, scheduler, spec
from topology.invariants import violations

FC_SPEC = json.dumps(
    {
        "virtualCluster": "vision",
        "leafCellNumber": 8,
        "affinityGroup": {
            "name": "x",
            "members": [{"podNumber": 2, "leafCellNumber": 8, "taskRole": "worker"}],
        },
    }
)


def fc_pod(uid: str, index: int, name: str | None = None) -> dict[str, Any]:
    return pod(
        uid,
        name or f"fw-worker-{index}",
        "vision",
        FC_SPEC,
        annotations=fc_annotations("vision", "fw", "0_a", "worker", index),
    )


def test_a_second_live_pod_with_a_bound_tasks_identity_waits_and_cannot_bind() -> None:
    async def go() -> None:
        s = scheduler()
        _, n0 = await place(s, fc_pod("u0", 0))
        await place(s, fc_pod("u1", 1))
        forged = fc_pod("forged", 0, "fw-worker-0-copy")
        r = await s.filter(args(forged))
        assert r["NodeNames"] == []
        reasons = set(r["FailedAndUnresolvableNodes"].values())
        assert any("held by pod u0, which is still alive" in t for t in reasons), reasons
        b = await s.bind(bind_args(forged, n0 or ""))
        assert "held by pod u0" in b["Error"]
        gang = s.core.gang("vision/fw/0_a")
        assert gang is not None and {sl.key: sl.pod_uid for sl in gang.slots} == {
            "worker/0": "u0",
            "worker/1": "u1",
        }
        assert violations(s.core) == []
        # once the holder is gone, the retried task takes its slot back, on the same node
        await s.pod_gone("u0")
        _, node = await place(s, forged)
        assert node == n0
        assert violations(s.core) == []

    run(go())


def test_a_reused_uid_with_another_spec_changes_nothing() -> None:
    async def go() -> None:
        s = scheduler()
        p = pod("u-a", "a", "vision", spec("vision", 8, 1, "vision/one"))
        _, node = await place(s, p)
        assert node is not None
        s.gang_ledger.set_ip("u-a", "10.0.0.1")
        s.gang_ledger.touch(s.core, "vision/one", s.waiting_of)
        before = s.gang_ledger.records["vision/one"].phase
        assert before.value == "Ready"
        other = pod("u-a", "a", "vision", spec("vision", 4, 1, "vision/other"))
        r = await s.filter(args(other))
        assert "pod UID u-a is bound in gang vision/one" in r["Error"]
        assert s.gang_ledger.records["vision/one"].phase is before
        assert s.gang_ledger.pods["u-a"].ip == "10.0.0.1"
        cached = s.cached("u-a")
        assert cached is not None and cached.gang == "vision/one"
        assert s.core.gang("vision/other") is None

    run(go())


def test_a_bind_that_fails_before_the_binding_is_written_leaves_nothing_claimed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(*_: Any) -> dict[str, str]:
        raise UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed")

    monkeypatch.setattr(verbs, "signed_bind_annotations", broken)

    async def go() -> None:
        s = scheduler()
        p = pod("u-b", "b", "vision", spec("vision", 8, 2, "vision/two"))
        r = await s.filter(args(p))
        node = r["NodeNames"][0]
        b = await s.bind(bind_args(p, node))
        assert "UnicodeEncodeError" in b["Error"] and "Platform Error" not in b["Error"]
        gang = s.core.gang("vision/two")
        assert gang is not None and all(sl.pod_uid is None for sl in gang.slots)
        assert s.core.gang_of_pod("u-b") is None
        assert violations(s.core) == []

    run(go())


def test_a_pod_of_another_namespace_cannot_pose_as_a_frameworks_task() -> None:
    """FrameworkController creates a framework's pods in the framework's namespace: a tenant's pod in
    nlp naming vision's framework (a newer attempt, even) is no task of it, and supersedes nothing."""

    async def go() -> None:
        s = scheduler()
        await place(s, fc_pod("u0", 0))
        await place(s, fc_pod("u1", 1))
        forged = pod(
            "forged",
            "fw-worker-0",
            "nlp",
            spec("nlp", 8, 1, "nlp/forged"),
            annotations=fc_annotations("vision", "fw", "9_newer", "worker", 0),
        )
        await s.filter(args(forged))
        gang = s.core.gang("vision/fw/0_a")
        assert gang is not None and [sl.pod_uid for sl in gang.slots] == ["u0", "u1"]
        assert s.core.gang("vision/fw/9_newer") is None
        assert violations(s.core) == []

    run(go())


def test_a_pending_pod_whose_spec_names_another_gang_lets_the_old_reservation_go() -> None:
    async def go() -> None:
        s = scheduler()
        p = pod("u-m", "m", "vision", spec("vision", 8, 1, "vision/first"))
        assert (await s.filter(args(p)))["NodeNames"]
        assert s.core.gang("vision/first") is not None
        edited = pod("u-m", "m", "vision", spec("vision", 8, 1, "vision/second"))
        assert (await s.filter(args(edited)))["NodeNames"]
        assert s.core.gang("vision/first") is None  # nobody is left to claim it
        assert s.core.gang("vision/second") is not None
        assert violations(s.core) == []

    run(go())


async def stays_in(s: verbs.Scheduler, moved: dict[str, Any], gang: str) -> None:
    """Prioritize and preempt for `moved` (a pod whose filter reserved `gang`, now naming another):
    it scores 0 everywhere, preempt answers 400 naming `gang`, and the pod stays `gang`'s."""
    assert all(h["Score"] == 0 for h in await s.prioritize(args(moved)))
    with pytest.raises(VerbError) as refused:
        await s.preempt(wire.parse_preemption_args({"Pod": moved, "NodeNameToVictims": {}}))
    assert refused.value.status == 400
    assert f"was filtered into gang {gang}" in refused.value.message, refused.value.message
    cached = s.cached(moved["metadata"]["uid"])
    assert cached is not None and cached.gang == gang


def test_only_a_filter_moves_a_pod_to_another_gang() -> None:
    """kube-scheduler filters a pod before it prioritizes it or preempts for it. A prioritize or
    preempt whose pod names another gang than the one its filter reserved (a reused UID, a spec edited
    since) leaves the pod in the reserved gang, so deleting the pod still lets that reservation go
    at once instead of at its TTL."""

    async def go() -> None:
        s = scheduler()
        p = pod("u-m", "m", "vision", spec("vision", 8, 1, "vision/first"))
        assert (await s.filter(args(p)))["NodeNames"]
        for moved in (
            pod("u-m", "m", "vision", spec("vision", 8, 1, "vision/second")),
            pod("u-m", "m2", "nlp", spec("nlp", 1)),  # a reused UID: another pod altogether
        ):
            await stays_in(s, moved, "vision/first")
        assert {g.name for g in s.core.gangs()} == {"vision/first"}
        released = await s.pod_gone("u-m")
        assert released is not None and released.gang == "vision/first"
        assert list(s.core.gangs()) == []
        assert violations(s.core) == []

    run(go())


def gpu_pod(uid: str, name: str, ns: str, gpus: int) -> dict[str, Any]:
    """A pod of topogang's profile with no spec: a convention's one-pod gang of `gpus` GPUs."""
    return {
        "metadata": {"uid": uid, "name": name, "namespace": ns},
        "spec": {
            "schedulerName": "topogang",
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
        },
        "status": {"phase": "Pending"},
    }


def test_a_spec_gangs_pod_read_as_a_gpu_pod_stays_in_its_gang() -> None:
    """A pod whose spec reserved a gang, then sent with the spec gone (a GPU pod of the profile, a
    convention's one-pod gang of its own), leaves the reserved gang as much as a spec naming another
    gang would: prioritize and preempt keep it in the reserved gang, and a filter that moves it lets
    the reservation go (`make fuzz` seed 41: a preempt moved the pod, deleting it then released
    nothing, and the gang held its GPUs until its TTL)."""

    async def go() -> None:
        s = scheduler()
        assert (await s.filter(args(pod("u-s", "s", "vision", spec("vision", 4, 1, "vision/kept")))))[
            "NodeNames"
        ]
        await stays_in(s, gpu_pod("u-s", "s2", "vision", 2), "vision/kept")
        released = await s.pod_gone("u-s")
        assert released is not None and released.gang == "vision/kept"
        assert list(s.core.gangs()) == []
        # a filter moves it: the gang it left goes at once, and the pod is the new gang's
        assert (await s.filter(args(pod("u-t", "t", "vision", spec("vision", 4, 1, "vision/left")))))[
            "NodeNames"
        ]
        assert (await s.filter(args(gpu_pod("u-t", "t", "vision", 2))))["NodeNames"]
        assert [g.name for g in s.core.gangs()] == ["vision/pod:t"]  # the GPU pod's own one-pod gang
        released = await s.pod_gone("u-t")
        assert released is not None and released.gang == "vision/pod:t"
        assert list(s.core.gangs()) == [] and violations(s.core) == []

    run(go())


def test_a_stale_attempts_pod_with_a_reserved_uid_stays_in_its_gang() -> None:
    """A filter that turns a stale framework attempt's pod away asks the core nothing, so it lets no
    gang go: a UID that reserved a gang before keeps it, and deleting the pod lets it go."""

    async def go() -> None:
        s = scheduler()
        first = pod("u-x", "x", "vision", spec("vision", 8, 1, "vision/first"))
        assert (await s.filter(args(first)))["NodeNames"]
        newer = fc_annotations("vision", "fw", "1_b", "worker", 0)
        await place(s, pod("n0", "fw-worker-0", "vision", FC_SPEC, annotations=newer))
        stale = fc_pod("u-x", 1)  # attempt 0_a, older than the 1_b just placed
        r = await s.filter(args(stale))
        assert "stale framework attempt" in next(iter(r["FailedAndUnresolvableNodes"].values()))
        cached = s.cached("u-x")
        assert cached is not None and cached.gang == "vision/first"
        released = await s.pod_gone("u-x")
        assert released is not None and released.gang == "vision/first"
        assert {g.name for g in s.core.gangs()} == {"vision/fw/1_b"}
        assert violations(s.core) == []

    run(go())


def test_a_pod_reported_finished_before_it_was_bound_lets_its_reservation_go() -> None:
    """A pod that holds no slot (its filter or preempt reserved the gang; no bind came) and is then
    reported finished, not deleted, is gone all the same: with no other pod of its gang known, the
    reservation goes at once rather than at its TTL (the pod is forgotten, so nothing later would)."""

    async def go() -> None:
        s = scheduler()
        p = pod("u-f", "f", "vision", spec("vision", 8, 1, "vision/never-bound"))
        assert (await s.filter(args(p)))["NodeNames"]
        released = await s.pod_gone("u-f", finished=True)
        assert released is not None and released.gang == "vision/never-bound"
        assert list(s.core.gangs()) == []
        assert violations(s.core) == []
        # while another pod of the gang is known, the reservation stays for it
        for uid in ("u-g", "u-h"):
            assert (await s.filter(args(pod(uid, uid, "vision", spec("vision", 8, 2, "vision/two")))))[
                "NodeNames"
            ]
        assert await s.pod_gone("u-g", finished=True) is None
        assert s.core.gang("vision/two") is not None
        assert violations(s.core) == []

    run(go())


@pytest.mark.parametrize("odd", ["\u00b2_x", "9" * 5000 + "_x"])
def test_an_attempt_uid_whose_head_int_refuses_stops_no_later_attempt(odd: str) -> None:
    """A task's attempt instance UID is its pod's annotation, the tenant's to write. One whose head
    `str.isdigit` accepts but `int` refuses reads as an attempt without a number (the latest seen
    wins), so the framework's next attempt supersedes it and is placed."""

    async def go() -> None:
        s = scheduler()
        first = pod(
            "u-o",
            "fw-worker-0",
            "vision",
            FC_SPEC,
            annotations=fc_annotations("vision", "fw", odd, "worker", 0),
        )
        r = await s.filter(args(first))
        # placed, or (5,000 digits) refused with a clear error naming the annotation
        assert (r["NodeNames"] and not r["Error"]) or "FC_FRAMEWORK_ATTEMPT_INSTANCE_UID" in r["Error"], r
        later = fc_annotations("vision", "fw", "2_b", "worker", 0)
        r = await s.filter(args(pod("u-n", "fw-worker-0-b", "vision", FC_SPEC, annotations=later)))
        assert r["NodeNames"] and not r["Error"], r
        assert {g.name for g in s.core.gangs()} == {"vision/fw/2_b"}
        assert violations(s.core) == []

    run(go())
