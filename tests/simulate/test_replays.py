"""`loadtest.simulate.replays`: the same week replayed with run-time noise, summed up per week."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadtest.simulate import weeks
from loadtest.simulate.replays import Replay, main, table
from tests.simulate.test_cli_options import SAMPLE


def test_the_table_gives_medians_ranges_and_how_often_each_target_and_goal_held() -> None:
    rs = [
        Replay("w", 0, 100.0, 50.0, 2.0, 1.0, {"G3c": True, "G4": False}),
        Replay("w", 1, 40.0, 50.0, 0.5, 1.0, {"G3c": False, "G4": False}),
        Replay("w", 2, 70.0, 60.0, 1.0, 1.0, {"G3c": True, "G4": False}),
    ]
    lines = table(rs, 0.001)
    assert lines[0].startswith("3 replays per week, run times within 0.10%")
    row = lines[-1].split(" | ")
    assert row[1:4] == ["70 [40-100]", "50 [50-60]", "1/3"]  # only replay 1 lost no more than the peer
    assert row[4:7] == ["1.00 [0.50-2.00]", "1.00 [1.00-1.00]", "2/3"]
    assert row[7] == "G4 (3/3), G3c (1/3) |"


def test_replays_of_a_week_differ_and_are_written(tmp_path: Path) -> None:
    out = tmp_path / "r"
    argv = ["--trace", str(SAMPLE), "--out", str(out), "--replays", "2", "--workers", "1", "--noise", "0.05"]
    assert main([*argv, "2017-10-23", "--", "--policies", "topogang", "kueue-like"]) == 0
    doc = json.loads((out / "replays.json").read_text())
    assert [(r["week"], r["seed"]) for r in doc] == [("2017-10-23", 0), ("2017-10-23", 1)]
    runs = [json.loads((out / "2017-10-23" / f"replay-{k}" / "metrics.json").read_text()) for k in (0, 1)]
    assert [r["run_time_noise"]["seed"] for r in runs] == [0, 1]
    jct = [r["policies"]["topogang"]["jct"]["all"]["mean"] for r in runs]
    assert jct[0] != jct[1]
    assert "| 2017-10-23 |" in (out / "replays.md").read_text()


def test_a_week_without_multi_gpu_jobs_reads_as_no_queueing() -> None:
    multi_free = {"queueing": {"multi": None}, "lost_gpu_hours": 1.0}
    doc = {"policies": {"topogang": multi_free, "kueue-like": multi_free}, "goals": []}
    r = Replay.read("w", 0, doc)
    assert (r.p95, r.peer_p95, r.p95_met, r.lost_met) == (0.0, 0.0, True, True)


def test_bad_options_exit_2(tmp_path: Path) -> None:
    assert main(["--out", str(tmp_path), "--replays", "0", "shipped"]) == 2
    assert main(["--out", str(tmp_path), "--noise", "0", "shipped"]) == 2


def test_a_window_of_weeks_is_replayed_whole_and_named_as_weeks_names_it(tmp_path: Path) -> None:
    out, one = tmp_path / "r", tmp_path / "one"
    once = ["--trace", str(SAMPLE), "--replays", "1", "--workers", "1"]
    policies = ["--", "--policies", "topogang", "kueue-like"]
    assert main([*once, "--out", str(out), "--weeks", "2", "2017-10-23", *policies]) == 0
    doc = json.loads((out / "replays.json").read_text())
    assert [(r["week"], r["seed"]) for r in doc] == [("2017-10-23+2w", 0)]
    run = json.loads((out / "2017-10-23+2w" / "replay-0" / "metrics.json").read_text())
    assert main([*once, "--out", str(one), "2017-10-23", *policies]) == 0
    week = json.loads((one / "2017-10-23" / "replay-0" / "metrics.json").read_text())
    assert run["jobs"] > week["jobs"]  # the second week's jobs are in the window
    assert "| 2017-10-23+2w |" in (out / "replays.md").read_text()


def test_the_shipped_week_has_no_window(tmp_path: Path) -> None:
    assert main(["--out", str(tmp_path), "--weeks", "2", "shipped"]) == 2
    assert main(["--out", str(tmp_path), "--weeks", "0", "2017-10-23"]) == 2


def test_weeks_refuses_a_window_from_the_shipped_week_as_replays_does(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exc:
        weeks.main(["--out", str(tmp_path), "--weeks", "4", "shipped"])
    assert exc.value.code == 2
    assert weeks.window_error(["2017-10-23"], 4) is None
    assert weeks.window_error(["shipped"], 1) is None
    assert weeks.window_error(["2017-10-23"], 0) == "--weeks must be positive"
