"""The e2e control plane itself: apiserver, KWOK GPU nodes, pods KWOK makes Running, the scheduler profile.

These tests need no extender: they check the harness that the extender's e2e tests will run on.
"""

from __future__ import annotations

import ipaddress
import json
import ssl
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from config.load import load_config
from tests.e2e.conftest import E2ECluster
from tests.e2e.helpers import wait_until
from topology.layout import expand, type_infos

pytestmark = pytest.mark.e2e

GPU = "nvidia.com/gpu"


def https_get(url: str, env: dict[str, str], *, client_cert: bool = True, verify: bool = True) -> str:
    """GET with the e2e CA and (optionally) the admin client certificate."""
    if verify:
        ctx = ssl.create_default_context(cafile=env["CA_CERT"])
    else:  # kube-scheduler serves an in-memory self-signed certificate
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if client_cert:
        ctx.load_cert_chain(env["CLIENT_CERT"], env["CLIENT_KEY"])
    with urllib.request.urlopen(url, context=ctx, timeout=10) as resp:
        body: bytes = resp.read()
    return body.decode()


def expected_nodes(topology: str) -> dict[str, int]:
    """Node name -> GPUs, straight from the topology config (independent of scripts/e2e/fake_nodes.py)."""
    spec = load_config(topology).spec
    types = type_infos(spec)
    return {
        cell.node: types[cell.cell_type].leaf_count
        for cell in expand(spec, types).cells
        if types[cell.cell_type].is_node_level and cell.node is not None
    }


def key(obj: dict[str, Any], name: str) -> Any:
    """obj[name], matching the key case-insensitively."""
    return next(v for k, v in obj.items() if k.lower() == name.lower())


def scheduler_config(cluster: E2ECluster) -> dict[str, Any]:
    loaded = yaml.safe_load((cluster.workdir / "scheduler.yaml").read_text(encoding="utf-8"))
    assert isinstance(loaded, dict)
    return loaded


@pytest.fixture
def namespace(e2e_cluster: E2ECluster) -> Iterator[str]:
    """A fresh namespace per test. Without kube-controller-manager a deleted namespace never finishes
    terminating, so only the pods are deleted afterwards (KWOK's pod-delete stage completes that)."""
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    core = e2e_cluster.core
    core.create_namespace(client.V1Namespace.model_validate({"metadata": {"name": name}}))
    yield name
    for pod in core.list_namespaced_pod(name).items:
        if pod.metadata and pod.metadata.name:
            core.delete_namespaced_pod(pod.metadata.name, name, grace_period_seconds=0)


def make_pod(
    name: str, *, node: str | None = None, scheduler: str | None = None, limits: dict[str, str]
) -> Any:
    spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": 0,
        # Never pulled: KWOK only fakes the container status.
        "containers": [{"name": "main", "image": "fake.invalid/train:1", "resources": {"limits": limits}}],
    }
    if node is not None:
        spec["nodeName"] = node
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    return client.V1Pod.model_validate({"metadata": {"name": name}, "spec": spec})


def running_pod(core: client.CoreV1Api, name: str, ns: str) -> client.V1Pod | None:
    pod = core.read_namespaced_pod(name, ns)
    if pod.status and pod.status.phase == "Running" and pod.status.pod_ip:
        return pod
    return None


def test_apiserver_is_ready_and_serves_the_built_version(e2e_cluster: E2ECluster) -> None:
    env = e2e_cluster.env
    assert https_get(f"{e2e_cluster.api_url}/readyz", env) == "ok"
    version = client.VersionApi(e2e_cluster.api).get_code()
    assert version.git_version == env["K8S_VERSION"]
    names = {ns.metadata.name for ns in e2e_cluster.core.list_namespace().items if ns.metadata}
    assert {"default", "kube-system", "kube-node-lease"} <= names
    assert e2e_cluster.kubeconfig.is_file()


def test_kwok_gpu_nodes_are_ready_with_gpu_capacity(e2e_cluster: E2ECluster) -> None:
    expected = expected_nodes(e2e_cluster.env["TOPOLOGY"])
    assert expected, "the topology config has no node-level cells"
    nodes = {n.metadata.name: n for n in e2e_cluster.core.list_node().items if n.metadata and n.metadata.name}
    assert sorted(nodes) == sorted(expected)
    for name, gpus in expected.items():
        node = nodes[name]
        assert node.status is not None and node.spec is not None
        ready = [c.status for c in node.status.conditions or [] if c.type == "Ready"]
        assert ready == ["True"], f"{name}: Ready={ready}"
        assert (node.status.capacity or {}).get(GPU) == str(gpus)
        assert (node.status.allocatable or {}).get(GPU) == str(gpus)
        # TaintNodesByCondition is disabled (no node controller would ever lift its not-ready taint).
        assert not node.spec.taints, f"{name}: unexpected taints {node.spec.taints}"


def test_pod_with_node_name_runs_with_a_pod_ip(e2e_cluster: E2ECluster, namespace: str) -> None:
    core = e2e_cluster.core
    node = core.read_node(min(expected_nodes(e2e_cluster.env["TOPOLOGY"])))
    assert node.metadata is not None and node.metadata.name and node.spec and node.spec.pod_cidr
    core.create_namespaced_pod(namespace, make_pod("direct", node=node.metadata.name, limits={GPU: "8"}))
    pod = wait_until("pod Running with an IP", lambda: running_pod(core, "direct", namespace))
    assert pod.status is not None and pod.status.pod_ip and pod.spec is not None
    assert pod.spec.node_name == node.metadata.name
    assert ipaddress.ip_address(pod.status.pod_ip) in ipaddress.ip_network(node.spec.pod_cidr)
    assert node.status is not None
    internal = [a.address for a in node.status.addresses or [] if a.type == "InternalIP"]
    assert pod.status.host_ip in internal

    core.delete_namespaced_pod("direct", namespace, grace_period_seconds=0)

    def gone() -> bool:
        try:
            core.read_namespaced_pod("direct", namespace)
        except ApiException as exc:
            return bool(exc.status == 404)
        return False

    wait_until("pod deleted (KWOK pod-delete stage)", gone)


def test_kube_scheduler_is_healthy_with_the_topogang_profile(e2e_cluster: E2ECluster) -> None:
    env = e2e_cluster.env
    sched = f"https://127.0.0.1:{env['SCHED_PORT']}"
    assert https_get(f"{sched}/healthz", env, client_cert=False, verify=False) == "ok"
    # /configz needs authn+authz: the admin cert (system:masters) is delegated to the apiserver. It shows the
    # internal config type, whose JSON keys are Go field names (URLPrefix, not urlPrefix): ignore case.
    live = json.loads(https_get(f"{sched}/configz", env, verify=False))["componentconfig"]
    names = [key(p, "schedulerName") for p in key(live, "profiles")]
    assert any("topogang" in n for n in names), names
    assert names == [p["schedulerName"] for p in scheduler_config(e2e_cluster)["profiles"]]
    assert [key(e, "urlPrefix") for e in key(live, "extenders")] == [env["EXTENDER_URL"]]
    assert key(key(live, "clientConnection"), "kubeconfig") == str(e2e_cluster.kubeconfig)
    source = (e2e_cluster.workdir / "scheduler.yaml").read_text(encoding="utf-8").splitlines()[0]
    print(f"kube-scheduler profiles {names}; {source}")


def _topogang_profile(cluster: E2ECluster) -> str:
    names = [str(p["schedulerName"]) for p in scheduler_config(cluster)["profiles"]]
    return next(n for n in names if "topogang" in n)


def test_unmanaged_pod_is_scheduled_and_runs(e2e_cluster: E2ECluster, namespace: str) -> None:
    """kube-scheduler skips an extender for pods that request none of its managedResources; with no
    extender running, such a pod must still be scheduled (DefaultBinder) and made Running by KWOK."""
    extenders = scheduler_config(e2e_cluster).get("extenders") or []
    if not all(e.get("managedResources") for e in extenders):
        pytest.skip("an extender without managedResources is called for every pod; nothing to check here")
    managed = {r["name"] for e in extenders for r in e.get("managedResources") or []}
    limits = {"cpu": "1"} if GPU in managed else {"cpu": "1", GPU: "1"}
    core = e2e_cluster.core
    core.create_namespaced_pod(
        namespace, make_pod("plain", scheduler=_topogang_profile(e2e_cluster), limits=limits)
    )
    pod = wait_until("scheduled pod Running with an IP", lambda: running_pod(core, "plain", namespace))
    assert pod.spec is not None and pod.spec.node_name in expected_nodes(e2e_cluster.env["TOPOLOGY"])


def test_managed_pod_waits_for_the_extender(e2e_cluster: E2ECluster, namespace: str) -> None:
    """A pod requesting the extender's managed resource is sent to EXTENDER_URL (nothing listens there in
    this test), so it stays Pending with the scheduler's error naming that URL: the extender is wired in.
    It runs before the first test that starts the session's extender (files run in name order:
    test_conventions, test_reload_confirm, ... come after this file)."""
    extenders = scheduler_config(e2e_cluster).get("extenders") or []
    managed = [r["name"] for e in extenders for r in e.get("managedResources") or []]
    if not managed:
        pytest.skip("no managedResources in the scheduler config")
    core = e2e_cluster.core
    core.create_namespaced_pod(
        namespace,
        make_pod("gang", scheduler=_topogang_profile(e2e_cluster), limits={managed[0]: "1", GPU: "1"}),
    )
    host_port = e2e_cluster.env["EXTENDER_URL"].split("://", 1)[1].split("/", 1)[0]

    def failed_on_extender() -> str | None:
        for ev in core.list_namespaced_event(namespace).items:
            obj = ev.involved_object
            if obj is not None and obj.name == "gang" and host_port in (ev.message or ""):
                return ev.message
        return None

    message = wait_until(f"a scheduling event naming {host_port}", failed_on_extender)
    print(f"scheduler event: {message}")
    pod = core.read_namespaced_pod("gang", namespace)
    assert pod.status is not None and pod.status.phase == "Pending", message
    assert pod.spec is not None and not pod.spec.node_name
    assert Path(e2e_cluster.kubeconfig).is_file()
