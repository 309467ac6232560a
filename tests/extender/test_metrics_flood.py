"""GET /metrics is open (no token) and classed a probe (no request limit), and each render holds the
verbs' lock: N concurrent anonymous scrapes queue N renders ahead of kube-scheduler's next verb.
Kubernetes mode (the in-memory API server), the read app in process."""

from __future__ import annotations

import asyncio

import httpx

from extender.http.app import build_app
from extender.kube.service import kube_service
from loadtest.kubefake import FakeKube
from tests.extender.helpers import example

FLOOD = 50


def test_concurrent_anonymous_scrapes_queue_one_render_on_the_verbs_lock() -> None:
    async def go() -> None:
        service = kube_service(example(), FakeKube(), namespace="topogang-system")
        s = service.scheduler
        renders = [0]
        render = s.metrics.render

        def counted() -> bytes:
            renders[0] += 1
            return render()

        s.metrics.render = counted  # type: ignore[method-assign]
        transport = httpx.ASGITransport(app=build_app(service))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
            await s.lock.acquire()  # a verb holds the lock while the scrapes come in
            flood = [asyncio.create_task(http.get("/metrics")) for _ in range(FLOOD)]
            await asyncio.sleep(0.2)
            s.lock.release()
            answers = await asyncio.gather(*flood)
            assert all(r.status_code == 200 and b"topogang_" in r.content for r in answers)
            assert renders[0] <= 2, f"{FLOOD} anonymous scrapes took the verbs' lock {renders[0]} times"
            # a scrape after a change still sees it (no stale cache)
            s.metrics.decisions.labels("filter", "unknown").inc(7)
            after = (await http.get("/metrics")).text
            assert 'topogang_extender_decisions_total{outcome="unknown",verb="filter"} 7.0' in after, after[
                :2000
            ]

    asyncio.run(go())
