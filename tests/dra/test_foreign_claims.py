"""Devices other schedulers' claims hold on topogang's nodes (`ForeignClaims`): the hold follows the
claim when it is allocated anew, and stays while the node's devices cannot be told as GPUs."""

from __future__ import annotations

import asyncio
from typing import Any

from extender.dra import claims as dc
from extender.dra.devices import DeviceMap
from extender.http.verbs import Scheduler
from extender.kube.dra import DraCatalog
from extender.kube.dra_mode import ForeignClaims
from tests.dra.test_devices import gpu_slice
from tests.dra.test_kube_dra import NODE, claim, make, setup
from tests.extender.helpers import scheduler


def allocated(c: dict[str, Any], dm: DeviceMap, gpus: tuple[int, ...], pod: str) -> dict[str, Any]:
    out = dict(c)
    results = [dc.Result("gpus", "gpu.nvidia.com", NODE, dm.by_gpu[g].name) for g in gpus]
    out["status"] = {
        "allocation": dc.allocation(results, NODE),
        "reservedFor": [dc.reserved_for(pod, f"uid-{pod}")],
    }
    return out


def held(s: Scheduler) -> list[tuple[int, ...]]:
    core = s.core
    return sorted(
        core.placement_of(g).pods[0].gpu_indices for g in core.gangs() if g.name.startswith("unverified:")
    )


async def watching() -> tuple[Any, DraCatalog, Scheduler, ForeignClaims, DeviceMap]:
    """The DRA catalog set up on `NODE`, a scheduler, and the foreign claims it watches for it."""
    kube, catalog, _ = await setup()
    s = scheduler()
    dm = catalog.device_map(NODE)
    assert isinstance(dm, DeviceMap)
    return kube, catalog, s, ForeignClaims(s, catalog), dm


def test_a_claim_allocated_anew_moves_its_hold_by_the_watch_and_by_a_relist() -> None:
    async def go() -> None:
        kube, _, s, foreign, dm = await watching()
        c = make(kube, claim("theirs", 2))
        await foreign.on_claim("MODIFIED", allocated(c, dm, (2, 3), "p1"))
        assert held(s) == [(2, 3)]
        await foreign.on_claim("MODIFIED", allocated(c, dm, (6, 7), "p2"))  # the watch saw it
        assert held(s) == [(6, 7)] and s.core.node_fill(NODE) == (6, 8)
        # a watch gap: the claim was deallocated and allocated again; the relist sees only the end
        await foreign.relist([allocated(c, dm, (4, 5), "p3")])
        assert held(s) == [(4, 5)] and s.core.node_fill(NODE) == (6, 8)
        await foreign.relist([])
        assert held(s) == [] and s.core.node_fill(NODE) == (8, 8)

    asyncio.run(go())


def test_a_hold_stays_while_the_nodes_slices_are_missing_and_is_judged_again_when_they_return() -> None:
    async def go() -> None:
        kube, catalog, s, foreign, dm = await watching()
        c = allocated(make(kube, claim("theirs", 2)), dm, (2, 3), "p1")
        await foreign.on_claim("MODIFIED", c)
        await catalog.relist_slices([])  # a driver restart: the node's slices gone a while
        await foreign.on_claim("MODIFIED", c)  # the claim seen meanwhile: its devices are still allocated
        assert held(s) == [(2, 3)]
        await catalog.relist_slices([gpu_slice()])
        assert held(s) == [(2, 3)] and s.core.node_fill(NODE) == (6, 8)
        # a claim first seen while the slices are missing is held once they are back
        other = allocated(make(kube, claim("later", 1)), dm, (5,), "p2")
        await catalog.relist_slices([])
        await foreign.on_claim("ADDED", other)
        assert held(s) == [(2, 3)]
        await catalog.relist_slices([gpu_slice()])
        assert held(s) == [(2, 3), (5,)]
        # published again in another PCI order (device gpu-i is GPU 7-i): each hold follows its devices
        await catalog.relist_slices([gpu_slice(bus=[f"0000:{0x88 - 0x10 * i:02x}:00.0" for i in range(8)])])
        assert held(s) == [(2,), (4, 5)] and s.core.node_fill(NODE) == (5, 8)

    asyncio.run(go())
