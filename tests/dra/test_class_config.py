"""resource.k8s.io `DeviceAllocationResult.config` is "a combination of all the claim AND class
configuration parameters" (kube-scheduler's allocator writes each request's DeviceClass
`spec.config` as `source: FromClass` entries, then the claim's as `FromClaim`); the node's driver
reads both from the allocation only. topogang writes both, in that order: before, it copied the
claim's and dropped the admin's DeviceClass configuration, so a pod topogang bound ran its GPUs
without what the admin set on the class."""

from __future__ import annotations

import asyncio

from extender.dra import claims as dc
from tests.dra.test_claim_config import OPAQUE
from tests.dra.test_kube_dra import ISO, NODE, NS, claim, make, pod, setup, target

CLASS_OPAQUE = {**OPAQUE, "parameters": {**OPAQUE["parameters"], "sharing": {"strategy": "MPS"}}}


def test_the_device_class_configuration_reaches_the_allocation() -> None:
    async def go() -> None:
        kube, _, binder = await setup()
        kube.server.create(
            f"{dc.API}/deviceclasses",
            {"metadata": {"name": "gpu.nvidia.com"}, "spec": {"config": [{"opaque": CLASS_OPAQUE}]}},
        )
        make(kube, claim("a", 2))
        p = make(kube, pod("w0", ["a"]))
        await binder.bind(target(p), NODE, {ISO: "0,1"})
        alloc = kube.server.at(dc.claim_path(NS, "a"))["status"]["allocation"]
        assert alloc["devices"].get("config") == [
            {"source": "FromClass", "requests": ["gpus"], "opaque": CLASS_OPAQUE}
        ], f"the allocation drops the DeviceClass's configuration: {alloc['devices']}"

    asyncio.run(go())
