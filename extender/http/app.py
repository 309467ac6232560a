"""The HTTP surface: starlette routes over a `Scheduler`, split in two apps served on two listeners.

`build_apps` is the one place that says which route is behind which door:

- `verbs_app`: `POST /v1/extender/{filter,prioritize,preempt,bind}`, kube-scheduler's verbs, and the
  mode's own state-changing routes (`Service.verb_routes`: standalone's pod deletions and node health).
  Served on the verbs listener, which only kube-scheduler may reach (mutual TLS and the allowed
  certificate names of `extender.http.tls`).
- `read_app`: everything job pods, admins, probes and Prometheus read (below), on the main listener.

`build_app` joins both for in-process use (tests, the soak, benchmarks through an ASGI transport);
`topogang serve` never puts it on a socket.

- The verbs: filter, prioritize
  and bind always answer HTTP 200; their errors go in the body's `Error` (kube-scheduler treats any
  other status as a failure it cannot explain to the user). Preempt has no `Error` field, so a
  malformed preempt gets a 4xx with `{"Error": ...}`.
- `GET /healthz`, `/readyz` (503 until recovery is done), `/metrics` (Prometheus).
- `GET /v1/inspect/...`: HiveD-shaped cluster status and affinity groups, plus a summary.
- `GET /ui`: the cluster view, a live read-only page (`extender.http.ui`), and its `GET /v1/ui/state`.
- `GET /`: every path.

Who may call each route is `extender.http.doors`' (a middleware over the routes; in Kubernetes mode a
job pod reads only its own gang, the cluster-wide views are an admin's, standalone is open).

Every answer is JSON. A verb never answers 5xx: bad input gets the protocol's `Error` (or, for
preempt, a 4xx), and an unexpected exception is logged with the request's identity, counted in
`topogang_internal_errors_total` and answered as an error in the verb's own shape (preempt: no
victims, which is always safe). Other routes answer JSON 404/405 for unknown paths and methods, and
a JSON 500 only for a fault of the server itself; malformed HTTP gets a JSON 400 (`extender.http.httpproto`).
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
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from extender.http import replies, views, wire
from extender.http.answers import VerbError
from extender.http.doors import Authority, Doors
from extender.http.explain_api import explain_route
from extender.http.httpproto import BodyTooLargeError, read_body
from extender.http.limits import ClientStalledError, RequestLimits, ServerLimits
from extender.http.ports import PodSource
from extender.http.snapshot import Snapshots
from extender.http.trusted import UnknownPodError, trusted_args, trusted_preemption
from extender.http.ui import ui_routes
from extender.http.verbs import Scheduler
from extender.ops.logtext import shown
from extender.ops.metrics import CONTENT_TYPE, Metrics

log = logging.getLogger("topogang.extender")

MAX_BODY = 64 * 1024 * 1024  # a NodeList of 1,000 full node objects is ~50 MiB
METRICS_EVERY = 0.1  # seconds: /metrics renders (under the verbs' lock) at most this often


class JSON(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return replies.dumps(content)


@dataclass
class Service:
    """What an app serves: the scheduler, tasks to run while it is up, and extra routes."""

    scheduler: Scheduler
    background: list[Callable[[], Coroutine[Any, Any, None]]] = field(default_factory=list)
    on_start: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    on_stop: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    routes: list[BaseRoute] = field(default_factory=list)  # read routes (the ledger, the barrier, ...)
    verb_routes: list[BaseRoute] = field(default_factory=list)  # state-changing: kube-scheduler's door
    description: str = ""
    # Kubernetes mode: the API server's copy of the pod a verb names (`extender.http.trusted`)
    pod_source: PodSource | None = None
    authority: Authority | None = None  # who may read what (`extender.http.doors`); None: all open
    admin_port: int | None = None  # the port of the admin listener (127.0.0.1 in the pod): no doors
    # a background task ended on an exception: the service cannot go on as it was (the CLI exits,
    # so the Deployment restarts the replica; a standby takes the Lease over)
    on_failed: Callable[[], None] | None = None


@dataclass(frozen=True)
class Apps:
    """The two doors: `verbs` (kube-scheduler only) and `reads` (job pods, admins, probes)."""

    verbs: Starlette
    reads: Starlette


def _filter_error(msg: str) -> Response:
    return JSON(replies.filter_error(msg))


def _plain_error(msg: str) -> Response:
    return JSON(replies.binding_result(msg))


def build_app(service: Service, limits: ServerLimits | None = None) -> Starlette:
    """Every route in one app, for in-process callers only (never served on a socket)."""
    return _app([*verb_routes(service), *read_routes(service)], service, lifespan=True, limits=limits)


def build_apps(service: Service, limits: ServerLimits | None = None) -> Apps:
    """The verbs app and the read app of `service`; the read app runs the service's lifespan."""
    return Apps(
        verbs=_app(verb_routes(service), service, lifespan=False, limits=limits),
        reads=_app(read_routes(service), service, lifespan=True, limits=limits),
    )


def verb_routes(service: Service) -> list[BaseRoute]:
    """kube-scheduler's verbs and the mode's state-changing routes."""
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

        latency = metrics.latency.labels(name)  # looked up once: a labelled child takes a lock and a hash

        async def endpoint(request: Request) -> Response:
            t0 = time.perf_counter()
            doc: object = None
            try:
                doc = wire.loads(await read_body(request, MAX_BODY), s.node_lists)
                return JSON(await handle(doc))
            except wire.WireError as err:
                metrics.decisions.labels(name, "malformed").inc()
                return fail(f"topogang: malformed {name} request: {err}", 400)
            except VerbError as err:
                return fail(err.message, err.status)
            except ClientDisconnect:
                return fail(f"topogang: the {name} request was cut off by the client", 400)
            except BodyTooLargeError as err:
                metrics.decisions.labels(name, "malformed").inc()
                return fail(f"topogang: {name}: {err}", 413)
            except Exception as exc:
                who = wire.request_identity(doc)
                log.exception("%s of %s failed", name, who)
                metrics.decisions.labels(name, "error").inc()
                metrics.internal_errors.labels(name).inc()
                msg = f"topogang: internal error in {name} of {who} (logged): {type(exc).__name__}"
                if error_status is None:
                    return on_error(msg)
                return JSON({**replies.preemption_result(None), "Error": msg})  # no victims: always safe
            finally:
                latency.observe(time.perf_counter() - t0)

        return endpoint

    def source() -> PodSource | None:
        """Where a verb's pod comes from; while not ready the verbs decide nothing and say so."""
        return service.pod_source if s.ready else None

    async def do_filter(doc: object) -> Any:
        try:
            args = await trusted_args(source(), wire.parse_extender_args(doc, s.node_lists))
        except UnknownPodError:
            metrics.decisions.labels("filter", "unknown").inc()
            raise
        out = await s.filter(args)
        if s.after_change is not None:
            await s.after_change()
        return out

    async def do_prioritize(doc: object) -> Any:
        args = wire.parse_extender_args(doc, s.node_lists)
        try:
            args = await trusted_args(source(), args)
        except UnknownPodError:  # no preference for a pod nobody knows
            metrics.decisions.labels("prioritize", "unknown").inc()
            return replies.host_priorities([(n, 0) for n in args.names])
        return await s.prioritize(args)

    async def do_preempt(doc: object) -> Any:
        try:
            args = await trusted_preemption(source(), wire.parse_preemption_args(doc))
        except UnknownPodError:
            metrics.decisions.labels("preempt", "unknown").inc()
            raise
        out = await s.preempt(args)
        if s.after_change is not None:
            await s.after_change()
        return out

    async def do_bind(doc: object) -> Any:
        return await s.bind(wire.parse_binding_args(doc))

    return [
        Route("/v1/extender/filter", verb("filter", do_filter, _filter_error), methods=["POST"]),
        Route("/v1/extender/prioritize", verb("prioritize", do_prioritize, _plain_error), methods=["POST"]),
        Route("/v1/extender/preempt", verb("preempt", do_preempt, _plain_error, 400), methods=["POST"]),
        Route("/v1/extender/bind", verb("bind", do_bind, _plain_error), methods=["POST"]),
        *service.verb_routes,
    ]


def read_routes(service: Service) -> list[BaseRoute]:
    """What job pods, admins, probes and Prometheus read."""
    s = service.scheduler
    metrics = s.metrics

    async def healthz(request: Request) -> Response:
        return JSON({"status": "ok"})

    async def readyz(request: Request) -> Response:
        if s.ready:
            return JSON({"ready": True})
        return JSON({"ready": False, "reason": s.not_ready_reason}, status_code=503)

    rendering = asyncio.Lock()  # one render at a time, whoever asks: the route is open to anybody
    rendered: list[Any] = [0, b"", float("-inf")]  # renders begun, the last body, when it was made

    async def metrics_endpoint(request: Request) -> Response:
        """A render holds the verbs' lock and the event loop, and anybody may ask, as often as it
        likes (a probe: no token, no limit). So there is at most one render every `METRICS_EVERY`,
        answering everybody who came before it began: an answer is never older than its request."""
        wanted = rendered[0] + 1  # the first render to begin after this request came
        async with rendering:
            if rendered[0] < wanted:
                await asyncio.sleep(rendered[2] + METRICS_EVERY - time.monotonic())
                rendered[0] += 1
                async with s.lock.quietly():  # it reads, and changes nothing the snapshots copy
                    rendered[1] = metrics.render()
                rendered[2] = time.monotonic()
            body = rendered[1]
        return Response(body, media_type=CONTENT_TYPE)

    snaps = Snapshots(s, on_copy=metrics.snapshot_hold.observe)

    async def inspect_summary(request: Request) -> Response:
        doc = await snaps.read("summary", lambda v: views.summary(v.core, v.waiting, v.ready))
        return JSON({**doc, "ready": s.ready})

    async def cluster_status(request: Request) -> Response:
        return JSON(
            await snaps.read(
                "clusterstatus",
                lambda v: {
                    "physicalCluster": views.physical_cluster(v.core),
                    "virtualClusters": views.virtual_clusters(v.core),
                },
            )
        )

    async def physical(request: Request) -> Response:
        return JSON(await snaps.read("physical", lambda v: views.physical_cluster(v.core)))

    async def virtual(request: Request) -> Response:
        vc = request.path_params.get("vc")
        snap = await snaps.get()
        if vc is not None and not snap.core.has_vc(vc):
            return JSON({"Error": f"VC {vc} not found"}, status_code=404)
        out = await snaps.render(snap, "virtual", lambda v: views.virtual_clusters(v.core))
        return JSON(out.get(vc, []) if vc is not None else out)

    async def groups(request: Request) -> Response:
        items = await snaps.read("groups", lambda v: views.affinity_groups(v.core, v.waiting, v.now))
        return JSON({"items": items})

    async def group(request: Request) -> Response:
        name = request.path_params["name"]
        g = await snaps.read(None, lambda v: views.affinity_group_named(v.core, v.waiting, name, v.now))
        if g is None:
            return JSON(
                {
                    "Error": f"Affinity group {name} does not exist since it is not allocated, reserved "
                    "or waiting"
                },
                status_code=404,
            )
        return JSON(g)

    return [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", metrics_endpoint, methods=["GET"]),
        Route("/v1/inspect", inspect_summary, methods=["GET"]),
        Route("/v1/inspect/clusterstatus", cluster_status, methods=["GET"]),
        Route("/v1/inspect/clusterstatus/physicalcluster", physical, methods=["GET"]),
        Route("/v1/inspect/clusterstatus/virtualclusters", virtual, methods=["GET"]),
        Route("/v1/inspect/clusterstatus/virtualclusters/", virtual, methods=["GET"]),
        Route("/v1/inspect/clusterstatus/virtualclusters/{vc}", virtual, methods=["GET"]),
        Route("/v1/inspect/affinitygroups", groups, methods=["GET"]),
        Route("/v1/inspect/affinitygroups/", groups, methods=["GET"]),
        Route("/v1/inspect/affinitygroups/{name:path}", group, methods=["GET"]),
        explain_route(service.scheduler, snaps),
        *ui_routes(service.scheduler, snaps),
        *service.routes,
    ]


def _task_name(fn: Callable[..., object]) -> str:
    return str(getattr(fn, "__qualname__", None) or repr(fn))


def _background_ended(service: Service, task: asyncio.Task[None]) -> None:
    """A background task (the watches, the lead, the reload) is never meant to end on an exception:
    one that does leaves the state it keeps stale, silently. Say so, stop answering as ready, and
    let the service's `on_failed` decide (the CLI exits)."""
    if task.cancelled() or task.exception() is None:
        return
    exc = task.exception()
    log.critical(
        "background task %s failed; the service cannot go on without it", task.get_name(), exc_info=exc
    )
    service.scheduler.ready = False
    service.scheduler.not_ready_reason = f"background task {task.get_name()} failed: {type(exc).__name__}"
    if service.on_failed is not None:
        service.on_failed()


def _app(
    routes: list[BaseRoute], service: Service, *, lifespan: bool, limits: ServerLimits | None = None
) -> Starlette:
    """An app over `routes`, with `GET /` listing them, JSON errors, and the last-resort `Guard`."""
    routes = list(routes)
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
    async def run_service(app: Starlette) -> AsyncIterator[None]:
        for fn in service.on_start:
            await fn()
        tasks = [asyncio.create_task(fn(), name=_task_name(fn)) for fn in service.background]
        for t in tasks:
            t.add_done_callback(lambda t: _background_ended(service, t))
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

    return Starlette(
        routes=routes,
        exception_handlers={HTTPException: http_error},
        lifespan=run_service if lifespan else None,
        middleware=[
            Middleware(Guard, metrics=service.scheduler.metrics),
            Middleware(RequestLimits, limits=limits or ServerLimits(), metrics=service.scheduler.metrics),
            Middleware(Doors, routes=routes, authority=service.authority, admin_port=service.admin_port),
        ],
    )


class Guard:
    """The outermost layer: an exception that escapes a route is logged, counted and answered as JSON
    (starlette's own last resort answers text/plain 500 and re-raises into the server's log)."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except ClientStalledError as exc:  # the client's doing, not an error of ours: the server closes it
            log.info("%s %s: %s", scope.get("method", ""), shown(scope.get("path", "")), exc)
        except Exception as exc:
            path = scope.get("path", "")
            log.exception("%s %s failed", scope.get("method", ""), shown(path))
            self.metrics.internal_errors.labels(_route_label(path)).inc()
            if started:
                return  # the answer is on its way: nothing valid can follow it
            body = JSON({"Error": f"topogang: internal error in {path} (logged): {type(exc).__name__}"}, 500)
            await body(scope, receive, send)


def _route_label(path: str) -> str:
    """A bounded label: the first two segments (`/v1/inspect`), never a caller's free text."""
    parts = [p for p in path.split("/") if p][:2]
    known = {"v1", "ui", "healthz", "readyz", "metrics", "extender", "inspect", "gangs", "explain"}
    return "/" + "/".join(p if p in known else "*" for p in parts)
