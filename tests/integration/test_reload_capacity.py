"""A valid edit that would cost running gangs GPUs or their guarantee, against a real server:
`topogang diff --against` names the gangs and what they lose, and a hot reload refuses the edit
until the confirmation file names the edited config's digest."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from config.cli import cli_diff
from tests.integration.conftest import CONFIG, Pods, reloading
from tests.integration.test_reload import _nodes, vc_quota, wait_for
from tests.integration.test_server import schedule
from tests.polling import poll

NLP_NODES = "cellType: A100-RACK.A100-NODE\n      cellNumber: 3"
GONE_NODE = "a100-r3-n4"


def run_nlp_gangs(client: httpx.Client, pods: Pods) -> dict[str, str]:
    """Three one-node nlp gangs, the last on GONE_NODE; {gang: node}."""
    nodes = [n for n in _nodes(client) if n != GONE_NODE]
    out: dict[str, str] = {}
    for i in range(3):
        pod = pods.make(f"g{i}", "nlp", {"virtualCluster": "nlp", "priority": 10, "leafCellNumber": 8})
        node = schedule(client, pod, [GONE_NODE] if i == 2 else nodes)
        assert node is not None
        out[f"nlp/pod:{pod['metadata']['name']}"] = node
    assert out[next(reversed(out))] == GONE_NODE
    return out


def diff_json(capsys: pytest.CaptureFixture[str], url: str, new: Path) -> tuple[int, dict[str, Any]]:
    code = cli_diff(["--against", url, str(new), "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out)


def test_diff_against_names_what_running_gangs_lose_and_reload_needs_the_digest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "cluster.yaml"
    text = CONFIG.read_text()
    assert NLP_NODES in text and f"- cellAddress: {GONE_NODE}\n" in text
    config.write_text(text)
    grow = tmp_path / "grow.yaml"
    grow.write_text(text.replace(NLP_NODES, NLP_NODES.replace("3", "4")))
    shrink = tmp_path / "shrink.yaml"
    shrink.write_text(text.replace(NLP_NODES, NLP_NODES.replace("3", "2")))
    no_node = tmp_path / "no-node.yaml"
    # a rack has exactly 4 nodes: the node leaves the cluster and a new one takes its place
    no_node.write_text(text.replace(f"cellAddress: {GONE_NODE}\n", "cellAddress: a100-r3-n5\n"))
    with reloading(config) as (server, client):
        pods = Pods(client)
        gangs = run_nlp_gangs(client, pods)

        # grow a VC: a change, and no running gang loses anything
        code, d = diff_json(capsys, server.url, grow)
        assert code == 1 and d["virtualClusters"]["changed"][0]["newGpus"] == 32
        running = d["runningGangs"]
        assert running["checked"] == 3 and running["losesGuarantee"] == running["losesGpus"] == []
        assert d["refusedUnlessConfirmed"] is False

        # shrink a VC below what it runs: the newest gang runs on as opportunistic
        code, d = diff_json(capsys, server.url, shrink)
        (lost,) = d["runningGangs"]["losesGuarantee"]
        assert code == 1 and lost["gang"] in gangs and lost["vc"] == "nlp" and lost["keptGpus"] == 8
        assert d["runningGangs"]["losesGpus"] == [] and d["refusedUnlessConfirmed"] is True
        shrink_digest = d["confirmDigest"]

        # remove a node with a running pod: that gang loses all its GPUs
        code, d = diff_json(capsys, server.url, no_node)
        (cut,) = d["runningGangs"]["losesGpus"]
        assert cut["gang"] == next(g for g, n in gangs.items() if n == GONE_NODE)
        assert (cut["gpus"], cut["keptGpus"], cut["losesGuarantee"]) == (8, 0, False)
        assert d["nodes"]["removed"] == [GONE_NODE] and d["nodes"]["added"] == ["a100-r3-n5"]

        # the text form says the same, and how to confirm
        assert cli_diff(["--against", server.url, str(shrink)]) == 1
        out = capsys.readouterr().out
        assert f"! {lost['gang']} (VC nlp, 8 GPUs): loses its guarantee" in out
        assert f"put {shrink_digest} in the file confirm-capacity-loss" in out

        # the reload refuses the shrink: the running config stays
        applied = client.get("/v1/config").json()["appliedHash"]
        config.write_text(shrink.read_text())
        refused = wait_for(client, "refused")
        assert refused["appliedHash"] == applied and refused["refusedDigest"] == shrink_digest
        assert any(
            f"gang {lost['gang']} (VC nlp, 8 GPUs) loses its guarantee" in e for e in refused["lastErrors"]
        )
        assert any(
            f"write {shrink_digest} to {tmp_path / 'confirm-capacity-loss'}" in e
            for e in refused["lastErrors"]
        )
        assert vc_quota(client, "nlp") == 24
        assert 'topogang_config_reloads_total{result="refused"} 1.0' in client.get("/metrics").text

        # a confirmation that names anything but this config's digest confirms nothing
        confirm = tmp_path / "confirm-capacity-loss"
        confirm.write_text("true\n")
        wrong = wait_for_errors(client, "confirms true, not this config")
        assert wrong["lastResult"] == "refused" and vc_quota(client, "nlp") == 24

        # the digest confirms it: applied, the gang downgraded, every pod where it was
        confirm.write_text(shrink_digest + "\n")
        wait_for(client, "applied")
        assert vc_quota(client, "nlp") == 16
        group = client.get(f"/v1/inspect/affinitygroups/{lost['gang']}").json()["status"]
        assert group["priority"] == -1 and group["request"]["priority"] == 10
        bound = client.get("/v1/standalone/bindings").json()
        assert sorted(b["node"] for b in bound.values()) == sorted(gangs.values())

        # the confirmation stays in the file, but names only that edit: removing the node is refused
        config.write_text(no_node.read_text().replace(NLP_NODES, NLP_NODES.replace("3", "2")))
        again = wait_for(client, "refused")
        assert any(f"confirms {shrink_digest}, not this config" in e for e in again["lastErrors"])
        assert GONE_NODE in _nodes(client)
        pods.cleanup()


def wait_for_errors(client: httpx.Client, text: str) -> dict[str, Any]:
    status: dict[str, Any] = {}

    def reached() -> bool:
        status.update(client.get("/v1/config").json())
        return any(text in e for e in status["lastErrors"])

    poll(f"the config status to say {text!r}", reached, tries=150, interval=0.1)
    return status
