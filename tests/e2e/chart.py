"""The e2e cluster is installed through the Helm chart deploy/helm/topogang, as a platform team installs it.

The real helm (built from Go modules by scripts/e2e/build-bins.sh) runs the README's install against the
e2e API server: `helm install topogang deploy/helm/topogang --set-file config=TOPOLOGY`. It creates every
object of the chart: the Namespace, the GangReservation CRD, the ServiceAccounts and RBAC, the config
ConfigMap, the scheduler's ConfigMap, the extender's Service and both Deployments. The Deployments never
become pods (no controller-manager runs, and KWOK's nodes have no container runtime), so what they would
run is run as local processes from the same chart, rendered by `helm template` with the same values:

- kube-scheduler runs the KubeSchedulerConfiguration of the scheduler's ConfigMap (needed before the API
  server is up, hence the render), with only what scripts/e2e/scheduler_config.py changes for a local
  process (urlPrefix to the local port, its kubeconfig, leader election off);
- the extender runs with the Deployment's container args and env (`extender_args`): `--kube` becomes
  `--kubeconfig` with its ServiceAccount's token, `--listen :9096` and `--verbs-listen :9443` local ports,
  every file it reads (`--config`, the verbs' certificate, key and client CA) the file its ConfigMap or
  Secret holds as read back from the API server (what the kubelet would mount), and POD_NAMESPACE /
  POD_NAME the values of their fieldRefs;
- kube-scheduler starts once the chart is installed (scripts/e2e/scheduler-up.sh), calling the verbs over
  mutual TLS with the client certificate of the Secret the chart made (`scheduler_tls_dir`), as the
  scheduler's Deployment mounts it;
- the read listener serves HTTPS with the chart's certificate (`extender.tls`, on by default; it names
  127.0.0.1 for a port-forward, so the harness checks it with the chart's published CA, ConfigMap
  `topogang-ca`, host name included);
- `--admin-listen` a free local port (the admin listener `kubectl port-forward` would reach: the
  harness reads the cluster-wide views there).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from scripts import manifests
from tests.e2e import helpers

EXTENDER = "topogang-extender"  # the Deployment's name for the release `topogang`
SCHEDULER = "topogang-scheduler"
SCHEDULER_CONFIG = "topogang-scheduler-config"
CRD = "gangreservations.topogang.io"


@dataclass(frozen=True)
class ChartRender:
    """The chart's objects as rendered, and the file with all of them (kept with the cluster's logs)."""

    docs: list[dict[str, Any]]
    path: Path

    def one(self, kind: str, name: str) -> dict[str, Any]:
        (found,) = [d for d in self.docs if d["kind"] == kind and d["metadata"]["name"] == name]
        return found

    @property
    def extender(self) -> dict[str, Any]:
        return self.one("Deployment", EXTENDER)

    @property
    def namespace(self) -> str:
        return str(self.extender["metadata"]["namespace"])


RELEASE = "topogang"


def values(topology: Path) -> tuple[str, ...]:
    # every test makes a fresh namespace mapped to no VC, so the session runs in entitlement mode open
    # (HiveD's trust) rather than the chart's opportunistic; test_entitlement.py closes it by a config edit
    return ("--set-file", f"config={topology}", "--set", "extender.defaultEntitlement=open")


def render(helm: Path, topology: Path, out_dir: Path) -> ChartRender:
    """The chart rendered for this cluster's topology; also writes the scheduler's ConfigMap alone to
    `scheduler_config_file` (scripts/e2e/cluster-up.sh reads a KubeSchedulerConfiguration from it)."""
    text = manifests.template(helm, *values(topology), release=RELEASE)
    path = out_dir / "chart-rendered.yaml"
    path.write_text(text, encoding="utf-8")
    out = ChartRender([d for d in yaml.safe_load_all(text) if d], path)
    scheduler_config_file(out).write_text(yaml.safe_dump(out.one("ConfigMap", SCHEDULER_CONFIG)), "utf-8")
    return out


def scheduler_config_file(chart: ChartRender) -> Path:
    return chart.path.with_name("chart-scheduler-config.yaml")


def install(helm: Path, kubeconfig: Path, topology: Path, api: client.ApiClient) -> str:
    """`helm install` of the chart, as the README says; helm's output. Returns once the CRD serves."""
    out = manifests.helm(
        helm,
        "install",
        RELEASE,
        str(manifests.CHART),
        *values(topology),
        "--kubeconfig",
        str(kubeconfig),
        "--timeout",
        "2m",
    )
    ext = client.ApiextensionsV1Api(api)

    def established() -> bool:
        got: Any = ext.read_custom_resource_definition(CRD)
        return any(c.type == "Established" and c.status == "True" for c in (got.status.conditions or []))

    helpers.wait_until(f"the CRD {CRD} established", established, 30)
    return out


FILE_FLAGS = (
    "--config",
    "--verbs-tls-cert",
    "--verbs-tls-key",
    "--client-ca",
    "--tls-cert",
    "--tls-key",
    "--bind-signing-key-file",
)


def extender_args(
    chart: ChartRender,
    core: client.CoreV1Api,
    *,
    kubeconfig: Path,
    port: int,
    verbs_port: int,
    workdir: Path,
    admin_port: int,
) -> tuple[list[str], dict[str, str]]:
    """`topogang serve`'s arguments and the env of the chart's extender container, for a local process:
    reads on `port`, the verbs on `verbs_port`."""
    deployment = chart.extender
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = list(container["args"])
    assert args.count("--kube") == 1, f"the chart's extender args have no single --kube: {args}"
    args[args.index("--kube")] = f"--kubeconfig={kubeconfig}"
    args[args.index("--listen") + 1] = f"127.0.0.1:{port}"
    args[args.index("--verbs-listen") + 1] = f"127.0.0.1:{verbs_port}"
    for flag in FILE_FLAGS:
        if flag in args:
            at = args.index(flag) + 1
            args[at] = str(mounted_file(chart, core, args[at], workdir))
    args[args.index("--admin-listen") + 1] = f"127.0.0.1:{admin_port}"
    ns, name = chart.namespace, f"{deployment['metadata']['name']}-e2e"
    fields = {"metadata.namespace": ns, "metadata.name": name}
    env = {
        e["name"]: e["value"] if "value" in e else fields[e["valueFrom"]["fieldRef"]["fieldPath"]]
        for e in container.get("env", [])
    }
    return args, env


def mounted_file(
    chart: ChartRender, core: client.CoreV1Api, path: str, workdir: Path, deployment: str = EXTENDER
) -> Path:
    """The file at `path` in a Deployment's container: its ConfigMap's or Secret's key, read from the
    API server, written under `workdir` (a directory per volume, as the kubelet mounts them)."""
    pod = chart.one("Deployment", deployment)["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    (mount,) = [m for m in container["volumeMounts"] if path.startswith(m["mountPath"] + "/")]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    key = path.removeprefix(mount["mountPath"] + "/")
    out = workdir / f"{deployment}-{mount['name']}" / key
    out.parent.mkdir(exist_ok=True)
    if "configMap" in volume:
        cm = core.read_namespaced_config_map(volume["configMap"]["name"], chart.namespace)
        assert cm.data and key in cm.data, f"ConfigMap {volume['configMap']['name']} has no key {key}"
        out.write_text(cm.data[key], encoding="utf-8")
    else:
        secret = core.read_namespaced_secret(volume["secret"]["secretName"], chart.namespace)
        assert secret.data and key in secret.data, f"Secret {volume['secret']['secretName']} has no key {key}"
        out.write_bytes(base64.b64decode(secret.data[key]))
        out.chmod(0o600)
    return out


def read_ca(chart: ChartRender, core: client.CoreV1Api, workdir: Path) -> Path:
    """The CA of the read listener's certificate, from the ConfigMap the chart publishes for job
    namespaces (`<release>-ca`), as a tenant copies it."""
    name = f"{RELEASE}-ca"
    cm = core.read_namespaced_config_map(name, chart.namespace)
    assert cm.data and "ca.crt" in cm.data, f"ConfigMap {name} has no ca.crt"
    out = workdir / "read-ca.crt"
    out.write_text(cm.data["ca.crt"], encoding="utf-8")
    return out


def scheduler_tls_dir(chart: ChartRender, core: client.CoreV1Api, workdir: Path) -> Path | None:
    """The directory holding kube-scheduler's tlsConfig files (its client certificate, key and the CA
    of the extender's) as its Deployment mounts them from the chart's Secret; None without TLS."""
    cm = chart.one("ConfigMap", SCHEDULER_CONFIG)
    cfg = yaml.safe_load(cm["data"]["kube-scheduler-config.yaml"])
    (ext,) = cfg["extenders"]
    tls = ext.get("tlsConfig") or {}
    files = [
        mounted_file(chart, core, str(tls[k]), workdir, SCHEDULER) for k in ("certFile", "keyFile", "caFile")
        if k in tls
    ]  # fmt: skip
    return files[0].parent if files else None


def verbs_scheme(chart: ChartRender) -> str:
    cfg = yaml.safe_load(chart.one("ConfigMap", SCHEDULER_CONFIG)["data"]["kube-scheduler-config.yaml"])
    return str(cfg["extenders"][0]["urlPrefix"]).split("://", 1)[0]


DOOR_FLAGS = ("--verbs-listen", "--verbs-tls-cert", "--verbs-tls-key", "--client-ca", "--verbs-allowed-names")


def door_args(args: list[str]) -> list[str]:
    """The verbs' door of `extender_args`' output (listener, certificate, client CA, allowed names)."""
    out: list[str] = []
    for flag in DOOR_FLAGS:
        if flag in args:
            out += [flag, args[args.index(flag) + 1]]
    return out
