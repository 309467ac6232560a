"""The server protects itself: who may send what, how much at once, and for how long.

`RequestLimits` is the outermost ASGI layer but one (`app.Guard` catches what escapes it). Before any
route runs, each request is classed by its path:

    verb     POST /v1/extender/*          kube-scheduler's calls: never held back by readers
    probe    /healthz, /readyz, /metrics  always answered (kubelet, Prometheus)
    explain  POST /v1/explain             a what-if on a copy of the core: the dearest read
    poll     GET /v1/gangs/{ns}/{name} with waitFor or resourceVersion: a long-poll (up to 60 s)
    read     everything else

and refused, with a JSON `Error` naming the limit, when:

- a verb's or explain's body (POST) is not `application/json` (415). A web page can send a
  cross-origin "simple" POST (`text/plain`, no CORS preflight) to an admin's `kubectl port-forward`;
  with JSON required the browser must ask first, and nothing here ever says yes;
- its `Host` is not one the server answers to (421): a DNS-rebinding page's requests carry the
  page's own host name. Accepted: IP literals, `localhost`, cluster Service names (`*.svc`,
  `*.svc.<cluster domain>`) and the names the admin lists (`--allowed-hosts`; `*` accepts any).
  Probes are not checked (kubelet and Prometheus send the pod IP anyway);
- the server already runs `max_requests` requests (503 with Retry-After), probes and verbs except:
  a verb waits for the lock it would wait for anyway, and a probe costs nothing;
- a class is at its server-wide limit (reads, explains) or the caller (its client address) at its
  own (reads, explains, polls): 429 with Retry-After.

`ProtectedHttpTools` (uvicorn's protocol, with `httpproto`'s JSON 400s) drops a connection that has
not sent a whole request head `head_timeout` seconds after it opened or after its last answer (a
slowloris trickles a head forever; uvicorn itself only times out idle keep-alive connections after
an answer, never a half-sent head), and keeps at most `max_connections` open: at the cap a new
connection evicts the oldest one that waits for a head, or is refused when none does.
`raise_open_files` lifts the soft open-file limit to the hard one at start (1,024 by default: ~1,050
idle sockets once made /healthz, filter and config reloads all fail to open anything).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import resource
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from extender.http.httpproto import JSONErrorsHttpTools
from extender.ops.metrics import Metrics

log = logging.getLogger("topogang.extender")

PROBES = frozenset({"/healthz", "/readyz", "/metrics"})
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
SERVICE_SUFFIXES = (".svc", ".svc.cluster.local")
HOSTS_REMEMBERED = 64  # distinct Host values whose verdict is kept (kube-scheduler sends one)
# a request head's URL and headers at most (a bearer token is at most 16 KiB, `kube.reviews`): uvicorn
# keeps every header in a list and grows the URL by concatenation, on the loop the verbs run on
MAX_HEAD_BYTES = 64 * 1024
HEADER_OVERHEAD = 4  # ": " and CRLF: a head of many empty headers counts them too


@dataclass(frozen=True)
class ServerLimits:
    """Every limit of the server; `topogang serve` flags of the same names set them."""

    max_connections: int = 4096
    head_timeout: float = 10.0
    max_requests: int = 1024
    max_reads: int = 32
    reads_per_client: int = 8
    max_explains: int = 2
    explains_per_client: int = 1
    polls_per_client: int = 64
    allowed_hosts: tuple[str, ...] = ()
    retry_after: int = 1
    # a response part the client does not take within this (it stopped reading, its window shut):
    # the request ends and frees its slot. Otherwise a few connections that pipeline requests and
    # never read would hold every read slot (the open assets need no token) for as long as they like
    send_timeout: float = 30.0

    def host_allowed(self, host: str) -> bool:
        if "*" in self.allowed_hosts:
            return True
        name = _strip_port(host).lower().rstrip(".")
        if not name:
            return False
        try:
            ipaddress.ip_address(name)
            return True
        except ValueError:
            pass
        if name == "localhost" or name in self.allowed_hosts:
            return True
        return name.endswith(SERVICE_SUFFIXES) or any(
            name.endswith(f".svc.{h[2:]}") for h in self.allowed_hosts if h.startswith("*.")
        )


def _strip_port(host: str) -> str:
    if host.startswith("["):  # [::1]:9096
        return host[1 : host.find("]")] if "]" in host else host
    if host.count(":") == 1:
        return host.rsplit(":", 1)[0]
    return host


def parse_hosts(text: str | None) -> tuple[str, ...]:
    """`--allowed-hosts a,b,c` -> ("a", "b", "c"), lower-cased, blanks dropped."""
    return tuple(h.strip().lower() for h in (text or "").split(",") if h.strip())


def route_class(method: str, path: str, query: bytes) -> str:
    if path in PROBES:
        return "probe"
    if path.startswith("/v1/extender/"):
        return "verb"
    if path == "/v1/explain":
        return "explain"
    if (
        path.startswith("/v1/gangs/")
        and path.count("/") >= 4
        and (b"waitFor=" in query or b"resourceVersion=" in query)
    ):
        return "poll"
    return "read"


@dataclass
class _Counts:
    total: int = 0
    by_class: Counter[str] = field(default_factory=Counter)
    by_caller: Counter[tuple[str, str]] = field(default_factory=Counter)


class ClientStalledError(Exception):
    """The client stopped taking the answer (`ServerLimits.send_timeout`): the server closes it."""


class RequestLimits:
    """The request-level limits above (an ASGI middleware)."""

    def __init__(self, app: ASGIApp, limits: ServerLimits, metrics: Metrics) -> None:
        self.app = app
        self.limits = limits
        self.metrics = metrics
        self.counts = _Counts()
        # the Host values seen lately and whether they are allowed: kube-scheduler sends one, and
        # parsing it (an IP address, the suffixes) on every verb is time on every filter's path
        self._hosts: dict[str, bool] = {}

    def _host_allowed(self, host: str) -> bool:
        known = self._hosts.get(host)
        if known is None:
            known = self.limits.host_allowed(host)
            if len(self._hosts) >= HOSTS_REMEMBERED:  # the header is the caller's: stay bounded
                self._hosts.clear()
            self._hosts[host] = known
        return known

    def _refuse(
        self, kind: str, reason: str, status: int, msg: str
    ) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
        self.metrics.refused.labels(kind, reason).inc()
        headers = [(b"content-type", b"application/json")]
        if status in (429, 503):
            headers.append((b"retry-after", str(self.limits.retry_after).encode()))
        return status, orjson.dumps({"Error": f"topogang: {msg}"}), headers

    def _check(
        self, scope: Scope, kind: str, caller: str
    ) -> tuple[int, bytes, list[tuple[bytes, bytes]]] | None:
        lim, c = self.limits, self.counts
        headers = _headers(scope)
        method = scope.get("method", "")
        if kind != "probe":
            host = headers.get("host", "")
            if not self._host_allowed(host):
                return self._refuse(
                    kind, "host", 421, f"Host {host!r} is not a name this server answers to (--allowed-hosts)"
                )
        if kind in ("verb", "explain") and method in BODY_METHODS:
            ctype = headers.get("content-type", "")
            if ctype.split(";", 1)[0].strip().lower() != "application/json":
                shown = ctype or "none"
                return self._refuse(
                    kind,
                    "content_type",
                    415,
                    f"Content-Type {shown!r} is not accepted: send application/json",
                )
        if kind in ("probe", "verb"):
            return None
        if c.total >= lim.max_requests:
            return self._refuse(
                kind, "overloaded", 503, f"the server is at its limit of {lim.max_requests} requests"
            )
        cap, per_caller = {
            "read": (lim.max_reads, lim.reads_per_client),
            "explain": (lim.max_explains, lim.explains_per_client),
            "poll": (None, lim.polls_per_client),
        }[kind]
        if cap is not None and c.by_class[kind] >= cap:
            return self._refuse(
                kind, "too_many", 429, f"{cap} {kind} requests are running: try again shortly"
            )
        if c.by_caller[(kind, caller)] >= per_caller:
            return self._refuse(
                kind,
                "too_many",
                429,
                f"{caller} already runs {per_caller} {kind} requests: try again shortly",
            )
        return None

    def _bounded(self, send: Send, caller: str) -> Send:
        """`send`, each message of the answer taken within `send_timeout` or `ClientStalledError`."""
        timeout = self.limits.send_timeout

        async def bounded(message: Message) -> None:
            try:
                async with asyncio.timeout(timeout):  # no task of its own: the answer is not delayed
                    await send(message)
            except TimeoutError:
                raise ClientStalledError(f"{caller} took no part of the answer for {timeout:g}s") from None

        return bounded

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        kind = route_class(scope.get("method", ""), scope.get("path", ""), scope.get("query_string", b""))
        client = scope.get("client")
        caller = str(client[0]) if client else "unknown"
        refused = self._check(scope, kind, caller)
        if refused is not None:
            status, body, headers = refused
            headers.append((b"content-length", str(len(body)).encode()))
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        c = self.counts
        counted = kind not in ("probe", "verb")
        if counted:
            c.by_class[kind] += 1
            c.by_caller[(kind, caller)] += 1
        c.total += 1
        try:  # the verbs and probes (kube-scheduler's, the kubelet's) send as they are, on no clock
            await self.app(scope, receive, self._bounded(send, caller) if counted else send)
        finally:
            c.total -= 1
            if counted:
                c.by_class[kind] -= 1
                c.by_caller[(kind, caller)] -= 1
                if not c.by_caller[(kind, caller)]:
                    del c.by_caller[(kind, caller)]


def _headers(scope: Scope) -> dict[str, str]:
    """The two headers the limits read (the first of each), decoded; the rest are left as bytes."""
    out: dict[str, str] = {}
    for k, v in scope.get("headers", ()):
        name = k.lower()
        if name in _READ_HEADERS:
            out.setdefault(name.decode("latin-1"), v.decode("latin-1"))
    return out


_READ_HEADERS = frozenset((b"host", b"content-type"))


async def wait_or_disconnect(request: Request, events: Iterable[asyncio.Event], timeout: float) -> bool:
    """Wait until one of `events` is set or `timeout` passes; False when the client went away first
    (its long-poll must end with it, not hold a task and a caller's poll slot for up to 60 s)."""

    async def gone() -> None:
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                return

    watch = asyncio.ensure_future(gone())
    waits = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        done, _ = await asyncio.wait(
            [watch, *waits], timeout=max(0.0, timeout), return_when=asyncio.FIRST_COMPLETED
        )
        return watch not in done
    finally:
        for t in (watch, *waits):
            t.cancel()


class ProtectedHttpTools(JSONErrorsHttpTools):
    """Connections that must send a whole request head in time, and no more of them than the cap."""

    head_timeout: float = ServerLimits.head_timeout
    max_connections: int = ServerLimits.max_connections
    _head_timer: asyncio.TimerHandle | None = None
    waiting_since: float | None = None  # loop time since when it waits for a head; None: busy
    _head_bytes = 0  # of the request head being read (`MAX_HEAD_BYTES`)

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            idle = [
                p
                for p in self.connections
                if isinstance(p, ProtectedHttpTools) and p is not self and p.waiting_since is not None
            ]
            if not idle:
                log.warning(
                    "connection refused: %d connections open (--max-connections)", len(self.connections) - 1
                )
                transport.close()
                return
            oldest = min(idle, key=lambda p: p.waiting_since or 0.0)
            oldest._drop("evicted: the server is at its connection limit")
        self._await_head()

    def _await_head(self) -> None:
        self._cancel_head_timer()
        self.waiting_since = self.loop.time()
        self._head_timer = self.loop.call_later(
            self.head_timeout, self._drop, "no complete request head in time"
        )

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _drop(self, why: str) -> None:
        self._cancel_head_timer()
        self.waiting_since = None
        if not self.transport.is_closing():
            log.debug("connection from %s closed: %s", self.client, why)
            self.transport.close()

    def on_message_begin(self) -> None:
        self._head_bytes = 0
        super().on_message_begin()

    # Past `MAX_HEAD_BYTES` the parser stops (uvicorn answers 400 and closes the connection). Counted
    # inline, not through a helper: these run for every header of every verb
    def on_url(self, url: bytes) -> None:
        self._head_bytes += len(url)
        if self._head_bytes > MAX_HEAD_BYTES:
            raise ValueError(f"a request head over {MAX_HEAD_BYTES} bytes")
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_bytes += len(name) + len(value) + HEADER_OVERHEAD
        if self._head_bytes > MAX_HEAD_BYTES:
            raise ValueError(f"a request head over {MAX_HEAD_BYTES} bytes")
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._cancel_head_timer()
        self.waiting_since = None
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        running = self.cycle is not None and not self.cycle.response_complete  # a pipelined one
        if not self.transport.is_closing() and not running:
            self._await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        self.waiting_since = None
        super().connection_lost(exc)


def raise_open_files() -> tuple[int, int]:
    """The soft open-file limit raised to the hard one; (old soft, new soft)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:
            log.warning("cannot raise the open-file limit from %d to %d: %s", soft, target, exc)
            return soft, soft
        return soft, target
    return soft, soft
