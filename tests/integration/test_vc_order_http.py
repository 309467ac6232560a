"""`topogang.vcQueueing` against a real `topogang serve` over HTTP: by default a VC's later gang waits
[Queued] behind its older gang that waits for room, and is told which; `BestEffortFIFO` in the
config lets it go on. A bad value is refused at load with the key's path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from config import ConfigError
from config.load import load_config_text
from extender import kubesched
from tests.integration.conftest import CONFIG, Pods, reloading, running_server
from tests.integration.test_server import schedule


def nlp_gang(pods: Pods, name: str, n: int) -> list[dict[str, Any]]:
    spec = {
        "virtualCluster": "nlp",
        "leafCellNumber": 8,
        "affinityGroup": {"name": f"{name}-{pods.run}", "members": [{"podNumber": n, "leafCellNumber": 8}]},
    }
    return [pods.make(f"{name}-{i}", "nlp", spec) for i in range(n)]


def filtered(client: httpx.Client, pod: dict[str, Any], nodes: list[str]) -> tuple[list[str], str]:
    r = client.post("/v1/extender/filter", json={"Pod": pod, "NodeNames": nodes}).json()
    why = " ".join(
        [*(r.get("FailedNodes") or {}).values(), *(r.get("FailedAndUnresolvableNodes") or {}).values()]
    )
    return list(r.get("NodeNames") or []), why


def big_gang_after_one(client: httpx.Client, pods: Pods, nodes: list[str]) -> tuple[list[str], str]:
    """nlp runs a one-node gang; then a three-node gang (nlp's whole quota) is filtered: what passed
    for it, and why not."""
    assert schedule(client, nlp_gang(pods, "one", 1)[0], nodes) is not None
    return filtered(client, nlp_gang(pods, "big", 3)[0], nodes)


def small_gang_behind_a_big_one(config: Path) -> tuple[list[str], str, str, str | None]:
    """nlp runs a one-node gang, a three-node gang waits for nlp's quota; a later one-node gang is
    explained, then filtered. What passed for it, why not, the big gang's name, and what the
    explain API said it waits behind."""
    with running_server(config) as srv, srv.client(timeout=10.0) as client:
        nodes = kubesched.node_names(client.get(kubesched.PHYSICAL_CLUSTER).json())
        pods = Pods(client)
        try:
            passed, why = big_gang_after_one(client, pods, nodes)
            assert not passed and "[InsufficientQuota]" in why, why
            small = nlp_gang(pods, "small", 1)[0]
            explained = client.post("/v1/explain", json=small).json()
            passed, why = filtered(client, small, nodes)
            return passed, why, f"nlp/big-{pods.run}", explained.get("queuedBehind")
        finally:
            pods.cleanup()


def test_a_later_gang_waits_behind_the_vcs_older_gang_by_default() -> None:
    passed, why, big, behind = small_gang_behind_a_big_one(CONFIG)
    assert not passed and "[Queued]" in why and f"gang {big}" in why, why
    assert behind == f"gang {big}"


def test_best_effort_fifo_in_the_config_lets_it_go_on(tmp_path: Path) -> None:
    config = tmp_path / "cluster.yaml"
    config.write_text(CONFIG.read_text(encoding="utf-8") + "  vcQueueing: BestEffortFIFO\n", encoding="utf-8")
    passed, why, _, behind = small_gang_behind_a_big_one(config)
    assert passed and behind is None, why


def test_a_bad_value_names_its_path() -> None:
    with pytest.raises(ConfigError) as info:
        load_config_text(CONFIG.read_text(encoding="utf-8") + "  vcQueueing: Fifo\n", "c.yaml")
    got = dict(info.value.errors)
    assert "topogang.vcQueueing" in got and "StrictFIFO" in got["topogang.vcQueueing"], got


def test_a_hot_reload_switches_the_order(tmp_path: Path) -> None:
    """Queued under the default, the later gang places once the admin's edit to BestEffortFIFO is
    applied, without a restart."""
    from tests.integration.test_reload import wait_for

    config = tmp_path / "cluster.yaml"
    text = CONFIG.read_text(encoding="utf-8")
    config.write_text(text, encoding="utf-8")
    with reloading(config) as (_, client):
        nodes = kubesched.node_names(client.get(kubesched.PHYSICAL_CLUSTER).json())
        pods = Pods(client)
        assert not big_gang_after_one(client, pods, nodes)[0]
        small = nlp_gang(pods, "small", 1)[0]
        passed, why = filtered(client, small, nodes)
        assert not passed and "[Queued]" in why, why
        config.write_text(text + "  vcQueueing: BestEffortFIFO\n", encoding="utf-8")
        wait_for(client, "applied")
        passed, why = filtered(client, small, nodes)
        assert passed, why
        pods.cleanup()
