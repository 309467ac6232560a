"""Recovery from ResourceClaims (DRA mode): a bound pod's GPUs read from the allocations topogang
wrote for it (`extender.dra.adopt`), and the gang rebuilt from them when the pod's bind info is
missing or not topogang's; an allocation topogang did not make for that pod is never taken."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Mapping
from typing import Any

from config.load import load_config
from extender.dra import claims as dc
from extender.dra.adopt import claimed_gpus
from extender.dra.devices import DeviceMap, DraSettings, Mismatch, map_node, node_devices, parse_slice
from extender.gangs.bindinfo import ISOLATION_ANNOTATIONS
from extender.gangs.bindsig import BindSigner, verifier
from extender.kube import dra_mode
from extender.kube.client import pod_path
from extender.kube.dra import DraBinder
from extender.kube.events import EventRecorder
from extender.kube.recovery import recover
from extender.kube.sync import ClusterSync
from extender.ops.metrics import Metrics
from loadtest.kubefake import FakeKube
from tests.dra.test_devices import gpu_slice
from tests.extender.helpers import example, pod, scheduler, spec
from topology.core import Core
from topology.model import Topology
from topology.node_layout import node_halves

NODE = "a100-r1-n1"
NS = "vision"
DRIVER = "gpu.nvidia.com"


def device_map() -> DeviceMap:
    topo = Topology(load_config("config/examples/example-cluster.yaml").spec)
    s = parse_slice(gpu_slice())
    assert s is not None
    dm = map_node(NODE, node_halves(topo, NODE), node_devices([s], DRIVER, NODE), DraSettings())
    assert isinstance(dm, DeviceMap)
    return dm


def allocated_claim(
    name: str, gpus: tuple[int, ...], uid: str, dm: DeviceMap, node: str = NODE
) -> dict[str, Any]:
    """A claim as `DraBinder` leaves it: allocated on the node, reserved for the pod."""
    results = [dc.Result("gpus", DRIVER, dm.by_gpu[g].pool, dm.by_gpu[g].name) for g in gpus]
    return {
        "metadata": {"name": name, "namespace": NS, "uid": f"claim-{name}"},
        "spec": {
            "devices": {
                "requests": [{"name": "gpus", "exactly": {"deviceClassName": DRIVER, "count": len(gpus)}}]
            }
        },
        "status": {"allocation": dc.allocation(results, node), "reservedFor": [dc.reserved_for(uid, uid)]},
    }


def bound(
    uid: str, claims: list[str], text: str, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    p = pod(uid, uid, NS, text, annotations=annotations)
    p["spec"]["nodeName"] = NODE
    p["spec"]["resourceClaims"] = [{"name": f"c{i}", "resourceClaimName": n} for i, n in enumerate(claims)]
    p["status"] = {"phase": "Running"}
    return p


def test_the_gpus_of_a_claim_topogang_allocated_for_the_pod() -> None:
    dm = device_map()
    p = bound("w0", ["a", "b"], spec("vision", 4))
    claims = {"a": allocated_claim("a", (4,), "w0", dm), "b": allocated_claim("b", (5, 6, 7), "w0", dm)}
    assert claimed_gpus(p, claims, dm, DraSettings()) == (4, 5, 6, 7)
    plain = bound("w1", [], spec("vision", 4))
    assert claimed_gpus(plain, claims, dm, DraSettings()) is None  # no claims: nothing to say


def test_an_allocation_topogang_did_not_make_for_the_pod_is_not_taken() -> None:
    dm = device_map()
    p = bound("w0", ["a"], spec("vision", 2))
    good = allocated_claim("a", (2, 3), "w0", dm)

    def why(change: Any, the_map: DeviceMap | Mismatch | None = dm) -> str:
        c = copy.deepcopy(good)
        change(c)
        got = claimed_gpus(p, {"a": c}, the_map, DraSettings())
        assert isinstance(got, str), got
        return got

    def other_pod(c: Any) -> None:
        c["status"]["reservedFor"] = [dc.reserved_for("x", "other")]

    def other_node(c: Any) -> None:
        c["status"]["allocation"]["nodeSelector"] = dc.node_selector("a100-r1-n2")

    def other_driver(c: Any) -> None:
        c["status"]["allocation"]["devices"]["results"][0]["driver"] = "gpu.example.com"

    def unknown_device(c: Any) -> None:
        c["status"]["allocation"]["devices"]["results"][0]["device"] = "gpu-99"

    def too_few(c: Any) -> None:
        del c["status"]["allocation"]["devices"]["results"][1]

    def not_allocated(c: Any) -> None:
        c["status"] = {}

    def other_class(c: Any) -> None:
        c["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = "other"

    assert "not reserved for the pod" in why(other_pod)
    assert f"not allocated on the pod's node {NODE}" in why(other_node)
    assert "driver gpu.example.com" in why(other_driver)
    assert "gpu-99 is no GPU" in why(unknown_device)
    assert "its GPU requests ask" in why(too_few)
    assert "not allocated" in why(not_allocated)
    assert "deviceClassName" in why(other_class)
    assert "contradict" in why(lambda c: None, Mismatch(NODE, "contradict"))
    assert "does not exist" in str(claimed_gpus(p, {}, dm, DraSettings()))
    assert claimed_gpus(p, {"a": good}, dm, DraSettings()) == (2, 3)


def test_recovery_rebuilds_a_gang_from_its_claims_when_bind_info_is_missing_or_forged() -> None:
    """Two pods of one gang bound by topogang in DRA mode, their bind info gone (one pod's replaced
    by a tenant's isolation annotation naming other GPUs): the gang comes back, each pod on the
    GPUs its claims hold, and nothing is held for the forged annotation."""
    dm = device_map()
    text = spec("vision", 4, pods=2, group="vision/train")
    forged = {ISOLATION_ANNOTATIONS[0]: "0,1,2,3"}
    pods = [bound("w0", ["a"], text), bound("w1", ["b"], text, forged)]
    claims = {
        "a": allocated_claim("a", (0, 1, 2, 3), "w0", dm),
        "b": allocated_claim("b", (4, 5, 6, 7), "w1", dm),
    }
    verify = verifier(BindSigner(b"k" * 32))
    core = Core(example().spec)
    report = recover(
        core, pods, now=0.0, verify=verify, claimed=lambda p: claimed_gpus(p, claims, dm, DraSettings())
    )
    assert report.gangs == ["vision/train"] and report.pods == 2 and not report.unverified
    gang = core.gang("vision/train")
    assert gang is not None
    got = sorted((p.node, p.gpu_indices) for p in core.placement_of(gang).pods)
    assert got == [(NODE, (0, 1, 2, 3)), (NODE, (4, 5, 6, 7))]
    assert sum("taken from its ResourceClaims" in n for n in report.notes) == 2
    # without the claims (or claims that are not topogang's), the annotations are judged as before
    report = recover(Core(example().spec), pods, now=0.0, verify=verify)
    assert report.pods == 0 and [u.name for u in report.unverified] == ["w1"]
    claims["a"]["status"]["reservedFor"] = []
    fresh = Core(example().spec)
    report = recover(
        fresh, pods, now=0.0, verify=verify, claimed=lambda p: claimed_gpus(p, claims, dm, DraSettings())
    )
    assert any("not reserved for the pod" in n for n in report.notes)
    assert [g.name for g in fresh.gangs()] == ["vision/train"] and report.pods == 1


def test_the_start_of_a_dra_mode_service_reads_the_claims_for_recovery() -> None:
    """`dra_mode.attach` gives `ClusterSync.start` the claims (listed once, after the slices): a
    bound pod without bind info comes back on its claim's GPUs."""

    async def go() -> None:
        kube = FakeKube()
        s = scheduler()
        s.ready = False
        sync = ClusterSync(s, kube)
        metrics = Metrics()
        recorder = EventRecorder(kube, metrics, clock=lambda: 0.0, instance="t")
        dra_mode.attach(
            s,
            sync,
            kube,
            load_config("config/examples/example-cluster.yaml"),
            DraSettings(),
            recorder,
            metrics,
        )
        assert isinstance(s.binder, DraBinder)
        p = kube.server.create(pod_path(NS), bound("w0", ["a"], spec("vision", 4)))
        dm = device_map()
        kube.server.create(
            f"{dc.API}/namespaces/{NS}/resourceclaims",
            allocated_claim("a", (4, 5, 6, 7), p["metadata"]["uid"], dm),
        )
        await s.binder.catalog.relist_slices([gpu_slice()])
        await sync.start()
        gang = s.core.gang("vision/pod:w0")
        assert gang is not None
        assert [q.gpu_indices for q in s.core.placement_of(gang).pods] == [(4, 5, 6, 7)]

    asyncio.run(go())


def test_a_pod_adopted_from_its_claims_takes_no_quota_a_verified_gang_holds() -> None:
    """The claims prove a pod's GPUs, not its priority: a tenant who raised its opportunistic pod's
    spec to priority 10 and broke its bind info (so it is adopted from its claims, its spec read
    as it is now) must not take the quota of a gang whose signed bind info says it holds it. It
    is adopted after every verified gang, and runs on as opportunistic where the VC has no room."""
    from extender.gangs.bindinfo import decode_isolation
    from extender.standalone import MemoryBinder
    from tests.extender.helpers import place, run
    from tests.extender.test_kube_edge import bound_pods

    async def go() -> None:
        binder = MemoryBinder()
        s = scheduler(binder)
        tenant = pod("a0", "a", "research", spec("research", 4, priority=-1))  # research/pod:a sorts first
        assert (await place(s, tenant))[1]
        z = spec("research", 4, 4, "research/z", priority=10)  # the rest of research's quota
        zs = [pod(f"z{i}", f"z-{i}", "research", z) for i in range(4)]
        for p in zs:
            assert (await place(s, p))[1]
        signer = BindSigner(b"k" * 32)
        api = bound_pods(s, binder, [tenant, *zs])
        for p in api:
            ann = p["metadata"]["annotations"]
            ann.update(signer.signed(ann, p["metadata"]["uid"]))
        edited = api[0]["metadata"]["annotations"]
        edited["topogang.io/pod-scheduling-spec"] = spec("research", 4, priority=10)
        edited["topogang.io/pod-bind-info"] += "# edited\n"

        def claimed(p: Mapping[str, Any]) -> tuple[int, ...]:  # the GPUs the DRA bind allocated it
            iso = binder.bound[p["metadata"]["uid"]].annotations[ISOLATION_ANNOTATIONS[0]]
            return tuple(decode_isolation(iso))

        core = Core(example().spec)
        report = recover(
            core,
            api,
            now=0.0,
            namespace_vcs={"research": "research"},
            verify=verifier(signer),
            claimed=claimed,
        )
        a, zg = core.gang("research/pod:a"), core.gang("research/z")
        assert zg is not None and zg.priority == 10 and zg.owner >= 0  # its guarantee kept
        assert a is not None and a.priority < 0  # its GPUs kept, as opportunistic
        assert any("taken from its ResourceClaims" in n for n in report.notes)

    run(go())
