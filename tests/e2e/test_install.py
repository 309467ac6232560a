"""topogang is installed through its Helm chart (`helm install`, tests/e2e/chart.py): every object the chart
renders is in the API server, and the session's extender runs as the chart's Deployment says (its Lease,
its config). (Named to run after test_control_plane, whose first tests need no extender running.)"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
import uuid
from typing import Any

import pytest
from kubernetes import client
from kubernetes.dynamic import DynamicClient

from scripts import manifests
from tests.e2e import chart
from tests.e2e.conftest import E2ECluster, Extender
from tests.e2e.helpers import ENABLE, tls_for

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
    assert extender.url.startswith("https://")  # the chart's default: reads over TLS
    with urllib.request.urlopen(f"{extender.url}/metrics", timeout=10, context=tls_for(extender.url)) as r:
        assert "topogang_leader 1.0" in r.read().decode()
    config = extender.argv[extender.argv.index("--config") + 1]
    cm = chart.one("ConfigMap", "topogang-config")
    with open(config, encoding="utf-8") as f:
        assert f.read() == cm["data"]["config.yaml"]


def _post(url: str, body: dict[str, Any], ca: str, cert: tuple[str, str] | None) -> tuple[int, Any]:
    ctx = ssl.create_default_context(cafile=ca)
    ctx.check_hostname = (
        False  # the certificate names the Service (…svc), the test calls 127.0.0.1; chain checked
    )
    if cert is not None:
        ctx.load_cert_chain(*cert)
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=10, context=ctx) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_only_kube_schedulers_certificate_reaches_the_verbs(
    e2e_cluster: E2ECluster, extender: Extender
) -> None:
    """The chart's defaults: the verbs over mutual TLS, and of the certificates its CA signed only
    kube-scheduler's passes; the extender's own serving certificate (same CA, another name) gets 403,
    no certificate gets no connection. A pod the API server does not have is answered as unknown."""
    door = extender.door
    names = door[door.index("--verbs-allowed-names") + 1].split(",")
    ca = door[door.index("--client-ca") + 1]
    other = (door[door.index("--verbs-tls-cert") + 1], door[door.index("--verbs-tls-key") + 1])
    tls_dir = chart.scheduler_tls_dir(e2e_cluster.chart, e2e_cluster.core, e2e_cluster.workdir)
    assert tls_dir is not None and names == ["topogang-scheduler"]
    scheduler = (str(tls_dir / "tls.crt"), str(tls_dir / "tls.key"))
    url = e2e_cluster.env["EXTENDER_URL"]
    assert url.startswith("https://") and url.endswith(f":{extender.verbs_port}/v1/extender")
    pod = {
        "metadata": {"uid": str(uuid.uuid4()), "name": "forged", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {ENABLE: "1"}}}]},
    }
    body = {"Pod": pod, "Nodes": None, "NodeNames": ["a100-r1-n1"]}
    status, got = _post(f"{url}/filter", body, ca, scheduler)
    assert status == 200 and "not known from the API server" in got["Error"] and not got["NodeNames"]
    status, got = _post(f"{url}/filter", body, ca, other)
    assert status == 403 and "topogang-extender.topogang-system.svc" in got["Error"]
    with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
        _post(f"{url}/filter", body, ca, None)
    # and the read port (HTTPS, the chart's read certificate) has no verbs
    req = urllib.request.Request(
        f"{extender.url}/v1/extender/filter",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},  # as kube-scheduler sends it (else a 415 first)
    )
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=10, context=tls_for(extender.url))
    assert err.value.code == 404


def test_helm_upgrade_keeps_the_charts_certificates(e2e_cluster: E2ECluster) -> None:
    """The chart's certificates are made once: an upgrade reads them back (`lookup`), so kube-scheduler
    and the extender keep trusting each other, and neither Deployment rolls."""
    core, ns = e2e_cluster.core, e2e_cluster.chart.namespace
    names = ("topogang-verbs-server", "topogang-verbs-client", "topogang-read-tls")

    def state() -> tuple[Any, ...]:
        apps = client.AppsV1Api(e2e_cluster.api)
        pods: list[Any] = [
            apps.read_namespaced_deployment(d, ns).spec.template for d in (chart.EXTENDER, chart.SCHEDULER)
        ]
        sums = [(p.metadata.annotations or {}).get("checksum/verbs-tls") for p in pods]
        return tuple(core.read_namespaced_secret(n, ns).data for n in names), tuple(sums)

    before = state()
    assert all(before[1]) and len(set(before[1])) == 1
    helm = manifests.helm_binary()
    assert helm is not None
    manifests.helm(helm, "upgrade", chart.RELEASE, str(manifests.CHART), "--reuse-values",
                   "--kubeconfig", str(e2e_cluster.kubeconfig), "--timeout", "2m")  # fmt: skip
    assert state() == before
