"""A pod's ResourceClaims as topogang reads and writes them (pure: JSON in, JSON out).

A pod names claims in `spec.resourceClaims`: a ResourceClaim by name, or a ResourceClaimTemplate
whose claim the ResourceClaim controller creates and names in `status.resourceClaimStatuses`. The
GPU requests are the `exactly` requests of the admin's device class; their counts are the pod's
GPU count. topogang allocates exactly those requests (kube-scheduler's DynamicResources plugin is off
in its profile), so a claim that also asks for something else, or for GPUs in a way topogang does not
allocate (all devices, a prioritized list, a selector), is refused with the field and the reason.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from topology.decisions import UserError

API = "/apis/resource.k8s.io/v1"
EXTENDED_RESOURCE_CLAIM = "resource.kubernetes.io/extended-resource-claim"
# kube-scheduler's mark on a claim it allocated: the resourceclaim controller deallocates only claims
# carrying it once no pod reserves them, and removes it then, so the claim can be deleted
FINALIZER = "resource.kubernetes.io/delete-protection"
MAX_COUNT = 4096


def claim_path(namespace: str, name: str) -> str:
    return f"{API}/namespaces/{namespace}/resourceclaims/{name}"


def template_path(namespace: str, name: str) -> str:
    return f"{API}/namespaces/{namespace}/resourceclaimtemplates/{name}"


@dataclass(frozen=True, slots=True)
class PodClaim:
    """One entry of `spec.resourceClaims`: the claim's name when known, else its template's."""

    entry: str  # the pod's name for it (`spec.resourceClaims[].name`)
    claim: str | None
    template: str | None


def pod_claims(pod: Mapping[str, Any]) -> list[PodClaim]:
    spec = pod.get("spec") if isinstance(pod.get("spec"), dict) else {}
    status = pod.get("status") if isinstance(pod.get("status"), dict) else {}
    assert isinstance(spec, dict) and isinstance(status, dict)
    made: dict[str, str] = {}
    for s in status.get("resourceClaimStatuses") or []:
        if (
            isinstance(s, dict)
            and isinstance(s.get("name"), str)
            and isinstance(s.get("resourceClaimName"), str)
        ):
            made[s["name"]] = s["resourceClaimName"]
    out = []
    for rc in spec.get("resourceClaims") or []:
        if not isinstance(rc, dict) or not isinstance(rc.get("name"), str):
            continue
        direct, template = rc.get("resourceClaimName"), rc.get("resourceClaimTemplateName")
        if isinstance(direct, str) and direct:
            out.append(PodClaim(rc["name"], direct, None))
        elif isinstance(template, str) and template:
            out.append(PodClaim(rc["name"], made.get(rc["name"]), template))
    return out


def has_claims(pod: Mapping[str, Any]) -> bool:
    spec = pod.get("spec")
    return isinstance(spec, dict) and bool(spec.get("resourceClaims"))


def claim_spec(obj: Mapping[str, Any], *, template: bool = False) -> Mapping[str, Any]:
    """A ResourceClaim's spec, or a template's `spec.spec`."""
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    assert isinstance(spec, dict)
    if template:
        inner = spec.get("spec")
        return inner if isinstance(inner, dict) else {}
    return spec


def gpu_requests(spec: Mapping[str, Any], device_class: str, where: str) -> list[tuple[str, int]]:
    """(request name, count) of every request of the GPU class; raises `UserError` for a request
    topogang cannot allocate (any other class: nothing else allocates it in topogang's profile)."""
    devices = spec.get("devices") if isinstance(spec.get("devices"), dict) else {}
    assert isinstance(devices, dict)
    if devices.get("constraints"):
        raise UserError(f"{where}.spec.devices.constraints", "topogang does not allocate by constraints")
    out: list[tuple[str, int]] = []
    for i, r in enumerate(devices.get("requests") or []):
        field = f"{where}.spec.devices.requests[{i}]"
        if not isinstance(r, dict) or not isinstance(r.get("name"), str):
            raise UserError(field, "a request without a name")
        ex = r.get("exactly")
        if not isinstance(ex, dict):
            raise UserError(
                f"{field}.exactly", "topogang allocates only `exactly` requests (no firstAvailable)"
            )
        cls = ex.get("deviceClassName")
        if cls != device_class:
            raise UserError(
                f"{field}.exactly.deviceClassName",
                f"{cls!r}: topogang allocates its pods' claims, and only devices of class {device_class!r}",
            )
        mode = ex.get("allocationMode", "ExactCount")
        if mode != "ExactCount":
            raise UserError(f"{field}.exactly.allocationMode", f"{mode!r}: only ExactCount is allocated")
        if ex.get("selectors") or ex.get("adminAccess") or ex.get("capacity") or ex.get("tolerations"):
            raise UserError(
                f"{field}.exactly",
                "selectors, adminAccess, capacity and tolerations are not allocated by topogang",
            )
        count = ex.get("count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_COUNT:
            raise UserError(f"{field}.exactly.count", f"{count!r}: a whole number from 1 to {MAX_COUNT}")
        out.append((r["name"], count))
    return out


# ------------------------------------------------------------------------------ status
@dataclass(frozen=True, slots=True)
class Result:
    request: str
    driver: str
    pool: str
    device: str


def split_devices(
    requests: Sequence[tuple[str, int]], devices: Sequence[tuple[str, str]], driver: str
) -> list[Result]:
    """The slot's devices ((pool, name), in GPU order) handed to the requests in order."""
    need = sum(n for _, n in requests)
    if need != len(devices):
        raise ValueError(f"the claims ask {need} GPUs, the slot has {len(devices)}")
    out, i = [], 0
    for name, n in requests:
        for pool, dev in devices[i : i + n]:
            out.append(Result(name, driver, pool, dev))
        i += n
    return out


def node_selector(node: str) -> dict[str, Any]:
    """The allocation's node: kube-scheduler's own form (a field selector on the node's name)."""
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    return {"nodeSelectorTerms": [term]}


def allocation(
    results: Sequence[Result], node: str, config: Sequence[Mapping[str, Any]] = ()
) -> dict[str, Any]:
    rs = [{"request": r.request, "driver": r.driver, "pool": r.pool, "device": r.device} for r in results]
    devices: dict[str, Any] = {"results": rs}
    if config:
        devices["config"] = list(config)
    return {"devices": devices, "nodeSelector": node_selector(node)}


def claim_config(claim: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The claim's `spec.devices.config` as the allocation carries it (`source: FromClaim`): the
    driver reads a claim's configuration from its allocation only."""
    devices = claim_spec(claim).get("devices")
    got = devices.get("config") if isinstance(devices, dict) else None
    return [
        {"source": "FromClaim", **{k: c[k] for k in ("requests", "opaque") if k in c}}
        for c in (got if isinstance(got, list) else [])
        if isinstance(c, dict)
    ]


def reserved_for(pod_name: str, pod_uid: str) -> dict[str, str]:
    return {"resource": "pods", "name": pod_name, "uid": pod_uid}


def allocated(claim: Mapping[str, Any]) -> list[Result]:
    """The devices a claim's `status.allocation` gives out (empty when not allocated)."""
    status = claim.get("status") if isinstance(claim.get("status"), dict) else {}
    assert isinstance(status, dict)
    alloc = status.get("allocation") if isinstance(status.get("allocation"), dict) else {}
    assert isinstance(alloc, dict)
    devs = alloc.get("devices") if isinstance(alloc.get("devices"), dict) else {}
    assert isinstance(devs, dict)
    out = []
    for r in devs.get("results") or []:
        if isinstance(r, dict) and all(
            isinstance(r.get(k), str) for k in ("request", "driver", "pool", "device")
        ):
            out.append(Result(r["request"], r["driver"], r["pool"], r["device"]))
    return out


def is_allocated(claim: Mapping[str, Any]) -> bool:
    status = claim.get("status")
    return isinstance(status, dict) and status.get("allocation") is not None


def allocation_node(claim: Mapping[str, Any]) -> str | None:
    """The one node the allocation's node selector names, in kube-scheduler's form (`node_selector`);
    None for any other selector (or none)."""
    status = claim.get("status") if isinstance(claim.get("status"), dict) else {}
    alloc = status.get("allocation") if isinstance(status, dict) else None
    sel = alloc.get("nodeSelector") if isinstance(alloc, dict) else None
    terms = sel.get("nodeSelectorTerms") if isinstance(sel, dict) else None
    if not isinstance(terms, list) or len(terms) != 1 or not isinstance(terms[0], dict):
        return None
    fields = terms[0].get("matchFields")
    if terms[0].get("matchExpressions") or not isinstance(fields, list) or len(fields) != 1:
        return None
    f = fields[0]
    ok = isinstance(f, dict) and f.get("key") == "metadata.name" and f.get("operator") == "In"
    values = f.get("values") if ok else None
    return values[0] if isinstance(values, list) and len(values) == 1 and isinstance(values[0], str) else None


def reserved_uids(claim: Mapping[str, Any]) -> list[str]:
    status = claim.get("status") if isinstance(claim.get("status"), dict) else {}
    assert isinstance(status, dict)
    return [
        r["uid"]
        for r in status.get("reservedFor") or []
        if isinstance(r, dict) and r.get("resource") == "pods" and isinstance(r.get("uid"), str)
    ]


def _finalizers(claim: Mapping[str, Any]) -> list[str]:
    meta = claim.get("metadata")
    got = meta.get("finalizers") if isinstance(meta, dict) else None
    return [f for f in got if isinstance(f, str)] if isinstance(got, list) else []


def _with_finalizers(claim: Mapping[str, Any], finalizers: list[str]) -> dict[str, Any]:
    body = dict(claim)
    meta = dict(claim.get("metadata") or {})
    meta["finalizers"] = finalizers
    body["metadata"] = meta
    return body


def protected(claim: Mapping[str, Any]) -> dict[str, Any] | None:
    """The claim with kube-scheduler's finalizer added, for a metadata update before its allocation
    is written (as kube-scheduler's own bind does); None when it carries it already."""
    have = _finalizers(claim)
    return None if FINALIZER in have else _with_finalizers(claim, [*have, FINALIZER])


def unprotected(claim: Mapping[str, Any]) -> dict[str, Any] | None:
    """The claim without that finalizer once it is not allocated (what the resourceclaim controller
    does after deallocating, so a deleted claim goes); None when there is nothing to remove."""
    have = _finalizers(claim)
    if FINALIZER not in have or is_allocated(claim):
        return None
    return _with_finalizers(claim, [f for f in have if f != FINALIZER])


def class_config(requests: Sequence[str], config: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The DeviceClass's `spec.config` as the allocation carries it, per request of the class
    (`source: FromClass`), as kube-scheduler's allocator writes it."""
    return [
        {"source": "FromClass", "requests": [r], **{k: c[k] for k in ("opaque",) if k in c}}
        for r in requests
        for c in config
        if isinstance(c, Mapping)
    ]


def reserved(
    claim: Mapping[str, Any],
    results: Sequence[Result],
    node: str,
    pod: str,
    uid: str,
    device_class_config: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The claim allocated to `results` on `node` and reserved for the pod (other pods' reservations
    kept), for a status update at the version read; the allocation's config is the class's, then
    the claim's."""
    body = dict(claim)
    status = dict(claim.get("status") or {})
    requests = list(dict.fromkeys(r.request for r in results))
    config = [*class_config(requests, device_class_config), *claim_config(claim)]
    status["allocation"] = allocation(results, node, config)
    others = [r for r in status.get("reservedFor") or [] if isinstance(r, dict) and r.get("uid") != uid]
    status["reservedFor"] = [*others, reserved_for(pod, uid)]
    body["status"] = status
    return body


def unreserved(claim: Mapping[str, Any], uid: str) -> dict[str, Any] | None:
    """The claim without the pod's reservation and, once no pod reserves it, without its allocation;
    None when there is nothing to change. The allocation goes also when the pod's reservation is
    gone already, if the claim carries `FINALIZER`: the resourceclaim controller drops the
    reservation of a deleted pod first and deallocates only claims carrying it (a claim allocated
    without it, and reserved by no one, is someone else's to keep)."""
    status = dict(claim.get("status") or {})
    before = status.get("reservedFor") or []
    rest = [r for r in before if not (isinstance(r, dict) and r.get("uid") == uid)]
    mine = len(rest) < len(before)
    drop = not rest and is_allocated(claim) and (mine or FINALIZER in _finalizers(claim))
    if not mine and not drop:
        return None
    status["reservedFor"] = rest
    if drop:
        status.pop("allocation", None)
    body = dict(claim)
    body["status"] = status
    return body
