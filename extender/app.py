"""The HTTP surface: starlette routes over a `Scheduler`.

- `POST /v1/extender/{filter,prioritize,preempt,bind}`: kube-scheduler's verbs. Filter, prioritize
  and bind always answer HTTP 200; their errors go in the body's `Error` (kube-scheduler treats any
  other status as a failure it cannot explain to the user). Preempt has no `Error` field, so a
  malformed preempt gets a 4xx with `{"Error": ...}`.
- `GET /healthz`, `/readyz` (503 until recovery is done), `/metrics` (Prometheus).
- `GET /v1/inspect/...`: HiveD-shaped cluster status and affinity groups, plus a summary.
- `GET /ui`: the cluster view, a live read-only page (`extender.ui`), and its `GET /v1/ui/state`.
- `GET /`: every path.

No request ever gets a 500: unexpected exceptions are logged and answered as errors in the verb's
own shape.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from extender import views, wire
from extender.explain_api import explain_route
from extender.metrics import CONTENT_TYPE
from extender.ui import ui_routes
from extender.verbs import Scheduler, VerbError

log = logging.getLogger("topogang.extender")

MAX_BODY = 64 * 1024 * 1024  # a NodeList of 1,000 full node objects is ~50 MiB


class JSON(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return wire.dumps(content)


class _BodyTooLargeError(Exception):
    pass


@dataclass
class Service:
    """What an app serves: the scheduler, tasks to run while it is up, and extra routes."""

    scheduler: Scheduler
    background: list[Callable[[], Coroutine[Any, Any, None]]] = field(default_factory=list)
    on_start: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    on_stop: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    routes: list[BaseRoute] = field(default_factory=list)
    description: str = ""


async def _body(request: Request) -> bytes:
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > MAX_BODY:
        raise _BodyTooLargeError
    chunks = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY:
            raise _BodyTooLargeError
        chunks.append(chunk)
    return b"".join(chunks)


def _filter_error(msg: str) -> Response:
    return JSON(wire.filter_error(msg))


def _plain_error(msg: str) -> Response:
    return JSON(wire.binding_result(msg))


def build_app(service: Service) -> Starlette:
    s = service.scheduler
    metrics = s.metrics

    def verb(
        name: str,
        handle: Callable[[object], Awaitable[Any]],
        on_error: Callable[[str], Response],
        error_status: int | None = None,
    ) -> Callable[[Request], Awaitable[Response]]:
        """One extender endpoint: parse, decide, answer; every failure in the verb's own shape."""

        def fail(msg: str, status: int) -> Response:
            if error_status is None:
                return on_error(msg)
            return JSON({"Error": msg}, status_code=status)

        async def endpoint(request: Request) -> Response:
            t0 = time.perf_counter()
            try:
                doc = wire.loads(await _body(request))
                return JSON(await handle(doc))
            except wire.WireError as err:
                metrics.decisions.labels(name, "malformed").inc()
                return fail(f"topogang: malformed {name} request: {err}", 400)
            except VerbError as err:
                return fail(err.message, err.status)
            except ClientDisconnect:
                return fail(f"topogang: the {name} request was cut off by the client", 400)
            except _BodyTooLargeError:
                metrics.decisions.labels(name, "malformed").inc()
                return fail(f"topogang: {name} request body is larger than {MAX_BODY} bytes", 413)
            except Exception as exc:
                log.exception("%s failed", name)
                metrics.decisions.labels(name, "error").inc()
                return fail(f"topogang: Platform Error: {name}: {type(exc).__name__}: {exc}", 503)
            finally:
                metrics.latency.labels(name).observe(time.perf_counter() - t0)

        return endpoint

    async def do_filter(doc: object) -> Any:
        out = await s.filter(wire.parse_extender_args(doc))
        if s.after_change is not None:
            await s.after_change()
        return out

    async def do_prioritize(doc: object) -> Any:
        return await s.prioritize(wire.parse_extender_args(doc))

    async def do_preempt(doc: object) -> Any:
        out = await s.preempt(wire.parse_preemption_args(doc))
        if s.after_change is not None:
            await s.after_change()
        return out

    async def do_bind(doc: object) -> Any:
        return await s.bind(wire.parse_binding_args(doc))

    def guarded(fn: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            try:
                return await fn(request)
            except Exception as exc:
                log.exception("GET %s failed", request.url.path)
                return JSON(
                    {"Error": f"topogang: Platform Error: {type(exc).__name__}: {exc}"}, status_code=503
                )

        return endpoint

    async def healthz(request: Request) -> Response:
        return JSON({"status": "ok"})

    async def readyz(request: Request) -> Response:
        if s.ready:
            return JSON({"ready": True})
        return JSON({"ready": False, "reason": s.not_ready_reason}, status_code=503)

    async def metrics_endpoint(request: Request) -> Response:
        async with s.lock:
            body = metrics.render()
        return Response(body, media_type=CONTENT_TYPE)

    async def inspect_summary(request: Request) -> Response:
        async with s.lock:
            return JSON(s.summary())

    async def cluster_status(request: Request) -> Response:
        async with s.lock:
            return JSON(
                {
                    "physicalCluster": views.physical_cluster(s.core),
                    "virtualClusters": views.virtual_clusters(s.core),
                }
            )

    async def physical(request: Request) -> Response:
        async with s.lock:
            return JSON(views.physical_cluster(s.core))

    async def virtual(request: Request) -> Response:
        vc = request.path_params.get("vc")
        async with s.lock:
            if vc is not None and vc not in s.core.vc_owner:
                return JSON({"Error": f"VC {vc} not found"}, status_code=404)
            out = views.virtual_clusters(s.core, vc)
        return JSON(out.get(vc, []) if vc is not None else out)

    async def groups(request: Request) -> Response:
        async with s.lock:
            return JSON({"items": s.affinity_groups()})

    async def group(request: Request) -> Response:
        name = request.path_params["name"]
        async with s.lock:
            g = s.affinity_group(name)
        if g is None:
            return JSON(
                {
                    "Error": f"Affinity group {name} does not exist since it is not allocated, reserved "
                    "or waiting"
                },
                status_code=404,
            )
        return JSON(g)

    routes: list[BaseRoute] = [
        Route("/v1/extender/filter", verb("filter", do_filter, _filter_error), methods=["POST"]),
        Route("/v1/extender/prioritize", verb("prioritize", do_prioritize, _plain_error), methods=["POST"]),
        Route("/v1/extender/preempt", verb("preempt", do_preempt, _plain_error, 400), methods=["POST"]),
        Route("/v1/extender/bind", verb("bind", do_bind, _plain_error), methods=["POST"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", guarded(metrics_endpoint), methods=["GET"]),
        Route("/v1/inspect", guarded(inspect_summary), methods=["GET"]),
        Route("/v1/inspect/clusterstatus", guarded(cluster_status), methods=["GET"]),
        Route("/v1/inspect/clusterstatus/physicalcluster", guarded(physical), methods=["GET"]),
        Route("/v1/inspect/clusterstatus/virtualclusters", guarded(virtual), methods=["GET"]),
        Route("/v1/inspect/clusterstatus/virtualclusters/", guarded(virtual), methods=["GET"]),
        Route("/v1/inspect/clusterstatus/virtualclusters/{vc}", guarded(virtual), methods=["GET"]),
        Route("/v1/inspect/affinitygroups", guarded(groups), methods=["GET"]),
        Route("/v1/inspect/affinitygroups/", guarded(groups), methods=["GET"]),
        Route("/v1/inspect/affinitygroups/{name:path}", guarded(group), methods=["GET"]),
        explain_route(service.scheduler),
        *ui_routes(service.scheduler),
        *service.routes,
    ]
    paths = sorted({r.path for r in routes if isinstance(r, Route)} | {"/"})

    async def index(request: Request) -> Response:
        return JSON({"paths": paths, "service": service.description})

    routes.append(Route("/", index, methods=["GET"]))

    async def http_error(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 400
        if status == 404:
            msg = f"Path not found: {request.url.path}"
        elif status == 405:
            msg = f"NotImplemented: {request.method}: {request.url.path}"
        else:
            msg = exc.detail if isinstance(exc, HTTPException) else str(exc)
        return JSON({"Error": msg}, status_code=status)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        for fn in service.on_start:
            await fn()
        tasks = [asyncio.create_task(fn()) for fn in service.background]
        try:
            yield
        finally:
            for t in tasks:
                t.cancel()
            for t in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await t
            for fn in service.on_stop:
                await fn()

    return Starlette(routes=routes, exception_handlers={HTTPException: http_error}, lifespan=lifespan)
