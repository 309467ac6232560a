"""DRA mode does not serve before the devices other schedulers' claims hold on its nodes are held
(README: "topogang never gives out a device a claim holds"). At the start, recovery lists every
ResourceClaim, but the holds for foreign claims (`ForeignClaims`) come from the claim watch's own
list, which ran after the extender turned ready: when that list failed (one 500 from the API server)
or was slow, the extender answered kube-scheduler's filters with those devices free. It now stays
not ready until that list has been judged."""

from __future__ import annotations

import asyncio

from extender.dra import claims as dc
from extender.dra.devices import DeviceMap, DraSettings
from extender.kube.dra import SLICES, DraBinder
from loadtest.kubefake import Fault
from tests.dra.test_devices import gpu_slice
from tests.dra.test_kube_dra import NODE
from tests.extender.helpers import Clock
from tests.extender.test_kube_durable import Running, cluster, until

NS = "other-team"


def test_the_extender_is_not_ready_before_foreign_claims_are_held() -> None:
    async def go() -> None:
        kube = cluster()
        kube.server.create(SLICES, gpu_slice())
        names = {d["name"] for d in gpu_slice()["spec"]["devices"]}
        assert {"gpu-2", "gpu-3"} <= names
        # another profile's DynamicResources plugin allocated GPUs 2 and 3 of NODE to a pod of its own
        claim = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "theirs", "namespace": NS},
            "spec": {
                "devices": {
                    "requests": [
                        {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}}
                    ]
                }
            },
            "status": {
                "allocation": dc.allocation(
                    [dc.Result("gpus", "gpu.nvidia.com", NODE, d) for d in ("gpu-2", "gpu-3")], NODE
                ),
                "reservedFor": [dc.reserved_for("their-pod", "uid-their-pod")],
            },
        }
        kube.server.create(f"{dc.API}/namespaces/{NS}/resourceclaims", claim)
        # recovery's list of the claims answers; the claim watch's first list meets one 500
        kube.inject(Fault("LIST", r"/resourceclaims$", "delay", seconds=0.0))
        kube.inject(Fault("LIST", r"/resourceclaims$", "error", status=500))
        from extender.kube.service import kube_service
        from tests.extender.helpers import example

        r = Running(kube_service(example(), kube, clock=Clock(), namespace="topogang", dra=DraSettings()))
        try:
            await until("ready", lambda: r.s.ready)
            binder = r.s.binder
            assert isinstance(binder, DraBinder)
            dm = binder.catalog.device_map(NODE)
            assert isinstance(dm, DeviceMap)
            free, total = r.s.core.node_fill(NODE)
            assert (free, total) == (6, 8), (
                f"ready with {free} of {total} GPUs of {NODE} free: GPUs 2 and 3, which ResourceClaim "
                f"{NS}/theirs holds, can be given out"
            )
        finally:
            await r.stop()

    asyncio.run(go())
