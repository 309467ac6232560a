"""bench-kube's DRA runs: the same jobs with each pod's GPUs asked through a ResourceClaim.

`stock-dra`: the stock profile's DynamicResources plugin allocates the claims (devices of its own
choosing). `topogang-dra`: topogang's DRA mode (`serve --dra`) allocates them (the devices of the
slot it chose) from a profile with DynamicResources off. The bench acts as NVIDIA's DRA driver: a
ResourceSlice per KWOK node and the DeviceClass `gpu.nvidia.com`; each pod's claim is created just
before the pod (no ResourceClaim controller runs on the bench's control plane).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import yaml

from loadtest.kubeapi import KubeHttp, tls_context

API = "/apis/resource.k8s.io/v1"
DRIVER = "gpu.nvidia.com"
CLAIM_ENTRY = "gpus"


def resource_slice(node: str, gpus: int) -> dict[str, Any]:
    devices = [
        {
            "name": f"gpu-{i}",
            "attributes": {
                "resource.kubernetes.io/pciBusID": {"string": f"0000:{0x18 + 0x10 * i:02x}:00.0"},
                "resource.kubernetes.io/pcieRoot": {"string": f"pci0000:{i // 2:02x}"},
            },
        }
        for i in range(gpus)
    ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def publish(env: dict[str, str], nodes: dict[str, int]) -> None:
    """The DeviceClass and a slice per node, as the driver would."""
    cls = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": DRIVER},
        "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]},
    }
    # a slow API server on a loaded machine: a patient client (a slice is one small object)
    with contextlib.closing(KubeHttp(int(env["API_PORT"]), tls_context(env), 120.0)) as api:
        api.ok("POST", f"{API}/deviceclasses", cls)
        for node, gpus in nodes.items():
            api.ok("POST", f"{API}/resourceslices", resource_slice(node, gpus))


def claim(name: str, namespace: str, gpus: int, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "spec": {
            "devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": DRIVER, "count": gpus}}]}
        },
    }


def through_claim(pod: dict[str, Any], gpus: int) -> dict[str, Any]:
    """The pod with its `nvidia.com/gpu` request replaced by a claim of as many GPUs; the claim."""
    meta, spec = pod["metadata"], pod["spec"]
    name = f"{meta['name']}-gpu"
    for c in spec["containers"]:
        for part in ("requests", "limits"):
            c["resources"].get(part, {}).pop("nvidia.com/gpu", None)
        c["resources"]["claims"] = [{"name": CLAIM_ENTRY}]
    spec["resourceClaims"] = [{"name": CLAIM_ENTRY, "resourceClaimName": name}]
    return claim(name, meta["namespace"], gpus, meta["labels"])


def scheduler_config(base: Path, out: Path, profile: str, *, extender: bool) -> Path:
    """kube-scheduler's config for a DRA run: profile renamed, no leader election; with the extender,
    DynamicResources off in that profile (topogang allocates), else the extender taken out."""
    cfg = yaml.safe_load(base.read_text())
    cfg["leaderElection"] = {"leaderElect": False}
    if not extender:
        cfg.pop("extenders", None)
    for p in cfg.get("profiles") or [{}]:
        p["schedulerName"] = profile
        if extender:
            multi = p.setdefault("plugins", {}).setdefault("multiPoint", {})
            multi.setdefault("disabled", []).append({"name": "DynamicResources"})
    out.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return out
