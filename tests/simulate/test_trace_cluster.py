"""Trace loading and the simulated clusters."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtest.simulate.cluster import PHILLY_VC_NODES, private_cluster, proportional_quotas, shared_cluster
from loadtest.simulate.trace import TraceError, load_trace
from topology.core import Core

CSV = """timestamp,duration,num_gpus,gpu_time,cluster
2017-10-23 00:00:10,100.0,12,1200.0,bbb
2017-10-23 00:00:00,50.0,1,50.0,bbb
2017-10-23 00:00:10,10.0,8,80.0,aaa
2017-10-24 00:00:05,5.0,32,160.0,aaa
2017-10-23 00:00:10,7.0,2,14.0,aaa
"""


def write(tmp_path: Path, text: str = CSV) -> Path:
    p = tmp_path / "t.csv"
    p.write_text(text)
    return p


def test_jobs_come_in_submit_order_ties_by_vc_then_row(tmp_path: Path) -> None:
    t = load_trace(write(tmp_path))
    assert [(j.vc, j.submit, j.gpus) for j in t.jobs] == [
        ("bbb", 0.0, 1),
        ("aaa", 10.0, 8),
        ("aaa", 10.0, 2),
        ("bbb", 10.0, 12),
        ("aaa", 86405.0, 32),
    ]
    assert [j.id for j in t.jobs] == [0, 1, 2, 3, 4]


def test_big_jobs_become_gangs_of_whole_nodes(tmp_path: Path) -> None:
    by_gpus = {j.gpus: j for j in load_trace(write(tmp_path)).jobs}
    assert by_gpus[1].pods == (1,)
    assert by_gpus[8].pods == (8,)
    assert by_gpus[12].pods == (8, 8) and by_gpus[12].held_gpus == 16
    assert by_gpus[32].pods == (8, 8, 8, 8)
    assert not by_gpus[1].multi_gpu and by_gpus[2].multi_gpu


def test_days_limit_and_vc_filters_count_what_they_leave_out(tmp_path: Path) -> None:
    p = write(tmp_path)
    assert len(load_trace(p, days=1).jobs) == 4
    assert load_trace(p, days=1).skipped == {"after --days": 1}
    t = load_trace(p, limit=2)
    assert [j.id for j in t.jobs] == [0, 1] and t.skipped == {"after --limit": 3}
    t = load_trace(p, vcs={"aaa"})
    assert {j.vc for j in t.jobs} == {"aaa"} and t.skipped == {"unknown VC": 2}


def test_bad_rows_name_the_line(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r":3:"):
        load_trace(
            write(tmp_path, "timestamp,duration,num_gpus,cluster\n2017-10-23 00:00:00,1,1,a\nx,1,1,a\n")
        )
    with pytest.raises(TraceError, match="missing column"):
        load_trace(write(tmp_path, "timestamp,duration\n"))


def test_philly_quotas_scale_to_80_nodes_by_largest_remainder() -> None:
    q = proportional_quotas(PHILLY_VC_NODES, 80)
    assert sum(q.values()) == 80
    assert q == {
        "6214e9": 15,  # 14.55: the tie among the three 64-node VCs goes to the first name
        "b436b2": 14,
        "ee9e8c": 14,
        "7f04ca": 7,
        "6c71a0": 7,
        "0e4a51": 7,
        "11cb48": 4,  # 3.64
        "e13805": 4,
        "2869ce": 4,
        "ed69ec": 2,  # 1.82
        "103959": 2,
    }


def test_default_cluster_is_640_gpus_with_every_quota_bound_to_the_core() -> None:
    c = shared_cluster()
    assert (c.nodes, c.total_gpus, c.rack_size) == (80, 640, 8)
    core = Core(c.spec)
    assert core.topo.total_leaves() == 640
    assert tuple(core.topo.node_names) == c.node_names
    assert core.vc_quota_leaves == {vc: 8 * n for vc, n in c.quotas.items()}
    assert c.rack_of(7) == 0 and c.rack_of(8) == 1 and c.half_of(3) == 0 and c.half_of(4) == 1


def test_private_cluster_is_exactly_the_quota() -> None:
    c = private_cluster("vc", 3)
    core = Core(c.spec)
    assert core.topo.total_leaves() == 24 and core.vc_quota_leaves == {"vc": 24}
