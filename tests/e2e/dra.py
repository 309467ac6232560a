"""The e2e cluster in DRA mode, for tests/e2e/test_dra.py.

The harness acts as the parts of a DRA cluster that do not run here:

- NVIDIA's DRA driver: a ResourceSlice per KWOK node (driver `gpu.nvidia.com`, pool = node, devices
  `gpu-<minor>` with `uuid`, `resource.kubernetes.io/pciBusID` and `pcieRoot`), and the DeviceClass
  `gpu.nvidia.com` (with `extendedResourceName: nvidia.com/gpu`, KEP-5004). The bus ids run opposite to
  the minors, so GPU index g of the config is device gpu-(7-g): a test that passes only if topogang
  numbers devices by bus id, not by name. The PCIe roots are one per switch (two GPUs).
- kube-controller-manager's ResourceClaim controller (not run here): `claim_for_template` makes the
  claim of a pod's ResourceClaimTemplate and names it in the pod's `status.resourceClaimStatuses`.

`DraMode` switches the session's cluster to the chart with `extender.dra.enabled=true` (helm upgrade:
the extender's DRA RBAC; kube-scheduler restarted on that chart's profile, DynamicResources off; the
extender run with `--dra`, under its ServiceAccount) and back.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from config.load import load_config
from scripts import manifests
from tests.e2e import chart
from tests.e2e.conftest import SCRIPTS, E2ECluster, Extender, _script_env, service_account_kubeconfig
from tests.e2e.helpers import wait_until
from topology.model import Topology
from topology.node_layout import node_halves

GROUP, VERSION = "resource.k8s.io", "v1"
DRIVER = "gpu.nvidia.com"
DRA_VALUES = ("--set", "extender.dra.enabled=true")


def bus_id(gpu: int) -> str:
    return f"0000:{0x18 + 0x10 * gpu:02x}:00.0"


def device_of(gpu: int, n: int = 8) -> str:
    """The device name the harness publishes for GPU index `gpu` (minors opposite to bus order)."""
    return f"gpu-{n - 1 - gpu}"


def resource_slice(node: str, n: int) -> dict[str, Any]:
    devices = []
    for gpu in range(n):
        devices.append(
            {
                "name": device_of(gpu, n),
                "attributes": {
                    "uuid": {"string": f"GPU-{node}-{gpu}"},
                    "productName": {"string": "NVIDIA A100-SXM4-80GB"},
                    "resource.kubernetes.io/pciBusID": {"string": bus_id(gpu)},
                    "resource.kubernetes.io/pcieRoot": {"string": f"pci0000:{gpu // 2:02x}"},
                },
            }
        )
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


DEVICE_CLASS = {
    "apiVersion": f"{GROUP}/{VERSION}",
    "kind": "DeviceClass",
    "metadata": {"name": DRIVER},
    "spec": {
        "selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}],
        "extendedResourceName": "nvidia.com/gpu",
    },
}


class Resources:
    """resource.k8s.io objects through the generic client."""

    def __init__(self, api: client.ApiClient) -> None:
        self.co = client.CustomObjectsApi(api)

    def create(self, plural: str, body: dict[str, Any], namespace: str | None = None) -> Any:
        if namespace is None:
            return self.co.create_cluster_custom_object(GROUP, VERSION, plural, body)
        return self.co.create_namespaced_custom_object(GROUP, VERSION, namespace, plural, body)

    def get(self, plural: str, name: str, namespace: str | None = None) -> Any:
        try:
            if namespace is None:
                return self.co.get_cluster_custom_object(GROUP, VERSION, plural, name)
            return self.co.get_namespaced_custom_object(GROUP, VERSION, namespace, plural, name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def delete(self, plural: str, name: str, namespace: str | None = None) -> None:
        try:
            if namespace is None:
                self.co.delete_cluster_custom_object(GROUP, VERSION, plural, name)
            else:
                self.co.delete_namespaced_custom_object(GROUP, VERSION, namespace, plural, name)
        except ApiException as exc:
            if exc.status != 404:
                raise

    def list(self, plural: str, namespace: str) -> list[Any]:
        got: Any = self.co.list_namespaced_custom_object(GROUP, VERSION, namespace, plural)
        return list(got.get("items", []))

    def replace_status(self, plural: str, name: str, namespace: str, body: dict[str, Any]) -> Any:
        return self.co.replace_namespaced_custom_object_status(GROUP, VERSION, namespace, plural, name, body)


def claim_body(name: str, count: int) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {
            "devices": {
                "requests": [{"name": "gpus", "exactly": {"deviceClassName": DRIVER, "count": count}}]
            }
        },
    }


def template_body(name: str, count: int) -> dict[str, Any]:
    spec = claim_body(name, count)["spec"]
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": spec},
    }


def claim_for_template(res: Resources, core: client.CoreV1Api, namespace: str, pod: str) -> str:
    """What the ResourceClaim controller does for a pod naming a template: the claim, owned by the pod,
    and its name in the pod's status. The claim's name."""
    p = core.read_namespaced_pod(pod, namespace)
    assert p.spec is not None and p.metadata is not None
    statuses = []
    made = ""
    for rc in p.spec.resource_claims or []:
        if not rc.resource_claim_template_name:
            continue
        tmpl = res.get("resourceclaimtemplates", rc.resource_claim_template_name, namespace)
        assert tmpl is not None, f"no ResourceClaimTemplate {rc.resource_claim_template_name}"
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ResourceClaim",
            "metadata": {
                "generateName": f"{pod}-{rc.name}-",
                "annotations": {"resource.kubernetes.io/pod-claim-name": rc.name},
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "name": pod,
                        "uid": p.metadata.uid,
                        "controller": True,
                    }
                ],
            },
            "spec": tmpl["spec"]["spec"],
        }
        made = res.create("resourceclaims", body, namespace)["metadata"]["name"]
        statuses.append({"name": rc.name, "resourceClaimName": made})
    core.patch_namespaced_pod_status(pod, namespace, {"status": {"resourceClaimStatuses": statuses}})
    return made


def nodes_gpus(topology: str | Path) -> dict[str, int]:
    topo = Topology(load_config(str(topology)).spec)
    return {n: len(node_halves(topo, n)) for n in topo.machines}


@dataclasses.dataclass
class DraMode:
    cluster: E2ECluster
    session: Extender
    dir: Path = dataclasses.field(init=False)
    rendered: chart.ChartRender | None = None
    extender: Extender | None = None

    def __post_init__(self) -> None:
        self.dir = self.cluster.workdir.parent / "dra"
        self.dir.mkdir(exist_ok=True)

    @property
    def topology(self) -> Path:
        return Path(self.cluster.env["TOPOLOGY"])

    def render(self) -> chart.ChartRender:
        helm = manifests.helm_binary()
        assert helm is not None
        text = manifests.template(helm, *chart.values(self.topology), *DRA_VALUES, release=chart.RELEASE)
        path = self.dir / "chart-rendered.yaml"
        path.write_text(text, encoding="utf-8")
        out = chart.ChartRender([d for d in yaml.safe_load_all(text) if d], path)
        chart.scheduler_config_file(out).write_text(
            yaml.safe_dump(out.one("ConfigMap", chart.SCHEDULER_CONFIG)), "utf-8"
        )
        return out

    def upgrade(self, dra: bool) -> None:
        helm = manifests.helm_binary()
        assert helm is not None
        manifests.helm(
            helm,
            "upgrade",
            chart.RELEASE,
            str(manifests.CHART),
            *chart.values(self.topology),
            *(DRA_VALUES if dra else ()),
            "--kubeconfig",
            str(self.cluster.kubeconfig),
            "--timeout",
            "2m",
        )

    def restart_scheduler(self, rendered: chart.ChartRender) -> None:
        """kube-scheduler again, on `rendered`'s profile (the process the harness started, by its pid
        file: the same check of pid and start time as cluster-down.sh)."""
        w = self.cluster.workdir
        pidfile = w / "run" / "kube-scheduler.pid"
        pid, start = pidfile.read_text().split()
        stat = Path(f"/proc/{pid}/stat")
        if stat.is_file() and stat.read_text().rsplit(") ", 1)[1].split()[19] == start:
            os.killpg(int(pid), signal.SIGTERM)
            deadline = time.monotonic() + 15
            while stat.is_file() and time.monotonic() < deadline:
                time.sleep(0.1)
        pidfile.unlink()
        env = {**_script_env(), "TOPOGANG_E2E_SCHEDULER_CONFIG": str(chart.scheduler_config_file(rendered))}
        tls = chart.scheduler_tls_dir(rendered, self.cluster.core, w)
        url = f"{chart.verbs_scheme(rendered)}://127.0.0.1:{self.cluster.env['EXTENDER_PORT']}/v1/extender"
        up = subprocess.run(
            ["bash", str(SCRIPTS / "scheduler-up.sh"), str(w), url, *([str(tls)] if tls else [])],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )
        assert up.returncode == 0, f"scheduler-up.sh failed: {up.stderr[-3000:]}"

    def publish(self, res: Resources) -> None:
        for name, n in nodes_gpus(self.topology).items():
            res.delete("resourceslices", f"{name}-{DRIVER}")
            res.create("resourceslices", resource_slice(name, n))
        res.delete("deviceclasses", DRIVER)
        res.create("deviceclasses", DEVICE_CLASS)

    def unpublish(self, res: Resources) -> None:
        for name in nodes_gpus(self.topology):
            res.delete("resourceslices", f"{name}-{DRIVER}")
        res.delete("deviceclasses", DRIVER)

    def up(self, res: Resources) -> Extender:
        self.rendered = self.render()
        self.upgrade(dra=True)
        self.publish(res)
        self.session.stop()
        self.restart_scheduler(self.rendered)
        ext = Extender(
            dataclasses.replace(self.cluster, chart=self.rendered), service_account_kubeconfig(self.cluster)
        )
        ext.starts = 100  # its logs are extender-101.log, ...: the session's stay as they are
        ext.start()
        self.extender = ext
        wait_until("the DRA extender to map every node", lambda: self.mapped(ext) or None, 30)
        return ext

    @staticmethod
    def mapped(ext: Extender) -> bool:
        s = ext.summary()
        return bool(s["gpus"]["bad"] == 0)

    def down(self, res: Resources) -> None:
        if self.extender is not None:
            self.extender.stop()
        self.unpublish(res)
        self.upgrade(dra=False)
        self.restart_scheduler(self.cluster.chart)
        self.session.start()
