"""`topogang simulate` end to end on a ~50-job slice, and its progress bar."""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import tomllib
from pathlib import Path

import pytest

from loadtest.simulate import cli
from loadtest.simulate.cli import DEFAULT_TRACE, Progress, main
from topogang_cli import main as topogang_main


def slice_csv(tmp_path: Path, n: int = 50) -> Path:
    """The first `n` rows of the shipped week."""
    p = tmp_path / "slice.csv"
    lines = DEFAULT_TRACE.read_text().splitlines()[: n + 1]
    p.write_text("\n".join(lines) + "\n")
    return p


def test_the_default_trace_ships_inside_the_package_with_its_provenance() -> None:
    """`topogang simulate` needs nothing beside the repository or the installed wheel."""
    assert DEFAULT_TRACE.is_relative_to(Path(cli.__file__).resolve().parent)
    data = DEFAULT_TRACE.read_bytes()
    readme = (DEFAULT_TRACE.parent / "README.md").read_text()
    assert hashlib.sha256(data).hexdigest() in readme  # the README describes exactly this file
    assert len(data) == 332_028 and data.count(b"\n") == 7_748 + 1
    assert "USENIX ATC '19" in readme and "CC BY 4.0" in readme
    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    globs = pyproject["tool"]["setuptools"]["package-data"]["loadtest.simulate"]
    assert any(DEFAULT_TRACE.match(f"*/loadtest/simulate/{g}") for g in globs)


def test_simulate_without_arguments_reads_the_shipped_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No --trace and no --out, run from an empty directory: the shipped week, results/ under it."""
    monkeypatch.chdir(tmp_path)
    assert main(["--days", "0.25", "--policies", "topogang", "--no-progress"]) == 0
    data = json.loads((tmp_path / "results" / "simulate" / "metrics.json").read_text())
    assert data["trace"].startswith(DEFAULT_TRACE.name) and str(tmp_path) not in data["trace"]
    assert 0 < data["jobs"] < 7_748
    assert "G3a" in capsys.readouterr().out


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
    for policy in ("topogang", "hived-like", "first-fit", "first-fit-elastic", "kueue-like", "private"):
        assert policy in report
    assert "| G3a |" in report and "## Sharing anomaly per VC" in report
    assert "Zhao et al., OSDI '20" in report  # the goals say where their targets come from, in the report
    # kueue-like's calibration against the real Kueue, as shipped (loadtest/simulate/data)
    assert "## kueue-like against the real Kueue" in report and "| preemptions | 15 | 68 |" in report
    data = json.loads((out / "metrics.json").read_text())
    assert data["jobs"] == 50
    assert set(data["policies"]) == {
        "topogang",
        "hived-like",
        "first-fit",
        "first-fit-elastic",
        "kueue-like",
        "private",
    }
    assert data["cluster"]["total_gpus"] == 640
    tg = data["policies"]["topogang"]
    assert tg["completed"] + sum(tg["dropped"].values()) == 50
    assert {g["id"] for g in data["goals"]} >= {"G3a", "G3c", "G3c-multi", "G4", "G5a", "G5b", "P"}
    assert "## Lost work per VC" in report
    for p in data["policies"].values():  # every lost GPU-hour is one VC's reclaim and another's loss
        per_vc = p["lost_per_vc"].values()
        for key in ("ended", "lost"):
            assert sum(v[key] for v in per_vc) == pytest.approx(p["lost_gpu_hours"])
    assert data["locality_model"]["name"] == "published" and "JCT mean, multi-GPU jobs (h)" in report
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
    assert "against the real Kueue" not in (out / "report.md").read_text()  # no kueue-like, no calibration


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
