"""The API server, spoken to as raw JSON through the `kubernetes` client's transport.

The generated models are slow and choke on partial objects, so this uses the client only for
configuration, authentication and connection pooling, and reads and writes plain dicts. `KubeApi` is
blocking; `AsyncKube` runs every call in a thread so the event loop never waits on the network.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import quote

import orjson
import urllib3

from config.fetch import load_api_client as load_api_client

log = logging.getLogger("topogang.kube")

REQUEST_TIMEOUT = 30.0
WATCH_SECONDS = 300
JSON_TYPE = "application/json"


class ApiError(Exception):
    """A non-2xx answer; `status` is the HTTP status, `reason` the API's `Status.reason`."""

    def __init__(self, status: int, message: str, reason: str = "") -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message
        self.reason = reason


class GoneError(ApiError):
    """410: the resourceVersion is too old; list again."""


class NoAnswerError(TimeoutError):
    """The API server gave no answer: none in time, or none at all (the connection refused or
    reset, TLS failing). Not an `ApiError`: the request may have taken effect all the same (a
    Binding, a DELETE), which only a read tells. The `kubernetes` client lets urllib3's own errors
    through unwrapped; turned into this one kind here, every caller that retries on a failed call
    (`except (ApiError, TimeoutError)`) sees the network's failures as the fake API server's
    injected timeouts show them to the tests."""


def _error(status: int, body: bytes) -> ApiError:
    message, reason = body.decode("utf-8", "replace")[:500], ""
    try:
        doc = orjson.loads(body)
        if isinstance(doc, dict):
            message = str(doc.get("message") or message)
            reason = str(doc.get("reason") or "")
    except orjson.JSONDecodeError:
        pass
    cls = GoneError if status == 410 else ApiError
    return cls(status, message, reason)


@contextlib.contextmanager
def _answered(method: str, path: str) -> Iterator[None]:
    """Raise `NoAnswerError` for whatever the transport raises: urllib3's errors, and the client's
    `ApiException` without a status (its wrapper of a TLS failure)."""
    try:
        yield
    except urllib3.exceptions.HTTPError as exc:
        raise NoAnswerError(f"{method} {path}: no answer from the API server: {exc}") from exc
    except Exception as exc:
        from kubernetes.client.exceptions import ApiException  # loaded with the client that raised it

        if isinstance(exc, ApiException) and not exc.status:
            raise NoAnswerError(f"{method} {path}: no answer from the API server: {exc.reason}") from exc
        raise


class KubeApi:
    """Blocking JSON requests against the API server."""

    def __init__(self, api_client: Any) -> None:
        self.api = api_client

    def _send(
        self,
        method: str,
        path: str,
        query: Sequence[tuple[str, str]] = (),
        body: Mapping[str, Any] | None = None,
        timeout: float | tuple[float, float] | None = REQUEST_TIMEOUT,
    ) -> Any:
        headers = {"Accept": JSON_TYPE}
        if body is not None:  # a PATCH is a JSON merge patch (RFC 7386), the API server's plain kind
            headers["Content-Type"] = "application/merge-patch+json" if method == "PATCH" else JSON_TYPE
        ser = self.api.param_serialize(
            method=method,
            resource_path=path,
            query_params=list(query),
            header_params=headers,
            body=dict(body) if body is not None else None,
            auth_settings=["BearerToken"],
        )
        with _answered(method, path):
            return self.api.call_api(*ser, _request_timeout=timeout)

    def request(
        self,
        method: str,
        path: str,
        query: Sequence[tuple[str, str]] = (),
        body: Mapping[str, Any] | None = None,
    ) -> dict[str, Any] | None:
        """The decoded answer; None for 404; `ApiError` for any other failure."""
        resp = self._send(method, path, query, body)
        with _answered(method, path):
            data = resp.read() or b"{}"
        if resp.status == 404:
            return None
        if not 200 <= resp.status < 300:
            raise _error(resp.status, data)
        doc = orjson.loads(data)
        return doc if isinstance(doc, dict) else {}

    def list(self, path: str, query: Sequence[tuple[str, str]] = ()) -> tuple[list[dict[str, Any]], str]:
        """Every item of a collection (paged) and the list's resourceVersion."""
        items: list[dict[str, Any]] = []
        token = ""
        while True:
            q = [*query, ("limit", "500")] + ([("continue", token)] if token else [])
            doc = self.request("GET", path, q)
            if doc is None:
                raise ApiError(404, f"{path} not found")
            items += [i for i in doc.get("items") or [] if isinstance(i, dict)]
            meta = doc.get("metadata") or {}
            token = meta.get("continue") or ""
            if not token:
                return items, str(meta.get("resourceVersion") or "")

    def watch(
        self, path: str, resource_version: str, stop: threading.Event, query: Sequence[tuple[str, str]] = ()
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """Watch events after `resource_version` until the server ends the watch or `stop` is set."""
        q = [
            *query,
            ("watch", "true"),
            ("resourceVersion", resource_version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(WATCH_SECONDS)),
        ]
        resp = self._send("GET", path, q, timeout=(REQUEST_TIMEOUT, float(WATCH_SECONDS + 30)))
        if not 200 <= resp.status < 300:
            raise _error(resp.status, resp.read() or b"")
        raw = resp.response
        try:
            for line in _lines(raw, path):
                if stop.is_set():
                    return
                if not line.strip():
                    continue
                event = orjson.loads(line)
                kind, obj = event.get("type"), event.get("object")
                if kind == "ERROR":
                    code = obj.get("code", 0) if isinstance(obj, dict) else 0
                    raise _error(int(code or 500), orjson.dumps(obj))
                if isinstance(kind, str) and isinstance(obj, dict):
                    yield kind, obj
        finally:
            raw.release_conn()


def _lines(raw: Any, path: str) -> Iterator[Any]:
    """A watch's lines; a connection that breaks mid-stream raises `NoAnswerError`."""
    from kubernetes.watch.watch import iter_resp_lines

    with _answered("WATCH", path):
        yield from iter_resp_lines(raw)  # type: ignore[no-untyped-call]


def pod_path(namespace: str, name: str = "") -> str:
    base = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods"
    return f"{base}/{quote(name, safe='')}" if name else base


class AsyncKube:
    """`KubeApi` with every call in a thread."""

    def __init__(self, api: KubeApi) -> None:
        self.api = api

    async def request(
        self,
        method: str,
        path: str,
        query: Sequence[tuple[str, str]] = (),
        body: Mapping[str, Any] | None = None,
    ) -> dict[str, Any] | None:
        return await asyncio.to_thread(self.api.request, method, path, query, body)

    async def list(
        self, path: str, query: Sequence[tuple[str, str]] = ()
    ) -> tuple[list[dict[str, Any]], str]:
        return await asyncio.to_thread(self.api.list, path, query)

    async def watch(
        self, path: str, resource_version: str, query: Sequence[tuple[str, str]] = ()
    ) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """Events from a thread running the blocking watch; ends when the server ends the watch."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[str, dict[str, Any]] | BaseException | None] = asyncio.Queue()
        stop = threading.Event()

        def put(item: tuple[str, dict[str, Any]] | BaseException | None) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, item)

        def run() -> None:
            try:
                for event in self.api.watch(path, resource_version, stop, query):
                    put(event)
                put(None)
            except BaseException as exc:  # handed to the event loop, which decides
                with contextlib.suppress(RuntimeError):  # RuntimeError: the loop is gone (shutdown)
                    put(exc)

        threading.Thread(target=run, name=f"watch {path}", daemon=True).start()
        try:
            while True:
                item = await queue.get()
                if item is None:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            stop.set()


async def patch_pod(kube: AsyncKube, namespace: str, name: str, body: Mapping[str, Any], doing: str) -> str:
    """One merge patch of a pod by the leader's per-pod writers (requeue marks, admission gates):
    `done`; `gone` when it was deleted, or the patch's preconditions no longer hold (404, 409, 422:
    a re-created pod, a change since the watch saw it, which the watch brings back); `failed`
    otherwise, logged as "cannot {doing} pod ns/name"."""
    try:
        got = await kube.request("PATCH", pod_path(namespace, name), body=body)
    except (ApiError, NoAnswerError) as err:
        if isinstance(err, ApiError) and err.status in (404, 409, 422):
            return "gone"
        log.warning("cannot %s pod %s/%s: %s", doing, namespace, name, err)
        return "failed"
    return "done" if got is not None else "gone"
