"""The calibration of kueue-like against the real Kueue: Kueue's Workload times read right, the
live pipeline's delays matched to the harness's jobs, and the report's section honest about a
kueue.py changed since."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from loadtest.kueue_calibration import _metric_rows, admission_delays, immediate_starts, pipeline
from loadtest.peers_records import workload_rows
from loadtest.simulate.calibration import markdown_lines


def _wl(group: str | None, owner: str | None, created: str, reserved: str | None) -> dict[str, Any]:
    conds = (
        {}
        if reserved is None
        else {"QuotaReserved": {"status": "True", "reason": "QuotaReserved", "time": reserved}}
    )
    return {"group": group, "owners": [owner] if owner else [], "created": created, "conditions": conds}


def test_admission_delays_are_creation_to_quota_reservation() -> None:
    wls = [
        _wl("j1-a0", None, "2026-11-26T00:00:00Z", "2026-11-26T00:00:04Z"),
        _wl(None, "j2-a0-0", "2026-11-26T00:00:01Z", "2026-11-26T00:00:11Z"),
        _wl(None, "j3-a0-0", "2026-11-26T00:00:02Z", None),  # still pending
    ]
    got = admission_delays(wls)
    assert got["workloads"] == 3 and got["creation_to_quota_s"]["n"] == 2
    assert got["creation_to_quota_s"]["mean"] == 7.0 and got["creation_to_quota_s"]["max"] == 10.0


def test_pipeline_matches_first_attempts_to_jobs_and_counts_the_busiest_second() -> None:
    # factor 10: job 1 submitted at trace 0 (real 0), job 2 at trace 20 (real 2); the earliest
    # creation fixes the clocks (job 1's Workload 1 s after its submit counts as 0)
    jobs = [
        {"id": 1, "submit": 0.0, "first_start": 100.0},
        {"id": 2, "submit": 20.0, "first_start": 120.0},
    ]
    wls = [
        _wl("j1-a0", None, "2026-11-26T00:00:01Z", "2026-11-26T00:00:05Z"),
        _wl(None, "j2-a0-0", "2026-11-26T00:00:05Z", "2026-11-26T00:00:05Z"),
        _wl(None, "j2-a1-0", "2026-11-26T00:00:06Z", "2026-11-26T00:00:06Z"),  # a retry: left out
    ]
    got = pipeline(jobs, wls, 10.0)
    assert got["submit_to_workload_s"]["max"] == 2.0  # job 2: created at 5, submitted at 1 + 2
    assert got["workload_to_quota_s"]["mean"] == 2.0
    assert got["quota_to_bound_s"]["p50"] == 7.0  # job 1: bound at 1 + 10, reserved at 5 -> 6; job 2 -> 8
    assert got["most_admissions_in_one_second"] == 2


def test_immediate_starts_are_the_live_lag_of_jobs_the_simulation_starts_at_once() -> None:
    sim = [{"id": 1, "submit": 0.0, "first_start": 0.0}, {"id": 2, "submit": 0.0, "first_start": 600.0}]
    live = [{"id": 1, "submit": 0.0, "first_start": 1200.0}, {"id": 2, "submit": 0.0, "first_start": 600.0}]
    got = immediate_starts(live, sim, 120.0)
    assert got["jobs"] == 1 and got["live_first_start_s"]["max"] == 10.0


def _col(preemptions: int, queue_h: float) -> dict[str, Any]:
    d = {"n": 10, "mean_h": queue_h, "p50_h": queue_h, "p95_h": queue_h}
    return {
        "started": 10,
        "queueing": {"all": d, "multi": d},
        "jct": {"all": d, "multi": d},
        "utilisation": 0.9,
        "mean_stranded_gpus": 10.0,
        "locality": {"multinode_min_one_rack": {"yes": 1, "n": 2}},
        "preemptions": preemptions,
        "lost_gpu_hours": 5.0,
    }


def test_rows_more_than_ten_percent_apart_are_marked() -> None:
    rows = {r["metric"]: r for r in _metric_rows(_col(10, 1.0), _col(11, 1.2))}
    assert rows["preemptions"]["apart"] is False and rows["preemptions"]["ratio"] == 1.1
    assert rows["queueing mean, all (h)"]["apart"] is True
    assert rows["utilisation"]["apart"] is False


def test_the_report_says_when_kueue_py_changed_since_the_calibration(tmp_path: Path) -> None:
    source = tmp_path / "kueue.py"
    source.write_text("x = 1\n")
    doc: dict[str, Any] = {
        "kueue": "v0.19.2",
        "kueue_like_sha256": "0" * 64,
        "rows": [{"metric": "preemptions", "unit": "count", "real": 15.0, "kueue_like": 68.0,
                  "ratio": 68 / 15, "apart": True}],
    }  # fmt: skip
    text = "\n".join(markdown_lines(doc, source))
    assert "has changed since this calibration" in text
    assert "| preemptions | 15 | 68 | 4.53x (apart) |" in text
    doc["kueue_like_sha256"] = hashlib.sha256(source.read_bytes()).hexdigest()
    assert "has changed" not in "\n".join(markdown_lines(doc, source))
    assert markdown_lines(None, source) == []


def test_workload_rows_keep_the_attempt_and_each_condition_time() -> None:
    doc = {
        "items": [
            {
                "metadata": {
                    "name": "pod-j7-a0-0-abcde",
                    "namespace": "vc-6c71a0",
                    "creationTimestamp": "2026-11-26T00:00:01Z",
                    "ownerReferences": [{"kind": "Pod", "name": "j7-a0-0"}],
                },
                "status": {
                    "conditions": [
                        {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
                         "lastTransitionTime": "2026-11-26T00:00:03Z"},
                    ]
                },
            }
        ]
    }  # fmt: skip
    (row,) = workload_rows(doc)
    assert row["owners"] == ["j7-a0-0"] and row["group"] is None
    assert row["conditions"]["QuotaReserved"] == {
        "status": "True",
        "reason": "QuotaReserved",
        "time": "2026-11-26T00:00:03Z",
    }
