"""One tenant's long-polls take every request slot of the read port (`max_requests`, 1,024), so every
other tenant's barrier (ledger and Framework proxy) and every admin is answered 503 for as long as it
likes. Kubernetes mode: the scene of tests/integration/test_read_doors.py (real uvicorn, in-memory
API server, real TokenReview); the requests go through one more in-process copy of the read app so
that they can come from many client addresses (a tenant's pods each have their own IP)."""

from __future__ import annotations

import asyncio

import httpx

from extender.http.app import build_app
from tests.integration.test_read_doors import place, serving, tokens

ADDRESSES = 16  # pods of namespace nlp (any pods: the token is one gang member's, the IP is the pod's)
PER_ADDRESS = 64  # ServerLimits.polls_per_client


def test_one_namespaces_long_polls_leave_other_tenants_their_reads() -> None:
    async def go() -> None:
        async with serving() as scene:
            await place(scene)
            h = tokens(scene)
            app = build_app(scene.service)  # default ServerLimits
            ledger = scene.service.scheduler.gang_ledger

            def client(ip: str) -> httpx.AsyncClient:
                t = httpx.ASGITransport(app=app, client=(ip, 40000))
                return httpx.AsyncClient(transport=t, base_url="http://127.0.0.1", timeout=90)

            pods_b = [client(f"10.9.200.{i}") for i in range(ADDRESSES)]
            rv = (await pods_b[0].get("/v1/gangs/nlp/lm", headers=h["pod-b"])).json()["resourceVersion"]
            poll = f"/v1/gangs/nlp/lm?resourceVersion={rv}&timeoutSeconds=60"
            hogs = [
                asyncio.create_task(c.get(poll, headers=h["pod-b"]))
                for c in pods_b
                for _ in range(PER_ADDRESS)
            ]
            await asyncio.sleep(3)
            waiting = ledger.waiters
            async with client("10.9.1.1") as pod_a:
                gang = await pod_a.get("/v1/gangs/vision/tf", headers=h["pod-a"])
                fw = await pod_a.get(
                    "/apis/frameworkcontroller.microsoft.com/v1/namespaces/vision/frameworks/tf",
                    headers=h["pod-a"],
                )
                view = await pod_a.get("/v1/inspect", headers=h["alice"])
            for t in hogs:
                t.cancel()
            await asyncio.gather(*hogs, return_exceptions=True)
            for c in pods_b:
                await c.aclose()
            print(
                f"nlp's long-polls held: {waiting}; vision's pod: gang {gang.status_code}, "
                f"Framework {fw.status_code}; the viewer: {view.status_code} {view.text[:100]}"
            )
            assert (gang.status_code, fw.status_code, view.status_code) == (200, 200, 200), (
                f"with {waiting} long-polls of namespace nlp held, namespace vision's pod reads its gang "
                f"{gang.status_code}, its Framework {fw.status_code}, the viewer /v1/inspect "
                f"{view.status_code}: {gang.text[:200]}"
            )

    asyncio.run(go())
