"""The real server over HTTP, driven as kube-scheduler drives it."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

import httpx
import pytest

from extender import kubesched
from tests.integration.conftest import JSON_TYPE, Pods, state


def filter_(client: httpx.Client, pod: dict[str, Any], names: list[str]) -> dict[str, Any]:
    r = client.post("/v1/extender/filter", json={"Pod": pod, "Nodes": None, "NodeNames": names})
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/json")
    body: dict[str, Any] = r.json()
    assert set(body) == {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}
    return body


def bind(client: httpx.Client, pod: dict[str, Any], node: str) -> str:
    m = pod["metadata"]
    r = client.post(
        "/v1/extender/bind",
        json={"PodName": m["name"], "PodNamespace": m["namespace"], "PodUID": m["uid"], "Node": node},
    )
    assert r.status_code == 200
    error: str = r.json()["Error"]
    return error


class Checked:
    """`extender.kubesched`'s transport over the test's client, checking every reply's shape; no
    pod here is bound where it could preempt, so its dry run names no victims."""

    def __init__(self, client: httpx.Client) -> None:
        self.client = client

    def filter(self, pod: kubesched.Pod, names: Sequence[str]) -> dict[str, Any]:
        return filter_(self.client, dict(pod), list(names))

    def prioritize(self, pod: kubesched.Pod, names: Sequence[str]) -> list[dict[str, Any]]:
        r = self.client.post("/v1/extender/prioritize", json={"Pod": pod, "Nodes": None, "NodeNames": names})
        assert r.status_code == 200
        ranked: list[dict[str, Any]] = r.json()
        assert [h["Host"] for h in ranked] == names and all(0 <= h["Score"] <= 10 for h in ranked)
        return ranked

    def bind(self, pod: kubesched.Pod, node: str) -> dict[str, Any]:
        return {"Error": bind(self.client, dict(pod), node)}

    def preempt(self, pod: kubesched.Pod, victims: Mapping[str, Any]) -> Any:
        raise AssertionError("the dry run named no victims")

    def dry_run(self, nodes: Sequence[str], priority: int) -> dict[str, Any]:
        return {}

    def evict(self, chosen: Mapping[str, Any]) -> None:
        raise AssertionError("nothing to evict")


def schedule(client: httpx.Client, pod: dict[str, Any], names: list[str]) -> str | None:
    """One kube-scheduler cycle (`extender.kubesched`'s): the node bound, or None."""
    checked = Checked(client)
    outcome = kubesched.drive(kubesched.schedule(pod, names, checked), checked)
    assert outcome.node is not None or not outcome.text.startswith("bind failed"), outcome
    return outcome.node


def group(client: httpx.Client, name: str) -> dict[str, Any]:
    r = client.get(f"/v1/inspect/affinitygroups/{name}")
    assert r.status_code == 200, r.text
    doc: dict[str, Any] = r.json()
    return doc


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_four_pod_gang_filtered_in_random_order(
    client: httpx.Client, pods: Pods, node_names: list[str], seed: int
) -> None:
    gang = f"vision/llm-{pods.run}"
    spec = {
        "virtualCluster": "vision",
        "priority": 100,
        "leafCellNumber": 8,
        "affinityGroup": {"name": gang, "members": [{"podNumber": 4, "leafCellNumber": 8}]},
    }
    members = [pods.make(f"w{i}", "vision", spec) for i in range(4)]
    random.Random(seed).shuffle(members)
    first = filter_(client, members[0], node_names)
    placement = group(client, gang)["status"]["physicalPlacement"]
    assert len(placement) == 4 and all(len(g) == 8 for g in placement.values())
    assert set(first["NodeNames"]) == set(placement)
    bound: list[str] = []
    for p in members:
        node = schedule(client, p, node_names)
        assert node is not None and node in placement
        bound.append(node)
    assert sorted(bound) == sorted(placement)
    status = group(client, gang)["status"]
    assert status["state"] == "Allocated" and len(status["allocatedPods"]) == 4
    assert status["lcaCellType"] == "A100-RACK"


def test_a_gang_too_big_waits_with_its_reason_in_every_node(
    client: httpx.Client, pods: Pods, node_names: list[str]
) -> None:
    spec = {
        "virtualCluster": "research",
        "leafCellNumber": 8,
        "affinityGroup": {
            "name": f"research/big-{pods.run}",
            "members": [{"podNumber": 3, "leafCellNumber": 8}],
        },
    }
    before = state(client)
    r = filter_(client, pods.make("big", "research", spec), node_names)
    assert r["NodeNames"] == [] and r["Error"] == ""
    reasons = {**r["FailedNodes"], **r["FailedAndUnresolvableNodes"]}
    assert set(reasons) == set(node_names)
    assert all("[InsufficientQuota]" in m and f"big-{pods.run}" in m for m in reasons.values())
    assert state(client) == before
    waiting = group(client, f"research/big-{pods.run}")["status"]
    assert waiting["state"] == "Waiting" and waiting["waitReason"]["needed"] == 24


def test_preempt_names_whole_lower_priority_gangs(
    client: httpx.Client, pods: Pods, node_names: list[str]
) -> None:
    low = [
        pods.make(f"low{i}", "nlp", {"virtualCluster": "nlp", "priority": 1, "leafCellNumber": 8})
        for i in range(3)
    ]
    for p in low:
        assert schedule(client, p, node_names) is not None
    urgent = pods.make("urgent", "nlp", {"virtualCluster": "nlp", "priority": 900, "leafCellNumber": 8})
    r = filter_(client, urgent, node_names)
    assert r["NodeNames"] == [] and r["FailedNodes"]  # preemption may help
    low_uids = {p["metadata"]["uid"] for p in low}
    meta = {
        n: {"Pods": [{"UID": u} for u in sorted(low_uids)], "NumPDBViolations": 0}
        for n in list(r["FailedNodes"])[:3]
    }
    pre = client.post(
        "/v1/extender/preempt", json={"Pod": urgent, "NodeNameToVictims": None, "NodeNameToMetaVictims": meta}
    )
    assert pre.status_code == 200
    answer = pre.json()
    assert set(answer) == {"NodeNameToMetaVictims"}
    victims = answer["NodeNameToMetaVictims"]
    if victims is None:  # the null shape: nothing to preempt
        return
    assert victims and all(v["Pods"] and v["NumPDBViolations"] == 0 for v in victims.values())
    uids = {p["UID"] for v in victims.values() for p in v["Pods"]}
    assert uids <= low_uids
    # the standalone server evicts whole victim gangs itself; the preemptor then gets its reservation
    for _ in range(50):
        if schedule(client, urgent, node_names) is not None:
            break
    else:
        pytest.fail("the preemptor never got its node")


def test_duplicate_and_out_of_order_calls(client: httpx.Client, pods: Pods, node_names: list[str]) -> None:
    spec = {"virtualCluster": "nlp", "leafCellNumber": 2}
    p = pods.make("solo", "nlp", spec)
    node = schedule(client, p, node_names)
    assert node is not None
    settled = state(client)
    assert bind(client, p, node) == ""  # bind twice
    assert filter_(client, p, node_names)["NodeNames"] == [node]  # filter after bind
    other = next(n for n in node_names if n != node)
    assert "already holds slot" in bind(client, p, other)  # bind elsewhere
    m = p["metadata"]
    stale = client.post(
        "/v1/extender/bind",
        json={"PodName": m["name"], "PodNamespace": "nlp", "PodUID": "stale-uid", "Node": node},
    ).json()["Error"]
    assert "stale PodUID" in stale
    ghost = pods.make("ghost", "nlp", spec)
    assert "without a scheduling placement" in bind(client, ghost, node)  # bind without filter
    assert state(client) == settled


def test_node_list_form_is_answered_with_node_objects(
    client: httpx.Client, pods: Pods, node_names: list[str]
) -> None:
    p = pods.make("nodes-form", "nlp", {"virtualCluster": "nlp", "leafCellNumber": 1})
    items = [{"metadata": {"name": n, "labels": {"x": "y"}}, "status": {}} for n in node_names]
    r = client.post(
        "/v1/extender/filter", json={"Pod": p, "Nodes": {"metadata": {}, "items": items}, "NodeNames": None}
    )
    body = r.json()
    assert r.status_code == 200 and body["NodeNames"] is None and body["Error"] == ""
    kept = body["Nodes"]["items"]
    assert len(kept) == 1 and kept[0] in items


def test_service_endpoints(client: httpx.Client) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json() == {"ready": True}
    paths = client.get("/").json()["paths"]
    assert {"/metrics", "/v1/inspect/clusterstatus", "/v1/gangs"} <= set(paths)
    assert not [p for p in paths if p.startswith("/v1/extender/")]  # behind the verbs' door
    miss = client.get("/nowhere")
    assert miss.status_code == 404 and miss.json() == {"Error": "Path not found: /nowhere"}
    wrong = client.get("/v1/extender/filter")
    assert wrong.status_code == 405 and "NotImplemented" in wrong.json()["Error"]
    vcs = client.get("/v1/inspect/clusterstatus/virtualclusters/").json()
    assert set(vcs) == {"vision", "nlp", "research"}
    assert client.get("/v1/inspect/clusterstatus/virtualclusters/nope").status_code == 404
    assert client.get("/v1/inspect/affinitygroups/no/such").status_code == 404
    metrics = client.get("/metrics")
    assert metrics.headers["content-type"].startswith("text/plain")
    for name in (
        "topogang_extender_request_duration_seconds_bucket",
        "topogang_gangs",
        "topogang_vc_gpus",
        "topogang_cells_free",
        "topogang_reservation_expiries_total",
    ):
        assert name in metrics.text


def test_malformed_verbs_get_errors_in_their_own_shape(client: httpx.Client) -> None:
    for verb in ("filter", "prioritize", "bind"):
        r = client.post(f"/v1/extender/{verb}", content=b"{not json", headers=JSON_TYPE)
        assert r.status_code == 200 and "not JSON" in r.json()["Error"]
    r = client.post("/v1/extender/preempt", content=b"[]", headers=JSON_TYPE)
    assert r.status_code == 400 and "expected an object" in r.json()["Error"]
    r = client.post("/v1/extender/bind", json={"PodName": "a", "PodNamespace": "b", "PodUID": "c"})
    assert r.json()["Error"] == "topogang: malformed bind request: Node: required key is missing"
