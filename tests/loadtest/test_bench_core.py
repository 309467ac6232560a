"""`loadtest.bench_core` on a small cluster: both schedulers replay the same jobs and the core's
decisions are counted (no timing is asserted; speed is only ever printed)."""

from __future__ import annotations

import pytest

from loadtest import bench_core


def test_both_schedulers_replay_the_same_jobs_and_place_nearly_all() -> None:
    r = bench_core.bench(nodes=16, fill=0.5, decisions=400, seed=3)
    assert r["decisions"] == 400 and r["gpus"] == 128
    # at half fill, with the oldest jobs released to make room, nearly every job fits in both
    assert r["core_placed"] > 300 and r["firstfit_placed"] > 300
    assert r["core_rate"] > 0 and r["firstfit_rate"] > 0
    assert r["ratio"] == pytest.approx(r["core_rate"] / r["firstfit_rate"])


def test_the_report_names_both_rates_and_both_goals(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_core.main(["--nodes", "16", "--decisions", "300"]) == 0
    out = capsys.readouterr().out
    assert "topogang" in out and "first-fit" in out
    assert "goal >= 5,000/s" in out and "goal >= 0.5x" in out
