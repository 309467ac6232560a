"""Standalone mode: the extender on a config file, with an in-memory binder instead of Kubernetes.

What `make run` serves, what locust and `topogang replay` hit, what demos use. It answers every verb
exactly as in a cluster; "binding" records the pod's node and annotations in memory. Since there is
no API server to report pods going away, it adds routes a kube-scheduler never calls; the two that
change state are served with the verbs (behind the verbs' door, `extender.http.app.build_apps`), never
on the listener job pods and browsers reach:

    DELETE /v1/standalone/pods/{uid}[?finished=true]   the pod was deleted (or completed)
    PUT    /v1/standalone/nodes/{name}  {"ready": bool, "badGpus": [int]}   a node's health changed
    GET    /v1/standalone/bindings                      (read listener) what is bound where

and it evicts preemption victims and expired members itself, as the Kubernetes edge would (with
`keep_victims`, preemption victims stay bound until a DELETE says they are gone, as when
kube-scheduler deletes them in a cluster: HiveD's conformance cases step through that). A bound
pod gets a fake, deterministic pod IP (`fake_pod_ip`: from its node and GPUs), so the gang ledger
reaches Ready and `topogang barrier` works end to end without a cluster.
"""

from __future__ import annotations

import logging
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from config.load import LoadedConfig
from extender.gangs.bindinfo import ISOLATION_ANNOTATIONS, decode_isolation
from extender.gangs.disruption import Disruption
from extender.http.app import JSON, Service
from extender.http.httpproto import BodyTooLargeError, read_body
from extender.http.ledger_api import ledger_routes
from extender.http.ports import BindError, BindTarget
from extender.http.reload import ConfigWatcher
from extender.http.verbs import Scheduler
from extender.ops.background import every, expiry_interval
from extender.ops.collector import collector_paused
from extender.ops.metrics import Metrics
from topology.core import Core

log = logging.getLogger("topogang.extender")

EXAMPLE_CONFIG = Path(__file__).resolve().parent.parent / "config" / "examples" / "example-cluster.yaml"
NODE_BODY_MAX = 64 * 1024  # a node's health: {"ready": bool, "badGpus": [int]}


@dataclass(frozen=True, slots=True)
class BoundPod:
    namespace: str
    name: str
    node: str
    annotations: Mapping[str, str]
    pod_ip: str = ""


def fake_pod_ip(node: str, annotations: Mapping[str, str]) -> str:
    """10.a.b.c: a and b from the node's name, c from the pod's first GPU (its slot on the node)."""
    h = zlib.crc32(node.encode())
    gpus: tuple[int, ...] = ()
    for key in ISOLATION_ANNOTATIONS:
        try:
            gpus = decode_isolation(annotations.get(key, ""))
            break
        except ValueError:
            continue
    return f"10.{(h >> 8) & 255}.{h & 255}.{1 + min(gpus, default=0) % 254}"


class MemoryBinder:
    """Bindings kept in a dict: idempotent for the same pod and node, refuses a second node.
    `on_bind(uid, pod_ip)` hears of every Binding (the ledger takes the pod's IP from it)."""

    def __init__(self, on_bind: Callable[[str, str], None] | None = None) -> None:
        self.bound: dict[str, BoundPod] = {}
        self.on_bind = on_bind

    async def bind(self, target: BindTarget, node: str, annotations: Mapping[str, str]) -> None:
        old = self.bound.get(target.uid)
        if old is not None and old.node != node:
            raise BindError(f"pod {target.namespace}/{target.name} is already assigned to node {old.node}")
        ip = fake_pod_ip(node, annotations)
        self.bound[target.uid] = BoundPod(target.namespace, target.name, node, dict(annotations), ip)
        if self.on_bind is not None:
            self.on_bind(target.uid, ip)

    async def annotate(self, target: BindTarget, annotations: Mapping[str, str]) -> None:
        """Re-write a bound pod's annotations (a promoted gang's bind info)."""
        old = self.bound.get(target.uid)
        if old is None:
            raise BindError(f"pod {target.namespace}/{target.name} is not bound")
        self.bound[target.uid] = replace(old, annotations={**old.annotations, **annotations})

    def unbind(self, uid: str) -> BoundPod | None:
        return self.bound.pop(uid, None)


def build_standalone(
    loaded: LoadedConfig,
    *,
    clock: Callable[[], float] = time.monotonic,
    ttl_seconds: float | None = None,
    keep_victims: bool = False,
) -> Service:
    """A ready-to-serve standalone service for a loaded config."""
    extras = loaded.extras
    ttl = float(ttl_seconds if ttl_seconds is not None else extras.reservation_ttl_seconds)
    binder = MemoryBinder()
    with collector_paused():  # the topology model and its arrays: a build that frees nothing
        core = Core(loaded.spec)
    scheduler = Scheduler(
        core,
        binder,
        metrics=Metrics(),
        clock=clock,
        namespace_vcs=extras.namespace_virtual_clusters,
        ttl_seconds=ttl,
    )
    scheduler.entitlement.configure(extras)  # who may ask for what: the same rules as in a cluster
    scheduler.vc_queueing = extras.vc_queueing

    async def evict(uids: Sequence[str], why: Disruption) -> None:
        if keep_victims and why.preemption:
            log.info("preemption victims %s stay until deleted: %s", ", ".join(uids), why.detail)
            return
        for uid in uids:
            log.info("evicting pod %s: %s [%s]", uid, why.detail, why.reason)
            binder.unbind(uid)
            await scheduler.pod_gone(uid)

    scheduler.evictor = evict
    binder.on_bind = scheduler.gang_ledger.set_ip
    gangs = scheduler.conventions

    async def delete_pod(request: Request) -> Response:
        uid = request.path_params["uid"]
        finished = request.query_params.get("finished", "false").lower() in ("1", "true", "yes")
        was_bound = binder.unbind(uid)
        released = await scheduler.pod_gone(uid, finished=finished)
        return JSON(
            {
                "uid": uid,
                "wasBound": was_bound is not None,
                "releasedGang": released.gang if released is not None else None,
                "evict": list(released.evict_pod_uids) if released is not None else [],
            }
        )

    async def node_health(request: Request) -> Response:
        name = request.path_params["name"]
        try:  # orjson refuses nesting past 1,024 levels with a JSONDecodeError (a ValueError), where
            # the json module would raise RecursionError: a bad body is a 400 like any other
            body = orjson.loads(await read_body(request, NODE_BODY_MAX))
        except (ValueError, BodyTooLargeError):
            body = None
        if not isinstance(body, dict) or not isinstance(body.get("ready", True), bool):
            want = 'body: expected {"ready": true|false, "badGpus": [int, ...]}'
            return JSON({"error": want}, status_code=400)
        bad = body.get("badGpus") or []
        if not isinstance(bad, list) or not all(isinstance(g, int) and not isinstance(g, bool) for g in bad):
            return JSON({"error": "badGpus: expected a list of GPU indices"}, status_code=400)
        async with scheduler.lock:
            if not scheduler.core.has_node(name):
                return JSON({"error": f"node {name} is not in the cluster config"}, status_code=404)
            scheduler.core.set_node_health(name, bool(body.get("ready", True)), bad_gpus=frozenset(bad))
            bad_now = list(scheduler.core.node_health(name))
        return JSON({"node": name, "badGpus": bad_now})

    async def bindings(request: Request) -> Response:
        return JSON(
            {
                uid: {
                    "namespace": b.namespace,
                    "name": b.name,
                    "node": b.node,
                    "podIP": b.pod_ip,
                    "annotations": dict(b.annotations),
                }
                for uid, b in sorted(binder.bound.items())
            }
        )

    async def start() -> None:
        scheduler.ready = True
        scheduler.not_ready_reason = ""

    nodes = len(scheduler.core.node_names())
    gpus = scheduler.core.gpu_count
    watcher = ConfigWatcher(scheduler, loaded.file, clock=clock, follow_ttl=ttl_seconds is None)
    return Service(
        scheduler=scheduler,
        background=[
            lambda: every(expiry_interval(ttl), scheduler.expire, "reservation expiry"),
            lambda: gangs.run(scheduler),
            watcher.run,
        ],
        on_start=[start],
        verb_routes=[
            Route("/v1/standalone/pods/{uid}", delete_pod, methods=["DELETE"]),
            Route("/v1/standalone/nodes/{name}", node_health, methods=["PUT"]),
        ],
        routes=[
            Route("/v1/standalone/bindings", bindings, methods=["GET"]),
            *ledger_routes(scheduler),
            watcher.route(),
        ],
        description=f"topogang standalone extender on {loaded.file} ({nodes} nodes, {gpus} GPUs)",
    )
