"""A request head has no size limit on either listener: uvicorn's httptools protocol appends every
piece of the URL to one bytes object (`self.url += url`: quadratic, on the event loop the verbs share)
and keeps every header in a list. Anonymous, before any door: 10 MiB of tiny headers on one connection
is ~250 MiB of the extender's memory, a 100 MiB URL stalls the event loop for seconds. Here the
Kubernetes-mode read app behind the HTTP class `topogang serve` uses (`cli._http_class`)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator

import uvicorn

from extender.cli import _http_class
from extender.http.app import build_app
from extender.http.limits import ServerLimits
from extender.kube.service import kube_service
from loadtest.kubefake import FakeKube
from tests.extender.helpers import example


@contextlib.asynccontextmanager
async def read_port() -> AsyncIterator[int]:
    service = kube_service(example(), FakeKube(), namespace="topogang-system")
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    http = _http_class(ServerLimits(), certified=False)  # what `topogang serve` runs both listeners with
    config = uvicorn.Config(build_app(service), http=http, log_level="error", lifespan="off")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    await asyncio.sleep(0.3)
    try:
        yield sock.getsockname()[1]
    finally:
        server.should_exit = True
        await task
        sock.close()


async def answer(port: int, head: bytes) -> str:
    """What the server does with `head`: its status line's code, "closed", or "waits" (still reading
    the head after 3 s: it took every byte so far and wants more)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(head)
        with contextlib.suppress(ConnectionError):
            await writer.drain()
        try:
            line = await asyncio.wait_for(reader.readline(), 3)
        except TimeoutError:
            return "waits"
        except ConnectionError:
            return "closed"
        return line.split()[1].decode() if line else "closed"
    finally:
        writer.close()


def test_a_request_head_is_bounded() -> None:
    async def go() -> None:
        async with read_port() as port:
            end = b" HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            token = b"Authorization: Bearer " + b"t" * 16_000 + b"\r\n"  # the doors' own limit is 16 KiB
            assert await answer(port, b"GET /healthz" + end + token + b"\r\n") == "200"
            headers = await answer(port, b"GET /healthz" + end + b"x:y\r\n" * 200_000 + b"\r\n")
            url = await answer(port, b"GET /healthz?x=" + b"a" * (4 << 20))  # not ended yet
            assert headers in ("400", "closed"), f"1 MiB of 200,000 headers: {headers}"
            assert url in ("400", "closed"), f"4 MiB of a URL and no end yet: {url}"

    asyncio.run(go())
