"""Turning DRA mode on for a Kubernetes-mode service: the catalog's watches, the binder, the hooks.

Everything DRA mode changes in the service is here, so `extender.kube.service` only calls `attach`:
the binder allocates claims before each Binding, the conventions count a pod's claimed GPUs, node
health keeps tainted or unmappable GPUs out, a gone pod's claims are released, the start's recovery
reads the GPUs of a pod without topogang's bind info from its claims, and devices that
claims of other schedulers hold on topogang's nodes are held as `unverified:` gangs (recovery's
way of holding GPUs topogang did not give out) until those claims let go.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from config.load import LoadedConfig
from extender.dra import claims as dc
from extender.dra.adopt import claimed_gpus
from extender.dra.devices import DeviceMap, DraSettings, Mismatch
from extender.http.verbs import Scheduler
from extender.kube import pods as kpods
from extender.kube.client import AsyncKube
from extender.kube.dra import SLICES, TAINT_RULES, DraBinder, DraCatalog, release
from extender.kube.events import EventRecorder, ObjectRef
from extender.kube.recovery import Claimed
from extender.kube.sync import ClusterSync
from extender.kube.unverified import Unverified, hold_unverified
from extender.ops.metrics import Metrics
from topology import inspect
from topology.core import Core
from topology.model import Topology

log = logging.getLogger("topogang.dra")

CLAIMS = f"{dc.API}/resourceclaims"


def attach(
    scheduler: Scheduler,
    sync: ClusterSync,
    kube: AsyncKube,
    loaded: LoadedConfig,
    settings: DraSettings,
    recorder: EventRecorder,
    metrics: Metrics,
    on_reload: list[Callable[[Core], None]] | None = None,
    holds: list[Callable[[], str]] | None = None,
) -> list[Callable[[], Coroutine[Any, Any, None]]]:
    """Wire DRA mode in; the background tasks to run (the watches). `on_reload`: where to put the
    hook a reload calls with its new core (`extender.kube.node_changes.NodeChanges`); `holds`: where
    to put why the extender may not serve yet (the readiness check's)."""
    nodes = list(Topology(loaded.spec).machines)
    # the config in force, a reload's included (`reconfigured` below)
    catalog = DraCatalog(kube, settings, lambda node: inspect.node_halves(scheduler.core, node), nodes)
    scheduler.binder = DraBinder(kube, catalog)
    scheduler.conventions.claim_gpus = catalog.claim_gpus
    sync.extra_bad = catalog.bad_gpus
    catalog.on_change = sync.refresh_node
    pending: set[asyncio.Task[None]] = set()

    def reconfigured(new: Core) -> None:
        """A reload (under the scheduler's lock): nodes added or taken out, layouts changed."""
        changed = catalog.reconfigured(new.node_names())
        if changed:
            task = asyncio.get_running_loop().create_task(catalog.after_remap(changed))
            pending.add(task)
            task.add_done_callback(pending.discard)

    if on_reload is not None:
        on_reload.append(reconfigured)

    def on_mismatch(m: Mismatch) -> None:
        metrics.dra_mismatch.set(sum(isinstance(v, Mismatch) for v in catalog.maps.values()))
        text = f"topogang DRA: the ResourceSlices of {m.node} contradict the config: {m.reason}"
        recorder.record(
            ObjectRef("Node", "default", m.node), "DeviceMismatch", text, warning=True
        )  # Node Events live in default

    catalog.on_mismatch = on_mismatch

    async def on_gone(pod: Mapping[str, Any]) -> None:
        try:
            await release(kube, pod)
        except Exception:
            log.exception(
                "DRA: releasing the claims of pod %s/%s failed", kpods.namespace(pod), kpods.name(pod)
            )

    sync.on_gone = on_gone

    async def recovery_claims() -> Claimed:
        """The start's recovery takes a pod's GPUs from its claims when its bind info is not
        topogang's (`extender.dra.adopt`): the slices mapped, the claims listed once."""
        await catalog.listed.wait()
        items, _ = await kube.list(CLAIMS)
        by_ns: dict[str, dict[str, Mapping[str, Any]]] = {}
        for c in items:
            by_ns.setdefault(kpods.namespace(c), {})[str(kpods.meta(c).get("name"))] = c

        def claimed(pod: Mapping[str, Any]) -> tuple[int, ...] | str | None:
            node = kpods.node_name(pod)
            dm = catalog.maps.get(node) if node is not None else None
            return claimed_gpus(pod, by_ns.get(kpods.namespace(pod), {}), dm, settings)

        return claimed

    sync.recovery_claims = recovery_claims
    foreign = ForeignClaims(scheduler, catalog)

    async def watch_slices() -> None:
        await sync.watch(SLICES, "", catalog.on_slice, catalog.relist_slices)

    async def watch_rules() -> None:
        await sync.watch(TAINT_RULES, "", catalog.on_rule, catalog.relist_rules)

    claims_held = asyncio.Event()  # other schedulers' claims held once: topogang may serve

    def not_held() -> str:
        return "" if claims_held.is_set() else "holding the devices other schedulers' ResourceClaims hold"

    if holds is not None:
        holds.append(not_held)

    async def relist_claims(items: list[dict[str, Any]]) -> None:
        await foreign.relist(items)
        if not claims_held.is_set():
            claims_held.set()
            sync.refresh_ready()

    async def watch_claims() -> None:
        await sync.synced_event.wait()  # pods recovered: claims of pods holding slots are theirs
        await catalog.listed.wait()  # devices mapped: a claim's devices can be told as GPUs
        await sync.watch(CLAIMS, "", foreign.on_claim, relist_claims)

    log.info(
        "DRA mode: driver %s, device class %s, GPUs in %s order",
        settings.driver,
        settings.device_class,
        settings.order_by,
    )
    return [watch_slices, watch_rules, watch_claims]


class ForeignClaims:
    """Claims allocated on topogang's nodes for pods topogang did not bind (another profile's
    DynamicResources plugin, a claim allocated before topogang ran): their devices are held.

    A hold follows its claim: allocated anew (seen by the watch, or only by a relist after a gap), the
    old GPUs are let go and the new ones held. While the claim's devices cannot be told as GPUs (its
    node's slices gone a while, a driver restarting) the hold stays, since the devices are still
    allocated, and the claim is judged again each time a node's devices are mapped anew."""

    def __init__(self, scheduler: Scheduler, catalog: DraCatalog) -> None:
        self.s = scheduler
        self.catalog = catalog
        self.held: dict[str, Unverified] = {}  # claim uid -> what is held for it
        # claim uid -> (the claim, its node or None), for those held or whose devices are not mapped
        self.watched: dict[str, tuple[dict[str, Any], str | None]] = {}
        self.lock = asyncio.Lock()  # the watch, a relist and a remap judge one claim at a time
        catalog.on_remap.append(self.remapped)
        catalog.claims_holding = self.holding

    def holding(self, node: str) -> dict[tuple[str, str], tuple[int, ...]]:
        """The GPUs of `node` each held claim's allocation names, whether or not the core could
        hold them all (a gang's reservation may have them): no bind may write them."""
        return {
            (u.namespace, u.name.removeprefix("claim-")): u.gpus for u in self.held.values() if u.node == node
        }

    def _gpus(self, claim: Mapping[str, Any]) -> tuple[str, tuple[int, ...]] | str | None:
        """(node, GPUs) the claim's devices of the driver are; None: it holds none of topogang's
        nodes; "": some device is not in any node's map now (the hold, if any, stays)."""
        results = [r for r in dc.allocated(claim) if r.driver == self.catalog.settings.driver]
        named = dc.allocation_node(claim)
        if not results or (named is not None and named not in self.catalog.nodes):
            return None
        node = None
        gpus = []
        for r in results:
            found = [
                (name, g)
                for name, dm in self.catalog.maps.items()
                if isinstance(dm, DeviceMap) and (g := dm.gpu_of(r.pool, r.device)) is not None
            ]
            if len(found) != 1 or node not in (None, found[0][0]):
                return ""
            node = found[0][0]
            gpus.append(found[0][1])
        return (node, tuple(sorted(gpus))) if node is not None else ""

    def _ours(self, claim: Mapping[str, Any], node: str, gpus: tuple[int, ...]) -> bool:
        """Reserved for a pod whose slot in the core holds exactly these GPUs (a pod topogang
        binds claims its slot before its claims are written). Claims that give a pod other GPUs
        than its slot (bind info edited, a claim allocated by hand) are held on their own."""
        core = self.s.core
        for uid in dc.reserved_uids(claim):
            g = core.gang_of_pod(uid)
            slot = g.slot_of(uid) if g is not None else None
            if slot is None:
                continue
            where, have = core.slot_place(slot)
            if where == node and set(gpus) <= set(have):
                return True
            log.warning(
                "DRA: ResourceClaim %s/%s gives pod %s GPUs %s of %s; its slot holds %s of %s",
                kpods.namespace(claim),
                kpods.name(claim),
                uid,
                list(gpus),
                node,
                list(have),
                where,
            )
        return False

    async def _let_go(self, uid: str) -> None:
        if self.held.pop(uid, None) is not None:
            await self.s.pod_gone(uid)

    async def on_claim(self, kind: str, claim: dict[str, Any]) -> None:
        async with self.lock:
            await self._on_claim(kind, claim)

    async def _on_claim(self, kind: str, claim: dict[str, Any]) -> None:
        uid = kpods.uid(claim)
        if not uid:
            return
        got = None if kind == "DELETED" else self._gpus(claim)
        if isinstance(got, str):  # not mapped now: judged again when a node's devices are
            self.watched[uid] = (claim, dc.allocation_node(claim))
            return
        if got is None or self._ours(claim, *got):
            if got is None:
                self.watched.pop(uid, None)
            else:  # ours now: judged again when its node's devices are mapped anew
                self.watched[uid] = (claim, got[0])
            await self._let_go(uid)
            return
        node, gpus = got
        self.watched[uid] = (claim, node)
        old = self.held.get(uid)
        if old is not None and (old.node, old.gpus) == (node, gpus):
            return
        await self._let_go(uid)  # allocated anew: the old devices are free
        u = Unverified(uid, kpods.namespace(claim), f"claim-{kpods.name(claim)}", node, gpus, "ResourceClaim")
        async with self.s.lock:
            hold_unverified(self.s.core, u, self.s.clock())
        self.held[uid] = u
        log.info(
            "DRA: GPUs %s of %s held for ResourceClaim %s/%s",
            list(gpus),
            node,
            u.namespace,
            kpods.name(claim),
        )

    async def remapped(self, node: str) -> None:
        """A node's devices were mapped anew: its claims' GPUs judged again."""
        await self._judge(
            [
                claim
                for uid, (claim, where) in list(self.watched.items())
                if where in (node, None) or (uid in self.held and self.held[uid].node == node)
            ]
        )

    async def relist(self, items: list[dict[str, Any]]) -> None:
        present = {kpods.uid(c) for c in items}
        for uid in [u for u in self.watched if u not in present]:
            del self.watched[uid]
        async with self.lock:
            for uid in [u for u in self.held if u not in present]:
                await self._let_go(uid)
        await self._judge(items)
        await asyncio.sleep(0)

    async def _judge(self, claims: list[dict[str, Any]]) -> None:
        """Judge claims again, every hold that moves let go first: claims that traded devices (a
        node's devices renumbered, claims reallocated during a watch gap) each find theirs free."""
        async with self.lock:
            for c in claims:
                old = self.held.get(kpods.uid(c))
                got = self._gpus(c)
                if old is not None and got != "" and got != (old.node, old.gpus):
                    await self._let_go(old.uid)
        for c in claims:
            await self.on_claim("MODIFIED", c)
