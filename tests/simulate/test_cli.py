"""`topogang simulate` end to end on a ~50-job slice, and its progress bar."""

from __future__ import annotations

import importlib.util
import io
import json
import random
from pathlib import Path

import pytest

from loadtest.simulate.cli import DEFAULT_TRACE, Progress, main
from topogang_cli import main as topogang_main

VCS = ["6214e9", "b436b2", "ee9e8c", "7f04ca", "6c71a0", "0e4a51", "11cb48", "e13805"]


def slice_csv(tmp_path: Path, n: int = 50) -> Path:
    """The first `n` rows of the shipped week when it is there, else a synthetic slice like it."""
    p = tmp_path / "slice.csv"
    if DEFAULT_TRACE.exists():
        lines = DEFAULT_TRACE.read_text().splitlines()[: n + 1]
        p.write_text("\n".join(lines) + "\n")
        return p
    rng = random.Random(1)
    rows = ["timestamp,duration,num_gpus,gpu_time,cluster"]
    for i in range(n):
        g = rng.choice([1, 1, 1, 2, 4, 8, 16])
        d = rng.randint(60, 20000)
        rows.append(f"2017-10-23 {i // 60:02d}:{i % 60:02d}:00,{d}.0,{g},{d * g}.0,{rng.choice(VCS)}")
    p.write_text("\n".join(rows) + "\n")
    return p


def test_simulate_writes_the_report_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert (
        topogang_main(["simulate", "--trace", str(slice_csv(tmp_path)), "--out", str(out), "--limit", "50"])
        == 0
    )
    captured = capsys.readouterr()
    assert "G3a" in captured.out and "wrote" in captured.out
    assert "\r[" in captured.err and captured.err.endswith("\n")  # the progress bar
    report = (out / "report.md").read_text()
    for policy in ("topogang", "hived-like", "first-fit", "first-fit-elastic", "private"):
        assert policy in report
    assert "| G3a |" in report and "## Sharing anomaly per VC" in report
    data = json.loads((out / "metrics.json").read_text())
    assert data["jobs"] == 50
    assert set(data["policies"]) == {"topogang", "hived-like", "first-fit", "first-fit-elastic", "private"}
    assert data["cluster"]["total_gpus"] == 640
    tg = data["policies"]["topogang"]
    assert tg["completed"] + sum(tg["dropped"].values()) == 50
    assert {g["id"] for g in data["goals"]} >= {"G3a", "G3b", "G3c", "G4a", "G5a"}
    if importlib.util.find_spec("matplotlib") is not None:
        for png in ("queueing_cdf.png", "vc_p95.png", "gpus_over_time.png"):
            assert (out / png).read_bytes()[:4] == b"\x89PNG"
        assert "![queueing_cdf.png](queueing_cdf.png)" in report
    else:
        assert "Plots skipped" in report


def test_policies_and_days_can_be_chosen(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "o"
    args = [
        "--trace",
        str(slice_csv(tmp_path, 20)),
        "--out",
        str(out),
        "--policies",
        "first-fit",
        "hived-like",
    ]
    assert main([*args, "--days", "1", "--no-progress"]) == 0
    assert capsys.readouterr().err == ""
    data = json.loads((out / "metrics.json").read_text())
    assert set(data["policies"]) == {"first-fit", "hived-like"}


def test_bad_arguments_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--trace", str(tmp_path / "missing.csv"), "--out", str(tmp_path)]) == 2
    assert "cannot read the trace" in capsys.readouterr().err
    assert main(["--limit", "0"]) == 2
    with pytest.raises(SystemExit):
        main(["--policies", "nope"])


def test_progress_bar_redraws_one_line() -> None:
    buf = io.StringIO()
    bar = Progress(10, stream=buf, width=10)
    bar.update("topogang", 5, force=True)
    bar.update("topogang", 10, force=True)
    bar.close()
    text = buf.getvalue()
    assert text.count("\r") == 2 and text.endswith("\n")
    assert "[#####-----]  50.0%" in text and "[##########] 100.0%" in text
