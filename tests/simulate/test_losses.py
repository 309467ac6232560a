"""`python -m loadtest.simulate.losses`: every preemption of a run grouped by preemptor and victim
size (or VC), the groups adding up to the run's own lost GPU-hours."""

from __future__ import annotations

import pytest

from loadtest.simulate.cli import DEFAULT_TRACE, build_cluster
from loadtest.simulate.engine import simulate
from loadtest.simulate.losses import groups, main, size_class
from loadtest.simulate.roster import make_policy
from loadtest.simulate.slowdown import make_slowdown
from loadtest.simulate.trace import load_trace


def test_size_classes_cover_every_size_once() -> None:
    assert [size_class(g) for g in (1, 2, 4, 5, 8, 9, 15, 16, 64)] == [
        "1",
        "2-4",
        "2-4",
        "5-8",
        "5-8",
        "9-15",
        "9-15",
        "16+",
        "16+",
    ]


def test_every_preemption_is_grouped_and_the_groups_add_up_to_the_run() -> None:
    jobs = load_trace(DEFAULT_TRACE).jobs
    r = simulate(
        make_policy("topogang", build_cluster(None, None, None)),
        jobs,
        window=(jobs[0].submit, jobs[-1].submit),
        slowdown=make_slowdown("published"),
    )
    lost = sum(rec.lost_gpu_seconds for rec in r.records.values())
    by_vc = groups([r], "vc")
    for by in (groups([r]), by_vc):
        assert sum(g.victims for g in by.values()) == r.preemptions == len(r.evictions) > 0
        assert sum(g.lost_gpu_seconds for g in by.values()) == pytest.approx(lost)
    vcs = {rec.job.vc for rec in r.records.values()}
    assert {vc for pair in by_vc for vc in pair} <= vcs
    for e in r.evictions:  # each preemption sits under its own two VCs
        assert (r.records[e.by].job.vc, r.records[e.victim].job.vc) in by_vc
    for e in r.evictions:  # a victim never saves here: it loses its whole run, on every GPU it held
        assert e.lost_gpu_seconds == pytest.approx(e.ran * r.records[e.victim].job.held_gpus)
        assert e.by != e.victim and e.by in r.records


def test_the_command_prints_each_policys_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--policies", "kueue-like", "--noise", "0"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("kueue-like: 445 GPU-h lost over 1 replay(s)")  # the report's own figure
    assert "| preemptor GPUs | victim GPUs |" in out


def test_by_vc_names_whose_reclaims_cost_what(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--policies", "kueue-like", "--noise", "0", "--by", "vc"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("kueue-like: 445 GPU-h lost over 1 replay(s)")  # the same total as by size
    assert "| preemptor VC | victim VC |" in out
    assert "| e13805 | ee9e8c |" in out  # the shipped week's largest pair: e13805's gangs reclaiming


def test_bad_options_are_refused() -> None:
    with pytest.raises(SystemExit):
        main(["--replays", "0"])
    with pytest.raises(SystemExit):
        main(["--noise", "1.5"])
    with pytest.raises(SystemExit):
        main(["--by", "rack"])
