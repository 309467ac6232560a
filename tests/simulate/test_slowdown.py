"""The locality model: one test per spread level, the factors, and the engine stretching runs."""

from __future__ import annotations

import pytest

from loadtest.simulate.engine import simulate
from loadtest.simulate.policies import FirstFitPolicy, Placement
from loadtest.simulate.slowdown import (
    PUBLISHED,
    SlowdownError,
    closest_level,
    make_slowdown,
    spread_level,
)
from tests.simulate.helpers import jobs, tiny

C = tiny({"a": 4}, nodes=4, rack_size=2)  # racks {0, 1} and {2, 3}
MODEL = make_slowdown("published")


def test_half_level_one_half_of_one_node() -> None:
    pods = ((0, (4, 5, 6, 7)),)
    assert spread_level(C, pods, 4) == "half" == closest_level(C, 4)
    assert MODEL.stretch(C, 4, "half") == 1.0


def test_node_level_across_the_halves() -> None:
    pods = ((0, (2, 3, 4, 5)),)  # 2 GPUs in each half: could have been one half
    assert spread_level(C, pods, 4) == "node"
    assert MODEL.stretch(C, 4, "node") == pytest.approx(PUBLISHED["node"] / PUBLISHED["half"])
    assert spread_level(C, ((1, tuple(range(8))),), 8) == "node" == closest_level(C, 8)
    assert MODEL.stretch(C, 8, "node") == 1.0  # a whole-node job on one node runs as traced


def test_rack_level_fewest_nodes_in_one_rack() -> None:
    pods = ((2, tuple(range(8))), (3, tuple(range(8))))
    assert spread_level(C, pods, 16) == "rack" == closest_level(C, 16)
    assert MODEL.stretch(C, 16, "rack") == 1.0


def test_racks_level_across_racks_or_more_nodes_than_needed() -> None:
    across = ((1, tuple(range(8))), (2, tuple(range(8))))
    assert spread_level(C, across, 16) == "racks"
    assert MODEL.stretch(C, 16, "racks") == pytest.approx(PUBLISHED["racks"] / PUBLISHED["rack"])
    three = ((0, (0, 1, 2, 3)), (1, tuple(range(8))), (0, (4, 5, 6, 7)))
    assert spread_level(C, three, 16) == "rack"  # two nodes of one rack
    assert spread_level(C, ((0, (0, 1, 2, 3)), (1, (0, 1, 2, 3))), 8) == "racks"  # 8 GPUs on 2 nodes
    assert closest_level(C, 48) == "racks"  # larger than a rack of 16 GPUs


def test_one_gpu_jobs_and_the_none_model_never_stretch() -> None:
    assert MODEL.stretch(C, 1, "racks") == 1.0
    none = make_slowdown("none")
    assert none.off and all(none.stretch(C, 16, lvl) == 1.0 for lvl in ("half", "node", "rack", "racks"))


def test_factors_can_be_set_and_are_checked() -> None:
    custom = make_slowdown("published", "rack=1.3, racks=3")
    assert (
        custom.factors["rack"] == 1.3 and custom.factors["racks"] == 3.0 and custom.name == "published+custom"
    )
    for bad, words in (
        ("rack", "LEVEL=FACTOR"),
        ("pod=2", "LEVEL=FACTOR"),
        ("node=fast", "not a number"),
        ("half=0.5", "must be >= 1"),
        ("racks=1.1", "never fall"),  # below rack's 1.5
    ):
        with pytest.raises(SlowdownError, match=words):
            make_slowdown("published", bad)
    with pytest.raises(SlowdownError, match="unknown locality model"):
        make_slowdown("gandiva")


class _Spreading(FirstFitPolicy):
    """First-fit that puts a 4-GPU job across the halves of node 0 (GPUs 2-5)."""

    def _place(self, job, now):  # type: ignore[no-untyped-def]
        got = super()._place(job, now)
        if got is not None and job.gpus == 4:
            return Placement(((0, (2, 3, 4, 5)),))
        return got


def test_the_engine_stretches_a_spread_run_and_counts_its_gpu_time() -> None:
    js = jobs(("a", 0, 100, 4))
    plain = simulate(_Spreading(C), js, slowdown=make_slowdown("none"))
    stretched = simulate(_Spreading(C), js, slowdown=MODEL)
    assert plain.records[0].end == 100 and plain.records[0].run_seconds == 100
    assert stretched.records[0].end == pytest.approx(100 * PUBLISHED["node"])
    assert stretched.records[0].jct == pytest.approx(100 * PUBLISHED["node"])
