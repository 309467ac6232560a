"""topogang is installed through its Helm chart (`helm install`, tests/e2e/chart.py): every object the chart
renders is in the API server, and the session's extender runs as the chart's Deployment says (its Lease,
its config). (Named to run after test_control_plane, whose first tests need no extender running.)"""

from __future__ import annotations

import urllib.request
from typing import Any

import pytest
from kubernetes import client
from kubernetes.dynamic import DynamicClient

from tests.e2e.conftest import E2ECluster, Extender

pytestmark = pytest.mark.e2e


def test_every_rendered_object_is_installed(e2e_cluster: E2ECluster) -> None:
    dyn = DynamicClient(e2e_cluster.api)  # type: ignore[no-untyped-call]
    kinds = set()
    for doc in e2e_cluster.chart.docs:
        meta = doc["metadata"]
        api = dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        got: Any = api.get(name=meta["name"], namespace=meta.get("namespace"))
        labels = got.to_dict()["metadata"].get("labels") or {}
        assert (meta.get("labels") or {}).items() <= labels.items(), f"{doc['kind']} {meta['name']}"
        kinds.add(doc["kind"])
    assert {"Namespace", "CustomResourceDefinition", "ClusterRole", "Role", "ServiceAccount"} <= kinds
    assert {"ConfigMap", "Service", "Deployment"} <= kinds


def test_the_extender_runs_the_charts_args_leader_election_and_config(
    e2e_cluster: E2ECluster, extender: Extender
) -> None:
    chart = e2e_cluster.chart
    (container,) = chart.extender["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    lease_name = args[args.index("--lease-name") + 1]
    lease: Any = client.CoordinationV1Api(e2e_cluster.api).read_namespaced_lease(lease_name, chart.namespace)
    assert lease.spec.holder_identity == extender.env["POD_NAME"]
    with urllib.request.urlopen(f"{extender.url}/metrics", timeout=10) as r:
        assert "topogang_leader 1.0" in r.read().decode()
    config = extender.argv[extender.argv.index("--config") + 1]
    cm = chart.one("ConfigMap", "topogang-config")
    with open(config, encoding="utf-8") as f:
        assert f.read() == cm["data"]["config.yaml"]
