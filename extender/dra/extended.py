"""KEP-5004's claim for a pod asking `nvidia.com/gpu` (pure: JSON in, JSON out).

With a DeviceClass whose `extendedResourceName` is `nvidia.com/gpu`, kube-scheduler's
DynamicResources plugin makes one ResourceClaim per pod for those requests and names it, with the
request each container uses, in the pod's `status.extendedResourceClaimStatus`; the kubelet hands
each container the devices of the requests mapped to it. That plugin is off in topogang's profile,
so `extender.kube.dra` makes the same claim; its requests must be named and sized as the plugin
would, or the kubelet's mapping and the slot's GPU count disagree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from extender.dra import claims as dc
from extender.gangs.optin import GPU_RESOURCE, gpu_count
from topology.decisions import UserError


@dataclass(frozen=True, slots=True)
class Extended:
    """The claim's requests ((name, GPUs), sorted by name) and each container's mapping to them."""

    requests: list[tuple[str, int]]
    mappings: list[dict[str, str]]

    @property
    def gpus(self) -> int:
        return sum(n for _, n in self.requests)


def _gpus_and_index(container: object) -> tuple[str, int, int]:
    """(name, GPUs, the place of `nvidia.com/gpu` among its sorted extended resources)."""
    res = container.get("resources") if isinstance(container, dict) else None
    if not isinstance(container, dict) or not isinstance(res, dict):
        return "", 0, 0
    names: set[str] = set()
    n = 0
    for part in ("requests", "limits"):
        vals = res.get(part)
        if isinstance(vals, dict):
            names |= {
                k for k in vals if isinstance(k, str) and "/" in k and not k.startswith("kubernetes.io/")
            }
            n = max(n, gpu_count(vals.get(GPU_RESOURCE)) or 0)
    return str(container.get("name", "")), n, sorted(names).index(GPU_RESOURCE) if n else 0


def container_requests(pod: Mapping[str, Any]) -> Extended:
    """The requests kube-scheduler puts in the claim: container-<i>-request-<j>, i over init
    containers then containers, j the resource's place among the container's sorted extended ones.

    Each app container (and sidecar: an init container that keeps running) gets its own request. An
    init container runs before them, alone, so it uses their devices: it maps to the requests of the
    long-running containers after it, and asks only what they lack; of those extra asks only the
    largest is kept, the others mapped to it. So the claim asks the pod's effective request (for
    plain init containers: the larger of the containers' sum and the largest init container), the
    count topogang's slot has (`extender.gangs.optin.pod_gpus`)."""
    spec = pod.get("spec") if isinstance(pod.get("spec"), dict) else {}
    assert isinstance(spec, dict)
    inits = [c for c in spec.get("initContainers") or [] if isinstance(c, dict)]
    every = [*inits, *(c for c in spec.get("containers") or [] if isinstance(c, dict))]
    short = [i for i, c in enumerate(inits) if c.get("restartPolicy") != "Always"]
    plain = set(short)
    long_lived: list[tuple[str, int] | None] = [None] * len(every)
    mappings: list[dict[str, str]] = []
    for i, c in enumerate(every):
        if i in plain:
            continue
        name, n, j = _gpus_and_index(c)
        if n:
            long_lived[i] = (f"container-{i}-request-{j}", n)
            mappings.append(_mapping(name, f"container-{i}-request-{j}"))
    largest: tuple[str, int] | None = None
    extra: list[str] = []  # the requests of init containers that the largest one stands for
    init_maps: list[dict[str, str]] = []
    for i in short:
        name, n, j = _gpus_and_index(every[i])
        if not n:
            continue
        have = 0
        for r in long_lived[i:]:
            if r is not None and have < n:
                have += r[1]
                init_maps.append(_mapping(name, r[0]))
        if have < n:
            own = (f"container-{i}-request-{j}", n - have)
            init_maps.append(_mapping(name, own[0]))
            extra.append(own[0])
            if largest is None or largest[1] < own[1]:
                largest = own
    if largest is not None:
        init_maps = [
            _mapping(m["containerName"], largest[0]) if m["requestName"] in extra else m for m in init_maps
        ]
    requests = sorted([r for r in [largest, *long_lived] if r is not None])
    return Extended(requests, [*mappings, *init_maps])


def _mapping(container: str, request: str) -> dict[str, str]:
    return {"containerName": container, "resourceName": GPU_RESOURCE, "requestName": request}


def claim_body(
    namespace: str, pod: str, uid: str, requests: Sequence[tuple[str, int]], device_class: str
) -> dict[str, Any]:
    """The claim as kube-scheduler creates it: owned by the pod (gone with it), marked as the
    pod's extended-resource claim, carrying the finalizer its bind would add."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "generateName": f"{pod}-extended-resources-",
            "namespace": namespace,
            "annotations": {dc.EXTENDED_RESOURCE_CLAIM: "true"},
            "finalizers": [dc.FINALIZER],
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": uid, "controller": True}
            ],
        },
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": r,
                        "exactly": {
                            "deviceClassName": device_class,
                            "allocationMode": "ExactCount",
                            "count": n,
                        },
                    }
                    for r, n in requests
                ]
            }
        },
    }


def claim_name(pod: Mapping[str, Any]) -> str | None:
    """The claim the pod's `status.extendedResourceClaimStatus` names (a bind tried before)."""
    status = pod.get("status")
    ext = status.get("extendedResourceClaimStatus") if isinstance(status, dict) else None
    name = ext.get("resourceClaimName") if isinstance(ext, dict) else None
    return name if isinstance(name, str) and name else None


def reusable(
    claim: Mapping[str, Any], uid: str, requests: Sequence[tuple[str, int]], device_class: str
) -> bool:
    """Whether a claim a bind tried before is this pod's extended-resource claim, not being deleted,
    asking exactly these requests: it is written again rather than a second one made."""
    meta = claim.get("metadata") if isinstance(claim.get("metadata"), dict) else {}
    assert isinstance(meta, dict)
    owners = meta.get("ownerReferences") or []
    owned = any(isinstance(o, dict) and o.get("uid") == uid and o.get("controller") for o in owners)
    marked = (meta.get("annotations") or {}).get(dc.EXTENDED_RESOURCE_CLAIM) == "true"
    if not owned or not marked or meta.get("deletionTimestamp"):
        return False
    try:
        return dc.gpu_requests(dc.claim_spec(claim), device_class, "") == list(requests)
    except UserError:
        return False
