"""Hot reload against a real server: a valid edit applies with running pods kept, an invalid one is
rejected with its reason and changes nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from extender import kubesched
from tests.integration.conftest import CONFIG, Pods, reloading
from tests.integration.test_server import schedule
from tests.polling import poll


def wait_for(client: httpx.Client, result: str) -> dict[str, Any]:
    status: dict[str, Any] = {}

    def reached() -> bool:
        status.update(client.get("/v1/config").json())
        return bool(status["lastResult"] == result)

    poll(f"the config to reach {result!r}", reached, tries=150, interval=0.1)
    return status


def vc_quota(client: httpx.Client, vc: str) -> int:
    return int(client.get("/v1/inspect").json()["virtualClusters"][vc]["quota"])


def test_valid_edit_applies_without_restart_and_invalid_one_is_rejected(tmp_path: Path) -> None:
    config = tmp_path / "cluster.yaml"
    text = CONFIG.read_text()
    config.write_text(text)
    with reloading(config) as (_, client):
        nodes = _nodes(client)
        pods = Pods(client)
        pod = pods.make("keep", "nlp", {"virtualCluster": "nlp", "priority": 0, "leafCellNumber": 8})
        node = schedule(client, pod, nodes)
        assert node is not None
        before = vc_quota(client, "nlp")
        # grow nlp by one node, taken from the unpromised headroom
        config.write_text(text.replace("cellNumber: 3", "cellNumber: 4", 1))
        status = wait_for(client, "applied")
        assert vc_quota(client, "nlp") == before + 8
        bound = client.get("/v1/standalone/bindings").json()
        assert bound[pod["metadata"]["uid"]]["node"] == node  # the running pod kept its GPUs
        assert any("kept" in line for line in status["lastReport"])
        applied = status["appliedHash"]
        # an invalid edit: rejected with a precise reason, the running config stays
        config.write_text(text.replace("childCellNumber: 2", "childCellNumber: 0", 1))
        rejected = wait_for(client, "rejected")
        assert rejected["appliedHash"] == applied
        assert any("childCellNumber" in e for e in rejected["lastErrors"])
        assert vc_quota(client, "nlp") == before + 8
        metrics = client.get("/metrics").text
        assert 'topogang_config_reloads_total{result="applied"} 1.0' in metrics
        assert 'topogang_config_reloads_total{result="rejected"} 1.0' in metrics
        pods.cleanup()


def _nodes(client: httpx.Client) -> list[str]:
    return kubesched.node_names(client.get(kubesched.PHYSICAL_CLUSTER).json())


def test_reload_refuses_an_edit_that_validate_refuses_and_keeps_every_gpu(tmp_path: Path) -> None:
    """A misspelt childCellType once validated with a warning and a reload halved the cluster."""
    config = tmp_path / "cluster.yaml"
    text = CONFIG.read_text()
    assert "childCellType: A100-SWITCH" in text
    config.write_text(text)
    with reloading(config) as (_, client):
        before = client.get("/v1/inspect").json()
        applied = client.get("/v1/config").json()["appliedHash"]
        config.write_text(text.replace("childCellType: A100-SWITCH", "childCellType: A100-SWTICH", 1))
        rejected = wait_for(client, "rejected")
        assert rejected["appliedHash"] == applied
        (line,) = [e for e in rejected["lastErrors"] if "A100-HALF.childCellType" in e]
        assert line.startswith(f"{config}: physicalCluster.cellTypes.A100-HALF.childCellType: ")
        assert "did you mean 'A100-SWITCH'?" in line
        after = client.get("/v1/inspect").json()
        assert after["virtualClusters"] == before["virtualClusters"]
        assert len(_nodes(client)) == 12
