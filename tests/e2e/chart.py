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
  `--kubeconfig` with its ServiceAccount's token, `--listen :9096` the local port, `--config` the file its
  ConfigMap holds as read back from the API server (what the kubelet would mount), `--admin-listen` a
  free local port (the admin listener `kubectl port-forward` would reach: the harness reads the
  cluster-wide views there), and POD_NAMESPACE / POD_NAME the values of their fieldRefs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from scripts import manifests
from tests.e2e import helpers

EXTENDER = "topogang-extender"  # the Deployment's name for the release `topogang`
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
    return ("--set-file", f"config={topology}")


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


def extender_args(
    chart: ChartRender,
    core: client.CoreV1Api,
    *,
    kubeconfig: Path,
    port: int,
    workdir: Path,
    admin_port: int,
) -> tuple[list[str], dict[str, str]]:
    """`topogang serve`'s arguments and the env of the chart's extender container, for a local process."""
    deployment = chart.extender
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = list(container["args"])
    assert args.count("--kube") == 1, f"the chart's extender args have no single --kube: {args}"
    args[args.index("--kube")] = f"--kubeconfig={kubeconfig}"
    args[args.index("--listen") + 1] = f"127.0.0.1:{port}"
    args[args.index("--admin-listen") + 1] = f"127.0.0.1:{admin_port}"
    at = args.index("--config") + 1
    args[at] = str(mounted_config(chart, core, args[at], workdir))
    ns, name = chart.namespace, f"{deployment['metadata']['name']}-e2e"
    fields = {"metadata.namespace": ns, "metadata.name": name}
    env = {
        e["name"]: e["value"] if "value" in e else fields[e["valueFrom"]["fieldRef"]["fieldPath"]]
        for e in container.get("env", [])
    }
    return args, env


def mounted_config(chart: ChartRender, core: client.CoreV1Api, path: str, workdir: Path) -> Path:
    """The file at `path` in the extender container: its ConfigMap's key, read from the API server."""
    deployment = chart.extender
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    (mount,) = [m for m in container["volumeMounts"] if path.startswith(m["mountPath"] + "/")]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    key = path.removeprefix(mount["mountPath"] + "/")
    cm = core.read_namespaced_config_map(volume["configMap"]["name"], chart.namespace)
    assert cm.data and key in cm.data, f"ConfigMap {volume['configMap']['name']} has no key {key}"
    out = workdir / "extender-config" / key
    out.parent.mkdir(exist_ok=True)
    out.write_text(cm.data[key], encoding="utf-8")
    return out
