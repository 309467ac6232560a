"""A small HTTPS client for the e2e control plane's kube-apiserver (and kube-scheduler's /metrics),
for `loadtest.bench_kube`: raw JSON through `http.client` with the admin client certificate, so
creating a thousand pods and watching them costs the benchmark little CPU next to the components it
measures. One `KubeHttp` per thread (an `http.client` connection is not shared)."""

from __future__ import annotations

import contextlib
import http.client
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlencode

import orjson


def tls_context(env: Mapping[str, str]) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=env["CA_CERT"])
    ctx.load_cert_chain(env["CLIENT_CERT"], env["CLIENT_KEY"])
    return ctx


def scheduler_context(env: Mapping[str, str]) -> ssl.SSLContext:
    """For kube-scheduler's secure port: it serves a self-signed certificate of its own (nothing to
    verify it against), and authenticates the admin's client certificate through the API server."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.load_cert_chain(env["CLIENT_CERT"], env["CLIENT_KEY"])
    return ctx


class KubeHttp:
    """JSON requests to one HTTPS endpoint on 127.0.0.1, reconnecting after a dropped connection."""

    def __init__(self, port: int, ctx: ssl.SSLContext, timeout: float = 30.0) -> None:
        self.port, self.ctx, self.timeout = port, ctx, timeout
        self.conn = self._connect()

    def _connect(self) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection("127.0.0.1", self.port, context=self.ctx, timeout=self.timeout)

    def call(
        self, method: str, path: str, body: object = None, query: Mapping[str, str] | None = None
    ) -> tuple[int, Any]:
        url = path + (f"?{urlencode(query)}" if query else "")
        data = orjson.dumps(body) if body is not None else None
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        for attempt in (1, 2):
            try:
                self.conn.request(method, url, body=data, headers=headers)
                resp = self.conn.getresponse()
                raw = resp.read()
                break
            except (OSError, http.client.HTTPException):
                self.conn.close()
                self.conn = self._connect()
                if attempt == 2:
                    raise
        try:
            doc = orjson.loads(raw) if raw else None
        except orjson.JSONDecodeError:
            doc = raw.decode("utf-8", "replace")
        return resp.status, doc

    def ok(self, method: str, path: str, body: object = None, query: Mapping[str, str] | None = None) -> Any:
        status, doc = self.call(method, path, body, query)
        if status >= 300 and not (method == "POST" and status == 409):
            raise RuntimeError(f"{method} {path}: HTTP {status}: {str(doc)[:300]}")
        return doc

    def text(self, path: str, *, forbidden_for: float = 0.0) -> str:
        """A GET's body. `forbidden_for`: seconds a 401 or 403 is read again (kube-scheduler checks a
        client certificate against the CA it loads from the API server a moment after it serves:
        until then the admin's certificate is anonymous to it)."""
        deadline = time.monotonic() + forbidden_for
        while True:
            self.conn.request("GET", path)
            resp = self.conn.getresponse()
            raw = resp.read()
            if resp.status in (401, 403) and time.monotonic() < deadline:
                time.sleep(0.5)
                continue
            if resp.status != 200:
                raise RuntimeError(f"GET {path}: HTTP {resp.status}: {raw[:200]!r}")
            return raw.decode("utf-8", "replace")

    def close(self) -> None:
        self.conn.close()


class PodWatch:
    """Watches the pods with one label across namespaces, in a thread: `on_pod(type, pod, t)` for
    every event, `t` the time.monotonic() it arrived. Re-watches from the last resourceVersion when
    the server ends the stream."""

    def __init__(
        self,
        port: int,
        ctx: ssl.SSLContext,
        selector: str,
        on_pod: Callable[[str, dict[str, Any], float], None],
    ) -> None:
        self.port, self.ctx, self.selector, self.on_pod = port, ctx, selector, on_pod
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.started = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self.thread.start()
        if not self.started.wait(30):
            raise RuntimeError(f"the pod watch did not start: {self.error!r}")

    def _run(self) -> None:
        rv = ""
        try:
            with contextlib.closing(KubeHttp(self.port, self.ctx)) as api:
                listed = api.ok("GET", "/api/v1/pods", query={"labelSelector": self.selector})
                rv = listed["metadata"]["resourceVersion"]
            while not self.stop.is_set():
                rv = self._stream(rv)
        except BaseException as exc:  # reported by the bench, which then stops
            self.error = exc
            self.started.set()

    def _stream(self, rv: str) -> str:
        conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.ctx, timeout=60)
        query = urlencode(
            {"watch": "1", "labelSelector": self.selector, "resourceVersion": rv, "timeoutSeconds": "300"}
        )
        try:
            conn.request("GET", f"/api/v1/pods?{query}")
            resp = conn.getresponse()
            if resp.status != 200:
                raise RuntimeError(f"watch: HTTP {resp.status}: {resp.read()[:200]!r}")
            self.started.set()
            while not self.stop.is_set():
                line = resp.readline()
                if not line:
                    return rv
                event = orjson.loads(line)
                obj = event.get("object") or {}
                if event.get("type") == "ERROR":
                    raise RuntimeError(f"watch: {obj}")
                rv = (obj.get("metadata") or {}).get("resourceVersion", rv)
                self.on_pod(str(event.get("type")), obj, time.monotonic())
        except TimeoutError:
            return rv  # no event for a minute: watch again
        finally:
            conn.close()
        return rv

    def close(self) -> None:
        self.stop.set()
