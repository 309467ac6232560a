"""The ledger API on a real standalone server, driven by FrameworkController task pods as
kube-scheduler would drive them: every phase, retries, new attempts, expiry, long-polls, the proxy."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from extender.gangs.framework import injector
from tests.barrier.test_framework import framework
from tests.integration.test_server import filter_
from tests.ledger.conftest import Job, node_names

FRAMEWORKS = "/apis/frameworkcontroller.microsoft.com/v1/namespaces"


def ready_job(job: Job) -> list[dict[str, Any]]:
    pods = job.pods()
    for p in pods:
        job.schedule(p)
    assert job.get()["phase"] == "Ready"
    return pods


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_framework_walks_every_phase_with_members_in_random_order(job: Job, seed: int) -> None:
    job.get(status=404)
    pods = job.pods()
    random.Random(seed).shuffle(pods)
    filter_(job.api, pods[0], job.nodes)
    doc = job.get()
    assert doc["kind"] == "GangStatus" and doc["phase"] == "Reserved" and not doc["ready"]
    assert (doc["expected"], doc["reserved"], doc["bound"], doc["withPodIP"]) == (3, 3, 0, 0)
    assert doc["gang"]["namespace"] == job.ns and doc["gang"]["name"] == job.fw
    assert doc["gang"]["attemptInstanceUID"] == "0_cm-a" and doc["gang"]["frameworkUID"] == f"uid-{job.fw}"
    assert [(m["taskRole"], m["taskIndex"], m["rank"]) for m in doc["members"]] == [
        ("ps", 0, 0),
        ("worker", 0, 1),
        ("worker", 1, 2),
    ]
    assert doc["placement"]["virtualCluster"] == "vision" and doc["reservedAt"].endswith("Z")
    slots = {(m["taskRole"], m["taskIndex"]): m["node"] for m in doc["members"]}
    versions = [int(doc["resourceVersion"])]
    for i, p in enumerate(pods):
        node = job.schedule(p)
        a = p["metadata"]["annotations"]
        assert node == slots[(a["FC_TASKROLE_NAME"], int(a["FC_TASK_INDEX"]))]
        doc = job.get("?attempt=0_cm-a")
        versions.append(int(doc["resourceVersion"]))
        assert doc["bound"] == i + 1
        assert doc["phase"] == ("Ready" if i == 2 else "Reserved")
    assert versions == sorted(versions) and len(set(versions)) == len(versions)
    assert doc["withPodIP"] == 3 and doc["readyAt"] and doc["boundAt"] and doc["expiresAt"] is None
    ips = [m["podIP"] for m in doc["members"]]
    assert all(ip.startswith("10.") for ip in ips) and len(set(ips)) == 3
    assert {m["podName"] for m in doc["members"]} == {p["metadata"]["name"] for p in pods}
    assert doc["framework"]["metadata"]["name"] == job.fw  # a Ready framework carries its Framework
    listed = job.api.get("/v1/gangs", params={"namespace": job.ns, "phase": "ready", "vc": "vision"}).json()
    assert job.fw in [g["name"] for g in listed["items"]] and listed["kind"] == "GangStatusList"
    assert job.fw not in [g["name"] for g in job.api.get("/v1/gangs?phase=Pending").json()["items"]]
    assert job.fw not in [g["name"] for g in job.api.get("/v1/gangs?vc=nlp").json()["items"]]


def before_its_timeout(get: Callable[[str], dict[str, Any]], query: str) -> dict[str, Any]:
    """A long-poll with the longest timeout (60 s), answered while a wait of half that is still
    running: what ended it was the gang, not its timeout. A bound on a hang, not a measurement."""
    got: dict[str, Any] = {}
    t = threading.Thread(target=lambda: got.update(get(f"{query}&timeoutSeconds=60")))
    t.start()
    t.join(30)
    assert not t.is_alive(), f"{query}: no answer before half its timeout"
    return got


def test_a_member_deleted_breaks_the_gang_and_its_retry_takes_back_its_slot(job: Job) -> None:
    pods = ready_job(job)
    before = job.get()["members"][2]
    job.delete(pods[2])
    doc = job.get()
    assert doc["phase"] == "Broken" and doc["bound"] == 2 and doc["members"][2]["state"] == "Free"
    assert "lost" in doc["reason"]
    retry = job.pod("worker", 1, uid=f"retry-{job.fw}")
    assert job.schedule(retry) == before["node"]
    doc = job.get()
    assert doc["phase"] == "Ready" and doc["members"][2]["podUID"] == f"retry-{job.fw}"
    assert (doc["members"][2]["gpus"], doc["members"][2]["rank"]) == (before["gpus"], 2)


def test_a_new_attempt_supersedes_the_old_one(job: Job) -> None:
    old = ready_job(job)
    old_nodes = {m["node"] for m in job.get()["members"]}
    new = job.pods(attempt="1_cm-b")
    filter_(job.api, new[1], job.nodes)
    r = job.api.get(f"/v1/gangs/{job.ns}/{job.fw}", params={"attempt": "0_cm-a"})
    assert r.status_code == 409 and "superseded by attempt 1_cm-b" in r.json()["message"]
    doc = job.get("?attempt=1_cm-b")
    assert doc["phase"] == "Reserved" and doc["gang"]["attemptInstanceUID"] == "1_cm-b"
    assert job.get()["gang"]["attemptInstanceUID"] == "1_cm-b"
    bound = job.api.get("/v1/standalone/bindings").json()
    assert not any(p["metadata"]["uid"] in bound for p in old)  # the old attempt's pods are evicted
    stale = filter_(job.api, job.pod("ps", 0, uid=f"late-{job.fw}"), job.nodes)
    assert stale["NodeNames"] == [] and "stale framework attempt" in next(
        iter(stale["FailedAndUnresolvableNodes"].values())
    )
    for p in new:
        job.schedule(p)
    assert job.get("?attempt=1_cm-b")["phase"] == "Ready"
    assert old_nodes  # the old placement existed; the new one is a fresh reservation


def test_a_long_poll_returns_the_moment_the_gang_is_ready(job: Job) -> None:
    pods = job.pods()
    for p in pods[:2]:
        job.schedule(p)
    got: dict[str, Any] = {}

    def poll() -> None:
        got["doc"] = job.get("?waitFor=Ready&timeoutSeconds=60&attempt=0_cm-a")

    t = threading.Thread(target=poll)
    t.start()
    time.sleep(0.5)
    assert t.is_alive()
    assert "topogang_ledger_waiters 1.0" in job.api.get("/metrics").text
    job.schedule(pods[2])
    t.join(30)  # a bound on a hang, half the poll's own 60 s timeout: only the gang's change ends it
    assert not t.is_alive() and got["doc"]["phase"] == "Ready"
    metrics = job.api.get("/metrics").text
    assert 'topogang_ledger_gangs{phase="Ready"}' in metrics and "topogang_ledger_waiters 0.0" in metrics


def test_a_long_poll_times_out_with_the_current_status(job: Job) -> None:
    filter_(job.api, job.pods()[0], job.nodes)
    # Bound never comes: the poll ends at its timeout with the phase the gang has
    assert job.get("?waitFor=Bound&timeoutSeconds=1")["phase"] == "Reserved"
    # a phase already reached answers at once
    assert before_its_timeout(job.get, "?waitFor=Reserved")["phase"] == "Reserved"


def test_a_gang_that_can_never_fit_says_so_at_once(api: httpx.Client, nodes: list[str]) -> None:
    j = Job(api, nodes, ns="research", vc="research", gpus=8)
    try:
        filter_(api, j.pods()[0], nodes)
        doc = before_its_timeout(j.get, "?waitFor=Ready")
        assert doc["phase"] == "Pending" and doc["neverFits"] and "InsufficientQuota" in doc["reason"]
        bad = j.pod("ps", 0, uid=f"bad-{j.fw}", spec={"virtualCluster": "research", "leafCellNumber": 0})
        bad["metadata"]["annotations"]["FC_FRAMEWORK_ATTEMPT_INSTANCE_UID"] = "3_x"
        assert "User Error" in filter_(api, bad, nodes)["Error"]
        doc = j.get("?attempt=3_x")
        assert doc["phase"] == "Pending" and doc["neverFits"] and "leafCellNumber" in doc["reason"]
    finally:
        j.cleanup()


def test_bad_requests(api: httpx.Client) -> None:
    assert api.get("/v1/gangs/nobody/nothing").status_code == 404
    assert api.get("/v1/gangs/nobody/nothing?waitFor=Running").status_code == 400
    assert api.get("/v1/gangs/nobody/nothing?timeoutSeconds=soon").status_code == 400
    assert api.get("/v1/gangs?phase=Done").status_code == 400
    assert api.post("/v1/gangs/nobody/nothing").status_code == 405
    assert api.delete("/v1/gangs").status_code == 405


def test_the_framework_proxy_blanks_ips_until_ready(job: Job) -> None:
    path = f"{FRAMEWORKS}/{job.ns}/frameworks/{job.fw}"
    r = job.api.get(path)
    assert r.status_code == 404 and r.json()["kind"] == "Status" and r.json()["reason"] == "NotFound"
    pods = job.pods()
    for p in pods[:2]:
        job.schedule(p)
    f = job.api.get(path).json()
    tasks = [t for role in f["status"]["attemptStatus"]["taskRoleStatuses"] for t in role["taskStatuses"]]
    assert len(tasks) == 3 and all(t["attemptStatus"]["podIP"] is None for t in tasks)
    job.schedule(pods[2])
    f = job.api.get(path).json()
    ips = {(m["taskRole"], m["taskIndex"]): m["podIP"] for m in job.get()["members"]}
    assert f["kind"] == "Framework" and f["metadata"] == {
        "namespace": job.ns,
        "name": job.fw,
        "uid": f"uid-{job.fw}",
    }
    expected = framework({"ps": [ips[("ps", 0)]], "worker": [ips[("worker", 0)], ips[("worker", 1)]]})
    assert injector(f) == injector(expected)


def test_a_reservation_whose_members_never_come_expires(short_ttl_api: httpx.Client) -> None:
    nodes = node_names(short_ttl_api)
    j = Job(short_ttl_api, nodes)
    try:
        filter_(short_ttl_api, j.pods()[0], nodes)
        assert j.get()["phase"] == "Reserved"
        doc = before_its_timeout(j.get, "?waitFor=Ready")  # the expiry ends it
        assert doc["phase"] == "Expired" and "expired" in doc["reason"] and len(doc["members"]) == 3
        again = j.get()  # the tombstone stays for the other members' barriers
        assert again["phase"] == "Expired" and again["resourceVersion"] == doc["resourceVersion"]
    finally:
        j.cleanup()
