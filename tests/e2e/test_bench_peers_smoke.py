"""`make bench-peers` runs end to end at a tiny size (e2e only): topogang, the real Kueue and the
stock kube-scheduler each on a fresh control plane of 16 KWOK nodes, a dozen jobs of the Philly
slice at 600x (a gang among them), each arm stopping by itself. Checked: every arm ran without an
API error, every measured job started and got its completion time from the harness (KWOK ended
its pods: the lag was measured), Kueue admitted the jobs through its webhooks (it also counts as
scheduler CPU), the table and JSON were written and the goals carry a verdict. No speed is asserted.

Skipped only when the Kueue binary is missing (`scripts/e2e/build-bins.sh kueue`), and then
failed instead when TOPOGANG_E2E_REQUIRE_KUEUE=1 (.ci/run sets it once the binary is built)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from loadtest import bench_peers
from loadtest.kueue_plane import e2e_setting, kueue_binary

pytestmark = pytest.mark.e2e


def test_bench_peers_runs_three_arms_at_a_tiny_size(tmp_path: Path) -> None:
    if kueue_binary() is None:
        msg = "no kueue binary: scripts/e2e/build-bins.sh kueue builds it"
        if os.environ.get("TOPOGANG_E2E_REQUIRE_KUEUE") == "1":
            pytest.fail(f"TOPOGANG_E2E_REQUIRE_KUEUE=1 but {msg}", pytrace=False)
        pytest.skip(msg)
    argv = ["--nodes", "16", "--limit", "12", "--hours", "2", "--drain-hours", "1", "--factor", "600"]
    assert bench_peers.main([*argv, "--out", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "bench-peers.json").read_text())
    assert doc["errors"] == {}
    live = {c["name"]: c for c in doc["columns"] if c["live"]}
    assert set(live) == {"topogang", "kueue", "stock"}
    for name, col in live.items():
        assert col["error_count"] == 0, (name, col["errors"])
        assert col["unstarted"] == 0, name
        assert col["started"] >= 10, name
        assert col["kwok_lag_p95"] is not None, f"{name}: KWOK ended no pod"
        assert col["scheduler_metrics"].get("attempts scheduled", 0) >= col["started"], name
    # the placing components' CPU, each measured apart: the extender's and Kueue's as well as
    # kube-scheduler's, which together make the total the table compares
    parts = {name: set(col["scheduler_cpu_by_component"]) for name, col in live.items()}
    assert parts == {
        "topogang": {"kube-scheduler", "extender"},
        "kueue": {"kube-scheduler", "kueue"},
        "stock": {"kube-scheduler"},
    }
    for name, col in live.items():
        spent = col["scheduler_cpu_by_component"]
        assert all(secs > 0 for secs in spent.values()), (name, spent)
        assert sum(spent.values()) == pytest.approx(col["scheduler_cpu_seconds"]), name
    # every failed attempt of topogang's arm is read back from kube-scheduler's log with its wait
    waits = live["topogang"]["unschedulable_by"]
    assert waits is not None
    assert sum(waits.values()) == live["topogang"]["scheduler_metrics"].get("attempts unschedulable", 0)
    assert all(col["pods_bound"] >= col["started"] for col in live.values())
    assert doc["meta"]["kueue"] == e2e_setting("KUEUE_VERSION")
    assert {g["id"] for g in doc["goals"]} >= {"G3a", "G3c", "G4", "G5b", "P"}
    table = (tmp_path / "bench-peers.md").read_text()
    assert "| metric | topogang | kueue | stock |" in table
    assert "| scheduler CPU s by component | kube-scheduler " in table
    assert "| kube-scheduler attempts: scheduled / unschedulable | " in table
    assert "| unschedulable attempts by the extender's wait | " in table
