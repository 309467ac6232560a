"""One process's connection to the fake server, with fault injection (see the package's docstring)."""

from __future__ import annotations

import asyncio
import copy
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from extender.kube.client import ApiError, AsyncKube, KubeApi, NoAnswerError
from loadtest.kubefake.objects import parse_path
from loadtest.kubefake.server import FakeApiServer, WatchStream


# ---------------------------------------------------------------------------------------- faults
@dataclass
class Fault:
    """What the next `count` requests matching `method` and `path` (a regex, searched) suffer.

    kind: "error" (answer `status` without applying), "timeout" (raise `NoAnswerError`, as the real
    client does, without applying), "lost-reply" (apply, then raise `NoAnswerError`: the client never
    hears it worked), "delay" (wait `seconds`, then apply)."""

    method: str
    path: str
    kind: str
    count: int = 1
    status: int = 500
    seconds: float = 0.0
    label: str = ""  # what `FakeKube.injected` counts it as (default: the kind)

    def __post_init__(self) -> None:
        if self.kind not in ("error", "timeout", "lost-reply", "delay"):
            raise ValueError(f"unknown fault kind {self.kind!r}")
        self._re = re.compile(self.path)

    def matches(self, method: str, path: str) -> bool:
        return self.count > 0 and method == self.method and self._re.search(path) is not None


class ConnectionClosedError(ConnectionError):
    """The client was closed (its process is gone)."""


class FakeKube(AsyncKube):
    """One process's view of a `FakeApiServer`, with fault injection; drop-in for `AsyncKube`."""

    def __init__(
        self, server: FakeApiServer | None = None, *, watch_lag: float = 0.0, record: bool = False
    ) -> None:
        super().__init__(KubeApi(None))
        self.server = server or FakeApiServer()
        self.record = record  # keep every request in `calls` (a test's; the soak would pile them up)
        self.calls: list[tuple[str, str, Mapping[str, Any] | None]] = []
        self.watch_lag = watch_lag
        self.faults: list[Fault] = []
        self.streams: dict[WatchStream, None] = {}
        self.requests: dict[str, int] = {}  # "METHOD resource[/subresource]" -> count
        self.injected: dict[str, int] = {}  # fault label -> how many times it fired
        self.closed = False

    def inject(self, fault: Fault) -> None:
        self.faults.append(fault)

    def _fault(self, method: str, path: str) -> Fault | None:
        for f in self.faults:
            if f.matches(method, path):
                f.count -= 1
                self.faults = [x for x in self.faults if x.count > 0]
                label = f.label or f.kind
                self.injected[label] = self.injected.get(label, 0) + 1
                return f
        return None

    def _alive(self) -> None:
        if self.closed:
            raise ConnectionClosedError("the client is closed")

    async def request(
        self,
        method: str,
        path: str,
        query: Sequence[tuple[str, str]] = (),
        body: Mapping[str, Any] | None = None,
    ) -> dict[str, Any] | None:
        self._alive()
        if self.record:
            self.calls.append((method, path, copy.deepcopy(dict(body)) if body is not None else None))
        ref = parse_path(path)
        what = f"{method} {ref.resource}" + (f"/{ref.subresource}" if ref.subresource else "")
        self.requests[what] = self.requests.get(what, 0) + 1
        fault = self._fault(method, path)
        if fault is not None:
            if fault.kind == "error":
                raise ApiError(fault.status, "injected fault", "InternalError")
            if fault.kind == "timeout":
                raise NoAnswerError(f"{method} {path}: timed out (injected)")
            if fault.kind == "delay":
                await asyncio.sleep(fault.seconds)
                self._alive()
        try:
            out = self.server.handle(method, path, query, body)
        except ApiError as err:
            if err.status == 404:
                return None
            raise
        if fault is not None and fault.kind == "lost-reply":
            raise NoAnswerError(f"{method} {path}: no reply (injected; the server applied it)")
        return out

    async def list(
        self, path: str, query: Sequence[tuple[str, str]] = ()
    ) -> tuple[list[dict[str, Any]], str]:
        self._alive()
        fault = self._fault("LIST", path)
        if fault is not None:
            if fault.kind == "delay":
                await asyncio.sleep(fault.seconds)
            elif fault.kind == "error":
                raise ApiError(fault.status, "injected fault", "InternalError")
            else:
                raise NoAnswerError(f"list {path}: timed out (injected)")
        return self.server.list(path, query)

    async def watch(
        self, path: str, resource_version: str, query: Sequence[tuple[str, str]] = ()
    ) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        self._alive()
        stream = self.server.open_watch(path, resource_version, query, self.watch_lag)
        self.streams[stream] = None
        try:
            while True:
                item = await stream.next()
                if item is None:
                    return
                yield item
        finally:
            self.streams.pop(stream, None)
            self.server.close_watch(stream)

    # -------------------------------------------------------------------- watch faults
    def cut_watches(self) -> int:
        """Every open watch fails at its next read, as a dropped connection does."""
        for s in self.streams:
            s.fault = ConnectionResetError("watch connection reset (injected)")
            s.wake.set()
        return len(self.streams)

    def end_watches(self) -> int:
        """Every open watch ends cleanly, as the server's `timeoutSeconds` ends it."""
        for s in self.streams:
            s.ended = True
            s.wake.set()
        return len(self.streams)

    def caught_up(self, path: str) -> bool:
        """Whether a watch of `path` is open and its reader has handled every event so far."""
        ref = parse_path(path)
        return any(
            s.kind_key == ref.kind_key and s.namespace == ref.namespace and s.idle and not s.queue
            for s in self.streams
        )

    def close(self) -> None:
        """The process is gone: its watches fail and every later request raises."""
        self.closed = True
        for s in list(self.streams):
            s.fault = ConnectionClosedError("the client is closed")
            s.wake.set()
