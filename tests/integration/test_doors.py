"""The verbs' door against real servers on 127.0.0.1: standalone's state changes are not on the read
listener; in Kubernetes mode (the in-memory API server of loadtest/kubefake.py behind a real uvicorn) a
forged filter, for a pod the watch does not know or under another pod's UID, places nothing, binds
nothing, evicts nothing and writes no Event, while the very same request for the real pod does.
(Mutual TLS and the allowed certificate names: tests/integration/test_tls.py.)"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any

import httpx
import uvicorn

from extender.http.app import build_apps
from extender.http.httpproto import JSONErrorsHttpTools
from extender.kube.client import pod_path
from extender.kube.service import kube_service
from loadtest.kubefake import FakeKube
from tests.extender.helpers import Clock, example, nodes, pod, ready_node, run, spec, until_ready
from tests.integration.conftest import running_server
from tests.polling import poll

NS = "topogang-system"


def test_standalone_serves_state_changes_only_on_the_verbs_listener() -> None:
    with running_server() as server:
        poll(
            "the banner's loopback line",
            lambda: "on 127.0.0.1 only" in "".join(server.log),
            tries=100,
            interval=0.05,
        )
        assert server.verbs_url != server.url
        read = httpx.Client(base_url=server.url, timeout=10.0)
        verbs = httpx.Client(base_url=server.verbs_url, timeout=10.0)
        with read, verbs:
            assert read.delete("/v1/standalone/pods/u1").status_code == 404
            assert read.put("/v1/standalone/nodes/a100-r1-n1", json={"ready": False}).status_code == 404
            assert read.post("/v1/extender/bind", json={}).status_code == 404
            assert read.get("/v1/standalone/bindings").status_code == 200  # reading stays
            assert verbs.get("/v1/inspect").status_code == 404  # and the verbs listener reads nothing
            r = verbs.put("/v1/standalone/nodes/a100-r1-n1", json={"ready": True})
            assert r.status_code == 200 and r.json()["node"] == "a100-r1-n1"
            assert verbs.delete("/v1/standalone/pods/u1").json()["wasBound"] is False
            # a body nested deeper than a parser recurses is a 400, not a RecursionError's 500
            r = verbs.put("/v1/standalone/nodes/a100-r1-n1", content=b"[" * 5000)
            assert r.status_code == 400 and "expected" in r.json()["error"]


# ------------------------------------------------------------------------------------ Kubernetes mode
def _socket() -> socket.socket:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(64)
    return s


@contextlib.asynccontextmanager
async def serving(kube: FakeKube) -> AsyncIterator[tuple[str, str]]:
    """The Kubernetes-mode service on two real listeners, as `topogang serve` runs it: (read URL,
    verbs URL), once ready. The read listener is made the admin listener (no tokens: the tenant and
    admin doors are `test_read_doors`'), so these tests read the cluster-wide views as an admin."""
    service = kube_service(example(), kube, clock=Clock(), namespace=NS)
    socks = [_socket(), _socket()]
    service.admin_port = socks[0].getsockname()[1]
    apps = build_apps(service)
    servers = [
        uvicorn.Server(
            uvicorn.Config(
                app,
                lifespan="on" if app is apps.reads else "off",
                log_level="warning",
                http=JSONErrorsHttpTools,
                ws="none",
            )
        )
        for app in (apps.reads, apps.verbs)
    ]
    tasks = [asyncio.create_task(srv.serve(sockets=[s])) for srv, s in zip(servers, socks, strict=True)]
    read, verbs = (f"http://127.0.0.1:{s.getsockname()[1]}" for s in socks)
    try:
        async with httpx.AsyncClient(timeout=5.0) as c:
            await until_ready(c, f"{read}/readyz", "the Kubernetes-mode service")
        yield read, verbs
    finally:
        for srv in servers:
            srv.should_exit = True
        await asyncio.gather(*tasks, return_exceptions=True)
        for s in socks:
            s.close()


def create(kube: FakeKube, p: dict[str, Any]) -> dict[str, Any]:
    m = p["metadata"]
    body = {**p, "metadata": {k: v for k, v in m.items() if k != "uid"}}
    return kube.server.create(f"/api/v1/namespaces/{m['namespace']}/pods", body)


async def until(what: str, ok: Any) -> None:
    for _ in range(500):
        if ok():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def filter_body(p: dict[str, Any]) -> dict[str, Any]:
    return {"Pod": p, "Nodes": None, "NodeNames": nodes()}


def test_forged_filters_decide_nothing_and_the_real_pod_is_scheduled() -> None:
    async def go() -> None:
        kube = FakeKube()
        for n in nodes():
            kube.server.put(f"/api/v1/nodes/{n}", ready_node(n, 8))
        async with serving(kube) as (read, verbs), httpx.AsyncClient(base_url=verbs, timeout=10.0) as c:
            await until("the pod watch", lambda: kube.caught_up("/api/v1/pods"))
            # the vision team's low-priority gang fills its VC: six 8-GPU pods, each filtered and bound
            low = spec("vision", 8, pods=6, group="vision/low", priority=0)
            team = [create(kube, pod("", f"low-{i}", "vision", low)) for i in range(6)]
            await until("the gang watched", lambda: kube.caught_up("/api/v1/pods"))
            for p in team:
                got = (await c.post("/v1/extender/filter", json=filter_body(p))).json()
                assert got["NodeNames"], got
                m = p["metadata"]
                bind = {"PodName": m["name"], "PodNamespace": "vision", "PodUID": m["uid"]}
                r = await c.post("/v1/extender/bind", json={**bind, "Node": got["NodeNames"][0]})
                assert r.json() == {"Error": ""}
            bound = [kube.server.at(pod_path("vision", f"low-{i}"))["spec"].get("nodeName") for i in range(6)]
            assert all(bound), bound
            async with httpx.AsyncClient(base_url=read, timeout=10.0) as rc:
                before = (await rc.get("/v1/inspect")).json()
            events = kube.server.event_count
            urgent = spec("vision", 8, pods=1, group="vision/urgent", priority=100)

            # 1. a pod the API server has never had
            forged = pod("f0000000-0000-4000-8000-000000000001", "urgent", "vision", urgent)
            r = (await c.post("/v1/extender/filter", json=filter_body(forged))).json()
            assert "not known from the API server" in r["Error"] and not r["NodeNames"]
            # 2. another pod's UID (a low-priority member's, readable from /v1/gangs) under other names
            stolen = pod(team[0]["metadata"]["uid"], "urgent", "research", urgent)
            r = (await c.post("/v1/extender/filter", json=filter_body(stolen))).json()
            assert "is vision/low-0 on the API server" in r["Error"] and not r["NodeNames"]
            # 3. preempt and bind for them: no victims, no Binding
            pre = await c.post("/v1/extender/preempt", json={"Pod": forged, "NodeNameToMetaVictims": {}})
            assert pre.status_code == 503 and "not known" in pre.json()["Error"]
            fm = forged["metadata"]
            bind = {"PodName": fm["name"], "PodNamespace": "vision", "PodUID": fm["uid"], "Node": nodes()[0]}
            assert "does not exist" in (await c.post("/v1/extender/bind", json=bind)).json()["Error"]
            prio = (await c.post("/v1/extender/prioritize", json=filter_body(forged))).json()
            assert {h["Score"] for h in prio} == {0}

            await asyncio.sleep(0.2)  # an eviction or Event would be on its way by now
            assert all(kube.server.get(pod_path("vision", f"low-{i}")) is not None for i in range(6))
            assert not any(kube.server.at(pod_path("vision", f"low-{i}")).get("metadata", {}).get(
                "deletionTimestamp") for i in range(6))  # fmt: skip
            assert kube.server.event_count == events
            async with httpx.AsyncClient(base_url=read, timeout=10.0) as rc:
                assert (await rc.get("/v1/inspect")).json()["gangs"] == before["gangs"]

            # the same filter for the pod the API server has: it preempts the low-priority gang
            real = create(kube, pod("", "urgent", "vision", urgent))
            await until("the urgent pod watched", lambda: kube.caught_up("/api/v1/pods"))
            r = (await c.post("/v1/extender/filter", json=filter_body(real))).json()
            assert not r["NodeNames"], r  # it waits for its victims to go

            def evicted() -> bool:
                return any(
                    kube.server.get(pod_path("vision", f"low-{i}")) is None
                    or kube.server.at(pod_path("vision", f"low-{i}"))
                    .get("metadata", {})
                    .get("deletionTimestamp")
                    for i in range(6)
                )

            await until("the low-priority gang evicted", evicted)

    run(go())
