"""A namespace's bound on reservations not yet filled (`topogang.tenants.<ns>.maxReservedGpus`)
against a real `topogang serve` over HTTP: a gang that would pass it waits [TenantLimit] and
`/v1/explain` says so; the admin's edit raising the bound is applied without a restart."""

from __future__ import annotations

from pathlib import Path

from extender import kubesched
from tests.integration.conftest import CONFIG, Pods, reloading
from tests.integration.test_vc_order_http import filtered, nlp_gang

BOUNDED = "  tenants:\n    nlp: {maxReservedGpus: %d}\n"


def test_a_gang_past_the_bound_waits_and_a_reload_raising_it_lets_it_go(tmp_path: Path) -> None:
    from tests.integration.test_reload import wait_for

    config = tmp_path / "cluster.yaml"
    text = CONFIG.read_text(encoding="utf-8")
    config.write_text(text + BOUNDED % 16, encoding="utf-8")
    with reloading(config) as (_, client):
        nodes = kubesched.node_names(client.get(kubesched.PHYSICAL_CLUSTER).json())
        pods = Pods(client)
        try:
            passed, why = filtered(client, nlp_gang(pods, "first", 2)[0], nodes)  # 16 GPUs reserved
            assert passed, why
            later = nlp_gang(pods, "later", 1)[0]
            explained = client.post("/v1/explain", json=later).json()
            assert "topogang.tenants.nlp.maxReservedGpus (16)" in explained.get("tenantLimit", ""), explained
            passed, why = filtered(client, later, nodes)
            assert not passed and "[TenantLimit]" in why and "hold 16 GPUs" in why, why
            config.write_text(text + BOUNDED % 24, encoding="utf-8")
            wait_for(client, "applied")
            assert "tenantLimit" not in client.post("/v1/explain", json=later).json()
            passed, why = filtered(client, later, nodes)
            assert passed, why
        finally:
            pods.cleanup()
