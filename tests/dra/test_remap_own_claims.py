"""A node's devices mapped anew (the slices published again in another order, the case
`ForeignClaims` handles for other schedulers' claims) do not let topogang give out a device that a
claim topogang itself allocated still holds: its own claims are judged again too. README:
"topogang never gives out a device a claim holds"."""

from __future__ import annotations

import asyncio
from typing import Any

from extender import kubesched
from extender.dra import claims as dc
from extender.dra.devices import DeviceMap
from extender.kube.client import pod_path
from extender.kube.dra_mode import ForeignClaims
from tests.dra.test_devices import gpu_slice
from tests.dra.test_kube_dra import NODE, setup
from tests.extender.helpers import InProcess, NoVictims, pod, scheduler, spec

NS = "vision"


def claim(name: str, count: int) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "devices": {
                "requests": [
                    {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": count}}
                ]
            }
        },
    }


def claimed_pod(kube: Any, name: str, claim_name: str, gpus: int) -> dict[str, Any]:
    p = pod("x", name, NS, spec(gpus=gpus))
    del p["metadata"]["uid"]
    p["spec"]["schedulerName"] = "topogang"
    p["spec"]["resourceClaims"] = [{"name": "c", "resourceClaimName": claim_name}]
    created: dict[str, Any] = kube.server.create(pod_path(NS), p)
    return created


def test_own_claims_are_judged_again_when_the_node_is_mapped_anew() -> None:
    async def go() -> None:
        kube, catalog, binder = await setup()
        s = scheduler(binder)
        foreign = ForeignClaims(s, catalog)
        kube.server.create(f"{dc.API}/namespaces/{NS}/resourceclaims", claim("a", 2))
        p = claimed_pod(kube, "w0", "a", 2)
        got = await kubesched.drive_async(kubesched.schedule(p, [NODE], NoVictims()), InProcess(s))
        assert got.node == NODE, got.text
        a = kube.server.at(dc.claim_path(NS, "a"))
        held_devices = sorted(r.device for r in dc.allocated(a))
        assert len(held_devices) == 2
        await foreign.on_claim("MODIFIED", a)  # the claim watch sees topogang's own write: "ours"
        # the driver publishes the node again, in another PCI order (device gpu-i is GPU 7-i)
        await catalog.relist_slices([gpu_slice(bus=[f"0000:{0x88 - 0x10 * i:02x}:00.0" for i in range(8)])])
        dm = catalog.device_map(NODE)
        assert isinstance(dm, DeviceMap)
        now_gpus = {g for d in held_devices if (g := dm.gpu_of(NODE, d)) is not None}
        # a second pod asks for all the GPUs the core still calls free on the node
        free, _total = s.core.node_fill(NODE)
        kube.server.create(f"{dc.API}/namespaces/{NS}/resourceclaims", claim("b", free))
        q = claimed_pod(kube, "w1", "b", free)
        await kubesched.drive_async(kubesched.schedule(q, [NODE], NoVictims()), InProcess(s))
        b = kube.server.at(dc.claim_path(NS, "b"))
        twice = sorted(set(held_devices) & {r.device for r in dc.allocated(b)})
        assert twice == [], (
            f"devices {twice} (now GPUs {sorted(now_gpus)}) are allocated to claim a of running pod "
            f"w0 and to claim b of pod w1"
        )

    asyncio.run(go())
