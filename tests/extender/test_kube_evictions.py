"""Evictions mark the pod as kube-scheduler marks a preemption victim, then delete it: who may
write the mark (the extender, with `pods/status` patch), what the victim's namespace reads (the
preempting gang named only when it is of the same namespace), and in which namespace each pod is
read (its own, by the UID the extender knows it by)."""

from __future__ import annotations

import copy
from typing import Any

from extender.gangs import disruption
from extender.gangs.disruption import Disruption
from extender.kube.client import pod_path
from extender.kube.pods import DISRUPTION_TARGET, disrupted
from extender.kube.sync import ClusterSync
from loadtest.kubefake import FakeKube, Fault
from tests.extender.helpers import run, scheduler

RUNNING = [
    {"type": "PodScheduled", "status": "True"},
    {"type": "Ready", "status": "True"},
]


def cluster(
    *pods: tuple[str, str, str],
) -> tuple[FakeKube, ClusterSync, list[tuple[str, str, str, Disruption]]]:
    """The fake API server with these (uid, namespace, name) pods running, a sync that knows them by
    their watched copies, and the list its `on_evicted` calls land in."""
    kube = FakeKube(record=True)
    sync = ClusterSync(scheduler(), kube)
    told: list[tuple[str, str, str, Disruption]] = []
    sync.on_evicted = lambda ns, name, uid, why: told.append((ns, name, uid, why))
    for uid, ns, name in pods:
        stored = kube.server.put(
            pod_path(ns, name),
            {
                "metadata": {"uid": uid, "name": name, "namespace": ns, "generation": 1},
                "status": {"conditions": RUNNING},
            },
        )
        sync.live[uid] = (ns, name)
        sync.pods[uid] = copy.deepcopy(stored)
    return kube, sync, told


def evictions(sync: ClusterSync, reason: str, outcome: str) -> float:
    """`topogang_evictions_total` for this reason and outcome."""
    got = sync.s.metrics.registry.get_sample_value(
        "topogang_evictions_total", {"reason": reason, "outcome": outcome}
    )
    return got or 0.0


def status_patches(kube: FakeKube) -> list[dict[str, Any]]:
    return [
        dict(body or {})
        for method, path, body in kube.calls
        if method == "PATCH" and path.endswith("/status")
    ]


def mark_of(patch: dict[str, Any]) -> dict[str, Any]:
    (mark,) = [c for c in patch["status"]["conditions"] if c["type"] == DISRUPTION_TARGET]
    return dict(mark)


def test_a_victim_is_marked_disrupted_before_it_is_deleted_with_a_uid_precondition() -> None:
    async def go() -> None:
        kube, sync, told = cluster(("u1", "nlp", "w-1"))
        await sync.evict(["u1", "unknown"], disruption.preempted_by("nlp/big"))
        methods = [(m, p) for m, p, _ in kube.calls]
        assert methods == [
            ("PATCH", "/api/v1/namespaces/nlp/pods/w-1/status"),
            ("DELETE", "/api/v1/namespaces/nlp/pods/w-1"),
        ]
        (patch,) = status_patches(kube)
        mark = mark_of(patch)
        assert mark["status"] == "True" and mark["reason"] == "PreemptionByScheduler"
        assert mark["observedGeneration"] == 1
        assert mark["message"].startswith("topogang: preempting to accommodate") and mark["message"].endswith(
            "(big)"
        )
        assert [c["type"] for c in patch["status"]["conditions"]] == [
            "PodScheduled",
            "Ready",
            DISRUPTION_TARGET,
        ]
        assert kube.calls[-1][2] == {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "preconditions": {"uid": "u1"},
        }
        assert [(ns, name, uid) for ns, name, uid, _ in told] == [("nlp", "w-1", "u1")]
        assert evictions(sync, "PreemptionByScheduler", "marked") == 1

    run(go())


def test_a_victim_of_another_namespace_reads_no_name_of_the_preempting_gang() -> None:
    async def go() -> None:
        kube, sync, _ = cluster(("u1", "vision", "w-1"))
        await sync.evict(["u1"], disruption.preempted_by("nlp/secret-project"))
        message = mark_of(status_patches(kube)[0])["message"]
        assert "secret-project" not in message and "nlp" not in message
        assert message == "topogang: preempting to accommodate a higher priority pod group"

    run(go())


def test_a_gang_name_reaches_the_mark_printable_and_cut_short() -> None:
    async def go() -> None:
        kube, sync, _ = cluster(("u1", "nlp", "w-1"))
        await sync.evict(["u1"], disruption.preempted_by("nlp/" + "x" * 2000 + "\x1b[31m"))
        message = mark_of(status_patches(kube)[0])["message"]
        assert len(message) <= 512 and "\x1b" not in message

    run(go())


def test_a_stale_copy_is_read_again_and_the_kubelets_newer_conditions_are_kept() -> None:
    async def go() -> None:
        kube, sync, told = cluster(("u1", "nlp", "w-1"))
        path = pod_path("nlp", "w-1")
        newer = copy.deepcopy(kube.server.get(path))
        assert newer is not None
        newer["status"]["conditions"] = [*RUNNING, {"type": "ContainersReady", "status": "False"}]
        kube.server.put(path, newer)  # the kubelet wrote since the watched copy: a new resourceVersion
        await sync.evict(["u1"], disruption.reservation_expired())
        first, second = status_patches(kube)
        assert first["metadata"]["resourceVersion"] != second["metadata"]["resourceVersion"]
        assert [c["type"] for c in second["status"]["conditions"]] == [
            "PodScheduled",
            "Ready",
            "ContainersReady",
            DISRUPTION_TARGET,
        ]
        assert mark_of(second)["reason"] == "GangReservationExpired"
        assert kube.calls[-1][0] == "DELETE" and len(told) == 1

    run(go())


def test_a_pod_replaced_under_the_same_name_is_neither_marked_nor_deleted() -> None:
    async def go() -> None:
        kube, sync, told = cluster(("u1", "nlp", "w-1"))
        path = pod_path("nlp", "w-1")
        kube.server.delete(path, None)
        kube.server.put(path, {"metadata": {"uid": "u2", "name": "w-1", "namespace": "nlp"}, "status": {}})
        await sync.evict(["u1"], disruption.preempted_by("nlp/big"))
        assert len(status_patches(kube)) == 1  # the stale copy's write, refused (409); no second
        stored = kube.server.get(path)
        assert stored is not None and not disrupted(stored)  # neither marked nor deleted
        assert told == [] and evictions(sync, "PreemptionByScheduler", "not deleted") == 1

    run(go())


def test_a_pod_whose_status_cannot_be_written_is_deleted_all_the_same() -> None:
    async def go() -> None:
        kube, sync, told = cluster(("u1", "nlp", "w-1"))
        kube.inject(Fault("PATCH", r"/pods/w-1/status$", "error", status=403))
        await sync.evict(["u1"], disruption.not_whole("nlp/pair"))
        assert kube.server.get(pod_path("nlp", "w-1")) is None
        assert len(told) == 1 and told[0][3].reason == "GangNotWhole"
        assert evictions(sync, "GangNotWhole", "unmarked") == 1

    run(go())


def test_a_write_without_an_answer_stops_neither_the_deletion_nor_the_next_pod() -> None:
    async def go() -> None:
        kube, sync, told = cluster(("u1", "nlp", "w-1"), ("u2", "nlp", "w-2"))
        kube.inject(Fault("PATCH", r"/pods/w-1/status$", "timeout"))
        kube.inject(Fault("DELETE", r"/pods/w-1$", "timeout"))
        await sync.evict(["u1", "u2"], disruption.preempted_by("nlp/big"))
        assert kube.server.get(pod_path("nlp", "w-1")) is not None  # its deletion had no answer
        assert kube.server.get(pod_path("nlp", "w-2")) is None
        assert [uid for _, _, uid, _ in told] == ["u2"]
        assert evictions(sync, "PreemptionByScheduler", "not deleted") == 1
        assert evictions(sync, "PreemptionByScheduler", "marked") == 1

    run(go())


def test_a_pod_marked_already_is_not_marked_again() -> None:
    async def go() -> None:
        kube, sync, _ = cluster(("u1", "nlp", "w-1"))
        pod = copy.deepcopy(dict(sync.pods["u1"]))
        pod["status"]["conditions"] = [*RUNNING, {"type": DISRUPTION_TARGET, "status": "True"}]
        sync.pods["u1"] = pod  # kube-scheduler marked it for its own preemption
        await sync.evict(["u1"], disruption.preempted_by("nlp/big"))
        assert status_patches(kube) == [] and kube.calls[-1][0] == "DELETE"

    run(go())


def test_every_cause_has_a_reason_the_api_server_accepts_and_a_namespaced_message() -> None:
    causes = [
        disruption.preempted_by("a/g"),
        disruption.reservation_expired(),
        disruption.superseded("a/fw/attempt-2"),
        disruption.not_whole("a/g"),
        disruption.off_placement(disruption.OFF_PLACEMENT_WHY),
    ]
    assert len({c.reason for c in causes}) == len(causes)
    for c in causes:
        assert c.reason.isalnum() and c.reason[0].isupper()  # a CamelCase reason, as the API validates
        for ns in ("a", "b"):
            text = c.message(ns)
            assert text.startswith("topogang: ") and (ns == "a" or "(" not in text)
