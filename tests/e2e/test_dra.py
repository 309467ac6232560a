"""DRA mode end to end: topogang allocates its pods' ResourceClaims on the real v1.37 control plane.

The harness publishes ResourceSlices as NVIDIA's DRA driver does (tests/e2e/dra.py) and runs the chart
with `extender.dra.enabled=true`: kube-scheduler's DynamicResources plugin off in topogang's profile,
the extender with `--dra` under its ServiceAccount. What the cluster then shows: each claim's
`status.allocation` names exactly the devices of the GPUs in the pod's bind info, on one half; a gang
that does not fit allocates nothing; a deleted pod's claim is released and its GPUs reused; a restart
keeps the placements the claims record, and rebuilds them from the claims when the pods' bind info is
gone; a tainted device is not given out; a pod asking
`nvidia.com/gpu` (KEP-5004) gets a claim of its slot's devices.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client

from extender.gangs.bindinfo import ISOLATION_ANNOTATIONS
from extender.gangs.bindsig import HIVED_BIND_INFO, SIGNATURE_ANNOTATION, TOPOGANG_BIND_INFO
from tests.e2e import dra
from tests.e2e.conftest import E2ECluster, Extender, holds_nothing
from tests.e2e.helpers import (
    ENABLE,
    GPU,
    PROFILE,
    SPEC,
    Placed,
    delete_pods,
    hold_for,
    none_bound,
    pods_of,
    seen_by_scheduler,
    wait_gone,
    wait_running,
    wait_until,
)

pytestmark = pytest.mark.e2e

HOLD_SECONDS = 5.0
NODE = "a100-r3-n4"  # a research/vision-free corner of the example cluster for the pinned tests


@pytest.fixture(scope="module")
def dra_ext(e2e_cluster: E2ECluster, extender_session: Extender) -> Iterator[Extender]:
    res = dra.Resources(e2e_cluster.api)
    groups = client.ApisApi(e2e_cluster.api).get_api_versions().groups or []
    served = {v.group_version for g in groups for v in g.versions}
    assert "resource.k8s.io/v1" in served, f"resource.k8s.io/v1 is not served: {sorted(served)}"
    mode = dra.DraMode(e2e_cluster, extender_session)
    try:
        yield mode.up(res)
    finally:
        mode.down(res)


@pytest.fixture
def ns(e2e_cluster: E2ECluster, dra_ext: Extender) -> Iterator[str]:
    core = e2e_cluster.core
    dra_ext.ensure_running()
    wait_until("the extender to hold nothing", lambda: holds_nothing(dra_ext) is None, 30)
    name = f"e2e-dra-{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace.model_validate({"metadata": {"name": name}}))
    yield name
    names = [str(p.metadata.name) for p in core.list_namespaced_pod(name).items if p.metadata]
    wait_gone(core, name, delete_pods(core, name, names), 60)
    dra_ext.ensure_running()
    wait_until("the extender to release everything", lambda: holds_nothing(dra_ext) is None, 30)


def claim_pod(
    name: str,
    *,
    gang: str,
    vc: str,
    members: list[tuple[int, int]],
    gpus: int,
    claim: str | None = None,
    template: str | None = None,
    node: str | None = None,
) -> Any:
    """A HiveD-style gang pod that gets its GPUs through a ResourceClaim: the opt-in limit and the
    spec annotation, no `nvidia.com/gpu` request."""
    spec = {
        "virtualCluster": vc,
        "leafCellNumber": gpus,
        "affinityGroup": {
            "name": gang,
            "members": [{"podNumber": n, "leafCellNumber": g} for n, g in members],
        },
    }
    ref = {
        "name": "gpus",
        **({"resourceClaimName": claim} if claim else {"resourceClaimTemplateName": template}),
    }
    pod_spec: dict[str, Any] = {
        "schedulerName": PROFILE,
        "terminationGracePeriodSeconds": 0,
        "containers": [
            {
                "name": "main",
                "image": "fake.invalid/train:1",
                "resources": {"limits": {ENABLE: "1"}, "claims": [{"name": "gpus"}]},
            }
        ],
        "resourceClaims": [ref],
    }
    if node:
        pod_spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    return client.V1Pod.model_validate(
        {"metadata": {"name": name, "annotations": {SPEC: yaml.safe_dump(spec)}}, "spec": pod_spec}
    )


def claim_of(res: dra.Resources, core: client.CoreV1Api, ns: str, pod: str) -> dict[str, Any]:
    p = core.read_namespaced_pod(pod, ns)
    assert p.spec is not None and p.status is not None
    (rc,) = p.spec.resource_claims or []
    name = rc.resource_claim_name
    if name is None:
        (st,) = [s for s in p.status.resource_claim_statuses or [] if s.name == rc.name]
        name = st.resource_claim_name
    assert name, f"pod {pod} names no ResourceClaim yet"
    got = res.get("resourceclaims", name, ns)
    assert got is not None, f"no ResourceClaim {name}"
    return dict(got)


def allocated_devices(claim: dict[str, Any]) -> list[str]:
    alloc = (claim.get("status") or {}).get("allocation") or {}
    return [r["device"] for r in (alloc.get("devices") or {}).get("results") or []]


def check_allocation(claim: dict[str, Any], placed: Placed, uid: str, request: str = "gpus") -> None:
    """The claim gives exactly the devices of the pod's GPUs, on its node, reserved for it."""
    assert sorted(allocated_devices(claim)) == sorted(dra.device_of(g) for g in placed.gpus), (claim, placed)
    alloc = claim["status"]["allocation"]
    results = alloc["devices"]["results"]
    assert {(r["driver"], r["pool"], r["request"]) for r in results} == {(dra.DRIVER, placed.node, request)}
    (term,) = alloc["nodeSelector"]["nodeSelectorTerms"]
    assert term["matchFields"] == [{"key": "metadata.name", "operator": "In", "values": [placed.node]}]
    assert [r["uid"] for r in claim["status"]["reservedFor"]] == [uid]


def one_half(gpus: tuple[int, ...]) -> bool:
    return all(g < 4 for g in gpus) or all(g >= 4 for g in gpus)


def uid_of(core: client.CoreV1Api, ns: str, pod: str) -> str:
    meta = core.read_namespaced_pod(pod, ns).metadata
    assert meta is not None
    return str(meta.uid)


# ------------------------------------------------------------------------------------------ tests
def test_gang_with_claims_binds_whole_on_the_slot_devices_and_survives_a_restart(
    e2e_cluster: E2ECluster, dra_ext: Extender, ns: str
) -> None:
    core, res = e2e_cluster.core, dra.Resources(e2e_cluster.api)
    res.create("resourceclaimtemplates", dra.template_body("four", 4), ns)
    res.create("resourceclaims", dra.claim_body("w1-gpus", 4), ns)
    gang = f"{ns}/train"
    core.create_namespaced_pod(
        ns, claim_pod("w0", gang=gang, vc="vision", members=[(2, 4)], gpus=4, template="four")
    )
    dra.claim_for_template(res, core, ns, "w0")  # the ResourceClaim controller's part
    core.create_namespaced_pod(
        ns, claim_pod("w1", gang=gang, vc="vision", members=[(2, 4)], gpus=4, claim="w1-gpus")
    )
    pods = wait_running(core, ns, ["w0", "w1"])
    claims = {}
    for name, placed in pods.items():
        assert len(placed.gpus) == 4 and one_half(placed.gpus), placed
        claims[name] = claim_of(res, core, ns, name)
        check_allocation(claims[name], placed, uid_of(core, ns, name))
    taken = [(p.node, d) for n, p in pods.items() for d in allocated_devices(claims[n])]
    assert len(set(taken)) == 8, f"a device given twice: {taken}"

    held = dra_ext.summary()["gpus"]
    dra_ext.restart()
    assert dra_ext.summary()["gpus"] == held  # the claims' GPUs are held again, no more, no fewer
    for name, placed in pods.items():
        check_allocation(claim_of(res, core, ns, name), placed, uid_of(core, ns, name))


def test_a_restart_rebuilds_the_placements_from_the_claims_without_bind_info(
    e2e_cluster: E2ECluster, dra_ext: Extender, ns: str
) -> None:
    """A gang of 2 x 4 fills NODE; its pods' bind info (and signature, and isolation annotation) is
    removed; a restarted extender holds the claims' GPUs for the gang, and a new pod pinned to NODE
    is not given them until the gang is gone."""
    core, res = e2e_cluster.core, dra.Resources(e2e_cluster.api)
    gang = f"{ns}/train"
    names = ["w0", "w1"]
    for n in names:
        res.create("resourceclaims", dra.claim_body(f"{n}-gpus", 4), ns)
        core.create_namespaced_pod(
            ns, claim_pod(n, gang=gang, vc="vision", members=[(2, 4)], gpus=4, claim=f"{n}-gpus", node=NODE)
        )
    wait_running(core, ns, names)
    devices = {n: sorted(allocated_devices(claim_of(res, core, ns, n))) for n in names}
    assert sorted(d for ds in devices.values() for d in ds) == sorted(dra.device_of(g) for g in range(8))
    held = dra_ext.summary()["gpus"]
    strip = dict.fromkeys((TOPOGANG_BIND_INFO, SIGNATURE_ANNOTATION, HIVED_BIND_INFO, *ISOLATION_ANNOTATIONS))
    for n in names:
        core.patch_namespaced_pod(n, ns, {"metadata": {"annotations": strip}})
        meta = core.read_namespaced_pod(n, ns).metadata
        ann = (meta.annotations if meta is not None else None) or {}
        assert not set(ann) & set(strip), ann
    dra_ext.restart()
    assert dra_ext.summary()["gpus"] == held  # the claims' GPUs are held again, no more, no fewer
    log = dra_ext.log()
    for n in names:
        assert f"({ns}/{n}): GPUs" in log and "taken from its ResourceClaims" in log, log[-3000:]
        assert f"pod {ns}/{n} on {NODE}" not in log  # adopted into its gang, not held as unverified
    res.create("resourceclaims", dra.claim_body("late-gpus", 4), ns)
    core.create_namespaced_pod(
        ns,
        claim_pod(
            "late", gang=f"{ns}/late", vc="vision", members=[(1, 4)], gpus=4, claim="late-gpus", node=NODE
        ),
    )
    wait_until("the late pod to be filtered", lambda: seen_by_scheduler(core, ns, "late"), 30)
    assert hold_for(
        "the gang's GPUs may not be given out", lambda: none_bound(core, ns, ["late"]), HOLD_SECONDS
    )
    wait_gone(core, ns, delete_pods(core, ns, names))  # the gang gone: its GPUs free again
    late = wait_running(core, ns, ["late"])["late"]
    assert late.node == NODE and len(late.gpus) == 4


def test_gang_that_does_not_fit_allocates_nothing(
    e2e_cluster: E2ECluster, dra_ext: Extender, ns: str
) -> None:
    """nlp has 24 GPUs: a gang of 4 x 8 waits whole, with no claim allocated."""
    core, res = e2e_cluster.core, dra.Resources(e2e_cluster.api)
    names = [f"big-{i}" for i in range(4)]
    for n in names:
        res.create("resourceclaims", dra.claim_body(f"{n}-gpus", 8), ns)
        core.create_namespaced_pod(
            ns, claim_pod(n, gang=f"{ns}/big", vc="nlp", members=[(4, 8)], gpus=8, claim=f"{n}-gpus")
        )
    wait_until("the gang to be filtered", lambda: seen_by_scheduler(core, ns, names[0]), 30)

    def violation() -> str | None:
        return none_bound(core, ns, names) or next(
            (c["metadata"]["name"] for c in res.list("resourceclaims", ns) if allocated_devices(c)), None
        )

    assert hold_for("nothing of the gang may bind or be allocated", violation, HOLD_SECONDS) >= 10


def test_deleted_pods_claim_is_released_and_its_gpus_reused(
    e2e_cluster: E2ECluster, dra_ext: Extender, ns: str
) -> None:
    core, res = e2e_cluster.core, dra.Resources(e2e_cluster.api)
    res.create("resourceclaims", dra.claim_body("a-gpus", 8), ns)
    core.create_namespaced_pod(
        ns, claim_pod("a", gang=f"{ns}/a", vc="vision", members=[(1, 8)], gpus=8, claim="a-gpus", node=NODE)
    )
    a = wait_running(core, ns, ["a"])["a"]
    check_allocation(claim_of(res, core, ns, "a"), a, uid_of(core, ns, "a"))
    wait_gone(core, ns, delete_pods(core, ns, ["a"]))
    wait_until(
        "claim a-gpus released",
        lambda: (
            not allocated_devices(res.get("resourceclaims", "a-gpus", ns))
            and not res.get("resourceclaims", "a-gpus", ns)["status"].get("reservedFor")
        ),
        30,
    )
    res.create("resourceclaims", dra.claim_body("b-gpus", 8), ns)
    core.create_namespaced_pod(
        ns, claim_pod("b", gang=f"{ns}/b", vc="vision", members=[(1, 8)], gpus=8, claim="b-gpus", node=NODE)
    )
    b = wait_running(core, ns, ["b"])["b"]
    assert b.node == NODE
    check_allocation(claim_of(res, core, ns, "b"), b, uid_of(core, ns, "b"))


def test_a_tainted_device_is_not_given_out(e2e_cluster: E2ECluster, dra_ext: Extender, ns: str) -> None:
    """A DeviceTaintRule on one GPU of a node: an 8-GPU pod pinned there waits; a 4-GPU pod gets the
    other half; without the rule the 8-GPU pod binds."""
    core, res = e2e_cluster.core, dra.Resources(e2e_cluster.api)
    rule = {
        "apiVersion": f"{dra.GROUP}/{dra.VERSION}",
        "kind": "DeviceTaintRule",
        "metadata": {"name": f"{ns}-xid"},
        "spec": {
            "deviceSelector": {"driver": dra.DRIVER, "pool": NODE, "device": dra.device_of(1)},
            "taint": {"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"},
        },
    }
    res.create("devicetaintrules", rule)
    try:
        wait_until("the tainted GPU to count bad", lambda: dra_ext.summary()["gpus"]["bad"] == 1 or None, 30)
        res.create("resourceclaims", dra.claim_body("half-gpus", 4), ns)
        core.create_namespaced_pod(
            ns,
            claim_pod(
                "half", gang=f"{ns}/half", vc="vision", members=[(1, 4)], gpus=4, claim="half-gpus", node=NODE
            ),
        )
        half = wait_running(core, ns, ["half"])["half"]
        assert half.gpus == (4, 5, 6, 7), f"GPU 1 is tainted: the other half, not {half.gpus}"
        check_allocation(claim_of(res, core, ns, "half"), half, uid_of(core, ns, "half"))
        assert dra.device_of(1) not in allocated_devices(claim_of(res, core, ns, "half"))
        wait_gone(core, ns, delete_pods(core, ns, ["half"]))
        res.create("resourceclaims", dra.claim_body("all-gpus", 8), ns)
        core.create_namespaced_pod(
            ns,
            claim_pod(
                "all", gang=f"{ns}/all", vc="vision", members=[(1, 8)], gpus=8, claim="all-gpus", node=NODE
            ),
        )
        wait_until("pod all to be filtered", lambda: seen_by_scheduler(core, ns, "all"), 30)
        assert (
            hold_for("an 8-GPU pod on a node with a tainted GPU", lambda: none_bound(core, ns, ["all"]), 3)
            >= 5
        )
    finally:
        res.delete("devicetaintrules", f"{ns}-xid")
    wait_until("the GPU to count healthy again", lambda: dra_ext.summary()["gpus"]["bad"] == 0 or None, 30)
    # kube-scheduler retries a pod the extender turned down at its next cluster event (none comes from
    # DRA objects in a profile without DynamicResources; README): a new pod is scheduled at once
    wait_gone(core, ns, delete_pods(core, ns, ["all"]))
    core.create_namespaced_pod(
        ns,
        claim_pod(
            "all2", gang=f"{ns}/all2", vc="vision", members=[(1, 8)], gpus=8, claim="all-gpus", node=NODE
        ),
    )
    again = wait_running(core, ns, ["all2"])["all2"]
    assert again.node == NODE and again.gpus == tuple(range(8))
    check_allocation(claim_of(res, core, ns, "all2"), again, uid_of(core, ns, "all2"))


def test_extended_resource_pod_is_placed_the_same_way(
    e2e_cluster: E2ECluster, dra_ext: Extender, ns: str
) -> None:
    """KEP-5004: a pod asking `nvidia.com/gpu: 4` (no claim, no topogang annotation) gets a claim made
    for it, allocated on the devices of its slot, named in its extendedResourceClaimStatus."""
    core, res = e2e_cluster.core, dra.Resources(e2e_cluster.api)
    pod = client.V1Pod.model_validate(
        {
            "metadata": {"name": "ext", "labels": {"topogang.io/virtual-cluster": "vision"}},
            "spec": {
                "schedulerName": PROFILE,
                "terminationGracePeriodSeconds": 0,
                "containers": [
                    {"name": "main", "image": "fake.invalid/train:1", "resources": {"limits": {GPU: "4"}}}
                ],
            },
        }
    )
    core.create_namespaced_pod(ns, pod)
    placed = wait_running(core, ns, ["ext"])["ext"]
    assert len(placed.gpus) == 4 and one_half(placed.gpus)
    got = core.read_namespaced_pod("ext", ns)
    assert got.status is not None and got.status.extended_resource_claim_status is not None
    ext = got.status.extended_resource_claim_status
    mappings = [(m.container_name, m.resource_name, m.request_name) for m in ext.request_mappings]
    assert mappings == [("main", GPU, "container-0-request-0")]
    claim = res.get("resourceclaims", ext.resource_claim_name, ns)
    assert claim["metadata"]["annotations"]["resource.kubernetes.io/extended-resource-claim"] == "true"
    check_allocation(claim, placed, uid_of(core, ns, "ext"), "container-0-request-0")
    name = ext.resource_claim_name
    wait_gone(core, ns, delete_pods(core, ns, ["ext"]))
    wait_until(
        "the pod's claim deleted with it", lambda: res.get("resourceclaims", name, ns) is None or None, 30
    )
    assert pods_of(core, ns) == {}
