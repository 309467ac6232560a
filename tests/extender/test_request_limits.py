"""The request limits' Host and Content-Type checks, read from the few headers they need and with
each Host's verdict remembered (every verb passes them): the same answers as reading them afresh."""

from __future__ import annotations

from typing import Any

from extender.http.limits import HOSTS_REMEMBERED, RequestLimits, ServerLimits
from extender.ops.metrics import Metrics


async def _app(scope: Any, receive: Any, send: Any) -> None:
    raise AssertionError("not called")


def _limits() -> RequestLimits:
    return RequestLimits(_app, ServerLimits(allowed_hosts=("sched.example",)), Metrics())


def _verb(headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    return {"type": "http", "method": "POST", "path": "/v1/extender/filter", "headers": headers}


def _status(rl: RequestLimits, headers: list[tuple[bytes, bytes]]) -> int:
    got = rl._check(_verb(headers), "verb", "127.0.0.1")
    return 200 if got is None else got[0]


JSON = (b"content-type", b"application/json")


def test_a_host_verdict_is_the_same_when_remembered_and_the_memory_stays_bounded() -> None:
    rl = _limits()
    for _ in range(2):  # the second pass answers from what the first remembered
        assert _status(rl, [(b"host", b"evil.example"), JSON]) == 421
        assert _status(rl, [(b"host", b"sched.example:9096"), JSON]) == 200
        assert _status(rl, [(b"host", b"127.0.0.1:9096"), JSON]) == 200
    for i in range(3 * HOSTS_REMEMBERED):  # a caller sending ever new Host values
        assert _status(rl, [(b"host", f"h{i}.evil.example".encode()), JSON]) == 421
    assert len(rl._hosts) <= HOSTS_REMEMBERED
    assert _status(rl, [(b"host", b"evil.example"), JSON]) == 421
    assert _status(rl, [(b"host", b"sched.example"), JSON]) == 200


def test_the_first_host_and_content_type_count_whatever_their_case() -> None:
    rl = _limits()
    assert _status(rl, [(b"Host", b"evil.example"), (b"host", b"sched.example"), JSON]) == 421
    assert _status(rl, [(b"host", b"sched.example"), (b"Content-Type", b"text/plain"), JSON]) == 415
    assert _status(rl, [(b"x-other", b"1"), (b"host", b"sched.example"), JSON]) == 200
    assert _status(rl, [(b"host", b"sched.example")]) == 415  # no Content-Type at all


def test_a_response_the_client_stops_taking_frees_its_read_slot() -> None:
    """A client that pipelines requests for the open assets and never reads holds each one's slot
    while its answer waits to be written: a handful of connections took every read slot. A part of
    the answer not taken within `send_timeout` ends the request, and the server closes the
    connection (the Guard lets it go quietly: it is the client's doing)."""
    import asyncio

    async def answer(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"x" * 19_000})

    async def never_taken(message: Any) -> None:
        if message["type"] == "http.response.body":
            await asyncio.Event().wait()  # the client's window stays shut

    async def go() -> None:
        rl = RequestLimits(answer, ServerLimits(send_timeout=0.05), Metrics())
        scope: dict[str, Any] = {
            "type": "http",
            "method": "GET",
            "path": "/ui/static/ui.js",
            "headers": [(b"host", b"127.0.0.1")],
            "client": ("10.0.0.9", 4000),
        }

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        stalls = [rl(scope, receive, never_taken) for _ in range(8)]
        results = await asyncio.wait_for(asyncio.gather(*stalls, return_exceptions=True), 5)
        assert all(type(r).__name__ == "ClientStalledError" for r in results), results
        assert rl.counts.total == 0 and not rl.counts.by_class["read"] and not rl.counts.by_caller

    asyncio.run(go())
