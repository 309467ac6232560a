"""`topogang demo FILE` runs on every example, deriving its jobs from the file's own VCs."""

from __future__ import annotations

from pathlib import Path

import pytest

from extender.demo import main

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = [
    *sorted((ROOT / "config" / "examples").glob("*.yaml")),
    ROOT / "tests/conformance/hived/hivedscheduler.yaml",
]


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_demo_runs_on_every_example(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "does not exist" not in out and "rejected" not in out
    assert "placed within one" in out
    assert out.rstrip().splitlines()[-1].startswith("released ")


def test_derived_jobs_use_the_configs_vcs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(ROOT / "config/examples/gb200-nvl72.yaml")]) == 0
    gangs = [line.split()[0] for line in capsys.readouterr().out.splitlines()[2:-1]]
    assert {g.split("/")[0] for g in gangs} == {"pretrain", "finetune", "inference"}
    assert "pretrain/over-quota" in gangs  # a job one node over the quota shows a wait


def test_bundled_example_keeps_its_script(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    assert "vision/resnet-32gpu" in capsys.readouterr().out
