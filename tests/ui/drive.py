"""Driving a real extender as kube-scheduler would (filter → prioritize → bind), for the UI tests."""

from __future__ import annotations

from typing import Any

import httpx

from tests.integration.conftest import Pods


def gang_spec(gang: str, vc: str, pods: int, gpus: int, priority: int = 100) -> dict[str, Any]:
    return {
        "virtualCluster": vc,
        "priority": priority,
        "leafCellNumber": gpus,
        "affinityGroup": {"name": gang, "members": [{"podNumber": pods, "leafCellNumber": gpus}]},
    }


def filter_(client: httpx.Client, pod: dict[str, Any], names: list[str]) -> dict[str, Any]:
    r = client.post("/v1/extender/filter", json={"Pod": pod, "Nodes": None, "NodeNames": names})
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    assert not body["Error"], body["Error"]
    return body


def schedule(client: httpx.Client, pod: dict[str, Any], names: list[str]) -> str | None:
    """One kube-scheduler cycle for a pod: the node it was bound to, or None when it waits."""
    survivors = filter_(client, pod, names)["NodeNames"] or []
    if not survivors:
        return None
    node: str = survivors[0]
    if len(survivors) > 1:
        r = client.post("/v1/extender/prioritize", json={"Pod": pod, "Nodes": None, "NodeNames": survivors})
        assert r.status_code == 200, r.text
        node = max(r.json(), key=lambda h: h["Score"])["Host"]
    m = pod["metadata"]
    r = client.post(
        "/v1/extender/bind",
        json={"PodName": m["name"], "PodNamespace": m["namespace"], "PodUID": m["uid"], "Node": node},
    )
    assert r.status_code == 200 and r.json()["Error"] == "", r.text
    return node


def schedule_gang(
    client: httpx.Client,
    pods: Pods,
    names: list[str],
    gang: str,
    vc: str,
    n: int,
    gpus: int,
    *,
    bind: int = -1,
) -> list[dict[str, Any]]:
    """Create a gang's pods and schedule the first `bind` of them (all with -1); the first filter
    reserves the whole gang, so unbound members' GPUs show as reserved."""
    spec = gang_spec(gang, vc, n, gpus)
    members = [pods.make(f"{gang.split('/')[-1]}-{i}", vc, spec) for i in range(n)]
    todo = members if bind < 0 else members[:bind]
    if not todo:
        filter_(client, members[0], names)
    for p in todo:
        assert schedule(client, p, names) is not None, f"{gang}: a member did not schedule"
    return members


def placement(client: httpx.Client, gang: str) -> set[tuple[str, int]]:
    """(node, GPU index) of every GPU the gang holds, from the HiveD-shaped inspect API."""
    r = client.get(f"/v1/inspect/affinitygroups/{gang}")
    assert r.status_code == 200, r.text
    phys: dict[str, list[int]] = r.json()["status"]["physicalPlacement"]
    return {(node, i) for node, gpus in phys.items() for i in gpus}


def node_names(client: httpx.Client) -> list[str]:
    doc = client.get("/v1/ui/state").json()
    out: list[str] = []

    def walk(c: Any) -> None:
        if isinstance(c, str):
            out.append(c)
        else:
            for k in c[1]:
                walk(k)

    for ch in doc["layout"]["chains"]:
        for top in ch[4]:
            walk(top)
    return out
