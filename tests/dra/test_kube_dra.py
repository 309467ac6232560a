"""DRA mode against the in-memory API: the claims' allocation written before the Binding, exactly
the slot's devices; undone when the Binding fails; released when the pod goes; KEP-5004's claim made
for a pod asking `nvidia.com/gpu`; the GPU count read from claims and templates."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from config.load import load_config
from extender.dra import claims as dc
from extender.dra.devices import DeviceMap, DraSettings
from extender.http.ports import BindError, BindTarget
from extender.kube import dra_mode
from extender.kube.client import pod_path
from extender.kube.dra import SLICES, DraBinder, DraCatalog, release
from extender.kube.dra_mode import ForeignClaims
from extender.kube.events import EventRecorder
from extender.kube.sync import ClusterSync
from extender.ops.metrics import Metrics
from loadtest.kubefake import FakeKube, Fault
from tests.dra.test_devices import gpu_slice
from tests.extender.helpers import scheduler
from topology.decisions import UserError
from topology.model import Topology
from topology.node_layout import node_halves

NODE = "a100-r1-n1"
NS = "ml"


def claim(name: str, count: int, cls: str = "gpu.nvidia.com") -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": cls, "count": count}}]}
        },
    }


def pod(name: str, claims: list[str] | None = None, gpus: int = 0) -> dict[str, Any]:
    c: dict[str, Any] = {"name": "main", "image": "x"}
    if gpus:
        c["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "schedulerName": "topogang",
            "containers": [c],
            "resourceClaims": [{"name": f"c{i}", "resourceClaimName": n} for i, n in enumerate(claims or [])],
        },
    }


async def setup() -> tuple[FakeKube, DraCatalog, DraBinder]:
    kube = FakeKube()
    topo = Topology(load_config("config/examples/example-cluster.yaml").spec)
    catalog = DraCatalog(kube, DraSettings(), lambda n: node_halves(topo, n), list(topo.machines))
    kube.server.create(SLICES, gpu_slice())
    items, _ = await kube.list(SLICES)
    await catalog.relist_slices(items)
    return kube, catalog, DraBinder(kube, catalog)


def make(kube: FakeKube, obj: dict[str, Any]) -> dict[str, Any]:
    kind = "pods" if obj["kind"] == "Pod" else "resourceclaims"
    base = pod_path(NS) if kind == "pods" else f"{dc.API}/namespaces/{NS}/resourceclaims"
    return kube.server.create(base, obj)


def target(p: dict[str, Any]) -> BindTarget:
    return BindTarget(NS, p["metadata"]["name"], p["metadata"]["uid"])


ISO = "topogang.io/pod-leaf-cell-isolation"


def test_bind_allocates_exactly_the_slot_devices_then_binds_and_release_gives_them_back() -> None:
    async def go() -> None:
        kube, catalog, binder = await setup()
        dm = catalog.device_map(NODE)
        assert isinstance(dm, DeviceMap)
        make(kube, claim("a", 1))
        make(kube, claim("b", 3))
        p = make(kube, pod("w0", ["a", "b"]))
        await binder.bind(target(p), NODE, {ISO: "4,5,6,7"})
        a = kube.server.at(dc.claim_path(NS, "a"))
        b = kube.server.at(dc.claim_path(NS, "b"))
        assert [r.device for r in dc.allocated(a)] == [dm.by_gpu[4].name]
        assert [r.device for r in dc.allocated(b)] == [dm.by_gpu[g].name for g in (5, 6, 7)]
        assert {r.request for r in dc.allocated(b)} == {"gpus"} and dc.allocated(b)[0].pool == NODE
        sel = b["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]
        assert sel["values"] == [NODE]
        assert dc.reserved_uids(a) == [p["metadata"]["uid"]]
        bound = kube.server.at(pod_path(NS, "w0"))
        assert bound["spec"]["nodeName"] == NODE
        await binder.bind(target(p), NODE, {ISO: "4,5,6,7"})  # a retried bind: the same answer
        await release(kube, bound)
        for name in ("a", "b"):
            got = kube.server.at(dc.claim_path(NS, name))
            assert dc.allocated(got) == [] and dc.reserved_uids(got) == []

    asyncio.run(go())


def test_a_failed_binding_takes_the_allocations_back() -> None:
    async def go() -> None:
        kube, _, binder = await setup()
        make(kube, claim("a", 2))
        p = make(kube, pod("w0", ["a"]))
        kube.inject(Fault("POST", "/binding", "error", status=500))
        with pytest.raises(BindError):
            await binder.bind(target(p), NODE, {ISO: "0,1"})
        a = kube.server.at(dc.claim_path(NS, "a"))
        assert dc.allocated(a) == [] and dc.reserved_uids(a) == []
        assert not kube.server.at(pod_path(NS, "w0"))["spec"].get("nodeName")

    asyncio.run(go())


def test_a_claim_that_asks_another_count_or_is_taken_allocates_nothing() -> None:
    async def go() -> None:
        kube, _, binder = await setup()
        make(kube, claim("a", 2))
        make(kube, claim("b", 2))
        p = make(kube, pod("w0", ["a", "b"]))
        with pytest.raises(BindError, match="ask 4 GPUs, its slot has 2"):
            await binder.bind(target(p), NODE, {ISO: "0,1"})
        # b already given other devices: a, written first, is taken back
        q = make(kube, pod("w1", ["b"]))
        await binder.bind(target(q), NODE, {ISO: "6,7"})
        r = make(kube, pod("w2", ["a", "b"]))
        with pytest.raises(BindError, match="allocated to other devices"):
            await binder.bind(target(r), NODE, {ISO: "0,1,2,3"})
        assert dc.allocated(kube.server.at(dc.claim_path(NS, "a"))) == []

    asyncio.run(go())


def test_a_node_whose_slices_contradict_the_config_binds_nothing() -> None:
    async def go() -> None:
        kube, catalog, binder = await setup()
        items, _ = await kube.list(SLICES)
        await catalog.relist_slices([])
        make(kube, claim("a", 1))
        p = make(kube, pod("w0", ["a"]))
        with pytest.raises(BindError, match=r"no gpu\.nvidia\.com devices published"):
            await binder.bind(target(p), NODE, {ISO: "0"})
        assert catalog.bad_gpus(NODE) == frozenset(range(8))
        await catalog.relist_slices(items)
        assert catalog.bad_gpus(NODE) == frozenset()

    asyncio.run(go())


def test_extended_resource_pod_gets_the_claim_kube_scheduler_would_make() -> None:
    async def go() -> None:
        kube, _, binder = await setup()
        kube.server.create(
            f"{dc.API}/deviceclasses",
            {"metadata": {"name": "gpu.nvidia.com"}, "spec": {"extendedResourceName": "nvidia.com/gpu"}},
        )
        p = make(kube, pod("w0", gpus=2))
        await binder.bind(target(p), NODE, {ISO: "2,3"})
        bound = kube.server.at(pod_path(NS, "w0"))
        ext = bound["status"]["extendedResourceClaimStatus"]
        assert ext["requestMappings"] == [
            {
                "containerName": "main",
                "resourceName": "nvidia.com/gpu",
                "requestName": "container-0-request-0",
            }
        ]
        made = kube.server.at(dc.claim_path(NS, ext["resourceClaimName"]))
        assert made["metadata"]["annotations"][dc.EXTENDED_RESOURCE_CLAIM] == "true"
        assert made["metadata"]["ownerReferences"][0]["uid"] == p["metadata"]["uid"]
        assert len(dc.allocated(made)) == 2
        await release(kube, bound)
        assert kube.server.get(dc.claim_path(NS, ext["resourceClaimName"])) is None

    asyncio.run(go())


def test_gpu_count_from_claims_and_templates_and_what_is_refused() -> None:
    async def go() -> None:
        kube, catalog, _ = await setup()
        make(kube, claim("a", 3))
        kube.server.create(
            f"{dc.API}/namespaces/{NS}/resourceclaimtemplates",
            {"metadata": {"name": "t", "namespace": NS}, "spec": {"spec": claim("x", 2)["spec"]}},
        )
        p = pod("w0", ["a"])
        p["spec"]["resourceClaims"].append({"name": "tt", "resourceClaimTemplateName": "t"})
        assert await catalog.claim_gpus(p, NS) == 5
        make(kube, claim("nic", 1, cls="nic.example.com"))
        with pytest.raises(UserError, match=r"only devices of class 'gpu\.nvidia\.com'"):
            await catalog.claim_gpus(pod("w1", ["nic"]), NS)
        with pytest.raises(UserError, match="does not exist"):
            await catalog.claim_gpus(pod("w2", ["nope"]), NS)

    asyncio.run(go())


def test_devices_other_schedulers_allocated_are_held_until_released() -> None:
    """A claim allocated on topogang's node for a pod topogang does not hold (another profile's
    DynamicResources plugin): its GPUs are held as an `unverified:` gang, and free again once the
    claim lets go. Node health follows taints and slices through `extra_bad`."""

    async def go() -> None:
        kube, catalog, _ = await setup()
        s = scheduler()
        foreign = ForeignClaims(s, catalog)
        dm = catalog.device_map(NODE)
        assert isinstance(dm, DeviceMap)
        c = make(kube, claim("theirs", 2))
        c["status"] = {
            "allocation": dc.allocation(
                [dc.Result("gpus", "gpu.nvidia.com", NODE, dm.by_gpu[g].name) for g in (2, 3)], NODE
            ),
            "reservedFor": [dc.reserved_for("elsewhere", "uid-elsewhere")],
        }
        await foreign.on_claim("MODIFIED", c)
        assert s.core.node_fill(NODE) == (6, 8)
        (g,) = [g for g in s.core.gangs() if g.name.startswith("unverified:")]
        assert s.core.placement_of(g).pods[0].gpu_indices == (2, 3)
        await foreign.on_claim("MODIFIED", c)  # seen again: held once
        assert s.core.node_fill(NODE) == (6, 8)
        c["status"] = {}
        await foreign.on_claim("MODIFIED", c)  # deallocated
        assert s.core.node_fill(NODE) == (8, 8)

    asyncio.run(go())


def test_pods_without_claims_bind_as_before_in_dra_mode() -> None:
    """A pod asking `nvidia.com/gpu` with no DeviceClass mapping it (a device plugin serves it), or
    asking through the opt-in limit alone (bind info and the env): the Binding, no claim."""

    async def go() -> None:
        kube, _, binder = await setup()
        for name, gpus in (("plugin", 2), ("env", 0)):
            p = make(kube, pod(name, gpus=gpus))
            await binder.bind(target(p), NODE, {ISO: "0,1"})
            assert kube.server.at(pod_path(NS, name))["spec"]["nodeName"] == NODE
        assert kube.server.items("resource.k8s.io/v1", "resourceclaims") == []

    asyncio.run(go())


def test_dra_mode_reports_a_contradicting_node_and_keeps_its_gpus_out() -> None:
    """`dra_mode.attach`: a node whose slice has too few devices gets a Warning Event (in `default`,
    where Node Events live), `topogang_dra_node_mismatch` counts it, node health marks its GPUs bad;
    a matching slice brings them back."""

    async def go() -> None:
        kube = FakeKube()
        s = scheduler()
        sync = ClusterSync(s, kube)
        metrics = Metrics()
        recorder = EventRecorder(kube, metrics, clock=lambda: 0.0, instance="t")
        loaded = load_config("config/examples/example-cluster.yaml")
        dra_mode.attach(s, sync, kube, loaded, DraSettings(), recorder, metrics)
        assert isinstance(s.binder, DraBinder)
        node = {
            "metadata": {"name": NODE},
            "spec": {},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }
        await sync.apply_nodes([node], full=False)
        catalog = s.binder.catalog
        await catalog.relist_slices([gpu_slice(n=6)])
        await asyncio.sleep(0.05)
        assert s.core.node_fill(NODE) == (0, 8)
        events = [
            e
            for e in kube.server.events
            if e.get("reason") == "DeviceMismatch" and e["involvedObject"]["name"] == NODE
        ]
        assert [(e["metadata"]["namespace"], e["type"]) for e in events] == [("default", "Warning")]
        assert "6 gpu.nvidia.com devices published, the config has 8 GPUs" in events[0]["message"]
        assert metrics.dra_mismatch._value.get() >= 1
        await catalog.relist_slices([gpu_slice()])
        assert s.core.node_fill(NODE) == (8, 8)

    asyncio.run(go())
