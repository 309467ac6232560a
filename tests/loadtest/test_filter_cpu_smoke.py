"""`python -m loadtest.filter_cpu` runs end to end at a tiny size; no speed is asserted."""

from __future__ import annotations

from pathlib import Path

import pytest

from config.generate import generate_yaml
from loadtest import filter_cpu
from loadtest.scaling import rack_size_for


@pytest.mark.parametrize("noop", [False, True])
def test_filter_cpu_times_each_kind_of_filter(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], noop: bool
) -> None:
    args = ["--nodes", "32", "--jobs", "3", "--out", str(tmp_path)]
    assert filter_cpu.main([*args, "--noop"] if noop else args) == 0
    out = capsys.readouterr().out
    assert out.startswith("noop filter CPU" if noop else "topogang filter CPU")
    assert "place n=3 p50" in out and "member n=9 p50" in out  # 3 gangs of 4 pods, each placed once


def test_the_extender_in_process_places_gangs_and_fills_the_cluster(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(generate_yaml(nodes=32, rack_size=rack_size_for(32)))
    times = filter_cpu.measure(cfg, 2)
    assert len(times["place"]) == 2 and len(times["member"]) == 6
    assert all(t > 0 for k in filter_cpu.KINDS for t in times[k])


def test_cold_calls_flush_the_caches_outside_the_timing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--nodes", "32", "--jobs", "2", "--out", str(tmp_path), "--cold"]
    assert filter_cpu.main(args) == 0
    out = capsys.readouterr().out
    assert out.startswith("topogang cold filter CPU") and "place n=2 p50" in out
