"""The report's plots show every policy: coinciding CDF lines stay apart, zero bars are marked, and the
capacity line is labelled. Checked on the figures' artists, not on pixels."""

from __future__ import annotations

from typing import Any

import pytest

from loadtest.simulate.cli import DEFAULT_TRACE
from loadtest.simulate.cluster import shared_cluster
from loadtest.simulate.engine import simulate, simulate_private
from loadtest.simulate.metrics import PolicyMetrics, policy_metrics
from loadtest.simulate.plots import gpus_over_time_figure, queueing_cdf_figure, vc_p95_figure
from loadtest.simulate.policies import CorePolicy
from loadtest.simulate.roster import make_policy
from loadtest.simulate.runinfo import RunInfo
from loadtest.simulate.trace import load_trace

plt = pytest.importorskip("matplotlib.pyplot")


@pytest.fixture(scope="module")
def run() -> tuple[RunInfo, dict[str, PolicyMetrics]]:
    jobs = load_trace(DEFAULT_TRACE, limit=300).jobs
    cluster = shared_cluster()
    window = (jobs[0].submit, jobs[-1].submit)
    m = {
        n: policy_metrics(simulate(make_policy(n, cluster), jobs, window=window))
        for n in ("topogang", "hived-like")
    }
    private = simulate_private(
        jobs, cluster, lambda c: CorePolicy(c, borrowing=False, name="private"), window=window
    )
    m["private"] = policy_metrics(private)
    info = RunInfo("slice", len(jobs), {}, (window[1] - window[0]) / 3600, cluster, list(m), 0.0)
    return info, m


def test_queueing_cdf_lines_that_coincide_stay_visible(run: tuple[RunInfo, dict[str, PolicyMetrics]]) -> None:
    fig = queueing_cdf_figure(run[1])
    try:
        for ax in fig.axes:
            lines = {ln.get_label(): ln for ln in ax.get_lines()}
            assert set(lines) == {"topogang", "hived-like", "private"}
            looks = {(ln.get_linestyle(), ln.get_marker(), ln.get_color()) for ln in lines.values()}
            assert len(looks) == 3  # no two policies look alike
            # hived-like, often equal to private, is drawn above it, thinner and dashed
            assert lines["hived-like"].get_zorder() > lines["private"].get_zorder()
            assert lines["hived-like"].get_linewidth() < lines["private"].get_linewidth()
    finally:
        plt.close(fig)


def test_zero_height_bars_are_labelled(run: tuple[RunInfo, dict[str, PolicyMetrics]]) -> None:
    info, m = run
    zeros = sum(
        1
        for x in m.values()
        for vc in sorted({vc for y in m.values() for vc in y.per_vc})
        if (d := x.per_vc.get(vc, {}).get("all")) is None or d.p95 == 0
    )
    assert zeros > 0  # the slice has idle VCs: the check below is not vacuous
    fig = vc_p95_figure(info, m)
    try:
        (ax,) = fig.axes
        assert [t.get_text() for t in ax.texts] == ["0"] * zeros
    finally:
        plt.close(fig)


def test_the_capacity_line_is_in_the_legend(run: tuple[RunInfo, dict[str, PolicyMetrics]]) -> None:
    fig = gpus_over_time_figure(*run)
    try:
        legend: Any = fig.axes[0].get_legend()
        labels = [t.get_text() for t in legend.get_texts()]
        assert "capacity (640 GPUs)" in labels and "last submit" in labels
    finally:
        plt.close(fig)


def test_every_policy_has_a_colour_of_its_own() -> None:
    """kueue-like once had no entry and got matplotlib's first colour: topogang's blue."""
    from loadtest.simulate.cli import POLICIES
    from loadtest.simulate.plots import color_of

    colours = [color_of(p) for p in POLICIES]
    assert len(set(colours)) == len(POLICIES), dict(zip(POLICIES, colours, strict=True))
    assert color_of("some-new-policy") not in colours
