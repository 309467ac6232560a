"""Kubernetes mode: the scheduler kept in step with the cluster.

Start-up (before /readyz turns ready, and before any verb is served): list nodes (every config node
is bad until the API server shows it Ready), list pods, and rebuild every bound gang from its
annotations (`recovery`). Then watch both from the lists' resourceVersions, listing again on 410:

- node added or changed -> `Core.set_node_health` (Ready, unschedulable, GPU allocatable); deleted
  -> all its GPUs bad;
- pod deleted -> its slot opens (`Core.release_pod`); pod Succeeded -> finished (released early with
  gangReleaseEnable); pod Failed -> its slot opens for the retry;
- a bound pod the core does not hold (bound elsewhere, or missed) -> adopted.

The scheduler's helpers come from here too: the binder, the pod and Framework lookups, the evictor
(preemption victims and expired members are deleted, with the UID as precondition), and events
telling a pod why its gang waits.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from config.load import LoadedConfig
from extender import views
from extender.app import Service
from extender.conventions import edge as conventions
from extender.kube import pods as kpods
from extender.kube.binder import KubeBinder
from extender.kube.client import ApiError, AsyncKube, GoneError, KubeApi, load_api_client, pod_path
from extender.kube.nodes import node_health, node_name
from extender.kube.recovery import recover
from extender.ledger_api import ledger_routes
from extender.metrics import Metrics
from extender.podspec import PodRequest, is_enabled
from extender.reload import ConfigWatcher
from extender.standalone import expiry_interval
from extender.verbs import Scheduler, spawn
from topology.core import Core

log = logging.getLogger("topogang.kube")

NODES = "/api/v1/nodes"
PODS = "/api/v1/pods"
FRAMEWORK_TTL = 30.0
EVENT_EVERY = 60.0  # the same wait reason is reported on a pod at most once a minute


def framework_path(namespace: str, name: str) -> str:
    ns, n = quote(namespace, safe=""), quote(name, safe="")
    return f"/apis/frameworkcontroller.microsoft.com/v1/namespaces/{ns}/frameworks/{n}"


def wait_event(pr: PodRequest, text: str, when: datetime, instance: str) -> dict[str, Any]:
    stamp = when.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{pr.name}.", "namespace": pr.namespace},
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": pr.name,
            "namespace": pr.namespace,
            "uid": pr.uid,
        },
        "reason": "GangWaiting",
        "message": text[:1024],
        "type": "Warning",
        "source": {"component": "topogang"},
        "reportingComponent": "topogang",
        "reportingInstance": instance,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


class ClusterSync:
    """Keeps a `Scheduler` in step with the API server's nodes and pods."""

    def __init__(self, scheduler: Scheduler, kube: AsyncKube) -> None:
        self.s = scheduler
        self.kube = kube
        self.live: dict[str, tuple[str, str]] = {}  # uid -> (namespace, name) of opted-in pods
        self.done: set[str] = set()  # uids already released as finished
        self.foreign: set[str] = set()  # bound pods without a readable decision (logged once)

    # ------------------------------------------------------------------------------ start-up
    async def start(self) -> tuple[str, str]:
        """List nodes and pods, recover, turn ready; the resourceVersions to watch from."""
        self.s.not_ready_reason = "listing nodes"
        nodes, nodes_rv = await self.kube.list(NODES)
        await self.apply_nodes(nodes, full=True)
        self.s.not_ready_reason = "listing pods and recovering allocations"
        pods, pods_rv = await self.kube.list(PODS)
        async with self.s.lock:
            report = recover(
                self.s.core,
                pods,
                now=self.s.clock(),
                namespace_vcs=self.s.namespace_vcs,
                ttl_seconds=self.s.ttl_seconds,
            )
            for pod in pods:  # pod IPs and FrameworkController identities for the gang ledger
                if is_enabled(pod) and not kpods.finished(pod):
                    self.s.gang_ledger.observe(self.s.core, pod, self.s.waiting_of)
        for pod in pods:
            if is_enabled(pod) and not kpods.finished(pod):
                self.live[kpods.uid(pod)] = (kpods.namespace(pod), kpods.name(pod))
        for line in report.lines():
            log.info("%s", line)
        self.s.ready = True
        self.s.not_ready_reason = ""
        return nodes_rv, pods_rv

    async def run(self) -> None:
        backoff = 1.0
        while True:
            try:
                nodes_rv, pods_rv = await self.start()
                break
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.s.not_ready_reason = f"cannot read the cluster: {exc}"
                log.warning("initial sync failed (%s); retrying in %.0fs", exc, backoff)
                await asyncio.sleep(backoff)
                backoff = min(30.0, backoff * 2)
        await asyncio.gather(
            self.watch(NODES, nodes_rv, self.on_node, self.relist_nodes),
            self.watch(PODS, pods_rv, self.on_pod, self.relist_pods),
        )

    async def watch(
        self,
        path: str,
        rv: str,
        on_event: Callable[[str, dict[str, Any]], Awaitable[None]],
        relist: Callable[[list[dict[str, Any]]], Awaitable[None]],
    ) -> None:
        """List+watch with resourceVersion resume; a 410 (or any failure) lists again."""
        backoff = 1.0
        while True:
            try:
                if not rv:
                    items, rv = await self.kube.list(path)
                    await relist(items)
                async for kind, obj in self.kube.watch(path, rv):
                    rv = kpods.resource_version(obj) or rv
                    if kind != "BOOKMARK":
                        await on_event(kind, obj)
                backoff = 1.0
            except asyncio.CancelledError:
                raise
            except GoneError:
                log.info("watch of %s expired (410); listing again", path)
                rv = ""
            except Exception as exc:
                log.warning("watch of %s failed (%s); listing again in %.0fs", path, exc, backoff)
                rv = ""
                await asyncio.sleep(backoff)
                backoff = min(30.0, backoff * 2)

    # ------------------------------------------------------------------------------ nodes
    async def apply_nodes(self, nodes: list[dict[str, Any]], *, full: bool) -> None:
        core = self.s.core
        async with self.s.lock:
            seen = set()
            for node in nodes:
                h = node_health(node)
                if not views.has_node(core, h.name):
                    continue
                seen.add(h.name)
                _, configured = views.node_fill(core, h.name)
                core.set_node_health(h.name, h.healthy, healthy_gpus=h.healthy_gpus(configured))
            if full:
                for name in core.topo.node_names:
                    if name not in seen:
                        core.set_node_health(name, False)

    async def on_node(self, kind: str, node: dict[str, Any]) -> None:
        if kind == "DELETED":
            async with self.s.lock:
                self.s.core.set_node_health(node_name(node), False)
        else:
            await self.apply_nodes([node], full=False)

    async def relist_nodes(self, nodes: list[dict[str, Any]]) -> None:
        await self.apply_nodes(nodes, full=True)

    # ------------------------------------------------------------------------------ pods
    async def on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        if not is_enabled(pod):
            return
        uid = kpods.uid(pod)
        if kind == "DELETED":
            self.live.pop(uid, None)
            self.foreign.discard(uid)
            if uid not in self.done:
                await self.s.pod_gone(uid, finished=kpods.succeeded(pod))
            self.done.discard(uid)
            return
        self.live[uid] = (kpods.namespace(pod), kpods.name(pod))
        if kpods.finished(pod):
            if uid not in self.done:
                self.done.add(uid)
                await self.s.pod_gone(uid, finished=kpods.succeeded(pod))
            return
        if kpods.node_name(pod) is not None and uid not in self.foreign and not self._held(uid):
            async with self.s.lock:
                report = recover(
                    self.s.core,
                    [pod],
                    now=self.s.clock(),
                    namespace_vcs=self.s.namespace_vcs,
                    ttl_seconds=self.s.ttl_seconds,
                )
            if not report.pods:
                self.foreign.add(uid)
            for line in report.lines()[1:]:
                log.warning("%s", line)
        async with self.s.lock:  # pod IP, deletion mark: what the gang ledger's Ready needs
            self.s.gang_ledger.observe(self.s.core, pod, self.s.waiting_of)

    def _held(self, uid: str) -> bool:
        """Whether the core already has this pod in a gang slot."""
        return uid in self.s.core.ledger.pod_gang

    async def relist_pods(self, pods: list[dict[str, Any]]) -> None:
        present = {kpods.uid(p) for p in pods}
        for uid in [u for u in self.live if u not in present]:
            del self.live[uid]
            await self.s.pod_gone(uid)
        for pod in pods:
            await self.on_pod("MODIFIED", pod)

    # ------------------------------------------------------------------------------ helpers
    async def evict(self, uids: Sequence[str], reason: str) -> None:
        for uid in uids:
            where = self.live.get(uid)
            if where is None:
                pr = self.s.cached(uid)
                where = (pr.namespace, pr.name) if pr is not None else None
            if where is None:
                log.warning("cannot evict pod %s (%s): not known", uid, reason)
                continue
            ns, name = where
            log.info("evicting pod %s/%s (%s): %s", ns, name, uid, reason)
            body = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}
            try:
                await self.kube.request("DELETE", pod_path(ns, name), body=body)
            except ApiError as err:
                if err.status != 409:
                    log.warning("evicting pod %s/%s failed: %s", ns, name, err)


def kube_service(
    loaded: LoadedConfig, kube: AsyncKube, *, clock: Callable[[], float] = time.monotonic
) -> Service:
    """The Kubernetes-mode service over an `AsyncKube` (tests pass a fake one)."""
    extras = loaded.extras
    ttl = float(extras.reservation_ttl_seconds)
    frameworks: dict[tuple[str, str], tuple[float, Mapping[str, Any] | None]] = {}
    reported: dict[tuple[str, str], float] = {}
    instance = socket.gethostname()

    async def pod_lookup(namespace: str, name: str) -> Mapping[str, Any] | None:
        return await kube.request("GET", pod_path(namespace, name))

    async def framework_lookup(namespace: str, name: str) -> Mapping[str, Any] | None:
        now = clock()
        hit = frameworks.get((namespace, name))
        if hit is not None and now - hit[0] < FRAMEWORK_TTL:
            return hit[1]
        try:
            fw = await kube.request("GET", framework_path(namespace, name))
        except ApiError as err:
            log.warning("cannot read Framework %s/%s: %s", namespace, name, err)
            fw = None
        frameworks[(namespace, name)] = (now, fw)
        return fw

    async def post_event(pr: PodRequest, text: str) -> None:
        body = wait_event(pr, text, datetime.now(UTC), instance)
        try:
            await kube.request("POST", f"/api/v1/namespaces/{quote(pr.namespace, safe='')}/events", body=body)
        except ApiError as err:
            log.debug("event for %s not written: %s", pr.key, err)

    def on_wait(pr: PodRequest, text: str) -> None:
        now = clock()
        key = (pr.uid, text)
        if now - reported.get(key, -EVENT_EVERY) < EVENT_EVERY:
            return
        reported[key] = now
        if len(reported) > 50_000:
            reported.clear()
        spawn(post_event(pr, text))

    scheduler = Scheduler(
        Core(loaded.spec),
        KubeBinder(kube),
        metrics=Metrics(),
        clock=clock,
        namespace_vcs=extras.namespace_virtual_clusters,
        ttl_seconds=ttl,
        pod_lookup=pod_lookup,
        framework_lookup=framework_lookup,
        on_wait=on_wait,
        preempt_on_filter=True,
    )
    scheduler.not_ready_reason = "connecting to the API server"
    sync = ClusterSync(scheduler, kube)
    scheduler.evictor = sync.evict
    gangs = conventions.attach(
        scheduler, conventions.Conventions(conventions.kube_fetch(kube.request), clock=clock)
    )

    async def forget_old_events() -> None:
        while True:
            await asyncio.sleep(EVENT_EVERY)
            now = clock()
            for key in [k for k, t in reported.items() if now - t > EVENT_EVERY]:
                del reported[key]

    nodes = len(scheduler.core.topo.node_names)
    watcher = ConfigWatcher(scheduler, loaded.file, clock=clock)
    return Service(
        scheduler=scheduler,
        background=[
            sync.run,
            lambda: scheduler.run_expiry(expiry_interval(ttl)),
            lambda: gangs.run(scheduler),
            forget_old_events,
            watcher.run,
        ],
        routes=[
            watcher.route(),
            *ledger_routes(
                scheduler, fetch_framework=lambda ns, name: kube.request("GET", framework_path(ns, name))
            ),
        ],
        description=f"topogang extender on {loaded.file} ({nodes} nodes) against the Kubernetes API",
    )


def build_kube_service(loaded: LoadedConfig, *, kubeconfig: str | None = None) -> Service:
    return kube_service(loaded, AsyncKube(KubeApi(load_api_client(kubeconfig))))
