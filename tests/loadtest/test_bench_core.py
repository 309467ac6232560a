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


def test_the_report_names_both_rates_and_one_goal(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_core.main(["--nodes", "16", "--decisions", "300"]) == 0
    out = capsys.readouterr().out
    assert "topogang" in out and "first-fit" in out
    assert "goal >= 5,000/s" in out
    # the ratio to first-fit is printed for information only: no goal, no verdict on its line
    (ratio,) = [line for line in out.splitlines() if line.startswith("ratio")]
    assert "first-fit" in ratio and "no goal" in ratio and "PASS" not in ratio and "FAIL" not in ratio


def test_the_steady_rate_is_timed_after_the_cluster_is_filled() -> None:
    from config.generate import generate_spec

    r = bench_core.steady_rate(generate_spec(nodes=16, rack_size=8), 0.5, 200, seed=3)
    assert r["decisions"] == 200 and r["gpus"] == 128
    assert 0.4 <= r["fill"] <= 0.5  # warmed up to the fill before the clock started
    assert r["placed"] > 100 and r["rate"] > 0 and r["cpu_rate"] > 0


def test_the_job_stream_is_made_lazily_and_holds_the_same_jobs() -> None:
    stream = bench_core.job_stream(["a", "b"], 50, seed=3)
    assert not isinstance(stream, list)
    assert list(stream) == bench_core.make_jobs(["a", "b"], 50, seed=3)
