"""Anybody who reaches the read port, with no credentials at all, makes the extender send one
TokenReview per request (a new made-up token each time: only repeats are kept), and up to 1,024 at
once: a GET of `/v1/gangs/{ns}/{name}?waitFor=...` is classed a long-poll before anybody knows who
sent it, and long-polls have no server-wide cap (reads have 32). Every API call of the extender runs in
the event loop's default thread pool (`AsyncKube.request`, asyncio.to_thread), Bindings included, so
a flood of made-up tokens queued ahead of kube-scheduler's binds: 6 filters and binds took 29.5 s
under it against 0.75 s alone, with a 20 ms API server. Readers' calls now wait in the event loop,
at most `MAX_READER_CALLS` in the pool at once.

Kubernetes mode, the scene of tests/integration/test_read_doors.py, with an API server that answers
each call after RTT seconds in a worker thread as the real client does (`AsyncKube`). What is
asserted is how many readers' calls were in that pool at once, not how long anything took."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Mapping, Sequence
from typing import Any

import httpx
import pytest

import tests.integration.test_read_doors as doors
from extender.http.app import build_app
from extender.kube.reviews import MAX_READER_CALLS
from loadtest.kubefake import FakeKube

RTT = 0.02  # the API server's answer time
ADDRESSES, PER_ADDRESS = 16, 64  # made-up long-polls from 16 pod IPs: ServerLimits.polls_per_client each
READERS = ("/apis/authentication.k8s.io/", "/apis/authorization.k8s.io/", "/frameworks/")


class Threaded(FakeKube):
    """The in-memory API server, each call holding a worker thread of the default pool for RTT;
    it counts the readers' calls (reviews, Framework reads) in flight, and the most at once."""

    reading = 0
    most = 0

    async def request(
        self,
        method: str,
        path: str,
        query: Sequence[tuple[str, str]] = (),
        body: Mapping[str, Any] | None = None,
    ) -> dict[str, Any] | None:
        reader = any(r in path for r in READERS)
        self.reading += reader
        self.most = max(self.most, self.reading)
        try:
            await asyncio.to_thread(time.sleep, RTT)
            return await super().request(method, path, query, body)
        finally:
            self.reading -= reader


async def most_at_once(kube: object, stop: asyncio.Event, tasks: list[asyncio.Task[None]]) -> int:
    """Stop the readers' tasks; the most readers' calls the API server had in flight at once."""
    stop.set()
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(kube, Threaded)
    return kube.most


def test_made_up_tokens_do_not_fill_the_pool_binds_use(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(doors, "FakeKube", Threaded)

    async def go() -> None:
        async with doors.serving() as scene:
            app = build_app(scene.service)
            stop = asyncio.Event()
            serial = itertools.count()

            async def anonymous(ip: str) -> None:
                t = httpx.ASGITransport(app=app, client=(ip, 40000))
                async with httpx.AsyncClient(transport=t, base_url="http://127.0.0.1", timeout=60) as c:
                    while not stop.is_set():
                        h = {"Authorization": f"Bearer made-up-{next(serial)}"}
                        await c.get("/v1/gangs/x/y?waitFor=Ready", headers=h)

            before = scene.kube.server.reviews
            flood = [
                asyncio.create_task(anonymous(f"10.7.0.{i}"))
                for i in range(ADDRESSES)
                for _ in range(PER_ADDRESS)
            ]
            await asyncio.sleep(0.5)
            await doors.place(scene)  # 6 filters and binds (each bind writes a Binding), then the pods' IPs
            most = await most_at_once(scene.kube, stop, flood)
            assert scene.kube.server.reviews - before > MAX_READER_CALLS  # the flood did send reviews
            assert most <= MAX_READER_CALLS, f"{most} readers' calls at once in the binds' pool"

    asyncio.run(go())
