"""The Helm chart deploy/helm/topogang, rendered by the real helm: lint-clean, deploy/*.yaml are exactly
what it renders, non-default values reach every object they should, and values that would install something
broken are refused with the value to change. The e2e suite installs its cluster through the same chart
(tests/e2e/chart.py)."""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from extender.cli import _parser as serve_parser
from extender.cli import limits_from
from extender.http.tls import TlsSettings
from extender.kube.admission_gate import GATE
from scripts import manifests

EXAMPLE = manifests.REPO / "config" / "examples" / "example-cluster.yaml"
NS = "gpu-scheduling"
# TLS on the read port, the verbs' certificates from cert-manager, 3 replicas, an existing ConfigMap, and
# every other value changed too
NON_DEFAULT = (
    "--set", "existingConfigMap=cluster-topology",
    "--set", "configKey=cluster.yaml",
    "--set", f"namespace={NS}",
    "--set", "extender.replicas=3",
    "--set", "extender.leaderElection.leaseName=tg-leader",
    "--set", "extender.leaderElection.leaseSeconds=20",
    "--set", "extender.tls.enabled=true",
    "--set", "extender.tls.secretName=extender-serving",
    "--set", "extender.verbs.port=9444",
    "--set", "extender.verbs.mtls.certificates=cert-manager",
    "--set", "extender.verbs.mtls.certManager.issuerRef.name=cluster-ca",
    "--set", "extender.verbs.mtls.certManager.issuerRef.kind=ClusterIssuer",
    "--set", "extender.verbs.mtls.clientSecretName=scheduler-client",
    "--set", "extender.verbs.mtls.allowedNames={gpu-gang-scheduler,sched.example}",
    "--set", "extender.verbs.networkPolicy.schedulerPodLabels.app=kube-scheduler",
    "--set", "extender.verbs.networkPolicy.schedulerNamespaceLabels.tier=control",
    "--set", "extender.image.repository=registry.example/topogang",
    "--set", "extender.image.tag=0.2.0",
    "--set", "extender.resources.requests.cpu=2",
    "--set", "extender.nodeSelector.pool=system",
    "--set", "scheduler.name=gpu-gang",
    "--set", "scheduler.image.tag=v1.35.4",
    "--set", "scheduler.nodeSelector.pool=system",
    "--set", "managedResources[0].name=example.com/gang",
    "--set", "managedResources[0].ignoredByScheduler=true",
    "--set", "extender.bindSigning.existingSecret=own-signing-key",
    "--set", "extender.bindSigning.adoptUnsignedBindInfo=true",
    "--set", "extender.readers.tokenAudience=cluster-x",
    "--set", "extender.readers.adminPort=0",
)  # fmt: skip


def render(helm: Path, *values: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(manifests.template(helm, *values)) if d]


def one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"{len(found)} {kind} {name or ''} in the render"
    return found[0]


def scheduler_config(docs: list[dict[str, Any]], name: str = "topogang-scheduler-config") -> dict[str, Any]:
    cfg = yaml.safe_load(one(docs, "ConfigMap", name)["data"]["kube-scheduler-config.yaml"])
    assert isinstance(cfg, dict)
    return cfg


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    (c,) = deployment["spec"]["template"]["spec"]["containers"]
    assert isinstance(c, dict)
    return c


def mounted(deployment: dict[str, Any], path: str) -> dict[str, Any]:
    """The volume behind a file path in the container (its longest matching mount)."""
    pod = deployment["spec"]["template"]["spec"]
    mount = max(
        (m for m in container(deployment)["volumeMounts"] if path.startswith(m["mountPath"] + "/")),
        key=lambda m: len(m["mountPath"]),
    )
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert isinstance(volume, dict)
    return volume


def test_helm_lint_is_clean(helm: Path) -> None:
    for values in (("--set-file", f"config={EXAMPLE}"), NON_DEFAULT):
        out = manifests.helm(helm, "lint", "--strict", str(manifests.CHART), *values)
        assert "1 chart(s) linted, 0 chart(s) failed" in out
        assert "[WARNING]" not in out and "[ERROR]" not in out, out


def test_deploy_manifests_are_what_the_chart_renders(helm: Path) -> None:
    stale = manifests.differences(helm)
    assert not stale, f"deploy/{', deploy/'.join(stale)} differ from the chart: run `make manifests`"


def test_the_one_line_install_renders_a_working_default(helm: Path) -> None:
    docs = render(helm, "--set-file", f"config={EXAMPLE}")
    assert {d["metadata"].get("namespace", "topogang-system") for d in docs} - {"kube-system"} == {
        "topogang-system"
    }
    assert one(docs, "Namespace")["metadata"]["name"] == "topogang-system"
    assert one(docs, "CustomResourceDefinition")["metadata"]["name"] == "gangreservations.topogang.io"
    # the config is the file given, byte for byte
    assert one(docs, "ConfigMap", "topogang-config")["data"]["config.yaml"] == EXAMPLE.read_text()
    ext = one(docs, "Deployment", "topogang-extender")
    args = serve_parser().parse_args(container(ext)["args"])
    assert ext["spec"]["replicas"] == 2 and args.leader_elect and args.lease_name == "topogang-extender"
    assert mounted(ext, args.config)["configMap"]["name"] == "topogang-config"
    assert args.kube and args.listen == ":9096"
    # the read port is HTTPS with the chart's certificate (the stock FrameworkBarrier sends its token
    # only over TLS), its probes too; the CA is published for job namespaces
    for path in (args.tls_cert, args.tls_key):
        assert mounted(ext, path)["secret"]["secretName"] == "topogang-read-tls"
    probes = (container(ext)["readinessProbe"], container(ext)["livenessProbe"])
    assert all(p["httpGet"]["scheme"] == "HTTPS" for p in probes)
    assert "BEGIN CERTIFICATE" in one(docs, "ConfigMap", "topogang-ca")["data"]["ca.crt"]
    # bind info is signed with a key of the chart's own Secret, random, kept past an uninstall
    signing = one(docs, "Secret", "topogang-bind-signing-key")
    assert len(base64.b64decode(signing["data"]["key"])) >= 32
    assert signing["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert mounted(ext, args.bind_signing_key_file)["secret"]["secretName"] == "topogang-bind-signing-key"
    assert not args.adopt_unsigned_bind_info
    assert args.default_entitlement == "opportunistic"  # the safe default: README "Multi-tenancy"
    # the self-protection limits (extender.http.limits), and the Service's names answered as Host
    assert (args.max_connections, args.head_timeout, args.max_reads, args.max_explains) == (4096, 10.0, 32, 2)
    limits = limits_from(args, "0.0.0.0")
    assert limits.host_allowed("topogang-extender.topogang-system.svc:9096")
    assert limits.host_allowed("topogang-extender:9096") and not limits.host_allowed("evil.example")
    # the doors: job pods' tokens of the audience topogang, the admin listener on the pod's loopback
    assert args.token_audience == "topogang" and args.admin_listen == "127.0.0.1:9097"
    viewer = one(docs, "ClusterRole", "topogang-viewer")
    assert viewer["rules"] == [
        {"apiGroups": ["topogang.io"], "resources": ["clusterstatus", "gangs"], "verbs": ["get", "list"]}
    ]
    sched = one(docs, "Deployment", "topogang-scheduler")
    assert mounted(sched, "/etc/topogang-scheduler/kube-scheduler-config.yaml")["configMap"]["name"] == (
        "topogang-scheduler-config"
    )
    # the verbs: their own port, mutual TLS, kube-scheduler's certificate name only
    tls = TlsSettings(args.tls_cert, args.tls_key, args.client_ca, args.verbs_tls_cert, args.verbs_tls_key,
                      tuple(args.verbs_allowed_names))  # fmt: skip
    assert args.verbs_listen == ":9443" and tls.mutual and not tls.problems()
    assert args.verbs_allowed_names == ["topogang-scheduler"]
    for path in (args.verbs_tls_cert, args.verbs_tls_key, args.client_ca):
        assert mounted(ext, path)["secret"]["secretName"] == "topogang-verbs-server"
    cfg = scheduler_config(docs)
    (call,) = cfg["extenders"]
    assert call["urlPrefix"] == "https://topogang-extender.topogang-system.svc:9443/v1/extender"
    assert call["tlsConfig"]["serverName"] == "topogang-extender.topogang-system.svc"
    for key in ("caFile", "certFile", "keyFile"):
        assert mounted(sched, call["tlsConfig"][key])["secret"]["secretName"] == "topogang-verbs-client"
    svc = one(docs, "Service", "topogang-extender")
    assert {p["name"]: p["port"] for p in svc["spec"]["ports"]} == {"http": 9096, "verbs": 9443}
    # the same checksum on both pods: new certificates roll both
    sums = {d["spec"]["template"]["metadata"]["annotations"]["checksum/verbs-tls"] for d in (ext, sched)}
    assert len(sums) == 1
    # only kube-scheduler's pods reach the verbs port; the read port stays open
    policy = one(docs, "NetworkPolicy")
    verbs_rule, read_rule = policy["spec"]["ingress"]
    assert verbs_rule["ports"] == [{"port": "verbs", "protocol": "TCP"}]
    (peer,) = verbs_rule["from"]
    assert peer["podSelector"]["matchLabels"] == {
        "app.kubernetes.io/name": "topogang-scheduler",
        "app.kubernetes.io/instance": "topogang",
    }
    assert peer["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "topogang-system"}
    assert read_rule == {"ports": [{"port": "http", "protocol": "TCP"}]}
    assert policy["spec"]["podSelector"]["matchLabels"] == ext["spec"]["selector"]["matchLabels"]


def test_the_chart_makes_a_ca_and_both_certificates(helm: Path, tmp_path: Path) -> None:
    docs = render(helm, "--set-file", f"config={EXAMPLE}")
    made = ("topogang-verbs-server", "topogang-verbs-client", "topogang-read-tls")
    secrets = {
        d["metadata"]["name"]: d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"] in made
    }
    assert set(secrets) == set(made)
    for name, doc in secrets.items():
        assert doc["type"] == "kubernetes.io/tls"
        for key, value in doc["data"].items():
            (tmp_path / f"{name}-{key}").write_bytes(base64.b64decode(value))
    ca = tmp_path / "topogang-verbs-server-ca.crt"
    assert ca.read_bytes() == (tmp_path / "topogang-verbs-client-ca.crt").read_bytes()  # one CA
    for name in secrets:
        ok = subprocess.run(["openssl", "verify", "-CAfile", str(ca), str(tmp_path / f"{name}-tls.crt")],
                            capture_output=True, text=True, check=False)  # fmt: skip
        assert ok.returncode == 0, ok.stdout + ok.stderr

    def names(name: str) -> str:
        cmd = ["openssl", "x509", "-noout", "-subject", "-ext", "subjectAltName", "-in"]
        out = subprocess.run(
            [*cmd, str(tmp_path / f"{name}-tls.crt")], capture_output=True, text=True, check=True
        )
        return out.stdout

    assert "CN = topogang-scheduler" in names("topogang-verbs-client")
    assert "DNS:topogang-extender.topogang-system.svc" in names("topogang-verbs-server")
    read = names("topogang-read-tls")  # the Service's names, and localhost for a port-forward
    assert "DNS:topogang-extender.topogang-system.svc" in read and "DNS:localhost" in read
    assert "IP Address:127.0.0.1" in read
    assert base64.b64decode(secrets["topogang-read-tls"]["data"]["ca.crt"]).decode().strip() == (
        one(docs, "ConfigMap", "topogang-ca")["data"]["ca.crt"].strip()
    )


def test_non_default_values_tls_three_replicas_existing_configmap(helm: Path) -> None:
    docs = render(helm, *NON_DEFAULT)
    # an existing ConfigMap: the chart makes none for the config, and mounts that one under its key
    assert [d["metadata"]["name"] for d in docs if d["kind"] == "ConfigMap"] == ["topogang-scheduler-config"]
    ext = one(docs, "Deployment", "topogang-extender")
    c = container(ext)
    args = serve_parser().parse_args(c["args"])
    assert args.config == "/etc/topogang/cluster.yaml"
    assert args.token_audience == "cluster-x" and args.admin_listen is None
    assert mounted(ext, args.config)["configMap"]["name"] == "cluster-topology"
    # an existing signing key Secret: the chart makes none, and mounts that one; the switch-over opt-in
    assert [d for d in docs if d["kind"] == "Secret"] == []
    assert mounted(ext, args.bind_signing_key_file)["secret"]["secretName"] == "own-signing-key"
    assert args.adopt_unsigned_bind_info
    # the namespace, everywhere (the scheduler's authentication reader stays in kube-system)
    assert one(docs, "Namespace")["metadata"]["name"] == NS
    namespaced = [d for d in docs if "namespace" in d["metadata"]]
    assert {d["metadata"]["namespace"] for d in namespaced} == {NS, "kube-system"}
    assert {s["namespace"] for d in docs for s in d.get("subjects", [])} == {NS}
    # 3 replicas, leader election on the named Lease, which the Role lets it use
    assert ext["spec"]["replicas"] == 3
    assert (args.leader_elect, args.lease_name, args.lease_seconds) == (True, "tg-leader", 20.0)
    lease_rules = one(docs, "Role", "topogang-extender-state")["rules"]
    assert any(r.get("resourceNames") == ["tg-leader"] and "update" in r["verbs"] for r in lease_rules)
    # HTTPS on the read port; the verbs' certificates from cert-manager, every file mounted from its Secret
    tls = TlsSettings(args.tls_cert, args.tls_key, args.client_ca, args.verbs_tls_cert, args.verbs_tls_key,
                      tuple(args.verbs_allowed_names))  # fmt: skip
    assert tls.enabled and tls.mutual and not tls.problems() and args.verbs_listen == ":9444"
    assert args.verbs_allowed_names == ["gpu-gang-scheduler,sched.example"]
    assert mounted(ext, args.tls_cert)["secret"]["secretName"] == "extender-serving"
    assert mounted(ext, args.tls_key)["secret"]["secretName"] == "extender-serving"
    assert mounted(ext, args.client_ca)["secret"]["secretName"] == "topogang-verbs-server"
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == {"http": 9096, "verbs": 9444}
    assert c["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    svc = one(docs, "Service", "topogang-extender")
    assert {p["name"]: p["port"] for p in svc["spec"]["ports"]} == {"http": 9096, "verbs": 9444}
    certs = {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "Certificate"}
    assert certs["scheduler-client"]["commonName"] == "topogang-scheduler"
    assert certs["scheduler-client"]["issuerRef"] == {"name": "cluster-ca", "kind": "ClusterIssuer",
                                                      "group": "cert-manager.io"}  # fmt: skip
    assert f"topogang-extender.{NS}.svc" in certs["topogang-verbs-server"]["dnsNames"]
    assert not [d for d in docs if d["kind"] == "Secret"]  # cert-manager makes them
    # kube-scheduler calls the verbs listener over HTTPS with its client certificate, from its Secret
    cfg = scheduler_config(docs)
    (call,) = cfg["extenders"]
    assert call["urlPrefix"] == f"https://topogang-extender.{NS}.svc:9444/v1/extender"
    assert call["enableHTTPS"] is True and call["tlsConfig"]["serverName"] == f"topogang-extender.{NS}.svc"
    sched = one(docs, "Deployment", "topogang-scheduler")
    for key in ("caFile", "certFile", "keyFile"):
        assert mounted(sched, call["tlsConfig"][key])["secret"]["secretName"] == "scheduler-client"
    (peer,) = one(docs, "NetworkPolicy")["spec"]["ingress"][0]["from"]
    assert peer["podSelector"]["matchLabels"] == {"app": "kube-scheduler"}
    assert peer["namespaceSelector"]["matchLabels"] == {"tier": "control"}
    # scheduler name, managed resources, its own Lease in the namespace
    assert [p["schedulerName"] for p in cfg["profiles"]] == ["gpu-gang"]
    assert call["managedResources"] == [{"name": "example.com/gang", "ignoredByScheduler": True}]
    assert (cfg["leaderElection"]["resourceNamespace"], cfg["leaderElection"]["resourceName"]) == (
        NS,
        "topogang-scheduler",
    )
    # image, resources, node selector
    assert c["image"] == "registry.example/topogang:0.2.0"
    assert c["resources"]["requests"]["cpu"] == 2 and c["resources"]["limits"]["memory"] == "2Gi"
    assert ext["spec"]["template"]["spec"]["nodeSelector"] == {"pool": "system"}
    assert container(sched)["image"] == "registry.k8s.io/kube-scheduler:v1.35.4"
    assert sched["spec"]["template"]["spec"]["nodeSelector"] == {"pool": "system"}


def with_config(*values: str) -> tuple[str, ...]:
    return ("--set", "existingConfigMap=x", *values)


@pytest.mark.parametrize(
    ("values", "names"),
    [
        ((), "--set-file config=my-cluster.yaml"),
        (with_config("--set", "extender.leaderElection.enabled=false"), "leaderElection"),
        (with_config("--set", "extender.verbs.mtls.certificates=secrets"), "extender.tls.secretName"),
        (with_config("--set", "extender.verbs.mtls.certificates=cert-manager"), "issuerRef.name"),
        (with_config("--set", "extender.verbs.mtls.certificates=vault"), "extender.verbs.mtls.certificates"),
        (with_config("--set", "extender.verbs.port=9096"), "extender.verbs.port"),
    ],
)
def test_values_that_would_install_something_broken_are_refused(
    helm: Path, values: tuple[str, ...], names: str
) -> None:
    with pytest.raises(manifests.HelmError, match="topogang: ") as err:
        manifests.template(helm, *values)
    assert names in str(err.value)


def test_cert_manager_issues_the_read_listeners_certificate_too(helm: Path) -> None:
    docs = render(
        helm,
        *with_config("--set", "extender.verbs.mtls.certificates=cert-manager"),
        *("--set", "extender.verbs.mtls.certManager.issuerRef.name=cluster-ca"),
    )
    certs = {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "Certificate"}
    assert set(certs) == {"topogang-verbs-server", "topogang-verbs-client", "topogang-read-tls"}
    read = certs["topogang-read-tls"]
    assert "topogang-extender.topogang-system.svc" in read["dnsNames"] and "localhost" in read["dnsNames"]
    assert read["ipAddresses"] == ["127.0.0.1"] and "server auth" in read["usages"]
    args = serve_parser().parse_args(container(one(docs, "Deployment", "topogang-extender"))["args"])
    assert mounted(one(docs, "Deployment", "topogang-extender"), args.tls_cert)["secret"]["secretName"] == (
        "topogang-read-tls"
    )
    assert not [
        d for d in docs if d["kind"] in ("Secret", "ConfigMap") and d["metadata"]["name"] == "topogang-ca"
    ]


def test_the_admission_gate_is_off_by_default_and_gates_only_the_profiles_unbound_pods(helm: Path) -> None:
    """Off, nothing admission-related renders; on, one MutatingAdmissionPolicy (CREATE of pods of
    the chart's scheduler profile, not created bound, limited to the selected namespaces) adds
    `topogang.io/admission`, and its binding names it."""
    assert not [d for d in render(helm, "--set-file", f"config={EXAMPLE}") if "AdmissionPolicy" in d["kind"]]
    docs = render(
        helm,
        *NON_DEFAULT,
        "--set",
        "extender.admissionGate.enabled=true",
        "--set",
        "extender.admissionGate.namespaceSelector.matchLabels.team=ml",
    )
    policy = one(docs, "MutatingAdmissionPolicy")
    binding = one(docs, "MutatingAdmissionPolicyBinding")
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Ignore"
    (rule,) = spec["matchConstraints"]["resourceRules"]
    assert rule["operations"] == ["CREATE"] and rule["resources"] == ["pods"]
    assert spec["matchConstraints"]["namespaceSelector"] == {"matchLabels": {"team": "ml"}}
    conditions = {c["name"]: c["expression"] for c in spec["matchConditions"]}
    assert (
        '"gpu-gang"' in conditions["topogang-profile"] and "nodeName" in conditions["not-bound-at-creation"]
    )
    (mutation,) = spec["mutations"]
    assert GATE in mutation["applyConfiguration"]["expression"]
