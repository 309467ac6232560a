"""POST /v1/explain against the real server: a what-if that answers and changes nothing."""

from __future__ import annotations

import httpx

from tests.fuzz import hostile
from tests.integration.conftest import JSON_TYPE, ROOT, Pods, running_server, state


def test_explain_answers_fit_wait_and_errors_without_changing_state(client: httpx.Client, pods: Pods) -> None:
    before = state(client)
    fits = pods.make("whatif", "nlp", {"virtualCluster": "nlp", "priority": 0, "leafCellNumber": 4})
    r = client.post("/v1/explain", json=fits)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["fitsNow"] is True and len(body["placement"]["pods"]) == 1
    assert len(body["placement"]["pods"][0]["gpus"]) == 4
    assert body["chains"][0]["levels"][0]["gpusPerCell"] == 1

    big = pods.make(
        "huge",
        "research",
        {
            "virtualCluster": "research",
            "leafCellNumber": 8,
            "affinityGroup": {"name": "research/huge", "members": [{"podNumber": 3, "leafCellNumber": 8}]},
        },
    )
    body = client.post("/v1/explain", json={"Pod": big}).json()
    assert body["fitsNow"] is False and body["reason"]["code"] == "InsufficientQuota"
    assert body["reason"]["vc"] == "research"

    bad = pods.make("bad", "nlp", {"virtualCluster": "nlp", "leafCellNumber": -1})
    r = client.post("/v1/explain", json=bad)
    assert r.status_code == 422 and r.json()["field"] == "leafCellNumber"
    assert client.post("/v1/explain", content=b"{not json", headers=JSON_TYPE).status_code == 400
    assert state(client) == before


def test_the_shipped_example_pod_is_explained_as_the_readme_says(client: httpx.Client) -> None:
    """`curl -d @examples/explain-pod.json` (the README's): a 2 x 8-GPU gang, placed on two nodes."""
    before = state(client)
    r = client.post(
        "/v1/explain",
        content=(ROOT / "examples" / "explain-pod.json").read_bytes(),
        headers=JSON_TYPE,
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["gang"] == "vision/train" and body["vc"] == "vision"
    assert body["fitsNow"] is True  # every test cleans up after itself: vision's quota is free
    assert [len(p["gpus"]) for p in body["placement"]["pods"]] == [8, 8]
    assert len(body["placement"]["nodes"]) == 2
    assert state(client) == before


def test_explaining_a_placed_gang_changes_nothing() -> None:
    """`/v1/explain` of a pod naming a gang that is already bound: the what-if placed a second gang
    of that name, which the rollback left behind (a Reserved twin on other GPUs, the real gang
    orphaned and Broken in the ledger). Found by `make fuzz`."""
    ctx = hostile.Context()
    with running_server() as server, server.client(timeout=10.0) as client:
        hostile.place_baseline(client, ctx)
        before = hostile.placed_state(client)
        for pod in (hostile.plain_pod(), hostile.fc_pod(0)):
            pod["metadata"]["uid"] = "someone-else"
            r = client.post("/v1/explain", json={"Pod": pod})
            assert r.status_code == 200, r.text
            assert r.json()["existing"]["phase"] == "Bound"
        assert hostile.placed_state(client) == before
