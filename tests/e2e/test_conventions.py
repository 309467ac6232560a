"""Gangs from other schedulers' conventions, through the real kube-scheduler: a coscheduling PodGroup
and a Spark application. Their pods carry no topogang limit or annotation, only `schedulerName:
topogang`, an `nvidia.com/gpu` request and the labels their own tooling writes; the extender (in
Kubernetes mode) reads the PodGroup object, or the Spark driver pod, to learn the gang's size.

The API server gets the PodGroup CRD from tests/e2e/manifests/podgroup-crd.yaml (no coscheduling
controller runs: the extender only reads the object). VC: the label `topogang.io/virtual-cluster`.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from tests.e2e.conftest import E2ECluster, Extender, ignore_conflict
from tests.e2e.helpers import (
    VC_LABEL,
    assert_whole_gang,
    delete_pods,
    gang_of,
    gpu_collisions,
    gpu_pod,
    hold_for,
    none_bound,
    racks,
    seen_by_scheduler,
    submit_gang,
    wait_gone,
    wait_running,
    wait_until,
)

pytestmark = pytest.mark.e2e

CRD = Path(__file__).parent / "manifests" / "podgroup-crd.yaml"
PG_GROUP, PG_VERSION, PG_PLURAL = "scheduling.x-k8s.io", "v1alpha1", "podgroups"
PG_LABEL = "scheduling.x-k8s.io/pod-group"
SPARK_APP, SPARK_ROLE = "spark-app-selector", "spark-role"
HOLD_SECONDS = 5.0


@pytest.fixture(scope="module")
def podgroup_crd(e2e_cluster: E2ECluster) -> str:
    """The PodGroup CRD, created once and served (Established) before a test uses it."""
    doc = yaml.safe_load(CRD.read_text(encoding="utf-8"))
    ext = client.ApiextensionsV1Api(e2e_cluster.api)
    ignore_conflict(
        ext.create_custom_resource_definition, client.V1CustomResourceDefinition.model_validate(doc)
    )
    name = str(doc["metadata"]["name"])

    def established() -> bool:
        crd = ext.read_custom_resource_definition(name)
        conditions = (crd.status.conditions if crd.status else None) or []
        return any(c.type == "Established" and c.status == "True" for c in conditions)

    wait_until(f"CRD {name} to be established", established, 30)
    return name


def ledger_gangs(extender: Extender, ns: str) -> list[dict[str, Any]]:
    got = extender.get(f"/v1/gangs?namespace={ns}")
    items = got["items"]
    assert isinstance(items, list)
    return items


def test_coscheduling_podgroup_gang_binds_whole_under_one_rack(
    e2e_cluster: E2ECluster, extender: Extender, gang_ns: str, podgroup_crd: str
) -> None:
    """A PodGroup with minMember 4 and four 8-GPU pods labelled with it: one gang of four, read from
    the PodGroup object (the pods state no size anywhere), placed whole on one rack's four nodes."""
    core = e2e_cluster.core
    custom = client.CustomObjectsApi(e2e_cluster.api)
    custom.create_namespaced_custom_object(
        PG_GROUP,
        PG_VERSION,
        gang_ns,
        PG_PLURAL,
        {
            "apiVersion": f"{PG_GROUP}/{PG_VERSION}",
            "kind": "PodGroup",
            "metadata": {"name": "allreduce"},
            "spec": {"minMember": 4, "scheduleTimeoutSeconds": 120},
        },
    )
    names = [f"allreduce-{i}" for i in range(4)]
    for n in names:
        core.create_namespaced_pod(gang_ns, gpu_pod(n, 8, labels={PG_LABEL: "allreduce", VC_LABEL: "vision"}))
    pods = wait_running(core, gang_ns, names)
    assert_whole_gang(pods, 8)
    nodes = sorted(str(p.node) for p in pods.values())
    assert len(set(nodes)) == 4, f"8-GPU members must be on 4 distinct nodes: {nodes}"
    rack = racks(e2e_cluster.env["TOPOLOGY"])
    assert len({rack[n] for n in nodes}) == 1, f"not under one rack: {[(n, rack[n]) for n in nodes]}"
    assert {gang_of(p) for p in pods.values()} == {f"{gang_ns}/allreduce"}
    assert not gpu_collisions(core)

    gangs = ledger_gangs(extender, gang_ns)
    assert [(g["gang"]["gang"], g["expected"], g["bound"]) for g in gangs] == [(f"{gang_ns}/allreduce", 4, 4)]
    assert sorted(gangs[0]["placement"]["nodes"]) == nodes
    assert gangs[0]["placement"]["virtualCluster"] == "vision"


def test_spark_driver_binds_only_when_the_whole_application_fits(
    e2e_cluster: E2ECluster, extender: Extender, gang_ns: str
) -> None:
    """A Spark application (driver 4 GPUs, `spark.executor.instances=2` executors of 8 GPUs, 20 GPUs on
    3 nodes) while vision's rack is taken (16 GPUs left): the driver must not bind. Once the blocker
    goes, the driver binds with the whole application reserved; the executors, created afterwards by
    the driver as Spark does (owner reference, no conf of their own), take the reserved slots."""
    core = e2e_cluster.core
    app = "spark-3f2a9c"
    labels = {SPARK_APP: app, VC_LABEL: "vision"}
    blocker = submit_gang(core, gang_ns, "blocker", 4, 8, "vision")
    wait_running(core, gang_ns, blocker)

    conf = ["--conf", "spark.executor.instances=2", "--conf", "spark.executor.resource.gpu.amount=8"]
    driver = core.create_namespaced_pod(
        gang_ns,
        gpu_pod(
            "app-driver",
            4,
            labels={**labels, SPARK_ROLE: "driver"},
            args=["driver", "--class", "Main", *conf],
        ),
    )
    wait_until("the driver to be filtered", lambda: seen_by_scheduler(core, gang_ns, "app-driver"), 30)
    checks = hold_for(
        "20 GPUs do not fit in vision's 16: the driver must not bind",
        lambda: none_bound(core, gang_ns, ["app-driver"]),
        HOLD_SECONDS,
    )
    assert checks >= 10
    waiting = extender.get(f"/v1/gangs/{gang_ns}/{app}")
    assert (waiting["phase"], waiting["bound"], waiting["placement"]) == ("Pending", 0, None), waiting

    wait_gone(core, gang_ns, delete_pods(core, gang_ns, blocker))
    drv = wait_running(core, gang_ns, ["app-driver"])["app-driver"]
    # The driver bound alone, but with every executor's slot reserved.
    reserved = extender.get(f"/v1/gangs/{gang_ns}/{app}")
    assert (reserved["expected"], reserved["bound"]) == (3, 1), reserved
    slots = sorted((len(m["gpus"]), m["state"]) for m in reserved["members"])
    assert slots == [(4, "Bound"), (8, "Free"), (8, "Free")], reserved["members"]
    reserved_nodes = set(reserved["placement"]["nodes"])
    assert drv.node in reserved_nodes

    executors = [f"app-exec-{i}" for i in (1, 2)]
    for n in executors:
        core.create_namespaced_pod(
            gang_ns, gpu_pod(n, 8, labels={**labels, SPARK_ROLE: "executor"}, owner=driver)
        )
    pods = wait_running(core, gang_ns, executors)
    assert_whole_gang({"app-driver": drv}, 4)
    assert_whole_gang(pods, 8)
    everyone = {**pods, "app-driver": drv}
    assert {gang_of(p) for p in everyone.values()} == {f"{gang_ns}/{app}"}
    assert {str(p.node) for p in everyone.values()} <= reserved_nodes
    rack = racks(e2e_cluster.env["TOPOLOGY"])
    assert len({rack[str(p.node)] for p in everyone.values()}) == 1, {n: p.node for n, p in everyone.items()}
    assert not gpu_collisions(core)

    deadline = time.monotonic() + 10
    while True:  # the ledger sees the executors' binds a moment after the pods show them
        gangs = ledger_gangs(extender, gang_ns)
        summary = [(g["gang"]["gang"], g["expected"], g["bound"]) for g in gangs]
        if summary == [(f"{gang_ns}/{app}", 3, 3)] or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert summary == [(f"{gang_ns}/{app}", 3, 3)], gangs
