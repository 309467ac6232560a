"""The bench's arithmetic and table (`loadtest.measure`, `loadtest.goals`, `loadtest.scaling`), on
made-up runs (no servers, no timing)."""

from __future__ import annotations

from loadtest.goals import format_table, goals
from loadtest.measure import CpuSampler, Run, VerbStats, median_run
from loadtest.scaling import rack_size_for


def run(filter_p99: float, rps: float, cpu: float = 0.5) -> Run:
    s = VerbStats(100, filter_p99 / 3, filter_p99, filter_p99 * 2, rps)
    return Run({"filter": s, "bind": s}, 10.0, cpu, 0.9)


def test_goals_are_ratios_of_medians_with_the_range_over_repetitions() -> None:
    ext = {1: [run(2.0, 100), run(3.0, 100), run(9.0, 100)], 16: [run(6.0, 300)] * 3}
    noop = {1: [run(1.0, 200), run(1.0, 200), run(1.0, 200)], 16: [run(4.0, 1000)] * 3}
    got = {g.name: g for g in goals(ext, noop)}
    g1 = got["G1 filter p99 @1 users"]
    assert g1.value == 3.0 and (g1.low, g1.high) == (2.0, 9.0) and not g1.ok
    g16 = got["G1 filter p99 @16 users"]
    assert g16.value == 1.5 and g16.ok
    g2 = got["G2b filter+prioritize+bind calls/s @16"]
    assert g2.value == 0.3 and not g2.ok


def test_median_run_and_table() -> None:
    m = median_run([run(1.0, 10), run(5.0, 30), run(2.0, 20)])
    assert m.verbs["filter"].p99 == 2.0 and m.verbs["filter"].rps == 20
    assert m.calls_per_second == 40
    ext = {1: [run(2.0, 100)], 16: [run(6.0, 300)]}
    noop = {1: [run(1.0, 200)], 16: [run(4.0, 1000)]}
    table = format_table(ext, noop, {"nodes": 1000, "fill": 0.3, "seconds": 15, "reps": 1})
    assert "2.00x" in table and "FAIL" in table and "PASS" in table
    assert table.count("\n") > 8


def test_rack_sizes_divide_the_cluster() -> None:
    assert rack_size_for(1000) == 8 and rack_size_for(5000) == 8 and rack_size_for(100) == 10


def test_cpu_share_is_read_over_the_window() -> None:
    s = CpuSampler({})
    s.samples = [(0.0, {"x": 1.0}), (1.0, {"x": 1.5}), (2.0, {"x": 2.5}), (3.0, {"x": 2.5})]
    assert s.share("x", 1.0, 2.0) == 1.0
    assert s.share("x", 0.0, 3.0) == 0.5
    assert s.share("missing", 0.0, 3.0) == 0.0
