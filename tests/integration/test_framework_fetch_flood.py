"""A job pod, with its own valid token, asks for its own Ready framework gang over and over as a
"long-poll" (`?waitFor=Ready`: answered at once, since the gang is Ready). Each answer reads the
Framework from the API server (`ledger_api.framework_for`, no cache), in the default thread pool that
kube-scheduler's Bindings share; long-polls have no server-wide cap, so 16 pod IPs queue ~1,000
Framework GETs ahead of the next bind (filter and bind took 3.5 s under it against 0.07 s alone, with a
20 ms API server). Same model as test_review_flood.py: each API call holds a worker thread for RTT,
and what is asserted is how many readers' calls were in that pool at once."""

from __future__ import annotations

import asyncio

import httpx
import pytest

import tests.integration.test_read_doors as doors
from extender.http.app import build_app
from extender.kube.client import pod_path
from extender.kube.reviews import MAX_READER_CALLS
from tests.extender.helpers import nodes, pod, spec
from tests.integration.test_review_flood import ADDRESSES, PER_ADDRESS, Threaded, most_at_once


def test_a_pods_reads_of_its_own_gang_do_not_fill_the_pool_binds_use(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doors, "FakeKube", Threaded)

    async def go() -> None:
        async with doors.serving() as scene:
            await doors.place(scene)
            h = doors.tokens(scene)
            app = build_app(scene.service)
            stop = asyncio.Event()
            fetched = [0]

            async def own_gang(ip: str) -> None:
                t = httpx.ASGITransport(app=app, client=(ip, 40000))
                async with httpx.AsyncClient(transport=t, base_url="http://127.0.0.1", timeout=60) as c:
                    while not stop.is_set():
                        r = await c.get("/v1/gangs/vision/tf?waitFor=Ready", headers=h["pod-a"])
                        fetched[0] += "framework" in r.json()

            reads = [
                asyncio.create_task(own_gang(f"10.7.0.{i}"))
                for i in range(ADDRESSES)
                for _ in range(PER_ADDRESS)
            ]
            await asyncio.sleep(0.5)
            p = pod("uid-new", "new-0", "vision", spec("vision", 1, pods=1, group="new"))
            scene.kube.server.put(pod_path("vision", "new-0"), p)
            await asyncio.sleep(0.3)  # the watch brings it
            r = await scene.http.post(
                "/v1/extender/filter", json={"Pod": p, "Nodes": None, "NodeNames": nodes()}
            )
            node = r.json()["NodeNames"][0]
            b = {"PodName": "new-0", "PodNamespace": "vision", "PodUID": "uid-new", "Node": node}
            r = await scene.http.post("/v1/extender/bind", json=b)
            assert r.json() == {"Error": ""}, r.text
            most = await most_at_once(scene.kube, stop, reads)
            assert fetched[0] > MAX_READER_CALLS  # the pod did read its Framework, over and over
            assert most <= MAX_READER_CALLS, f"{most} readers' calls at once in the binds' pool"

    asyncio.run(go())
