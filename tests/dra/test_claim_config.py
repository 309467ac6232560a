"""The allocation topogang writes is one the DRA API means. resource.k8s.io/v1
`DeviceAllocationResult.config` is "a combination of all the claim and class configuration
parameters" (`source: FromClaim` / `FromClass`); the node's driver reads a claim's configuration
from there, never from the claim's spec, so the claim's own config is copied into it. And a claim's
`spec.devices.constraints` (devices that must share an attribute) is a way of asking for GPUs
topogang does not allocate: refused with the field named, as `extender.dra.claims` refuses what it
does not allocate, never silently ignored."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from extender.dra import claims as dc
from tests.dra.test_kube_dra import ISO, NODE, NS, claim, make, pod, setup, target
from topology.decisions import UserError

OPAQUE: dict[str, Any] = {
    "driver": "gpu.nvidia.com",
    "parameters": {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "GpuConfig",
        "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}},
    },
}


def test_the_claims_configuration_reaches_the_allocation() -> None:
    async def go() -> None:
        kube, _, binder = await setup()
        c = claim("a", 2)
        c["spec"]["devices"]["config"] = [{"requests": ["gpus"], "opaque": OPAQUE}]
        make(kube, c)
        p = make(kube, pod("w0", ["a"]))
        await binder.bind(target(p), NODE, {ISO: "0,1"})
        alloc = kube.server.at(dc.claim_path(NS, "a"))["status"]["allocation"]
        assert alloc["devices"].get("config") == [
            {"source": "FromClaim", "requests": ["gpus"], "opaque": OPAQUE}
        ], f"the allocation written drops the claim's configuration: {alloc['devices']}"

    asyncio.run(go())


def test_a_claim_with_constraints_is_refused_with_the_field() -> None:
    async def go() -> None:
        kube, catalog, _ = await setup()
        c = claim("a", 2)
        c["spec"]["devices"]["constraints"] = [
            {"requests": ["gpus"], "matchAttribute": "resource.kubernetes.io/pcieRoot"}
        ]
        make(kube, c)
        with pytest.raises(UserError, match="constraints"):
            got = await catalog.claim_gpus(pod("w0", ["a"]), NS)
            raise AssertionError(f"a claim with constraints taken as asking {got} GPUs")

    asyncio.run(go())
