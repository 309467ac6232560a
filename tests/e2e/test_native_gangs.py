"""Kubernetes' own gangs (the Workload/PodGroup API, beta in 1.37) through the real kube-scheduler,
with the GenericWorkload and TopologyAwareWorkloadScheduling gates on (scripts/e2e/versions.sh).

Each gang is a `scheduling.k8s.io/v1beta1` PodGroup with `schedulingPolicy.gang.minCount`, and pods
that name it in `spec.schedulingGroup.podGroupName`: no topogang limit or annotation, only the
topogang profile, an `nvidia.com/gpu` request and the VC label. kube-scheduler queues such pods as
one PodGroup and runs its PodGroup cycle for them; these tests show that the cycle still calls the
extender's filter, prioritize and bind for each pod, and that topogang alone decides the gang (the
profile turns kube-scheduler's own gang and topology plugins off: deploy/kube-scheduler-config.yaml).
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from kubernetes import client

from tests.e2e.conftest import E2ECluster, Extender, priority_classes
from tests.e2e.helpers import (
    GPU,
    PROFILE,
    VC_LABEL,
    assert_whole_gang,
    delete_pods,
    gang_of,
    gpu_collisions,
    hold_for,
    http_text,
    none_bound,
    pod_events,
    pods_of,
    racks,
    seen_by_scheduler,
    submit_gang,
    wait_gone,
    wait_running,
    wait_until,
)

pytestmark = pytest.mark.e2e

RACK_KEY = "topology.kubernetes.io/rack"  # names the example config's A100-RACK level
HOLD_SECONDS = 5.0
LOW, HIGH = "e2e-native-low", "e2e-native-high"


@pytest.fixture(autouse=True)
def native_gangs(e2e_cluster: E2ECluster) -> None:
    if e2e_cluster.env.get("NATIVE_GANGS") != "1":
        pytest.skip(
            f"Kubernetes {e2e_cluster.env.get('K8S_VERSION')} runs without the Workload/PodGroup gates "
            "(scripts/e2e/versions.sh turns them on for 1.37)"
        )


def podgroup(
    cluster: E2ECluster,
    ns: str,
    name: str,
    min_count: int,
    *,
    topology_key: str | None = None,
    priority_class: str | None = None,
) -> None:
    spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": min_count}}}
    if topology_key is not None:
        spec["schedulingConstraints"] = {"topology": [{"key": topology_key}]}
    if priority_class is not None:
        spec["priorityClassName"] = priority_class
    body = client.V1beta1PodGroup.model_validate(
        {
            "apiVersion": "scheduling.k8s.io/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": name},
            "spec": spec,
        }
    )
    client.SchedulingV1beta1Api(cluster.api).create_namespaced_pod_group(ns, body)


def members(
    core: client.CoreV1Api,
    ns: str,
    group: str,
    pods: int,
    gpus: int,
    vc: str,
    priority_class: str | None = None,
) -> list[str]:
    """`pods` pods of `gpus` GPUs naming PodGroup `group`, as a workload controller writes them."""
    names = [f"{group}-{i}" for i in range(pods)]
    for n in names:
        spec: dict[str, Any] = {
            "schedulerName": PROFILE,
            "terminationGracePeriodSeconds": 0,
            "schedulingGroup": {"podGroupName": group},
            "containers": [
                {"name": "main", "image": "fake.invalid/train:1", "resources": {"limits": {GPU: str(gpus)}}}
            ],
        }
        if priority_class is not None:
            spec["priorityClassName"] = priority_class
        core.create_namespaced_pod(
            ns, client.V1Pod.model_validate({"metadata": {"name": n, "labels": {VC_LABEL: vc}}, "spec": spec})
        )
    return names


def decisions(extender: Extender, verb: str) -> float:
    """How many times the extender answered `verb` (every outcome), from its /metrics."""
    text = http_text(f"{extender.url}/metrics")
    pattern = rf'^topogang_extender_decisions_total\{{[^}}]*verb="{verb}"[^}}]*\}} ([0-9.e+]+)$'
    return sum(float(m.group(1)) for m in re.finditer(pattern, text, re.M))


NATIVE_GANG_PLUGINS = ("GangScheduling", "TopologyPlacementGenerator", "PodGroupPodsCount")


def test_the_topogang_profile_runs_without_kubernetes_own_gang_plugins(e2e_cluster: E2ECluster) -> None:
    """One owner per gang: kube-scheduler starts the topogang profile (the only one here) with its
    gang and topology plugins off at every extension point, though the gates that add them are on."""
    log = e2e_cluster.log("kube-scheduler")
    started = re.findall(r'"the scheduler starts to work with those plugins" Plugins=(\{.*\})$', log, re.M)
    assert started, "kube-scheduler logged no plugin list"
    for name in NATIVE_GANG_PLUGINS:
        assert f'"Name":"{name}"' not in started[-1], f"{name} runs in the topogang profile"
    assert "GenericWorkload is enabled, but GangScheduling plugin is not set" in log


def podgroup_cycle_done(cluster: E2ECluster, ns: str, group: str) -> bool:
    """kube-scheduler's PodGroup cycle (not its pod-by-pod one) scheduled the group."""
    line = rf'"Successfully scheduled a pod group" .*podGroup="{re.escape(ns)}/{re.escape(group)}"'
    return re.search(line, cluster.log("kube-scheduler")) is not None


# ------------------------------------------------------------------------------------------ 1. placement
def test_podgroup_gang_binds_whole_under_one_rack_through_the_extender(
    e2e_cluster: E2ECluster, extender: Extender, gang_ns: str
) -> None:
    """A PodGroup of four 8-GPU pods that must share a rack (KEP-5732's topology key): kube-scheduler's
    PodGroup cycle sends every pod through the extender's filter, prioritize and bind, and topogang
    places the gang whole under one rack."""
    core = e2e_cluster.core
    before = {v: decisions(extender, v) for v in ("filter", "prioritize", "bind")}
    podgroup(e2e_cluster, gang_ns, "allreduce", 4, topology_key=RACK_KEY)
    names = members(core, gang_ns, "allreduce", 4, 8, "vision")
    pods = wait_running(core, gang_ns, names)
    assert_whole_gang(pods, 8)
    nodes = sorted(str(p.node) for p in pods.values())
    assert len(set(nodes)) == 4, f"8-GPU members must be on 4 distinct nodes: {nodes}"
    rack = racks(e2e_cluster.env["TOPOLOGY"])
    assert len({rack[n] for n in nodes}) == 1, f"not under one rack: {[(n, rack[n]) for n in nodes]}"
    # bind info is written only by the extender's bind: kube-scheduler's own binder was not used
    assert {gang_of(p) for p in pods.values()} == {f"{gang_ns}/allreduce"}
    assert not gpu_collisions(core)
    wait_until(
        "the PodGroup cycle to log the group", lambda: podgroup_cycle_done(e2e_cluster, gang_ns, "allreduce")
    )
    after = {v: decisions(extender, v) for v in ("filter", "prioritize", "bind")}
    assert after["filter"] - before["filter"] >= 4, (before, after)
    assert after["prioritize"] - before["prioritize"] >= 1, (before, after)
    assert after["bind"] - before["bind"] == 4, (before, after)
    ledger = extender.get(f"/v1/gangs/{gang_ns}/allreduce")
    assert (ledger["expected"], ledger["bound"]) == (4, 4), ledger


# ------------------------------------------------------------------------------------------ 2. atomicity
def test_podgroup_gang_larger_than_free_capacity_binds_nothing_until_it_fits(
    e2e_cluster: E2ECluster, extender: Extender, gang_ns: str
) -> None:
    """vision (48 GPUs) holds a 32-GPU gang; a PodGroup of three 8-GPU pods (24 > 16 free) binds
    nothing, though two of its pods would fit, until the blocker goes; then it binds whole."""
    core = e2e_cluster.core
    blocker = submit_gang(core, gang_ns, "blocker", 4, 8, "vision")
    wait_running(core, gang_ns, blocker)
    podgroup(e2e_cluster, gang_ns, "wide", 3)
    names = members(core, gang_ns, "wide", 3, 8, "vision")
    wait_until("the PodGroup's pods to be filtered", lambda: seen_by_scheduler(core, gang_ns, names[0]), 30)
    checks = hold_for(
        "24 GPUs do not fit in 16: nothing may bind", lambda: none_bound(core, gang_ns, names), HOLD_SECONDS
    )
    assert checks >= 10
    usage = extender.summary()["virtualClusters"]["vision"]
    assert usage["quota"] - usage["used"] == 16, f"two vision nodes must stay free for this test: {usage}"

    wait_gone(core, gang_ns, delete_pods(core, gang_ns, blocker))
    pods = wait_running(core, gang_ns, names)
    assert_whole_gang(pods, 8)
    assert {gang_of(p) for p in pods.values()} == {f"{gang_ns}/wide"}
    assert not gpu_collisions(core)


# ------------------------------------------------------------------------------------------ 3. preemption
def test_higher_priority_podgroup_gang_preempts_a_lower_one_whole(
    e2e_cluster: E2ECluster, extender: Extender, gang_ns: str
) -> None:
    """nlp (3 nodes) is full with a 3-pod PodGroup of priority 10; a 2-pod PodGroup of priority 100
    evicts all three (the victim is the gang, not just the pods in its way) and binds whole. The
    gangs' priorities come from their PriorityClasses, as admission writes them."""
    core = e2e_cluster.core
    priority_classes(e2e_cluster, {LOW: 10, HIGH: 100})
    podgroup(e2e_cluster, gang_ns, "low", 3, priority_class=LOW)
    low = members(core, gang_ns, "low", 3, 8, "nlp", priority_class=LOW)
    assert_whole_gang(wait_running(core, gang_ns, low), 8)

    podgroup(e2e_cluster, gang_ns, "high", 2, priority_class=HIGH)
    high = members(core, gang_ns, "high", 2, 8, "nlp", priority_class=HIGH)
    high_pods = wait_running(core, gang_ns, high, timeout=90)
    assert_whole_gang(high_pods, 8)
    left = [n for n in low if n in pods_of(core, gang_ns, low)]
    assert not left, f"low-priority members not evicted: {left}"
    log = extender.log()
    for n in low:
        assert re.search(
            rf"evicting pod {gang_ns}/{n} .*\({gang_ns}/high\) \[PreemptionByScheduler\]", log
        ), f"{n} was not evicted by topogang's preemption of gang {gang_ns}/high"
    assert not gpu_collisions(core)


# ------------------------------------------------------------------------------------------ 4. bad constraint
def test_podgroup_topology_key_that_names_no_level_is_rejected_with_a_reason(
    e2e_cluster: E2ECluster, extender: Extender, gang_ns: str
) -> None:
    """A zone key: the example cluster has nodes and racks, no zones. No pod binds, and the pod's
    events say which field is wrong and which levels there are."""
    core = e2e_cluster.core
    podgroup(e2e_cluster, gang_ns, "zoned", 2, topology_key="topology.kubernetes.io/zone")
    names = members(core, gang_ns, "zoned", 2, 8, "vision")

    def reason() -> str | None:
        return next(
            (e for e in pod_events(core, gang_ns, names[0]) if "cannot be a required level" in e), None
        )

    said = wait_until("an event naming the bad topology key", reason, 30)
    assert "schedulingConstraints.topology[0].key" in said and "A100-NODE, A100-RACK" in said, said
    assert none_bound(core, gang_ns, names) is None
