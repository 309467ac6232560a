"""A FrameworkController gang reserved (placed whole, no member bound yet) when the extender
restarts or fails over comes back from its GangReservation (`reservation_sync.restore`), and its
ledger record takes the framework's identity when the framework's pods are filtered again. Before,
the record made from the gang's key (`GangLedger._record_for`: namespace `vision`, name
`tf/0_cm-a`, no attempt) kept that identity, the tenant door named the pods' gang
`vision/tf/0_cm-a`, not framework `vision/tf`, and every barrier of the framework
(`/v1/gangs/vision/tf?attempt=...`, and the stock FrameworkBarrier through the Framework proxy)
got 403 for the whole attempt, although the gang went Ready."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any

import httpx
import uvicorn

from extender.http.app import Service, build_app
from extender.http.doors import FRAMEWORK_PATH
from extender.kube.client import pod_path
from extender.kube.service import framework_path, kube_service
from loadtest.kubefake import FakeKube
from tests.extender.helpers import Clock, example, nodes, ready_node, until_ready
from tests.integration.test_read_doors import framework_object
from tests.ledger.fc import members


@contextlib.asynccontextmanager
async def serving(kube: FakeKube, clock: Clock) -> AsyncIterator[tuple[Service, httpx.AsyncClient]]:
    service = kube_service(example(), kube, clock=clock, namespace="topogang-system")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    server = uvicorn.Server(uvicorn.Config(build_app(service), log_level="warning", access_log=False))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{sock.getsockname()[1]}", timeout=10) as h:
            await until_ready(h)
            yield service, h
    finally:
        server.should_exit = True
        await task
        sock.close()


async def filter_pod(h: httpx.AsyncClient, p: dict[str, Any]) -> str:
    r = await h.post("/v1/extender/filter", json={"Pod": p, "Nodes": None, "NodeNames": nodes()})
    assert r.json().get("NodeNames"), r.text
    return str(r.json()["NodeNames"][0])


async def bind(h: httpx.AsyncClient, p: dict[str, Any], node: str) -> None:
    m = p["metadata"]
    binding = {"PodName": m["name"], "PodNamespace": m["namespace"], "PodUID": m["uid"], "Node": node}
    r = await h.post("/v1/extender/bind", json=binding)
    assert r.json() == {"Error": ""}, r.text


def test_a_framework_gang_restored_from_its_reservation_is_read_by_its_barriers() -> None:
    async def go() -> None:
        kube = FakeKube()
        for n in nodes():
            kube.server.put(f"/api/v1/nodes/{n}", ready_node(n, 8))
        kube.server.put(framework_path("vision", "tf"), framework_object("vision", "tf"))
        fc = members("vision", "tf", attempt="0_cm-a")  # ps-0, worker-0, worker-1
        for p in fc:
            kube.server.put(pod_path("vision", p["metadata"]["name"]), p)
        kube.server.pod_token("t-ps", fc[0])
        ps = {"Authorization": "Bearer t-ps"}
        clock = Clock(1000.0)
        async with serving(kube, clock) as (_, h):
            await filter_pod(h, fc[0])  # the gang is placed whole: a reservation, written through
        clock.t += 5  # a restart (or fail-over) before any member is bound
        async with serving(kube, clock) as (service, h):
            assert service.scheduler.core.gang("vision/tf/0_cm-a") is not None  # restored
            for i, p in enumerate(fc):
                await bind(h, p, await filter_pod(h, p))
                path = pod_path("vision", p["metadata"]["name"])
                kube.server.patch(path, {"status": {"phase": "Running", "podIP": f"10.0.0.{i + 1}"}})
            for _ in range(200):
                rec = service.scheduler.gang_ledger.records["vision/tf/0_cm-a"]
                if rec.phase.value == "Ready":
                    break
                await asyncio.sleep(0.02)
            r = await h.get("/v1/gangs/vision/tf?attempt=0_cm-a", headers=ps)
            assert r.status_code == 200, r.text
            assert r.json()["phase"] == "Ready" and r.json()["gang"]["attemptInstanceUID"] == "0_cm-a"
            r = await h.get(FRAMEWORK_PATH.format(namespace="vision", name="tf"), headers=ps)
            assert r.status_code == 200, r.text

    asyncio.run(go())
