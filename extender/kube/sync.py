"""The scheduler kept in step with the cluster: list, recover, then watch nodes and pods.

Start-up (before /readyz turns ready, and before any verb is served): list nodes (every config node
is bad until the API server shows it Ready), list pods, and rebuild every bound gang from its
annotations (`recovery`). Then watch both from the lists' resourceVersions, listing again on 410:

- node added or changed -> `Core.set_node_health` (Ready, unschedulable, GPU allocatable); deleted -> bad;
- pod deleted -> its slot opens (`Core.release_pod`); pod Succeeded -> finished (released early with
  gangReleaseEnable); pod Failed -> its slot opens for the retry;
- a bound pod the core does not hold (bound elsewhere, or missed) -> adopted;
- a bound, not finished pod that is not topogang's and asks for `nvidia.com/gpu` -> that many free
  GPUs of its node marked bad until it finishes or goes (`extender.kube.outside`): topogang's
  kube-scheduler profile leaves the resource to the extender, so nothing else counts them;
- a node's free GPUs rise, a gang is released, a slot's pod goes -> the pods the filter turned away
  for lack of room are requeued (`extender.kube.requeue`).

Pod content is untrusted (`extender.kube.invalid`): a pod whose annotations cannot be used is
skipped with a Warning Event saying why, and one pod's event that still fails to be handled is
logged and skipped, never a reason for start-up or a watch to stop (a watch that died on a pod would
list again and die on the same pod, forever, with every pod after it never seen).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Container, Iterable, Mapping, Sequence
from typing import Any

from extender.gangs.bindsig import BindSigner, recovery_verifier
from extender.gangs.disruption import OFF_PLACEMENT_WHY, Disruption, off_placement
from extender.gangs.entitlement import grant
from extender.gangs.optin import pod_gpus
from extender.gangs.podspec import PodRequest, is_enabled
from extender.http import views
from extender.http.ports import Evictor
from extender.http.verbs import Scheduler
from extender.kube import pods as kpods
from extender.kube.admission_gate import GatedPods
from extender.kube.client import ApiError, AsyncKube, GoneError, pod_path
from extender.kube.eviction_retry import EvictionRetries
from extender.kube.invalid import Invalid, fingerprint, invalid
from extender.kube.nodes import node_health, node_name
from extender.kube.off_config import OffConfig
from extender.kube.opt_in import UnsignedOptIn
from extender.kube.outside import Held, OutsidePods
from extender.kube.recovery import Claimed, recover
from extender.kube.recovery_report import RecoveryReport
from extender.kube.unverified import Claims, Unverified, holder
from extender.ops.collector import collector_paused

log = logging.getLogger("topogang.kube")

NODES = "/api/v1/nodes"
PODS = "/api/v1/pods"


class ClusterSync:
    """Keeps a `Scheduler` in step with the API server's nodes and pods."""

    def __init__(self, scheduler: Scheduler, kube: AsyncKube) -> None:
        self.s = scheduler
        self.kube = kube
        self.live: dict[str, tuple[str, str]] = {}  # uid -> (namespace, name) of opted-in pods
        self.pods: dict[str, Mapping[str, Any]] = {}  # uid -> the watched pod: what the verbs trust
        self.done: set[str] = set()  # uids already released as finished
        self.foreign: set[str] = set()  # bound pods without a readable decision (logged once)
        self.checked: dict[str, int] = {}  # uid -> `invalid.fingerprint` of what was last judged
        self.on_invalid: Callable[[Mapping[str, Any], Invalid], None] = lambda pod, bad: None
        # bind info is adopted only when this signer vouches for it (None: taken as it is)
        self.signer: BindSigner | None = None
        self.opt_in = UnsignedOptIn()  # the admin's opt-in: unsigned bind info at the first start
        self.on_unverified: Callable[[Unverified], None] = lambda u: None
        self.claims = Claims.guarding(scheduler)  # unverified pods' claims on GPUs another gang held
        self.synced = False
        self.synced_event = asyncio.Event()
        self.hold_reason: Callable[[], str] = lambda: ""  # why not to serve although synced
        # DRA mode: GPUs its device map keeps out (tainted, or slices contradicting the config)
        self.extra_bad: Callable[[str], frozenset[int]] = lambda node: frozenset()
        self.health: dict[str, tuple[bool, int | None]] = {}  # node -> (healthy, healthy GPUs)
        self.fenced: set[str] = set()  # nodes a reload added, unhealthy until read (`node_changes`)
        self.evictor: Evictor = self.evict  # (`serve`: the leader's)
        self.on_evicted: Callable[[str, str, str, Disruption], None] = lambda ns, name, uid, why: None
        self.off_config = OffConfig(self)  # pods bound on nodes the config lacks, by gang
        self.retries = EvictionRetries(self)  # pods whose deletion failed, tried again (the leader's)
        # DRA mode: a finished or deleted pod's claims go back
        self.on_gone: Callable[[Mapping[str, Any]], Awaitable[None]] = lambda pod: asyncio.sleep(0)
        # DRA mode: how the start's recovery reads a pod's GPUs from its claims
        self.recovery_claims: Callable[[], Awaitable[Claimed]] | None = None
        self.outside = OutsidePods()  # pods that are not topogang's holding GPUs of the config's nodes
        self.on_outside: Callable[[Held], None] = lambda held: None  # told once per such pod
        self.after_recovery: Callable[[], None] | None = None  # before ready (`serve`: `gc.freeze`)
        self.on_recovered: Callable[[RecoveryReport], Awaitable[None]] | None = None  # `start_config`
        self.gated = GatedPods(scheduler.holders)  # pods behind scheduling gates (`admission_gate`)

    def refresh_ready(self) -> None:
        """Ready = synced with the cluster and nothing else holding back (e.g. not the leader)."""
        reason = self.hold_reason() if self.synced else self.s.not_ready_reason
        self.s.ready = self.synced and not reason
        self.s.not_ready_reason = reason

    # ------------------------------------------------------------------------------ start-up
    async def start(self) -> tuple[str, str]:
        """List nodes and pods, recover, turn ready; the resourceVersions to watch from. Without the
        cyclic collector from the pod list to the end of recovery: a batch that builds (the listed
        pods, the core's gangs) and frees nearly nothing (`extender.ops.collector`)."""
        self.s.not_ready_reason = "listing nodes"
        nodes, nodes_rv = await self.kube.list(NODES)
        await self.apply_nodes(nodes, full=True)
        with collector_paused():
            pods_rv, report = await self._recover()
        if self.after_recovery is not None:
            self.after_recovery()
        for line in report.lines():
            log.info("%s", line)
        self.claims.tell(self.s.core, report.unverified, self.on_unverified)
        if self.on_recovered is not None:
            await self.on_recovered(report)
        self.synced = True
        self.synced_event.set()
        self.refresh_ready()
        return nodes_rv, pods_rv

    async def _recover(self) -> tuple[str, RecoveryReport]:
        self.s.not_ready_reason = "listing pods and recovering allocations"
        pods, pods_rv = await self.kube.list(PODS)
        self.gated.listed(pods)
        claimed = None
        if self.recovery_claims is not None:
            self.s.not_ready_reason = "reading ResourceSlices and ResourceClaims to recover allocations"
            claimed = await self.recovery_claims()
        verify = recovery_verifier(self.signer, pods, adopt_unsigned=await self.opt_in.armed())
        async with self.s.lock:
            report = recover(
                self.s.core,
                pods,
                now=self.s.clock(),
                namespace_vcs=self.s.namespace_vcs,
                ttl_seconds=self.s.ttl_seconds,
                verify=verify,
                claimed=claimed,
                entitle=self._entitle,
            )
            for pod in pods:  # pod IPs and FrameworkController identities for the gang ledger
                if is_enabled(pod) and not kpods.finished(pod):
                    self._guarded(
                        "observing", pod, self.s.gang_ledger.observe, self.s.core, pod, self.s.waiting_of
                    )
        self._keep_listed(pods, report.bind_info_read)
        # after recovery, so that the GPUs they stand for are ones no adopted gang holds
        touched = {h.node for pod in pods if (h := self._hold_outside(pod)) is not None}
        await self.refresh_nodes(touched)
        return pods_rv, report

    def _keep_listed(self, pods: list[dict[str, Any]], judged: Container[str]) -> None:
        """The start's pods as the watch goes on from them (`judged`: checked by their bind info)."""
        for pod in pods:
            if is_enabled(pod) and not kpods.finished(pod):
                uid = kpods.uid(pod)
                self.live[uid] = (kpods.namespace(pod), kpods.name(pod))
                self.pods[uid] = kpods.kept(pod)
                self.off_config.saw(pod)
                if uid in judged:
                    self.checked[uid] = fingerprint(pod)
                else:
                    self._guarded("checking", pod, self.check, pod)

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
        async with self.s.lock:
            core, seen = self.s.core, set()  # read under the lock: a reload may have replaced it
            for node in nodes:
                h = node_health(node)
                if not views.has_node(core, h.name) or h.name in self.fenced:
                    continue
                seen.add(h.name)
                _, configured = views.node_fill(core, h.name)
                self.health[h.name] = (h.healthy, h.healthy_gpus(configured))
                self._set_health(h.name)
            if full:
                for name in core.node_names():
                    if name not in seen:
                        self.health[name] = (False, None)
                        core.set_node_health(name, False)

    def _set_health(self, node: str) -> None:
        healthy, gpus = self.health.get(node, (False, None))
        bad = self.extra_bad(node)
        if healthy and self.outside.gpus_on(node):
            unheld = [i for i in views.node_unheld_gpus(self.s.core, node) if i not in bad]
            picks = self.outside.choose(node, unheld)
            bad = bad | picks
            if gpus is not None:  # the allocatable shortfall is on top of what the pods hold
                gpus = max(0, gpus - len(picks))
        else:
            self.outside.marked.pop(node, None)
            self.outside.short.discard(node)
        free = self.s.core.node_fill(node)[0]
        self.s.core.set_node_health(node, healthy, bad_gpus=bad, healthy_gpus=gpus)
        if self.s.core.node_fill(node)[0] > free:  # GPUs back (healed, or an outside pod gone)
            self.s.requeue.freed()

    async def refresh_node(self, node: str) -> None:
        """Node health again, after what `extra_bad` or the outside pods say of it changed."""
        await self.refresh_nodes((node,))

    async def refresh_nodes(self, nodes: Iterable[str]) -> None:
        """Node health again for `nodes`, and the outside pods' gauge (only a change of what they
        hold brings a node here); nothing, not even the lock, for none."""
        nodes = list(nodes)
        if not nodes:
            return
        self.s.metrics.outside_gpus.set(sum(self.outside.per_node.values()))
        async with self.s.lock:
            for node in nodes:
                if node in self.health:
                    self._set_health(node)

    async def on_node(self, kind: str, node: dict[str, Any]) -> None:
        if kind == "DELETED":
            async with self.s.lock:
                self.health[node_name(node)] = (False, None)
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
        """One pod event. Failing to reach the API server is the watch's (it lists again); anything
        else is this pod's content, and must not stop the watch."""
        try:
            await self._on_pod(kind, pod)
        except (ApiError, OSError, TimeoutError):
            raise
        except Exception:
            where = f"{kpods.namespace(pod)}/{kpods.name(pod)} ({kpods.uid(pod)})"
            log.exception("pod %s: %s event skipped", where, kind)

    async def _on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        self.gated.saw(kind, pod)
        self.retries.saw(kind, pod)
        if not is_enabled(pod):
            if kind == "DELETED":  # turned away while it opted in, maybe (`pod_gone` does the others)
                self.s.requeue.passed(kpods.uid(pod))
            await self._outside_pod(kind, pod)
            return
        uid = kpods.uid(pod)
        if kind == "DELETED":
            self.live.pop(uid, None)
            self.pods.pop(uid, None)
            self.foreign.discard(uid)
            self.checked.pop(uid, None)
            self.done.discard(uid)
            # even when released as finished already: a late filter may have remembered it since
            await self._gone_pod(uid, pod)
            return
        self.live[uid] = (kpods.namespace(pod), kpods.name(pod))
        self.pods[uid] = kpods.kept(pod)
        if kpods.finished(pod):
            self.checked.pop(uid, None)
            if uid not in self.done:
                self.done.add(uid)
                await self._gone_pod(uid, pod)
            return
        self.check(pod)
        self.off_config.saw(pod)
        if kpods.node_name(pod) is not None and uid not in self.foreign and not self._held(uid):
            async with self.s.lock:
                report = recover(
                    self.s.core,
                    [pod],
                    now=self.s.clock(),
                    namespace_vcs=self.s.namespace_vcs,
                    ttl_seconds=self.s.ttl_seconds,
                    verify=recovery_verifier(self.signer, [], adopt_unsigned=False),
                    entitle=self._entitle,
                )
            self.claims.tell(self.s.core, report.unverified, self.on_unverified)
            if not report.pods:
                self.foreign.add(uid)
            if report.evict:
                await self.evictor(report.evict, off_placement(OFF_PLACEMENT_WHY))
            for line in report.lines()[1:]:
                log.warning("%s", line)
        async with self.s.lock:  # pod IP, deletion mark: what the gang ledger's Ready needs
            self.s.gang_ledger.observe(self.s.core, pod, self.s.waiting_of)

    async def _gone_pod(self, uid: str, pod: Mapping[str, Any]) -> None:
        """A pod deleted or finished: its GPUs go back, first to pods that wait for GPUs to free."""
        self.claims.gone(uid)
        await self.off_config.going(uid, succeeded=kpods.succeeded(pod))
        await self.s.pod_gone(uid, finished=kpods.succeeded(pod))
        await self._freed()
        await self.on_gone(pod)

    async def _freed(self) -> None:
        """GPUs may be free: for pods outside topogang's, and unverified pods' claims (`unverified`)."""
        if self.outside.short:
            await self.refresh_nodes(list(self.outside.short))
        if self.claims.contested:
            async with self.s.lock:  # taking it holds what freed for them (`Claims.guarding`)
                pass

    def _hold_outside(self, pod: Mapping[str, Any]) -> Held | None:
        """Record a bound, not finished pod that is not topogang's and holds GPUs of a config node;
        the record when it is new (logged and told once), else None."""
        node = kpods.node_name(pod)
        if node is None or kpods.finished(pod) or is_enabled(pod) or not kpods.uid(pod):
            return None
        if not views.has_node(self.s.core, node):
            return None
        gpus = pod_gpus(pod)
        if not gpus:
            return None
        held = self.outside.hold(pod, node, gpus)
        if held is not None:
            log.warning(
                "pod %s/%s (%s) is not topogang's and holds %d nvidia.com/gpu of %s: "
                "as many of the node's GPUs are kept out of topogang's placements until it is gone",
                held.namespace,
                held.name,
                held.uid,
                gpus,
                node,
            )
            self.on_outside(held)
        return held

    async def _outside_pod(self, kind: str, pod: Mapping[str, Any]) -> None:
        """A pod that is not topogang's: its GPUs held while it is bound and not finished."""
        if kind == "DELETED" or kpods.finished(pod):
            held = self.outside.forget(kpods.uid(pod))
            if held is not None:
                log.info(
                    "pod %s/%s (%s) is gone or finished: %d GPUs of %s back to topogang",
                    held.namespace,
                    held.name,
                    held.uid,
                    held.gpus,
                    held.node,
                )
                await self.refresh_node(held.node)
            return
        held = self._hold_outside(pod)
        if held is not None:
            await self.refresh_node(held.node)

    def _entitle(self, pr: PodRequest, pod: Mapping[str, Any], held: int | None) -> PodRequest:
        """A recovered pod's request held to the entitlements in force (no Event: it is bound)."""
        return grant(self.s.entitlement.rules, pr, pod, held=held)

    def _held(self, uid: str) -> bool:
        """Whether the core has this pod in a gang slot, or its claim waits for GPUs (`Claims`)."""
        return self.s.core.holds_slot(uid) or uid in self.claims.contested

    async def relist_pods(self, pods: list[dict[str, Any]]) -> None:
        present = {kpods.uid(p) for p in pods}
        self.s.requeue.keep_only(present)
        self.retries.keep_only(present)
        self.gated.listed(pods)
        for uid in [u for u in self.outside.held if u not in present]:
            gone = self.outside.forget(uid)
            if gone is not None:
                await self.refresh_node(gone.node)
        for uid in [u for u in self.live if u not in present]:
            del self.live[uid]
            kept = self.pods.pop(uid, None)
            self.foreign.discard(uid)
            self.done.discard(uid)
            self.checked.pop(uid, None)
            self.claims.gone(uid)
            await self.off_config.going(uid, succeeded=False)
            await self.s.pod_gone(uid)
            if kept is not None:  # deleted while the watch was down: no DELETED comes for it
                await self.on_gone(kept)
        await self._freed()
        # kube-scheduler went on while the watch was down: pods filtered (and maybe bound) then,
        # and deleted before this list, never reached the watch, so no DELETED will come for them
        unseen = dict.fromkeys([*self.s.core.pods_holding_slots(), *self.s.pods.uids()])
        for uid in [u for u in unseen if u not in present and u not in self.live]:
            named = holder(self.s.core, self.claims, uid, self.s.cached(uid))
            if not self._held(uid):
                await self.s.pod_gone(uid)  # only remembered: forgotten now, re-read if it comes back
            elif named is not None and await self._gone(*named, uid):
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
    async def known_pod(self, uid: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        """The pod with this UID as the API server has it: the watched copy, else (a pod created an
        instant ago, which the watch may not have brought yet) read by the name a verb gave, kept
        only if its UID is the one asked for. None: not known."""
        pod = self.pods.get(uid)
        if pod is not None or not self.synced:
            return pod
        try:
            got = await self.kube.request("GET", pod_path(namespace, name))
        except ApiError as err:
            log.warning("cannot read pod %s/%s: %s", namespace, name, err)
            return None
        return got if got is not None and kpods.uid(got) == uid else None

    async def evict(self, uids: Sequence[str], why: Disruption) -> None:
        """Mark each pod disrupted, delete it, tell its namespace (`extender.kube.evictions`); one
        whose deletion fails is tried again later (`extender.kube.eviction_retry`)."""
        for uid in uids:
            pr = self.s.cached(uid) if uid not in self.live else None
            where = self.live.get(uid) or ((pr.namespace, pr.name) if pr is not None else None)
            if where is None:
                log.warning("cannot evict pod %s (%s): not known", uid, why.detail)
                continue
            await self.retries.evict(uid, *where, why)
