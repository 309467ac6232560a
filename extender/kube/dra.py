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
  and takes them back if the Binding fails. A pod asking `nvidia.com/gpu` with no claim (KEP-5004's
  extended-resource mapping) gets the claim kube-scheduler would have made, created here, and its
  `status.extendedResourceClaimStatus`.
- `release` gives a finished or deleted pod's claims back (reservation, then allocation).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
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
from extender.gangs.bindinfo import ISOLATION_ANNOTATIONS, decode_isolation
from extender.gangs.optin import GPU_RESOURCE, gpu_count
from extender.http.ports import BindError, BindTarget
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
        self.on_mismatch: Callable[[Mismatch], None] = lambda m: None
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

    async def _changed(self, nodes: set[str]) -> None:
        for node in sorted(nodes):
            if self.remap(node) and self.on_change is not None:
                await self.on_change(node)

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


def _container_requests(pod: Mapping[str, Any]) -> list[tuple[str, str, int]]:
    """(container name, request name, GPUs) of each container asking `nvidia.com/gpu`, named as
    kube-scheduler names a KEP-5004 claim's requests: container-<i>-request-<j>, i over init
    containers then containers, j the resource's place among the container's sorted extended ones."""
    spec = pod.get("spec") if isinstance(pod.get("spec"), dict) else {}
    assert isinstance(spec, dict)
    out = []
    every = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    for i, c in enumerate(every):
        res = c.get("resources") if isinstance(c, dict) else None
        if not isinstance(res, dict):
            continue
        names: set[str] = set()
        n = 0
        for part in ("requests", "limits"):
            vals = res.get(part)
            if isinstance(vals, dict):
                names |= {
                    k for k in vals if isinstance(k, str) and "/" in k and not k.startswith("kubernetes.io/")
                }
                n = max(n, gpu_count(vals.get(GPU_RESOURCE)) or 0)
        if n:
            j = sorted(names).index(GPU_RESOURCE)
            out.append((str(c.get("name", "")), f"container-{i}-request-{j}", n))
    return out


class DraBinder(KubeBinder):
    """The Binding, preceded by the claims' allocation (all of the pod's, or none)."""

    def __init__(self, kube: AsyncKube, catalog: DraCatalog) -> None:
        super().__init__(kube)
        self.catalog = catalog

    async def bind(self, target: BindTarget, node: str, annotations: Mapping[str, str]) -> None:
        pod = await self.kube.request("GET", pod_path(target.namespace, target.name))
        if pod is None or kpods.uid(pod) != target.uid:
            raise BindError(f"pod {target.namespace}/{target.name} ({target.uid}) does not exist")
        written = await self.allocate(pod, target, node, _slot_gpus(annotations))
        try:
            await super().bind(target, node, annotations)
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
                if await self._write(obj, results, target, node):
                    written.append(str(kpods.meta(obj).get("name")))
        except BaseException:
            await self.undo(target, written)
            raise
        return written

    async def _write(
        self, claim: Mapping[str, Any], results: list[dc.Result], target: BindTarget, node: str
    ) -> bool:
        """Allocate and reserve one claim (a PUT of its status at the version read: a concurrent
        change fails it). False: it already was, by this very decision (a retried bind)."""
        name = str(kpods.meta(claim).get("name"))
        have = dc.allocated(claim)
        if have:
            if sorted(have, key=str) != sorted(results, key=str):
                raise BindError(
                    f"ResourceClaim {target.namespace}/{name} is allocated to other devices already"
                )
            if target.uid in dc.reserved_uids(claim):
                return False
        body = dict(claim)
        status = dict(claim.get("status") or {})
        status["allocation"] = dc.allocation(results, node)
        others = [
            r for r in status.get("reservedFor") or [] if isinstance(r, dict) and r.get("uid") != target.uid
        ]
        status["reservedFor"] = [*others, dc.reserved_for(target.name, target.uid)]
        body["status"] = status
        try:
            await self.kube.request("PUT", dc.claim_path(target.namespace, name) + "/status", body=body)
        except ApiError as err:
            raise BindError(f"allocating ResourceClaim {target.namespace}/{name}: {err}") from None
        return True

    async def _extended(
        self, pod: Mapping[str, Any], target: BindTarget, node: str, devices: list[tuple[str, str]]
    ) -> list[str]:
        """KEP-5004: the claim kube-scheduler would make for `nvidia.com/gpu`, made and allocated here."""
        wants = _container_requests(pod)
        if not wants or not await self.catalog.extended_class():
            return []  # GPUs by bind info (the env path) or a device plugin: no claim to write
        reqs = [(r, n) for _, r, n in wants]
        if sum(n for _, n in reqs) != len(devices):
            raise BindError(
                f"the pod asks {sum(n for _, n in reqs)} {GPU_RESOURCE}, its slot has {len(devices)}"
            )
        cls = self.catalog.settings.device_class
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {
                "generateName": f"{target.name}-extended-resources-",
                "namespace": target.namespace,
                "annotations": {dc.EXTENDED_RESOURCE_CLAIM: "true"},
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "name": target.name,
                        "uid": target.uid,
                        "controller": True,
                    }
                ],
            },
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": r,
                            "exactly": {"deviceClassName": cls, "allocationMode": "ExactCount", "count": n},
                        }
                        for r, n in reqs
                    ]
                }
            },
        }
        try:
            made = await self.kube.request(
                "POST", f"{dc.API}/namespaces/{target.namespace}/resourceclaims", body=body
            )
        except ApiError as err:
            raise BindError(f"creating the pod's {GPU_RESOURCE} ResourceClaim: {err}") from None
        if made is None:
            raise BindError(f"creating the pod's {GPU_RESOURCE} ResourceClaim: no answer")
        name = str(kpods.meta(made).get("name"))
        try:
            await self._write(
                made, dc.split_devices(reqs, devices, self.catalog.settings.driver), target, node
            )
            mappings = [
                {"containerName": c, "resourceName": GPU_RESOURCE, "requestName": r} for c, r, _ in wants
            ]
            patch = {
                "status": {
                    "extendedResourceClaimStatus": {"requestMappings": mappings, "resourceClaimName": name}
                }
            }
            await self.kube.request("PATCH", pod_path(target.namespace, target.name) + "/status", body=patch)
        except BaseException:
            await self._delete_claim(target.namespace, name)
            raise
        return [f"extended:{name}"]

    async def _delete_claim(self, namespace: str, name: str) -> None:
        try:
            await self.kube.request("DELETE", dc.claim_path(namespace, name))
        except (ApiError, NoAnswerError) as err:  # a cleanup: never hides what failed
            log.warning("DRA: deleting ResourceClaim %s/%s failed: %s", namespace, name, err)

    async def undo(self, target: BindTarget, written: list[str]) -> None:
        """Take back what `allocate` wrote for a pod whose Binding failed."""
        for name in written:
            if name.startswith("extended:"):
                await self._delete_claim(target.namespace, name.removeprefix("extended:"))
            else:
                await unreserve(self.kube, target.namespace, name, target.uid)


async def unreserve(kube: AsyncKube, namespace: str, name: str, uid: str) -> None:
    """Drop the pod from the claim's `reservedFor`; with no one left, drop the allocation too."""
    try:
        claim = await kube.request("GET", dc.claim_path(namespace, name))
        if claim is None or uid not in dc.reserved_uids(claim):
            return
        status = dict(claim.get("status") or {})
        rest = [
            r for r in status.get("reservedFor") or [] if not (isinstance(r, dict) and r.get("uid") == uid)
        ]
        status["reservedFor"] = rest
        if not rest:
            status.pop("allocation", None)
        body = dict(claim)
        body["status"] = status
        await kube.request("PUT", dc.claim_path(namespace, name) + "/status", body=body)
        log.info("DRA: ResourceClaim %s/%s released by pod %s", namespace, name, uid)
    except ApiError as err:
        log.warning("DRA: releasing ResourceClaim %s/%s failed: %s", namespace, name, err)


async def release(kube: AsyncKube, pod: Mapping[str, Any]) -> None:
    """A finished or deleted pod's claims back: its reservations, and allocations no one else holds;
    the `nvidia.com/gpu` claim made for it deleted."""
    ns, uid = kpods.namespace(pod), kpods.uid(pod)
    for pc in dc.pod_claims(pod):
        if pc.claim is not None:
            await unreserve(kube, ns, pc.claim, uid)
    status = pod.get("status") if isinstance(pod.get("status"), dict) else {}
    ext = status.get("extendedResourceClaimStatus") if isinstance(status, dict) else None
    name = ext.get("resourceClaimName") if isinstance(ext, dict) else None
    if isinstance(name, str) and name:
        await unreserve(kube, ns, name, uid)
        try:
            await kube.request("DELETE", dc.claim_path(ns, name))
        except ApiError as err:
            log.warning("DRA: deleting ResourceClaim %s/%s failed: %s", ns, name, err)
