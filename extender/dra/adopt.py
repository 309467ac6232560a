"""The GPUs a bound pod's ResourceClaims give it, for recovery to rebuild its placement from (pure).

In DRA mode the claims' allocations are what the node's DRA driver hands the containers, and only
who may update `resourceclaims/status` (kube-scheduler, the DRA controllers, topogang) writes them;
a pod's annotations are its owner's to write. So an allocation vouches for a pod's GPUs better than
unsigned bind info does, and recovery takes it when the pod's bind info is missing or not
topogang's (`extender.kube.recovery`). It is taken only when it is one topogang's binder writes
(`extender.kube.dra.DraBinder`) for this very pod: every claim of the pod allocated, reserved for
the pod, on the pod's node in kube-scheduler's node-selector form, each GPU request given exactly
its count of the admin's driver's devices, every device one GPU of that node's device map.
Anything else is a reason, never a guess. The claim vouches for the GPUs only: the gang, its VC
and priority are read from the pod's spec as for any pod.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from extender.dra import claims as dc
from extender.dra.devices import DeviceMap, DraSettings, Mismatch
from topology.decisions import UserError

# a bound pod -> None (no claims), why its claims are not taken, or its GPUs
ClaimedGpus = tuple[int, ...] | str | None


def claimed_gpus(
    pod: Mapping[str, Any],
    claims: Mapping[str, Mapping[str, Any]],
    device_map: DeviceMap | Mismatch | None,
    settings: DraSettings,
) -> ClaimedGpus:
    """The GPUs the pod's claims (`claims`: the pod's namespace's, by name) allocate on its node."""
    pcs = dc.pod_claims(pod)
    if not pcs:
        return None
    spec = pod.get("spec") if isinstance(pod.get("spec"), dict) else {}
    meta = pod.get("metadata") if isinstance(pod.get("metadata"), dict) else {}
    assert isinstance(spec, dict) and isinstance(meta, dict)
    node, uid = spec.get("nodeName"), meta.get("uid")
    if not isinstance(node, str) or not node or not isinstance(uid, str) or not uid:
        return "the pod is not bound"
    if device_map is None:
        return f"node {node} has no device map"
    if isinstance(device_map, Mismatch):
        return f"node {node}: {device_map.reason}"
    gpus: list[int] = []
    for pc in pcs:
        if pc.claim is None:
            return f"the claim of template {pc.template} is not created"
        claim = claims.get(pc.claim)
        if claim is None:
            return f"ResourceClaim {pc.claim} does not exist"
        got = _claim_gpus(claim, pc.claim, node, uid, device_map, settings)
        if isinstance(got, str):
            return f"ResourceClaim {pc.claim}: {got}"
        gpus += got
    if not gpus:
        return None  # claims for no GPU: nothing to rebuild from
    if len(set(gpus)) != len(gpus):
        return "two claims allocate the same GPU"
    return tuple(sorted(gpus))


def _claim_gpus(
    claim: Mapping[str, Any], name: str, node: str, uid: str, dm: DeviceMap, settings: DraSettings
) -> list[int] | str:
    try:
        reqs = dc.gpu_requests(dc.claim_spec(claim), settings.device_class, f"ResourceClaim {name}")
    except UserError as err:
        return f"{err.field}: {err.message}"
    results = dc.allocated(claim)
    if not reqs:
        return [] if not results else "allocates devices for no GPU request"
    if not results:
        return "not allocated"
    if uid not in dc.reserved_uids(claim):
        return "not reserved for the pod"
    status = claim.get("status")
    alloc = status.get("allocation") if isinstance(status, dict) else None
    if not isinstance(alloc, dict) or alloc.get("nodeSelector") != dc.node_selector(node):
        return f"not allocated on the pod's node {node}"
    want = dict(reqs)
    have = Counter(r.request for r in results)
    if have != Counter(want):
        return f"allocates {dict(have)} devices, its GPU requests ask {want}"
    out = []
    for r in results:
        if r.driver != settings.driver:
            return f"device {r.device} is of driver {r.driver}, not {settings.driver}"
        g = dm.gpu_of(r.pool, r.device)
        if g is None:
            return f"device {r.pool}/{r.device} is no GPU of node {node}"
        out.append(g)
    return out
