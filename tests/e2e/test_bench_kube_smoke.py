"""`make bench-kube` runs end to end at a tiny size on its own control plane (e2e only): both runs
bind every pod, the scheduler's metrics are read, the goals are printed with a verdict and the JSON
written. No speed is asserted; a gang seen partially bound past its TTL would fail the bench's own
goal, which is checked here as a count. The DRA runs (GPUs through ResourceClaims: topogang allocating
them, then kube-scheduler's DynamicResources) bind every pod too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadtest import bench_kube

pytestmark = pytest.mark.e2e


def test_bench_kube_runs_at_a_tiny_size(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_kube.main(["--nodes", "16", "--jobs", "12", "--threads", "2", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    doc = json.loads((tmp_path / "bench-kube.json").read_text())
    assert doc["error"] == "", doc["error"]
    phases = {p["name"]: p for p in doc["phases"]}
    assert set(phases) == {"topogang", "stock", "topogang-dra", "stock-dra"}
    for p in phases.values():
        assert p["bound"] == p["pods"] == doc["meta"]["pods"]
        assert p["metrics"].get("attempts scheduled", 0) >= p["pods"]
    assert phases["topogang"]["violations"] == phases["topogang-dra"]["violations"] == []
    for g in doc["goals"]:
        assert ("PASS" if g["pass"] else "FAIL") in out
