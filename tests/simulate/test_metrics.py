"""Metrics on hand-built runs: stranded GPUs, locality, the sharing anomaly, the goals."""

from __future__ import annotations

import pytest

from loadtest.simulate.engine import simulate_private
from loadtest.simulate.goals import evaluate_goals
from loadtest.simulate.metrics import (
    Anomaly,
    delays,
    percentile,
    policy_metrics,
    sharing_anomaly,
)
from loadtest.simulate.policies import CorePolicy, FirstFitPolicy, Placement, locality
from tests.simulate.helpers import jobs, run, tiny


def test_percentiles_interpolate_linearly() -> None:
    assert percentile([0.0, 10.0], 95) == pytest.approx(9.5)
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    d = delays([0.0, 0.0, 30.0, 90.0])
    assert d is not None and (d.n, d.mean, d.p50, d.max) == (4, 30.0, 15.0, 90.0)
    assert d.p95 == pytest.approx(81.0)
    assert delays([]) is None


def test_stranded_gpus_are_free_gpus_on_partly_used_nodes() -> None:
    p = FirstFitPolicy(tiny({"a": 2}, nodes=2, rack_size=2))
    js = jobs(("a", 0, 1, 1), ("a", 0, 1, 8), ("a", 0, 1, 3))
    assert (p.stranded, p.whole_free_nodes, p.allocated) == (0, 2, 0)
    p.try_start(js[0], 0)
    assert (p.stranded, p.whole_free_nodes, p.allocated) == (7, 1, 1)
    p.try_start(js[1], 0)  # takes the whole second node: nothing more is stranded
    assert (p.stranded, p.whole_free_nodes, p.allocated) == (7, 0, 9)
    p.try_start(js[2], 0)
    assert p.stranded == 4
    p.finish(js[0], 1)
    assert p.stranded == 5
    p.finish(js[2], 1)
    assert (p.stranded, p.whole_free_nodes, p.allocated) == (0, 1, 8)


def test_time_averages_cover_first_to_last_submit() -> None:
    # one 1-GPU job over [0, 50), nothing over [50, 100): 7 stranded for half the window
    js = jobs(("a", 0, 50, 1), ("a", 100, 10, 8))
    m = policy_metrics(run("first-fit", tiny({"a": 2}), js))
    assert m.mean_stranded_gpus == pytest.approx(3.5)
    assert m.mean_allocated_gpus == pytest.approx(0.5)
    assert m.utilisation == pytest.approx(0.5 / 16)


def test_locality_of_hand_built_placements() -> None:
    c = tiny({"a": 4}, nodes=4, rack_size=2)
    one, two, eight, sixteen = jobs(("a", 0, 1, 1), ("a", 0, 1, 2), ("a", 0, 1, 8), ("a", 0, 1, 16))
    assert locality(c, two, Placement(((0, (2, 3)),))).one_half is True
    assert locality(c, two, Placement(((0, (3, 4)),))).one_half is False
    assert locality(c, one, Placement(((0, (5,)),))).one_half is True
    assert locality(c, eight, Placement(((1, tuple(range(8))),))).one_half is None
    full = tuple(range(8))
    assert locality(c, sixteen, Placement(((2, full), (3, full)))).min_nodes_one_rack is True
    assert locality(c, sixteen, Placement(((1, full), (2, full)))).min_nodes_one_rack is False  # two racks
    assert locality(c, sixteen, Placement(((1, full),))).one_node is None


def test_first_fit_splits_what_topogang_keeps_together() -> None:
    # three 1-GPU jobs, then a 2-GPU job (first-fit: GPUs 3 and 4, across halves); then a
    # 16-GPU gang (first-fit: nodes 1 and 2, across racks; topogang: one rack)
    js = jobs(("a", 0, 99, 1), ("a", 0, 99, 1), ("a", 0, 99, 1), ("a", 1, 99, 2), ("a", 2, 99, 16))
    c = tiny({"a": 4}, nodes=4, rack_size=2)
    ff = policy_metrics(run("first-fit", c, js))
    tg = policy_metrics(run("topogang", c, js))
    assert ff.locality["2to4_one_half"].share == 0.0
    assert tg.locality["2to4_one_half"].share == 1.0
    assert ff.locality["multinode_min_one_rack"].share == 0.0
    assert tg.locality["multinode_min_one_rack"].share == 1.0
    assert ff.locality["le8_one_node"].share == tg.locality["le8_one_node"].share == 1.0
    assert ff.locality["le4_one_half"].share == 0.75 and ff.locality["le4_one_half"].n == 4


# a's 6-GPU job ends at 10; b's jobs land on both nodes under first-fit (4 GPUs on node 1, 2
# on node 0), so a's 8-GPU job finds 8 free GPUs in count but no free node until 100
ANOMALY = jobs(("a", 0, 10, 6), ("b", 0, 100, 4), ("b", 0, 100, 2), ("a", 10, 5, 8))


def test_first_fit_shows_a_sharing_anomaly_topogang_does_not() -> None:
    c = tiny({"a": 1, "b": 1})
    ff = policy_metrics(run("first-fit", c, ANOMALY))
    tg = policy_metrics(run("topogang", c, ANOMALY))
    private = policy_metrics(simulate_private(ANOMALY, c, lambda pc: CorePolicy(pc, borrowing=False)))
    assert ff.queueing_values["all"] == [0.0, 0.0, 0.0, 90.0]
    assert private.queueing_values["all"] == [0.0, 0.0, 0.0, 0.0]
    ff_a = {a.vc: a for a in sharing_anomaly(ff, private)}
    assert ff_a["a"].private_p95 == 0.0
    assert ff_a["a"].shared_p95 == pytest.approx(85.5)  # p95 of (0, 90)
    assert ff_a["a"].anomalous and ff_a["a"].ratio is None and not ff_a["b"].anomalous
    assert not any(a.anomalous for a in sharing_anomaly(tg, private))
    assert tg.queueing_values["all"] == [0.0, 0.0, 0.0, 0.0]
    goals = {g.id: g for g in evaluate_goals({"topogang": tg, "first-fit": ff, "private": private})}
    assert goals["G3c"].passed is True and goals["G3c-multi"].passed is True
    assert goals["G3d"].passed is True and "first-fit: 1 VCs (a)" in goals["G3d"].value
    assert goals["G3a"].passed is None  # no peer in this run: not measurable, never a silent PASS
    kl = policy_metrics(run("kueue-like", c, ANOMALY))
    both = {
        g.id: g
        for g in evaluate_goals({"topogang": tg, "first-fit": ff, "kueue-like": kl, "private": private})
    }
    # multi-GPU mean JCT: topogang (10 + 100 + 100 + 5) / 4 vs first-fit (10 + 100 + 100 + 95) / 4
    assert tg.jct["multi"] is not None and tg.jct["multi"].mean == pytest.approx(215 / 4)
    assert both["G3a"].passed is False
    assert "= 0.70x" in both["G3a"].value  # 215 / 305 of first-fit: not half


def test_anomaly_ratio_edge_cases() -> None:
    assert Anomaly("v", 0.0, 0.0).ratio == 1.0 and not Anomaly("v", 0.0, 0.0).anomalous
    assert (
        Anomaly("v", 100.0, 105.0).ratio == pytest.approx(1.05) and not Anomaly("v", 100.0, 105.0).anomalous
    )
    assert Anomaly("v", 100.0, 106.0).anomalous


def test_goals_compare_topogang_with_the_baselines() -> None:
    # the borrowing scenario of the engine tests: the 4-GPU job waits 20 s under topogang (a
    # preemption), 90 s under first-fit; kueue-like reclaims the same way; under first-fit-elastic
    # nothing is preempted, so b's whole-node job waits for the borrower to finish
    js = jobs(("a", 0, 100, 8), ("a", 10, 50, 4), ("b", 20, 10, 8))
    c = tiny({"a": 1, "b": 1})
    names = ("topogang", "hived-like", "first-fit", "first-fit-elastic", "kueue-like")
    m = {p: policy_metrics(run(p, c, js)) for p in names}
    tq, fq = m["topogang"].queueing["multi"], m["first-fit"].queueing["multi"]
    assert tq is not None and fq is not None
    assert tq.mean == pytest.approx(20 / 3) and fq.mean == pytest.approx(30.0)
    jct = {p: m[p].jct["multi"] for p in names}
    assert [
        getattr(jct[p], "mean", None) for p in ("topogang", "kueue-like", "first-fit-elastic", "first-fit")
    ] == [
        pytest.approx(180 / 3),  # 100, 70, 10
        pytest.approx(180 / 3),
        pytest.approx(200 / 3),  # 100, 50, 50
        pytest.approx(250 / 3),  # 100, 140, 10
    ]
    goals = {g.id: g for g in evaluate_goals(m)}
    # equal to the best peer passes its half; 0.72x first-fit misses the other
    assert (
        goals["G3a"].passed is False and "= 1.00x" in goals["G3a"].value and "= 0.72x" in goals["G3a"].value
    )
    assert goals["G5a"].passed is True
    assert "G3c" in goals and goals["G3c"].passed is None  # no private replay in this run
    lost = 40 / 3600
    assert goals["P"].passed is False and m["topogang"].gpu_hours == pytest.approx(
        (800 + 200 + 80) / 3600 + lost
    )
    assert m["topogang"].preemptions == 1 and m["topogang"].lost_gpu_hours == pytest.approx(40 / 3600)
    # b's job ended a's 4-GPU borrower after its 10 s: b's reclaim, a's loss; nobody else's
    assert m["topogang"].lost_per_vc == {
        "a": {"ended": 0.0, "lost": pytest.approx(lost)},
        "b": {"ended": pytest.approx(lost), "lost": 0.0},
    }
    assert m["first-fit-elastic"].lost_per_vc == {}  # it preempts nothing
