"""The VC-takeover attack against a real `topogang serve --default-entitlement opportunistic` over
HTTP: a pod of a namespace mapped to no VC names vision at priority 1000 while vision's two gangs run;
filter, preempt and explain refuse it with the namespace, the VC, the priority and the config key,
and nothing changes."""

from __future__ import annotations

from typing import Any

import httpx

from extender import kubesched
from tests.integration.conftest import Pods, Server, running_server, state


def place(client: httpx.Client, pod: dict[str, Any], nodes: list[str]) -> dict[str, Any]:
    r = client.post("/v1/extender/filter", json={"Pod": pod, "NodeNames": nodes}).json()
    if r.get("NodeNames"):
        m = pod["metadata"]
        b = client.post(
            "/v1/extender/bind",
            json={
                "PodName": m["name"],
                "PodNamespace": m["namespace"],
                "PodUID": m["uid"],
                "Node": r["NodeNames"][0],
            },
        )
        assert b.json() == {"Error": ""}, b.json()
    return dict(r)


def gang(pods: Pods, prefix: str, ns: str, vc: str, n: int, priority: int) -> list[dict[str, Any]]:
    spec = {
        "virtualCluster": vc,
        "priority": priority,
        "leafCellNumber": 8,
        "affinityGroup": {"name": f"{prefix}-{pods.run}", "members": [{"podNumber": n, "leafCellNumber": 8}]},
    }
    return [pods.make(f"{prefix}-{i}", ns, spec) for i in range(n)]


def test_the_attack_is_refused_over_http_and_changes_nothing() -> None:
    with running_server(args=("--default-entitlement", "opportunistic")) as srv:
        assert not any("entitlement mode open" in line for line in srv.log)  # closed: no warning
        with srv.client(timeout=10.0) as client:
            nodes = kubesched.node_names(client.get(kubesched.PHYSICAL_CLUSTER).json())
            pods = Pods(client)
            for p in [
                *gang(pods, "rack", "vision", "vision", 4, 0),
                *gang(pods, "pair", "vision", "vision", 2, 0),
            ]:
                assert place(client, p, nodes).get("NodeNames"), "vision's own gangs bind"
            before = state(client)
            attack = gang(pods, "take", "intruder", "vision", 6, 1000)[0]
            r = client.post("/v1/extender/filter", json={"Pod": attack, "NodeNames": nodes}).json()
            for words in ("intruder", "'vision'", "1000", "topogang.tenants.intruder"):
                assert words in r["Error"], r
            pre = client.post("/v1/extender/preempt", json={"Pod": attack, "NodeNameToVictims": {}})
            assert pre.status_code == 400 and "topogang.tenants.intruder" in pre.text
            ex = client.post("/v1/explain", json=attack)
            assert ex.status_code == 422 and ex.json()["field"] == "priority", ex.text
            assert state(client) == before


def test_a_server_left_open_says_so_when_it_starts(server: Server) -> None:
    assert any("entitlement mode open" in line for line in server.log), "".join(server.log[:20])
