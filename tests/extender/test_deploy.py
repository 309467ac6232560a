"""The deploy/ manifests and the Dockerfile agree with the extender and the protocol's rules."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from extender.cli import parse_listen
from extender.gangs import reservation_objects as rsv
from extender.gangs.podspec import ENABLE_RESOURCES
from extender.http.doors import ROUTES

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]


def extender_objects() -> tuple[dict[str, Any], dict[str, Any]]:
    """The extender's Deployment and Service (in helm's install order in the file: Service first; the
    NetworkPolicy of its verbs port after them)."""
    kinds = {d["kind"]: d for d in docs("extender.yaml")}
    assert sorted(kinds) == ["Deployment", "NetworkPolicy", "Service"]
    return kinds["Deployment"], kinds["Service"]


def test_kube_scheduler_configuration_follows_the_protocol_rules() -> None:
    (cfg,) = docs("kube-scheduler-config.yaml")
    assert (cfg["apiVersion"], cfg["kind"]) == (
        "kubescheduler.config.k8s.io/v1",
        "KubeSchedulerConfiguration",
    )
    assert cfg["percentageOfNodesToScore"] == 100
    assert [p["schedulerName"] for p in cfg["profiles"]] == ["topogang"]
    le = cfg["leaderElection"]
    assert not le["leaderElect"] or le["resourceName"] != "kube-scheduler"
    (ext,) = cfg["extenders"]
    assert ext["urlPrefix"].endswith("/v1/extender")
    assert (ext["filterVerb"], ext["prioritizeVerb"], ext["preemptVerb"], ext["bindVerb"]) == (
        "filter",
        "prioritize",
        "preempt",
        "bind",
    )
    assert ext["weight"] > 0 and ext["nodeCacheCapable"] is True and ext["ignorable"] is False
    assert ext["urlPrefix"].startswith("https://") and ext["enableHTTPS"] is True  # mutual TLS, by default
    assert set(ext["tlsConfig"]) == {"serverName", "caFile", "certFile", "keyFile"}
    assert ext["httpTimeout"] == "5s"
    managed = {r["name"]: r["ignoredByScheduler"] for r in ext["managedResources"]}
    assert managed == {**dict.fromkeys(ENABLE_RESOURCES, True), "nvidia.com/gpu": True}


def test_the_service_behind_the_url_prefix_exists() -> None:
    (cfg,) = docs("kube-scheduler-config.yaml")
    host = cfg["extenders"][0]["urlPrefix"].split("//", 1)[1].split("/", 1)[0]
    name, ns = host.split(".")[:2]
    port = int(host.rsplit(":", 1)[1])
    deployment, service = extender_objects()
    assert (service["kind"], service["metadata"]["name"], service["metadata"]["namespace"]) == (
        "Service",
        name,
        ns,
    )
    ports = {p["name"]: p["port"] for p in service["spec"]["ports"]}
    assert ports["verbs"] == port  # kube-scheduler calls the verbs' own port, never the read port
    (c,) = deployment["spec"]["template"]["spec"]["containers"]
    listen = c["args"][c["args"].index("--verbs-listen") + 1]
    container_ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert parse_listen(listen, "0.0.0.0")[1] == container_ports["verbs"] == port
    reads = c["args"][c["args"].index("--listen") + 1]
    assert parse_listen(reads, "0.0.0.0")[1] == container_ports["http"] == ports["http"] != port
    assert "--kube" in c["args"] and "--client-ca" in c["args"] and "--verbs-allowed-names" in c["args"]


def test_extender_deployment_is_probed_and_locked_down() -> None:
    deployment, _ = extender_objects()
    spec = deployment["spec"]
    assert spec["replicas"] >= 2 and "--leader-elect" in spec["template"]["spec"]["containers"][0]["args"]
    pod = spec["template"]["spec"]
    assert "schedulerName" not in pod  # the default scheduler places the extender itself
    assert pod["securityContext"]["runAsNonRoot"] is True
    (c,) = pod["containers"]
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    limits = c.get("resources", {}).get("limits", {})
    assert not set(limits) & set(ENABLE_RESOURCES)


def test_rbac_grants_the_extender_only_what_it_uses() -> None:
    roles = {d["metadata"]["name"]: d for d in docs("rbac.yaml") if d["kind"] in ("ClusterRole", "Role")}
    grants = {
        (g, r): sorted(rule["verbs"])
        for rule in roles["topogang-extender"]["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
    }
    assert grants == {
        ("", "pods"): ["delete", "get", "list", "patch", "watch"],
        ("", "pods/binding"): ["create"],
        ("", "pods/status"): ["patch"],
        ("", "nodes"): ["list", "watch"],
        ("", "events"): ["create"],
        ("frameworkcontroller.microsoft.com", "frameworks"): ["get"],
        ("scheduling.x-k8s.io", "podgroups"): ["get"],
        ("scheduling.volcano.sh", "podgroups"): ["get"],
        ("scheduling.k8s.io", "workloads"): ["get"],
        ("scheduling.k8s.io", "podgroups"): ["get"],
        ("authentication.k8s.io", "tokenreviews"): ["create"],
        ("authorization.k8s.io", "subjectaccessreviews"): ["create"],
    }
    viewer = {
        (g, r): sorted(rule["verbs"])
        for rule in roles["topogang-viewer"]["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
    }
    asked = {("topogang.io", rule.resource) for rule in ROUTES.values() if rule.resource}
    assert set(viewer) == asked and all(v == ["get", "list"] for v in viewer.values())
    own = {
        (g, r, tuple(rule.get("resourceNames", []))): sorted(rule["verbs"])
        for rule in roles["topogang-extender-state"]["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
    }
    assert own == {
        ("topogang.io", "gangreservations", ()): ["create", "delete", "get", "list", "update"],
        ("coordination.k8s.io", "leases", ()): ["create"],
        ("coordination.k8s.io", "leases", ("topogang-extender",)): ["get", "update"],
    }
    (crd,) = docs("gangreservation-crd.yaml")
    assert crd["spec"]["group"] == rsv.GROUP and crd["spec"]["names"]["plural"] == rsv.PLURAL
    assert [v["name"] for v in crd["spec"]["versions"]] == [rsv.VERSION]
    lease = roles["topogang-scheduler-lease"]["rules"]
    (cfg,) = docs("kube-scheduler-config.yaml")
    assert any(cfg["leaderElection"]["resourceName"] in r.get("resourceNames", []) for r in lease)


def test_dockerfile_runs_topogang_serve_as_non_root() -> None:
    text = (DEPLOY.parent / "Dockerfile").read_text()
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
    base = next(line for line in lines if line.startswith("FROM "))
    assert base.startswith("FROM python:3.11.") and "slim" in base and ":latest" not in base
    assert any(line.startswith("USER ") and not line.startswith("USER root") for line in lines)
    assert 'ENTRYPOINT ["topogang", "serve"]' in lines
    assert text.index("COPY pyproject.toml") < text.index("COPY extender")  # dependencies layer first
