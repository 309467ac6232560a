"""A pod asking `nvidia.com/gpu` in DRA mode: KEP-5004's claim sized and mapped as kube-scheduler's
DynamicResources plugin would (init containers use the app containers' devices), a retried bind
writing the claim a bind made before again, and a pod asking GPUs through both a claim and
`nvidia.com/gpu` refused at filter."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from extender.conventions.resolve import resolve
from extender.dra import claims as dc
from extender.dra.extended import container_requests
from extender.gangs.optin import pod_gpus
from extender.http.ports import BindError
from extender.kube.client import pod_path
from extender.kube.dra import release
from loadtest.kubefake import FakeKube, Fault
from tests.dra.test_kube_dra import ISO, NODE, NS, make, pod, setup, target
from topology.decisions import UserError

ENABLE = "topogang.io/pod-scheduling-enable"


def mapped_class(kube: FakeKube) -> None:
    kube.server.create(
        f"{dc.API}/deviceclasses",
        {"metadata": {"name": "gpu.nvidia.com"}, "spec": {"extendedResourceName": "nvidia.com/gpu"}},
    )


def container(name: str, gpus: int, **extra: Any) -> dict[str, Any]:
    return {"name": name, "image": "x", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}, **extra}


def shaped(inits: list[dict[str, Any]], apps: list[dict[str, Any]]) -> dict[str, Any]:
    p = pod("w0")
    p["spec"]["initContainers"], p["spec"]["containers"] = inits, apps
    return p


def claims(kube: FakeKube) -> list[dict[str, Any]]:
    return kube.server.items("resource.k8s.io/v1", "resourceclaims")


def test_an_init_container_uses_the_app_containers_devices_so_the_claim_asks_the_slots_count() -> None:
    # one init container asking no more than the app containers: it maps to their requests
    p = shaped([container("init", 1)], [container("main", 1)])
    ext = container_requests(p)
    assert ext.requests == [("container-1-request-0", 1)] and ext.gpus == pod_gpus(p) == 1
    assert [(m["containerName"], m["requestName"]) for m in ext.mappings] == [
        ("main", "container-1-request-0"),
        ("init", "container-1-request-0"),
    ]
    # init containers asking more: each asks what the app containers lack; the largest ask stands for all
    p = shaped([container("big", 4), container("small", 2)], [container("a", 1)])
    ext = container_requests(p)
    assert ext.requests == [("container-0-request-0", 3), ("container-2-request-0", 1)]
    assert ext.gpus == pod_gpus(p) == 4
    assert [(m["containerName"], m["requestName"]) for m in ext.mappings] == [
        ("a", "container-2-request-0"),
        ("big", "container-2-request-0"),
        ("big", "container-0-request-0"),
        ("small", "container-2-request-0"),
        ("small", "container-0-request-0"),
    ]
    # a sidecar (an init container that keeps running) has devices of its own
    p = shaped([container("side", 1, restartPolicy="Always")], [container("a", 1)])
    assert container_requests(p).requests == [("container-0-request-0", 1), ("container-1-request-0", 1)]

    async def go() -> None:
        kube, _, binder = await setup()
        mapped_class(kube)
        w = make(kube, shaped([container("init", 1)], [container("main", 1)]))
        await binder.bind(target(w), NODE, {ISO: "0"})
        (made,) = claims(kube)
        assert [(r.request, r.device) for r in dc.allocated(made)] == [("container-1-request-0", "gpu-0")]
        assert kube.server.at(pod_path(NS, "w0"))["spec"]["nodeName"] == NODE

    asyncio.run(go())


def test_a_retried_bind_writes_the_claim_a_bind_made_before_again() -> None:
    """The Binding fails and the undo gets no answer: the claim named in the pod's status stays. The
    next bind writes that claim again (on the same GPUs, or on others) instead of making a second."""

    async def go() -> None:
        kube, _, binder = await setup()
        mapped_class(kube)
        p = make(kube, pod("w0", gpus=2))
        for fault in (
            Fault("POST", "/binding", "error", status=500),
            Fault("GET", "resourceclaims/", "timeout"),
            Fault("DELETE", "resourceclaims/", "timeout"),
        ):
            kube.inject(fault)
        with pytest.raises(BindError):
            await binder.bind(target(p), NODE, {ISO: "2,3"})
        (left,) = claims(kube)
        assert [r.device for r in dc.allocated(left)] == ["gpu-2", "gpu-3"]
        await binder.bind(target(p), NODE, {ISO: "2,3"})
        (made,) = claims(kube)
        assert made["metadata"]["name"] == left["metadata"]["name"]
        bound = kube.server.at(pod_path(NS, "w0"))
        assert bound["status"]["extendedResourceClaimStatus"]["resourceClaimName"] == made["metadata"]["name"]
        await release(kube, bound)
        assert claims(kube) == []
        # left unallocated by the undo (only its deletion got no answer): allocated again, elsewhere
        q = make(kube, pod("w1", gpus=2))
        kube.inject(Fault("POST", "/binding", "error", status=500))
        kube.inject(Fault("DELETE", "resourceclaims/", "timeout"))
        with pytest.raises(BindError):
            await binder.bind(target(q), NODE, {ISO: "0,1"})
        (left,) = claims(kube)
        assert dc.allocated(left) == [] and not left["metadata"].get("finalizers")
        await binder.bind(target(q), NODE, {ISO: "4,5"})
        (made,) = claims(kube)
        assert made["metadata"]["name"] == left["metadata"]["name"]
        assert [r.device for r in dc.allocated(made)] == ["gpu-4", "gpu-5"]
        assert made["metadata"]["finalizers"] == [dc.FINALIZER]

    asyncio.run(go())


def test_a_pod_asking_gpus_through_a_claim_and_nvidia_com_gpu_is_refused_at_filter() -> None:
    def asks(p: dict[str, Any], claimed: int) -> Any:
        m = p["metadata"]
        return resolve(p, "uid-1", NS, m["name"], namespace_vcs={NS: "vision"}, claim_gpus=claimed)

    both = pod("w0", ["a"], gpus=1)
    with pytest.raises(UserError) as err:
        asks(both, 1)
    assert err.value.field == "spec.resourceClaims, nvidia.com/gpu"
    assert "1 GPUs through its ResourceClaims and 1 through nvidia.com/gpu" in err.value.message
    claim_only = pod("w0", ["a"])
    claim_only["spec"]["containers"][0]["resources"] = {"limits": {ENABLE: "1"}}
    got = asks(claim_only, 2)
    assert got is not None and got.request.leaf_number == 2
    got = asks(pod("w0", gpus=2), 0)
    assert got is not None and got.request.leaf_number == 2
