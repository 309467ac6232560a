"""`topogang generate --from-cluster` on the e2e cluster's KWOK nodes: the written config validates, and an
extender started on it (Kubernetes mode, its own namespace, its own ports: the session's extender keeps
serving kube-scheduler) finds every node it names Ready and answers a filter with them.

The nodes are labelled the way a real cluster's are for the test (and the labels taken off afterwards):
rack 1 carries NVIDIA's NVLink clique label, racks 2 and 3 a rack label of the admin's, and one node of
rack 3 none, so the command's two rack labels, the uneven rack and the loose node are all exercised."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from config.from_nodes import CLIQUE_LABEL
from config.load import load_config
from tests.e2e.conftest import REPO, E2ECluster, Process, extender_command, free_port
from tests.e2e.helpers import GPU, PROFILE, gang_pod, http_json, http_status, wait_until

pytestmark = pytest.mark.e2e

RACK = "e2e.topogang.io/rack"
LOOSE = "a100-r3-n4"


def rack_labels(name: str) -> dict[str, str]:
    """a100-r1-*: the clique label; a100-r2/r3-*: the admin's rack label; LOOSE: none."""
    rack = name.rsplit("-", 1)[0]
    if name == LOOSE:
        return {}
    if rack.endswith("r1"):
        return {CLIQUE_LABEL: f"0f3a9c1e-e2e.{rack[-1]}"}
    return {RACK: rack}


@pytest.fixture
def labelled(e2e_cluster: E2ECluster) -> Iterator[list[str]]:
    """The GPU nodes' names, labelled for the test; the labels are taken off again."""
    core = e2e_cluster.core
    nodes: list[Any] = core.list_node().items
    names = [str(n.metadata.name) for n in nodes if int((n.status.capacity or {}).get(GPU, "0")) > 0]
    assert len(names) == 12, names
    for n in names:
        core.patch_node(n, {"metadata": {"labels": rack_labels(n)}})
    try:
        yield names
    finally:
        for n in names:
            core.patch_node(n, {"metadata": {"labels": {CLIQUE_LABEL: None, RACK: None}}})


def topogang(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*extender_command(), *args], capture_output=True, text=True, cwd=REPO, timeout=120, check=False
    )


def test_generate_from_cluster_writes_a_config_that_validates_and_serves(
    e2e_cluster: E2ECluster, labelled: list[str], tmp_path: Path
) -> None:
    out = tmp_path / "generated.yaml"
    gen = topogang(
        "generate", "--from-cluster", "--kubeconfig", str(e2e_cluster.kubeconfig),
        "--rack-label", CLIQUE_LABEL, "--rack-label", RACK, "--out", str(out),
    )  # fmt: skip
    assert gen.returncode == 0, gen.stderr
    assert f"carry none of the rack labels ({CLIQUE_LABEL}, {RACK}): {LOOSE}" in gen.stderr
    assert "A100 racks differ in size" in gen.stderr
    checked = topogang("validate", str(out))
    assert checked.returncode == 0, checked.stderr
    assert "OK\n" in checked.stdout and checked.stderr == "", checked.stderr

    doc = yaml.safe_load(out.read_text(encoding="utf-8"))
    tops = doc["physicalCluster"]["physicalCells"]
    assert [t["cellType"] for t in tops] == ["A100-4NODE-RACK"] * 2 + ["A100-3NODE-RACK", "A100-NODE"]
    racks = [[k["cellAddress"] for k in t["cellChildren"]] for t in tops[:3]]
    assert racks == [[f"a100-r{r}-n{i}" for i in range(1, 5 if r < 3 else 4)] for r in (1, 2, 3)]
    assert tops[3] == {"cellType": "A100-NODE", "cellAddress": LOOSE}
    loaded = load_config(out)
    assert loaded.analysis is not None

    serve(e2e_cluster, out, labelled)


def serve(cluster: E2ECluster, config: Path, nodes: list[str]) -> None:
    """The extender on the generated config, against the cluster: Ready with all 96 GPUs healthy (every
    node it names is a Ready Node), and a filter for an 8-GPU pod of VC `all` passes only whole free
    nodes of the cluster."""
    core = cluster.core
    ns = f"e2e-gen-{uuid.uuid4().hex[:6]}"
    core.create_namespace(client.V1Namespace.model_validate({"metadata": {"name": ns}}))
    port, verbs, admin = free_port(), free_port(), free_port()
    argv = [
        *extender_command(), "serve", "--kubeconfig", str(cluster.kubeconfig), "--config", str(config),
        "--listen", f"127.0.0.1:{port}", "--verbs-listen", f"127.0.0.1:{verbs}",
        "--admin-listen", f"127.0.0.1:{admin}", "--namespace", ns,
    ]  # fmt: skip
    log = cluster.workdir / "logs" / f"extender-generated-{ns}.log"
    proc = Process("extender-generated", argv, log, cwd=REPO)
    try:
        wait_until(
            "the extender on the generated config to be ready",
            lambda: (
                http_status(f"http://127.0.0.1:{port}/readyz", 2) == 200 or (not proc.alive() and "exited")
            ),
            90,
        )
        assert proc.alive(), proc.log()
        gpus = http_json(f"http://127.0.0.1:{admin}/v1/inspect")["gpus"]
        assert (gpus["total"], gpus["bad"]) == (96, 0), gpus

        body = gang_pod("probe", gang=f"{ns}/probe", vc="all", members=[(1, 8)], gpus=8)
        body.spec.scheduler_name = "e2e-nobody"  # stays Pending: no scheduler takes it, only this filter
        assert body.spec.scheduler_name != PROFILE
        pod: Any = core.create_namespaced_pod(ns, body)
        wire = client.ApiClient().sanitize_for_serialization(pod)  # type: ignore[no-untyped-call]
        answer = post_json(f"http://127.0.0.1:{verbs}/v1/extender/filter", {"Pod": wire, "NodeNames": nodes})
        assert not answer.get("Error"), answer
        assert answer["NodeNames"] and set(answer["NodeNames"]) <= set(nodes), answer
    finally:
        proc.stop()
        core.delete_namespace(ns)


def post_json(url: str, body: dict[str, Any]) -> Any:
    import json
    import urllib.request

    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())
