"""DRA mode (`topogang serve --dra`): topogang allocates its pods' ResourceClaims itself.

kube-scheduler's DynamicResources plugin is off in topogang's profile, so nothing else allocates the
claims of topogang's pods; the GPUs the container gets are the ones topogang chose:

- `DraCatalog` lists and watches ResourceSlices and DeviceTaintRules and keeps, per node, the map
  from the cell tree's GPU indices to devices (`extender.dra.devices`). A node whose slices
  contradict the config is reported (log, metric `topogang_dra_node_mismatch`, a Warning Event on the
  Node) and its GPUs are kept out of new placements, as are tainted devices (node health).
- `claim_gpus` reads a pod's GPU count from its claims (or their templates), for the conventions.
- `DraBinder` wraps the Binding: it writes each GPU claim's `status.allocation` (exactly the slot's
  devices, request by request, and the node) and `status.reservedFor` (the pod) before the Binding,
  after kube-scheduler's finalizer, and takes them back if the Binding fails. A pod asking
  `nvidia.com/gpu` with no claim (KEP-5004's extended-resource mapping) gets the claim
  kube-scheduler would have made (`extender.dra.extended`), created here, and its
  `status.extendedResourceClaimStatus`.
- `release` gives a finished or deleted pod's claims back (reservation, then allocation, then the
  finalizer), as the resourceclaim controller does for the claims kube-scheduler allocates.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from extender.dra import claims as dc
from extender.dra.devices import (
    DeviceMap,
    DraSettings,
    Mismatch,
    Slice,
    TaintRule,
    map_node,
    node_devices,
    parse_slice,
    parse_taint_rule,
    tainted_gpus,
)
from extender.dra.extended import claim_body, claim_name, container_requests, reusable
from extender.gangs.bindinfo import ISOLATION_ANNOTATIONS, decode_isolation
from extender.gangs.optin import GPU_RESOURCE
from extender.http.ports import BindError, BindTarget, BindUnknownError
from extender.kube import pods as kpods
from extender.kube.binder import KubeBinder
from extender.kube.client import ApiError, AsyncKube, NoAnswerError, pod_path
from topology.decisions import UserError

log = logging.getLogger("topogang.dra")

SLICES = f"{dc.API}/resourceslices"
TAINT_RULES = f"{dc.API}/devicetaintrules"
CACHE_SECONDS = 30.0
MAX_CACHED = 50_000

Halves = Callable[[str], dict[int, str]]


class DraCatalog:
    """Devices per node from the slices, and the claims' GPU counts; the I/O side of DRA mode."""

    def __init__(
        self,
        kube: AsyncKube,
        settings: DraSettings,
        halves: Halves,
        nodes: list[str],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube = kube
        self.settings = settings
        self.halves = halves
        self.nodes = set(nodes)
        self.clock = clock
        self.slices: dict[str, Slice] = {}
        self.rules: dict[str, TaintRule] = {}
        self.maps: dict[str, DeviceMap | Mismatch] = {}
        self.reported: dict[str, str] = {}  # node -> the mismatch last reported
        self.on_change: Callable[[str], Awaitable[None]] | None = None  # node health again
        self.on_remap: list[Callable[[str], Awaitable[None]]] = []  # a node's devices mapped anew
        self.on_mismatch: Callable[[Mismatch], None] = lambda m: None
        # (namespace, claim) -> the node's GPUs other schedulers' claims hold (`ForeignClaims`)
        self.claims_holding: Callable[[str], dict[tuple[str, str], tuple[int, ...]]] = lambda node: {}
        self._specs: dict[tuple[str, str, str], tuple[float, Mapping[str, Any] | None]] = {}
        self.listed = asyncio.Event()  # the slices were listed once: devices can be told from GPUs

    # ------------------------------------------------------------------------------ devices
    def device_map(self, node: str) -> DeviceMap | Mismatch:
        return self.maps.get(node) or Mismatch(node, f"no {self.settings.driver} ResourceSlice seen")

    def bad_gpus(self, node: str) -> frozenset[int]:
        """GPUs of the node not to give out: all of them when its slices contradict the config."""
        dm = self.device_map(node)
        if isinstance(dm, Mismatch):
            return frozenset(self.halves(node))
        return frozenset(tainted_gpus(dm, self.rules.values()))

    def remap(self, node: str) -> bool:
        """Map the node again; whether anything changed."""
        if node not in self.nodes:
            return False
        devices = node_devices(self.slices.values(), self.settings.driver, node)
        new = map_node(node, self.halves(node), devices, self.settings)
        changed = self.maps.get(node) != new
        self.maps[node] = new
        if isinstance(new, Mismatch):
            if self.reported.get(node) != new.reason:
                self.reported[node] = new.reason
                log.warning("DRA: node %s: %s; its GPUs are not given out", node, new.reason)
                self.on_mismatch(new)
        elif self.reported.pop(node, None) is not None:
            log.info("DRA: node %s: its devices match the config again", node)
        return changed

    def reconfigured(self, nodes: Iterable[str]) -> list[str]:
        """A reload: the config's nodes now (`halves` reads the config in force); every node
        mapped again, those gone forgotten; the nodes whose map changed."""
        self.nodes = set(nodes)
        for node in [n for n in self.maps if n not in self.nodes]:
            del self.maps[node]
            self.reported.pop(node, None)
        return [node for node in sorted(self.nodes) if self.remap(node)]

    async def after_remap(self, nodes: Iterable[str]) -> None:
        for node in nodes:
            await self._remapped(node)

    async def _changed(self, nodes: set[str]) -> None:
        for node in sorted(nodes):
            if self.remap(node):
                await self._remapped(node)

    async def _remapped(self, node: str) -> None:
        """Tell what follows a node's map (its health, the claims judged by it) that it changed."""
        if self.on_change is not None:
            await self.on_change(node)
        for hook in self.on_remap:
            await hook(node)

    async def on_slice(self, kind: str, obj: dict[str, Any]) -> None:
        name = kpods.meta(obj).get("name")
        if not isinstance(name, str):
            return
        old = self.slices.pop(name, None)
        touched = {old.node} if old is not None else set()
        if kind != "DELETED":
            s = parse_slice(obj)
            if s is not None:
                self.slices[name] = s
                touched.add(s.node)
        await self._changed(touched)

    async def relist_slices(self, items: list[dict[str, Any]]) -> None:
        self.slices = {s.name: s for s in (parse_slice(o) for o in items) if s is not None}
        await self._changed(set(self.nodes))
        self.listed.set()

    async def on_rule(self, kind: str, obj: dict[str, Any]) -> None:
        name = kpods.meta(obj).get("name")
        if not isinstance(name, str):
            return
        self.rules.pop(name, None)
        rule = parse_taint_rule(obj) if kind != "DELETED" else None
        if rule is not None:
            self.rules[name] = rule
        await self._rules_changed()

    async def relist_rules(self, items: list[dict[str, Any]]) -> None:
        self.rules = {r.name: r for r in (parse_taint_rule(o) for o in items) if r is not None}
        await self._rules_changed()

    async def _rules_changed(self) -> None:
        if self.on_change is None:
            return
        for node in sorted(self.nodes):
            await self.on_change(node)

    # ------------------------------------------------------------------------------ claims
    async def _spec(self, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        """A claim's or template's object (specs are immutable: cached a while)."""
        key = (kind, namespace, name)
        now = self.clock()
        hit = self._specs.get(key)
        if hit is not None and hit[1] is not None and now - hit[0] < CACHE_SECONDS:
            return hit[1]
        if kind == "class":
            path = _class_path(name)
        else:
            path = dc.claim_path(namespace, name) if kind == "claim" else dc.template_path(namespace, name)
        got = await self.kube.request("GET", path)
        if len(self._specs) > MAX_CACHED:
            self._specs.clear()
        self._specs[key] = (now, got)
        return got

    async def claim_gpus(self, pod: Mapping[str, Any], namespace: str) -> int:
        """The GPUs the pod's claims ask for; `UserError` naming the claim for what topogang cannot
        allocate or cannot find."""
        total = 0
        for i, pc in enumerate(dc.pod_claims(pod)):
            where = f"spec.resourceClaims[{i}]"
            if pc.claim is not None:
                obj = await self._spec("claim", namespace, pc.claim)
                if obj is None and pc.template is None:
                    raise UserError(
                        where, f"ResourceClaim {pc.claim} does not exist in namespace {namespace}"
                    )
                spec = dc.claim_spec(obj) if obj is not None else None
            else:
                spec = None
            if spec is None and pc.template is not None:
                obj = await self._spec("template", namespace, pc.template)
                if obj is None:
                    raise UserError(
                        where, f"ResourceClaimTemplate {pc.template} does not exist in namespace {namespace}"
                    )
                spec = dc.claim_spec(obj, template=True)
            if spec is not None:
                total += sum(n for _, n in dc.gpu_requests(spec, self.settings.device_class, where))
        return total

    async def class_config(self) -> list[dict[str, Any]]:
        """The admin's DeviceClass `spec.config` (each allocation carries it, `source: FromClass`)."""
        got = await self._spec("class", "", self.settings.device_class)
        spec = got.get("spec") if isinstance(got, Mapping) else None
        cfg = spec.get("config") if isinstance(spec, Mapping) else None
        return [c for c in cfg if isinstance(c, dict)] if isinstance(cfg, list) else []

    async def extended_class(self) -> bool:
        """Whether the admin's DeviceClass serves `nvidia.com/gpu` (KEP-5004's `extendedResourceName`)."""
        got = await self._spec("class", "", self.settings.device_class)
        spec = got.get("spec") if isinstance(got, Mapping) else None
        return isinstance(spec, Mapping) and spec.get("extendedResourceName") == GPU_RESOURCE


def _class_path(name: str) -> str:
    return f"{dc.API}/deviceclasses/{name}"


def _slot_gpus(annotations: Mapping[str, str]) -> tuple[int, ...]:
    for key in ISOLATION_ANNOTATIONS:
        text = annotations.get(key)
        if text:
            return decode_isolation(text)
    return ()


class DraBinder(KubeBinder):
    """The Binding, preceded by the claims' allocation (all of the pod's, or none)."""

    def __init__(self, kube: AsyncKube, catalog: DraCatalog) -> None:
        super().__init__(kube)
        self.catalog = catalog

    async def bind(self, target: BindTarget, node: str, annotations: Mapping[str, str]) -> None:
        self.fenced(target)  # before any claim is written
        pod = await self.kube.request("GET", pod_path(target.namespace, target.name))
        if pod is None or kpods.uid(pod) != target.uid:
            raise BindError(f"pod {target.namespace}/{target.name} ({target.uid}) does not exist")
        if kpods.node_name(pod) is not None:
            # bound already: the Binding tells a retried bind of this decision (success) from another
            # (refused); the claims of a pod that may run are never written again, nor taken back
            await super().bind(target, node, annotations)
            return
        written = await self.allocate(pod, target, node, _slot_gpus(annotations))
        try:
            await super().bind(target, node, annotations)
        except BindUnknownError:
            raise  # the pod may be bound with these claims: they stay, as its slot does
        except BaseException:
            await self.undo(target, written)
            raise

    async def allocate(
        self, pod: Mapping[str, Any], target: BindTarget, node: str, gpus: tuple[int, ...]
    ) -> list[str]:
        """Write every GPU claim's allocation; the claims written (to undo). Nothing stays written
        when one fails."""
        settings = self.catalog.settings
        dm = self.catalog.device_map(node)
        if isinstance(dm, Mismatch):
            raise BindError(f"node {node}: its devices cannot be allocated: {dm.reason}")
        devices = []
        for g in gpus:
            d = dm.device_of(g)
            if d is None:
                raise BindError(f"node {node} publishes no device for GPU {g}")
            devices.append((d.pool, d.name))
        own = {(target.namespace, pc.claim) for pc in dc.pod_claims(pod) if pc.claim is not None}
        own |= {(target.namespace, x)} if (x := claim_name(pod)) is not None else set()
        for (ns, name), held in self.catalog.claims_holding(node).items():
            if (ns, name) not in own and (both := sorted(set(held) & set(gpus))):
                raise BindError(f"node {node}: GPUs {both} are allocated to ResourceClaim {ns}/{name}")
        plan: list[tuple[Mapping[str, Any], list[tuple[str, int]]]] = []
        for i, pc in enumerate(dc.pod_claims(pod)):
            if pc.claim is None:
                raise BindError(
                    f"spec.resourceClaims[{i}]: the claim of template {pc.template} is not created yet"
                )
            claim = await self.kube.request("GET", dc.claim_path(target.namespace, pc.claim))
            if claim is None:
                raise BindError(f"ResourceClaim {target.namespace}/{pc.claim} does not exist")
            try:
                reqs = dc.gpu_requests(
                    dc.claim_spec(claim), settings.device_class, f"ResourceClaim {pc.claim}"
                )
            except UserError as err:
                raise BindError(f"{err.field}: {err.message}") from None
            if reqs:
                plan.append((claim, reqs))
        if not plan:
            return await self._extended(pod, target, node, devices)
        need = sum(n for _, reqs in plan for _, n in reqs)
        if need != len(devices):
            raise BindError(f"the pod's claims ask {need} GPUs, its slot has {len(devices)}")
        written: list[str] = []
        try:
            at = 0
            for obj, reqs in plan:
                n = sum(c for _, c in reqs)
                results = dc.split_devices(reqs, devices[at : at + n], settings.driver)
                at += n
                await self._write(obj, results, target, node, written)
        except BaseException:
            await self.undo(target, written)
            raise
        return written

    async def _write(
        self,
        claim: Mapping[str, Any],
        results: list[dc.Result],
        target: BindTarget,
        node: str,
        written: list[str],
    ) -> None:
        """Allocate and reserve one claim, as kube-scheduler's bind does: its finalizer first (a
        metadata update; without it the resourceclaim controller never deallocates the claim once
        its pod is gone), then the status at the version read (a concurrent change fails it). The
        claim is named in `written` before the first write: a write whose reply was lost may have
        been applied, and must be undone all the same. Left as is when already allocated so and
        reserved for the pod (a retried bind). Allocated to other devices but reserved for this pod
        alone, it is this pod's own leftover (an undo that got no answer): written again."""
        name = str(kpods.meta(claim).get("name"))
        where = f"ResourceClaim {target.namespace}/{name}"
        have, holders = dc.allocated(claim), dc.reserved_uids(claim)
        if have and sorted(have, key=str) != sorted(results, key=str):
            if holders != [target.uid]:
                raise BindError(f"{where} is allocated to other devices already")
        elif have and target.uid in holders:
            return
        path = dc.claim_path(target.namespace, name)
        written.append(name)
        try:
            body = dc.protected(claim)
            if body is not None:
                claim = await self.kube.request("PUT", path, body=body) or {}
                if not claim:
                    raise BindError(f"{where} does not exist")
            config = await self.catalog.class_config()
            body = dc.reserved(claim, results, node, target.name, target.uid, config)
            await self.kube.request("PUT", path + "/status", body=body)
        except (ApiError, NoAnswerError) as err:
            raise BindError(f"allocating {where}: {err}") from None

    async def _extended(
        self, pod: Mapping[str, Any], target: BindTarget, node: str, devices: list[tuple[str, str]]
    ) -> list[str]:
        """KEP-5004: the claim kube-scheduler would make for `nvidia.com/gpu`, made and allocated
        here; the one a bind tried before made (named in the pod's status) written again instead,
        so a retried bind leaves one claim, not two on the same devices."""
        ext = container_requests(pod)
        if not ext.requests or not await self.catalog.extended_class():
            return []  # GPUs by bind info (the env path) or a device plugin: no claim to write
        if ext.gpus != len(devices):
            raise BindError(f"the pod asks {ext.gpus} {GPU_RESOURCE}, its slot has {len(devices)}")
        cls, driver = self.catalog.settings.device_class, self.catalog.settings.driver
        results = dc.split_devices(ext.requests, devices, driver)
        name = claim_name(pod)
        made = await self.kube.request("GET", dc.claim_path(target.namespace, name)) if name else None
        if made is not None and reusable(made, target.uid, ext.requests, cls):
            try:
                await self._write(made, results, target, node, [])
            except BaseException:
                await delete_claim(self.kube, target.namespace, str(name), target.uid)
                raise
            return [f"extended:{name}"]
        body = claim_body(target.namespace, target.name, target.uid, ext.requests, cls)
        try:
            made = await self.kube.request(
                "POST", f"{dc.API}/namespaces/{target.namespace}/resourceclaims", body=body
            )
        except (ApiError, NoAnswerError) as err:
            raise BindError(f"creating the pod's {GPU_RESOURCE} ResourceClaim: {err}") from None
        if made is None:
            raise BindError(f"creating the pod's {GPU_RESOURCE} ResourceClaim: no answer")
        name = str(kpods.meta(made).get("name"))
        try:
            await self._write(made, results, target, node, [])
            patch = {
                "status": {
                    "extendedResourceClaimStatus": {
                        "requestMappings": ext.mappings,
                        "resourceClaimName": name,
                    }
                }
            }
            await self.kube.request("PATCH", pod_path(target.namespace, target.name) + "/status", body=patch)
        except BaseException:
            await delete_claim(self.kube, target.namespace, name, target.uid)
            raise
        return [f"extended:{name}"]

    async def undo(self, target: BindTarget, written: list[str]) -> None:
        """Take back what `allocate` wrote for a pod whose Binding failed: every claim, whatever
        another's answer (a claim left allocated would keep its devices from every later bind)."""
        for name in written:
            if name.startswith("extended:"):
                await delete_claim(self.kube, target.namespace, name.removeprefix("extended:"), target.uid)
            else:
                await unreserve(self.kube, target.namespace, name, target.uid)


UNRESERVE_TRIES = 5


async def unreserve(kube: AsyncKube, namespace: str, name: str, uid: str) -> None:
    """Drop the pod from the claim's `reservedFor`; with no one left, the allocation too
    (`extender.dra.claims.unreserved`), then the finalizer, as kube-scheduler's Unreserve and the
    resourceclaim controller do between them. The controller writes the same claims: a conflict is
    read again and retried a few times. Never raises for the API server (a cleanup: logged)."""
    path = dc.claim_path(namespace, name)
    for attempt in range(1, UNRESERVE_TRIES + 1):
        try:
            claim = await kube.request("GET", path)
            body = dc.unreserved(claim, uid) if claim is not None else None
            if body is not None:
                claim = await kube.request("PUT", path + "/status", body=body)
                log.info("DRA: ResourceClaim %s/%s released by pod %s", namespace, name, uid)
            bare = dc.unprotected(claim) if claim is not None else None
            if bare is not None:
                await kube.request("PUT", path, body=bare)
            return
        except ApiError as err:
            if err.status == 409 and attempt < UNRESERVE_TRIES:
                continue
            log.warning("DRA: releasing ResourceClaim %s/%s failed: %s", namespace, name, err)
        except NoAnswerError as err:
            log.warning("DRA: releasing ResourceClaim %s/%s got no answer: %s", namespace, name, err)
        return


async def delete_claim(kube: AsyncKube, namespace: str, name: str, uid: str) -> None:
    """A claim made for the pod (KEP-5004) released, then deleted: released first, as kube-scheduler
    removes its finalizer first, or the deletion would wait on it. Never raises for the API server."""
    await unreserve(kube, namespace, name, uid)
    try:
        await kube.request("DELETE", dc.claim_path(namespace, name))
    except (ApiError, NoAnswerError) as err:  # a cleanup: never hides what failed
        log.warning("DRA: deleting ResourceClaim %s/%s failed: %s", namespace, name, err)


async def release(kube: AsyncKube, pod: Mapping[str, Any]) -> None:
    """A finished or deleted pod's claims back: its reservations, and allocations no one else holds;
    the `nvidia.com/gpu` claim made for it deleted."""
    ns, uid = kpods.namespace(pod), kpods.uid(pod)
    for pc in dc.pod_claims(pod):
        if pc.claim is not None:
            await unreserve(kube, ns, pc.claim, uid)
    name = claim_name(pod)
    if name is not None:
        await delete_claim(kube, ns, name, uid)
