"""topogang reserves a gang's GPUs at filter but writes their claims only at each member's bind.
Another profile's DynamicResources plugin sees no allocation on those devices meanwhile and may
allocate them to a claim of its own pod; `ForeignClaims` then cannot hold them (the reservation has
them). The member's bind refuses GPUs another claim's allocation names (kube-scheduler's allocator
never allocates such a device), and kube-scheduler's retry places it again; before, it wrote the
same devices into its claim and two pods were handed one GPU."""

from __future__ import annotations

import asyncio
from typing import Any

from extender.dra import claims as dc
from extender.dra.devices import DeviceMap
from extender.kube.dra_mode import ForeignClaims
from tests.dra.test_kube_dra import NODE, setup
from tests.dra.test_remap_own_claims import NS, claim, claimed_pod
from tests.extender.helpers import InProcess


def test_a_bind_never_writes_a_device_another_claim_holds() -> None:
    async def go() -> None:
        kube, catalog, binder = await setup()
        from tests.extender.helpers import scheduler

        s = scheduler(binder)
        foreign = ForeignClaims(s, catalog)
        dm = catalog.device_map(NODE)
        assert isinstance(dm, DeviceMap)
        kube.server.create(f"{dc.API}/namespaces/{NS}/resourceclaims", claim("a", 2))
        p = claimed_pod(kube, "w0", "a", 2)
        ext = InProcess(s)
        got = await ext.filter(p, [NODE])
        assert got["NodeNames"] == [NODE], got
        (g,) = [g for g in s.core.gangs() if not g.name.startswith("unverified:")]
        (slot,) = g.slots
        _, reserved = s.core.slot_place(slot)
        # meanwhile another profile allocates those very devices to its own pod's claim
        theirs: dict[str, Any] = {
            "metadata": {"name": "theirs", "namespace": "other", "uid": "claim-theirs"},
            "spec": claim("theirs", len(reserved))["spec"],
            "status": {
                "allocation": dc.allocation(
                    [dc.Result("gpus", "gpu.nvidia.com", NODE, dm.by_gpu[i].name) for i in reserved], NODE
                ),
                "reservedFor": [dc.reserved_for("their-pod", "uid-their-pod")],
            },
        }
        await foreign.on_claim("ADDED", theirs)
        reply = await ext.bind(p, NODE)
        mine = {r.device for r in dc.allocated(kube.server.at(dc.claim_path(NS, "a")))}
        twice = sorted(mine & {r.device for r in dc.allocated(theirs)})
        assert twice == [], (
            f"bind answered {reply!r} and wrote devices {twice} into claim {NS}/a, which "
            "ResourceClaim other/theirs holds"
        )

    asyncio.run(go())
