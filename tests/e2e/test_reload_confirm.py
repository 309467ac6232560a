"""A config edit through the Helm chart that would cost a running gang its guarantee, end to end: the
real extender behind the real kube-scheduler, the config changed by `helm upgrade` (the ConfigMap the
kubelet would mount: its keys are written as the mounted directory's files).

The edit (nlp shrunk from 3 nodes to 1 while nlp runs a 2-node gang) validates, so it used to apply
and silently downgrade the gang. It is refused, with the gang named, its digest, and a ConfigRejected
Event; `topogang diff --against` the running extender says the same. A second upgrade with
`confirmCapacityLoss` set to that digest applies it: the gang runs on, where it was, as opportunistic.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from scripts import manifests
from tests.e2e import chart
from tests.e2e.conftest import REPO, E2ECluster, Extender
from tests.e2e.helpers import pods_of, submit_gang, wait_running, wait_until
from tests.soak.layouts import without_rack

pytestmark = pytest.mark.e2e

NLP_NODES = "cellType: A100-RACK.A100-NODE\n      cellNumber: 3"


def config_file(ext: Extender) -> Path:
    return Path(ext.argv[ext.argv.index("--config") + 1])


def helm_upgrade(cluster: E2ECluster, *values: str) -> None:
    helm = manifests.helm_binary()
    assert helm is not None
    manifests.helm(helm, "upgrade", chart.RELEASE, str(manifests.CHART), "--reuse-values", *values,
                   "--kubeconfig", str(cluster.kubeconfig), "--timeout", "2m")  # fmt: skip


def mount(cluster: E2ECluster, ext: Extender) -> None:
    """What the kubelet does once the ConfigMap changed: each of its keys a file of the directory the
    extender's config is in (swapped in whole), and a key that is gone, a file that is gone."""
    pod = cluster.chart.extender["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if "configMap" in v]
    cm = cluster.core.read_namespaced_config_map(volume["configMap"]["name"], cluster.chart.namespace)
    data: dict[str, str] = cm.data or {}
    directory = config_file(ext).parent
    for key, value in data.items():
        tmp = directory / f".{key}.tmp"
        tmp.write_text(value, encoding="utf-8")
        tmp.replace(directory / key)
    for f in directory.iterdir():
        if not f.name.startswith(".") and f.name not in data:
            f.unlink()


def nlp_quota(ext: Extender) -> int:
    return int(ext.get("/v1/inspect")["virtualClusters"]["nlp"]["quota"])


def status_after(ext: Extender, result: str, before: str) -> dict[str, Any] | None:
    s = ext.get("/v1/config")
    return s if s["lastResult"] == result and (result != "applied" or s["appliedHash"] != before) else None


def test_helm_upgrade_that_downgrades_a_running_gang_needs_its_digest(
    e2e_cluster: E2ECluster, extender: Extender, gang_ns: str, tmp_path: Path
) -> None:
    core = e2e_cluster.core
    names = submit_gang(core, gang_ns, "big", 2, 8, "nlp", priority=10)
    before = {n: (p.node, p.gpus) for n, p in wait_running(core, gang_ns, names).items()}
    gang = f"{gang_ns}/big"
    original = config_file(extender).read_text(encoding="utf-8")
    assert NLP_NODES in original
    shrunk = tmp_path / "shrunk.yaml"
    shrunk.write_text(original.replace(NLP_NODES, NLP_NODES.replace("3", "1")), encoding="utf-8")
    try:
        applied = extender.get("/v1/config")["appliedHash"]
        helm_upgrade(e2e_cluster, "--set-file", f"config={shrunk}")
        mount(e2e_cluster, extender)
        refused = wait_until("the shrink refused", lambda: status_after(extender, "refused", applied), 60)
        assert refused["appliedHash"] == applied and nlp_quota(extender) == 24
        assert any(f"gang {gang} (VC nlp, 16 GPUs) loses its guarantee" in e for e in refused["lastErrors"])
        digest = refused["refusedDigest"]
        assert any(f"--set-string confirmCapacityLoss={digest}" in e for e in refused["lastErrors"])

        def refusal_event() -> str | None:
            for e in core.list_namespaced_event(e2e_cluster.chart.namespace).items:
                if e.reason == "ConfigRejected" and "refused" in str(e.message) and gang in str(e.message):
                    return str(e.message)
            return None

        assert "the running one stays in force" in wait_until("a ConfigRejected event", refusal_event, 30)

        # the admin's check before confirming: diff against the running extender names the same gang
        diff = subprocess.run(
            [sys.executable, str(REPO / "topogang_cli.py"), "diff", "--against", extender.admin_url,
             str(shrunk), "--json"],
            capture_output=True, text=True, check=False, cwd=REPO, timeout=60,
        )  # fmt: skip
        assert diff.returncode == 1, diff.stderr
        d = json.loads(diff.stdout)
        assert [g["gang"] for g in d["runningGangs"]["losesGuarantee"]] == [gang]
        assert d["confirmDigest"] == digest and d["refusedUnlessConfirmed"] is True

        # confirmed by its digest: applied, the gang keeps running where it was, as opportunistic
        helm_upgrade(e2e_cluster, "--set-string", f"confirmCapacityLoss={digest}")
        mount(e2e_cluster, extender)
        wait_until("the confirmed shrink applied", lambda: status_after(extender, "applied", applied), 60)
        assert nlp_quota(extender) == 8
        group = extender.get(f"/v1/inspect/affinitygroups/{gang}")["status"]
        assert group["priority"] == -1 and group["request"]["priority"] == 10
        assert {n: (p.node, p.gpus) for n, p in pods_of(core, gang_ns, names).items()} == before
    finally:
        back = tmp_path / "original.yaml"
        back.write_text(original, encoding="utf-8")
        helm_upgrade(e2e_cluster, "--set-file", f"config={back}", "--set-string", "confirmCapacityLoss=")
        mount(e2e_cluster, extender)
        wait_until("the original config back", lambda: nlp_quota(extender) == 24, 60)
        assert not (config_file(extender).parent / "confirm-capacity-loss").exists()


def test_a_restart_refuses_a_config_that_takes_out_a_running_pods_node_until_confirmed(
    e2e_cluster: E2ECluster, extender: Extender, gang_ns: str
) -> None:
    """The config on disk takes out the rack a running pod is on, and nobody confirmed it: the hot
    reload refuses that, and so must the next start (a rolling upgrade, a crash), or the refusal
    would last only until the process restarts. `topogang serve` exits naming the pod's node and
    the digest; confirmed by that digest, it starts, and the whole one-pod gang runs on, outside
    the config's books."""
    core = e2e_cluster.core
    (name,) = submit_gang(core, gang_ns, "solo", 1, 8, "nlp", priority=10)
    placed = wait_running(core, gang_ns, [name])[name]
    assert placed.node is not None
    rack = int(placed.node.split("-r")[1].split("-")[0])  # a100-r<rack>-n<node>
    cfg = config_file(extender)
    original = cfg.read_text(encoding="utf-8")
    confirm = cfg.parent / "confirm-capacity-loss"
    try:
        extender.stop()
        cfg.write_text(without_rack(original, rack), encoding="utf-8")
        rc, log = extender.run_until_exit()
        assert rc == 4 and "refused at the start" in log and f"{name} on {placed.node}" in log, log[-3000:]
        found = re.search(r"write ([0-9a-f]{16}) to the file confirm-capacity-loss", log)
        assert found is not None, log[-3000:]

        confirm.write_text(found.group(1), encoding="utf-8")
        extender.start()
        groups = extender.get("/v1/inspect/affinitygroups/")["items"]
        assert f"{gang_ns}/solo" not in [
            g["metadata"]["name"] for g in groups
        ]  # its node is not the config's
        assert wait_running(core, gang_ns, [name])[name].node == placed.node  # not evicted
    finally:
        extender.stop()
        cfg.write_text(original, encoding="utf-8")
        confirm.unlink(missing_ok=True)
        extender.start()
