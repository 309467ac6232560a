"""POST /v1/explain against the real server: a what-if that answers and changes nothing."""

from __future__ import annotations

import httpx

from tests.integration.conftest import ROOT, Pods, state


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
    assert client.post("/v1/explain", content=b"{not json").status_code == 400
    assert state(client) == before


def test_the_shipped_example_pod_is_explained_as_the_readme_says(client: httpx.Client) -> None:
    """`curl -d @config/examples/explain-pod.json` (the README's): a 2 x 8-GPU gang, placed on two nodes."""
    before = state(client)
    r = client.post("/v1/explain", content=(ROOT / "config" / "examples" / "explain-pod.json").read_bytes())
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["gang"] == "vision/train" and body["vc"] == "vision"
    assert body["fitsNow"] is True  # every test cleans up after itself: vision's quota is free
    assert [len(p["gpus"]) for p in body["placement"]["pods"]] == [8, 8]
    assert len(body["placement"]["nodes"]) == 2
    assert state(client) == before
