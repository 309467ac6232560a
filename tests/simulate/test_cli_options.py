"""`topogang simulate` options for other weeks, other clusters and the locality model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadtest.simulate.cli import main

# 60 rows of the Philly trace (every 300th job submitted 2017-10-23 .. 2017-11-12), see data/README.md
SAMPLE = Path(__file__).resolve().parent / "data" / "philly_sample_3_weeks.csv"
EXAMPLES = Path(__file__).resolve().parents[2] / "config" / "examples"


def _run(tmp_path: Path, *args: str) -> dict:  # type: ignore[type-arg]
    out = tmp_path / "o"
    assert main(["--trace", str(SAMPLE), "--out", str(out), "--no-progress", *args]) == 0
    return json.loads((out / "metrics.json").read_text())  # type: ignore[no-any-return]


def test_week_slices_a_longer_trace(tmp_path: Path) -> None:
    data = _run(tmp_path, "--week", "2017-10-30", "--policies", "first-fit")
    assert data["jobs"] == 13 and "1 week(s) from 2017-10-30" in data["trace"]
    three = _run(tmp_path, "--week", "2017-10-23", "--weeks", "3", "--policies", "first-fit")
    assert three["jobs"] == 60


def test_nodes_and_rack_size_resize_the_cluster(tmp_path: Path) -> None:
    data = _run(tmp_path, "--nodes", "40", "--rack-size", "4", "--policies", "topogang", "kueue-like")
    assert data["cluster"]["total_gpus"] == 320 and data["cluster"]["rack_size"] == 4
    assert sum(data["cluster"]["quotas_nodes"].values()) == 40


def test_locality_model_none_keeps_traced_run_times(tmp_path: Path) -> None:
    data = _run(tmp_path, "--locality-model", "none", "--policies", "first-fit")
    assert data["locality_model"] == {
        "name": "none",
        "factors": {"half": 1.0, "node": 1.0, "rack": 1.0, "racks": 1.0},
    }
    ff = data["policies"]["first-fit"]
    assert ff["jct"]["all"]["mean"] == pytest.approx(
        ff["queueing"]["all"]["mean"] + _mean_duration(), rel=1e-9
    )


def test_run_time_noise_replays_the_week_seeded_and_says_so(tmp_path: Path) -> None:
    ff = ["--policies", "first-fit"]
    plain = _run(tmp_path, *ff)
    one = _run(tmp_path, *ff, "--run-time-noise", "0.01", "--noise-seed", "1")
    again = _run(tmp_path, *ff, "--run-time-noise", "0.01", "--noise-seed", "1")
    other = _run(tmp_path, *ff, "--run-time-noise", "0.01", "--noise-seed", "2")
    assert "run_time_noise" not in plain and one["run_time_noise"] == {"fraction": 0.01, "seed": 1}

    def jct(d: dict) -> float:  # type: ignore[type-arg]
        return float(d["policies"]["first-fit"]["jct"]["all"]["mean"])

    assert jct(one) == jct(again) != jct(other)
    assert jct(one) == pytest.approx(jct(plain), rel=0.01) and jct(one) != jct(plain)
    report = (tmp_path / "o" / "report.md").read_text()
    assert "every run time scaled by a factor in [0.99, 1.01] (seed 2" in report


def test_checkpoint_every_saves_every_job_and_says_so(tmp_path: Path) -> None:
    data = _run(tmp_path, "--policies", "topogang", "--checkpoint-every", "0.5")
    assert data["checkpoint_seconds"] == 1800
    assert "every job saves its work every 0.5 h" in (tmp_path / "o" / "report.md").read_text()
    assert "checkpoint_seconds" not in _run(tmp_path, "--policies", "topogang")


def test_no_plots_writes_the_report_and_json_alone(tmp_path: Path) -> None:
    data = _run(tmp_path, "--policies", "first-fit", "--no-plots")
    assert data["policies"]["first-fit"]["completed"] > 0
    assert not list((tmp_path / "o").glob("*.png"))
    assert "Plots not drawn (`--no-plots`)." in (tmp_path / "o" / "report.md").read_text()


def _mean_duration() -> float:
    lines = SAMPLE.read_text().splitlines()[1:]
    return sum(float(x.split(",")[1]) for x in lines) / len(lines)


CONFIG = """
physicalCluster:
  cellTypes:
    G-SWITCH: {childCellType: G, childCellNumber: 2}
    G-HALF: {childCellType: G-SWITCH, childCellNumber: 2}
    G-NODE: {childCellType: G-HALF, childCellNumber: 2, isNodeLevel: true}
    G-RACK: {childCellType: G-NODE, childCellNumber: 2}
  physicalCells:
  - cellType: G-RACK
    cellChildren: [{cellAddress: r1-n1}, {cellAddress: r1-n2}]
  - cellType: G-RACK
    cellChildren: [{cellAddress: r2-n1}, {cellAddress: r2-n2}]
virtualClusters:
  "6214e9":
    virtualCells: [{cellType: G-RACK.G-NODE, cellNumber: 2}]
  "6c71a0":
    virtualCells: [{cellType: G-RACK.G-NODE, cellNumber: 1}]
  "11cb48":
    virtualCells: [{cellType: G-RACK.G-NODE, cellNumber: 1}]
"""


def test_config_simulates_the_users_own_cluster(tmp_path: Path) -> None:
    cfg = tmp_path / "mine.yaml"
    cfg.write_text(CONFIG)
    data = _run(tmp_path, "--config", str(cfg))
    assert data["cluster"] == {
        "nodes": 4,
        "gpus_per_node": 8,
        "rack_size": 2,
        "total_gpus": 32,
        "quotas_nodes": {"11cb48": 1, "6214e9": 2, "6c71a0": 1},
    }
    tg = data["policies"]["topogang"]
    # the sample's jobs of those three VCs run (12 + 18 + 17); the other VCs' 13 are dropped
    assert tg["completed"] == 47 and tg["dropped"] == {"VC without quota": 13}
    assert "from `mine.yaml`" in (tmp_path / "o" / "report.md").read_text()


@pytest.mark.parametrize(
    ("example", "words"),
    [
        ("gb200-nvl72.yaml", "physicalCluster: the simulator needs 8-GPU nodes; found nodes of 4 GPUs"),
        ("dgx1-v100.yaml", "virtualClusters.interns: quota of 12 GPUs is not whole 8-GPU nodes"),
    ],
)
def test_a_config_the_simulator_cannot_model_is_refused_with_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], example: str, words: str
) -> None:
    assert main(["--config", str(EXAMPLES / example), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert example in err and words in err


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--week", "23/10/2017"], "not a date YYYY-MM-DD"),
        (["--week", "2017-10-23", "--weeks", "0"], "--weeks must be positive"),
        (["--week", "2030-01-01"], "no jobs in"),
        (["--nodes", "10", "--rack-size", "4"], "does not fill racks"),
        (["--nodes", "0"], "must be positive"),
        (["--slowdown", "rack=0.5"], "must be >= 1"),
        (["--config", "missing.yaml"], "no such file"),
        (["--config", "x.yaml", "--nodes", "8"], "leave out --nodes"),
        (["--run-time-noise", "1.5"], "--run-time-noise must be at least 0 and below 1"),
        (["--checkpoint-every", "0"], "--checkpoint-every must be at least a second"),
        (["--noise-seed", "3"], "--noise-seed needs --run-time-noise"),
    ],
)
def test_bad_options_exit_2_and_say_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], words: str
) -> None:
    assert main(["--trace", str(SAMPLE), "--out", str(tmp_path), "--no-progress", *args]) == 2
    assert words in capsys.readouterr().err
