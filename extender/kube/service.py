"""Kubernetes mode: the scheduler kept in step with the cluster.

Start-up (before /readyz turns ready, and before any verb is served): list nodes (every config node
is bad until the API server shows it Ready), list pods, and rebuild every bound gang from its
annotations (`recovery`). Then watch both from the lists' resourceVersions, listing again on 410:

- node added or changed -> `Core.set_node_health` (Ready, unschedulable, GPU allocatable); deleted
  -> all its GPUs bad;
- pod deleted -> its slot opens (`Core.release_pod`); pod Succeeded -> finished (released early with
  gangReleaseEnable); pod Failed -> its slot opens for the retry;
- a bound pod the core does not hold (bound elsewhere, or missed) -> adopted.

Pod content is untrusted (`extender.kube.invalid`): a pod whose annotations cannot be used is
skipped with a Warning Event saying why, and one pod's event that still fails to be handled is
logged and skipped, never a reason for start-up or a watch to stop (a watch that died on a pod would
list again and die on the same pod, forever, with every pod after it never seen).

The scheduler's helpers come from here too: the binder, the pod and Framework lookups, the evictor
(preemption victims and expired members are deleted, with the UID as precondition), and Events
telling a pod why its gang waits and what happened to it.

With a Lease (`--leader-elect`), every replica lists and watches (its state stays warm) but only the
holder is ready and runs what acts on the cluster: reservation expiry, durable reservations
(`GangReservation` objects, read back when it starts leading), the conventions' timeouts. Without
one, this replica leads from the start.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any
from urllib.parse import quote

from config.load import LoadedConfig
from extender import views
from extender.app import Service
from extender.conventions import edge as conventions
from extender.kube import pods as kpods
from extender.kube.binder import KubeBinder
from extender.kube.client import ApiError, AsyncKube, GoneError, KubeApi, load_api_client, pod_path
from extender.kube.events import REPEAT_SECONDS, EventRecorder, ObjectRef
from extender.kube.invalid import Invalid, fingerprint, invalid
from extender.kube.leader import LeaderElector, LeaseSettings
from extender.kube.nodes import node_health, node_name
from extender.kube.recovery import recover
from extender.kube.reservations import ReservationStore
from extender.ledger import Record, TransitionHook
from extender.ledger_api import ledger_routes
from extender.metrics import Metrics
from extender.podspec import PodRequest, is_enabled
from extender.reload import ConfigWatcher
from extender.standalone import expiry_interval
from extender.verbs import Scheduler
from topology.core import Core

log = logging.getLogger("topogang.kube")

NODES = "/api/v1/nodes"
PODS = "/api/v1/pods"
FRAMEWORK_TTL = 30.0
DEFAULT_NAMESPACE = os.environ.get("POD_NAMESPACE", "topogang-system")


def framework_path(namespace: str, name: str) -> str:
    ns, n = quote(namespace, safe=""), quote(name, safe="")
    return f"/apis/frameworkcontroller.microsoft.com/v1/namespaces/{ns}/frameworks/{n}"


class ClusterSync:
    """Keeps a `Scheduler` in step with the API server's nodes and pods."""

    def __init__(self, scheduler: Scheduler, kube: AsyncKube) -> None:
        self.s = scheduler
        self.kube = kube
        self.live: dict[str, tuple[str, str]] = {}  # uid -> (namespace, name) of opted-in pods
        self.done: set[str] = set()  # uids already released as finished
        self.foreign: set[str] = set()  # bound pods without a readable decision (logged once)
        self.checked: dict[str, int] = {}  # uid -> `invalid.fingerprint` of what was last judged
        self.on_invalid: Callable[[Mapping[str, Any], Invalid], None] = lambda pod, bad: None
        self.synced = False
        self.synced_event = asyncio.Event()
        self.hold_reason: Callable[[], str] = lambda: ""  # why not to serve although synced

    def refresh_ready(self) -> None:
        """Ready = synced with the cluster and nothing else holding back (e.g. not the leader)."""
        reason = self.hold_reason() if self.synced else self.s.not_ready_reason
        self.s.ready = self.synced and not reason
        self.s.not_ready_reason = reason

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
                    self._guarded(
                        "observing", pod, self.s.gang_ledger.observe, self.s.core, pod, self.s.waiting_of
                    )
        for pod in pods:
            if is_enabled(pod) and not kpods.finished(pod):
                self.live[kpods.uid(pod)] = (kpods.namespace(pod), kpods.name(pod))
                self._guarded("checking", pod, self.check, pod)
        for line in report.lines():
            log.info("%s", line)
        self.synced = True
        self.synced_event.set()
        self.refresh_ready()
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
                for name in core.node_names():
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
    def check(self, pod: Mapping[str, Any]) -> None:
        """Tell a pod whose annotations cannot be used why (once per content: a pod's status
        changes far more often than its annotations)."""
        uid, seen = kpods.uid(pod), fingerprint(pod)
        if self.checked.get(uid) == seen:
            return
        self.checked[uid] = seen
        bad = invalid(pod, namespace_vcs=self.s.namespace_vcs, max_pods=self.s.core.gpu_count)
        if bad is not None:
            log.warning(
                "pod %s/%s (%s) skipped: %s", kpods.namespace(pod), kpods.name(pod), uid, bad.message()
            )
            self.on_invalid(pod, bad)

    def _guarded(self, doing: str, pod: Mapping[str, Any], fn: Callable[..., object], *args: Any) -> None:
        """`fn(*args)`, with anything a pod's content provokes logged and the pod skipped."""
        try:
            fn(*args)
        except Exception:
            log.exception(
                "%s pod %s/%s (%s) failed; skipped",
                doing,
                kpods.namespace(pod),
                kpods.name(pod),
                kpods.uid(pod),
            )

    async def on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        """One pod event. A failure to reach the API server is the watch's to handle (it lists
        again); anything else is this pod's content, and must not stop the watch."""
        try:
            await self._on_pod(kind, pod)
        except (ApiError, OSError, TimeoutError):
            raise
        except Exception:
            log.exception(
                "pod %s/%s (%s): %s event skipped",
                kpods.namespace(pod),
                kpods.name(pod),
                kpods.uid(pod),
                kind,
            )

    async def _on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        if not is_enabled(pod):
            return
        uid = kpods.uid(pod)
        if kind == "DELETED":
            self.live.pop(uid, None)
            self.foreign.discard(uid)
            self.checked.pop(uid, None)
            # even when released as finished already: a late filter may have remembered it since
            await self.s.pod_gone(uid, finished=kpods.succeeded(pod))
            self.done.discard(uid)
            return
        self.live[uid] = (kpods.namespace(pod), kpods.name(pod))
        if kpods.finished(pod):
            self.checked.pop(uid, None)
            if uid not in self.done:
                self.done.add(uid)
                await self.s.pod_gone(uid, finished=kpods.succeeded(pod))
            return
        self.check(pod)
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
        return self.s.core.holds_slot(uid)

    async def relist_pods(self, pods: list[dict[str, Any]]) -> None:
        present = {kpods.uid(p) for p in pods}
        for uid in [u for u in self.live if u not in present]:
            del self.live[uid]
            self.foreign.discard(uid)
            self.done.discard(uid)
            self.checked.pop(uid, None)
            await self.s.pod_gone(uid)
        # kube-scheduler went on while the watch was down: pods filtered (and maybe bound) then,
        # and deleted before this list, never reached the watch, so no DELETED will come for them
        unseen = dict.fromkeys([*self.s.core.pods_holding_slots(), *self.s.cached_uids()])
        for uid in [u for u in unseen if u not in present and u not in self.live]:
            pr = self.s.cached(uid)
            if not self._held(uid):
                await self.s.pod_gone(uid)  # only remembered: forgotten now, re-read if it comes back
            elif pr is not None and await self._gone(pr.namespace, pr.name, uid):
                await self.s.pod_gone(uid)  # it may have been created after the list: read it
        for pod in pods:
            await self.on_pod("MODIFIED", pod)

    async def _gone(self, namespace: str, name: str, uid: str) -> bool:
        try:
            pod = await self.kube.request("GET", pod_path(namespace, name))
        except ApiError as err:
            log.warning("cannot read pod %s/%s: %s", namespace, name, err)
            return False
        return pod is None or kpods.uid(pod) != uid

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
    loaded: LoadedConfig,
    kube: AsyncKube,
    *,
    clock: Callable[[], float] = time.monotonic,
    namespace: str = DEFAULT_NAMESPACE,
    lease: LeaseSettings | None = None,
    identity: str | None = None,
    on_lost: Callable[[], None] | None = None,
) -> Service:
    """The Kubernetes-mode service over an `AsyncKube` (tests pass a fake one). `namespace` holds the
    extender's own objects (GangReservations, the Lease); `lease` turns on leader election, and
    `on_lost` is called when leadership is lost (the CLI exits, to restart as a clean standby)."""
    extras = loaded.extras
    ttl = float(extras.reservation_ttl_seconds)
    frameworks: dict[tuple[str, str], tuple[float, Mapping[str, Any] | None]] = {}
    instance = identity or os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"
    metrics = Metrics()
    recorder = EventRecorder(kube, metrics, clock=clock, instance=instance)

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

    def on_wait(pr: PodRequest, text: str) -> None:
        recorder.record(ObjectRef("Pod", pr.namespace, pr.name, pr.uid), "GangWaiting", text, warning=True)

    def on_invalid(pod: Mapping[str, Any], bad: Invalid) -> None:
        ref = ObjectRef("Pod", kpods.namespace(pod), kpods.name(pod), kpods.uid(pod))
        recorder.record(ref, bad.reason, bad.message(), warning=True)

    scheduler = Scheduler(
        Core(loaded.spec),
        KubeBinder(kube),
        metrics=metrics,
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
    sync.on_invalid = on_invalid
    scheduler.evictor = sync.evict
    scheduler.gang_ledger.on_transition = gang_events(recorder)
    gangs = conventions.attach(
        scheduler, conventions.Conventions(conventions.kube_fetch(kube.request), clock=clock)
    )
    store = ReservationStore(scheduler, kube, namespace)
    own_pod = ObjectRef("Pod", namespace, os.environ.get("POD_NAME", instance))

    async def forget_old_events() -> None:
        while True:
            await asyncio.sleep(REPEAT_SECONDS)
            recorder.forget()
            now = clock()
            for fw in [k for k, (t, _) in frameworks.items() if now - t >= FRAMEWORK_TTL]:
                del frameworks[fw]  # re-read on the next lookup anyway; kept, every one would stay

    leader_tasks = [
        lambda: scheduler.run_expiry(expiry_interval(ttl)),
        lambda: gangs.run(scheduler),
        store.run,
    ]
    # the Lease is judged against other processes: real time, whatever clock the scheduler runs on
    elector = LeaderElector(kube, lease, instance, clock=time.monotonic) if lease is not None else None

    def hold_reason() -> str:
        if elector is not None and not elector.leading:
            return f"standby: the Lease is held by {elector.holder or 'nobody yet'}"
        if not store_ready[0]:
            return "restoring persisted gang reservations"
        return ""

    store_ready = [False]
    sync.hold_reason = hold_reason

    async def lead() -> None:
        """Take the lead (at once without a Lease), read the reservations back, run the leader's
        tasks; give up everything when the Lease is lost."""
        if elector is not None:
            await elector.acquire(on_wait=sync.refresh_ready)
            metrics.leader.set(1)
        await sync.synced_event.wait()
        for line in await _restore_until_done(store):
            log.info("%s", line)
        store_ready[0] = True
        scheduler.after_change = store.flush_new
        sync.refresh_ready()
        tasks = [asyncio.create_task(fn()) for fn in leader_tasks]
        try:
            if elector is None:
                await asyncio.Event().wait()  # lead for good
            else:
                await elector.hold()
        finally:
            for t in tasks:
                t.cancel()
            metrics.leader.set(0)
            scheduler.after_change = None
        scheduler.ready = False
        scheduler.not_ready_reason = "lost the Lease"
        if on_lost is not None:
            on_lost()

    async def step_down() -> None:
        if elector is not None:
            await elector.release()

    def on_reload(result: str, errors: list[str]) -> None:
        if result == "applied":
            recorder.record(own_pod, "ConfigApplied", f"config {loaded.file} applied")
        else:
            text = f"config {loaded.file} {result}, the running one stays in force: " + "; ".join(errors)
            recorder.record(own_pod, "ConfigRejected", text, warning=True)

    nodes = len(scheduler.core.node_names())
    watcher = ConfigWatcher(scheduler, loaded.file, clock=clock)
    watcher.on_result = on_reload
    return Service(
        scheduler=scheduler,
        background=[sync.run, lead, forget_old_events, watcher.run],
        on_stop=[step_down],
        routes=[
            watcher.route(),
            *ledger_routes(
                scheduler, fetch_framework=lambda ns, name: kube.request("GET", framework_path(ns, name))
            ),
        ],
        description=f"topogang extender on {loaded.file} ({nodes} nodes) against the Kubernetes API"
        + (f", leader election on Lease {namespace}/{lease.name}" if lease is not None else ""),
    )


async def _restore_until_done(store: ReservationStore) -> list[str]:
    """Read the persisted reservations back; the API may be briefly unreachable at a fail-over."""
    backoff = 1.0
    while True:
        try:
            return await store.restore()
        except ApiError as err:
            if err.status == 404:  # the GangReservation CRD is not installed: nothing to restore
                log.warning("no GangReservation API (%s): reservations are kept in memory only", err)
                return []
            log.warning("reading gang reservations failed (%s); retrying in %.0fs", err, backoff)
        await asyncio.sleep(backoff)
        backoff = min(10.0, backoff * 2)


def gang_events(recorder: EventRecorder) -> TransitionHook:
    """A gang's phase changes, told on each member pod (what `kubectl describe pod` shows)."""

    def tell(rec: Record, members: list[tuple[str, str, str]], why: str) -> None:
        phase = rec.phase.value
        text = f"gang {rec.gang} is {phase}" + (f": {why}" if why else "")
        warning = phase in ("Expired", "Broken") or why.startswith("cancelled")
        for ns, name, uid in members:
            recorder.record(ObjectRef("Pod", ns, name, uid), f"Gang{phase}", text, warning=warning)

    return tell


def build_kube_service(
    loaded: LoadedConfig,
    *,
    kubeconfig: str | None = None,
    namespace: str = DEFAULT_NAMESPACE,
    lease: LeaseSettings | None = None,
    on_lost: Callable[[], None] | None = None,
) -> Service:
    return kube_service(
        loaded,
        AsyncKube(KubeApi(load_api_client(kubeconfig))),
        namespace=namespace,
        lease=lease,
        on_lost=on_lost,
    )
