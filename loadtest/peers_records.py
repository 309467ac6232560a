"""Per-job records of a bench-peers arm, and Kueue's own view of its Workloads, kept beside the table.

The table says how far apart two columns are; these say why: `jobs.json` holds, for every measured
job of an arm (live or simulated on the same slice), when it was submitted, first started, started
the run that completed, and where; `workloads.json` (the Kueue arm) holds each Workload's creation,
quota reservation and admission times and its eviction, as Kueue recorded them. Times in `jobs.json`
are trace seconds from the slice's start; Kueue's are its own RFC 3339 stamps (whole seconds).
`loadtest/kueue_calibration.py` reads both.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from loadtest.simulate.engine import RunResult
from loadtest.simulate.trace import Job

JOBS_FILE = "jobs.json"
WORKLOADS_FILE = "workloads.json"
WORKLOADS_PATH = "/apis/kueue.x-k8s.io/v1beta2/workloads"


def job_rows(result: RunResult, jobs: Iterable[Job], warm: frozenset[int]) -> list[dict[str, Any]]:
    """One row per measured job of the slice; `start` None for a job that never started."""
    out = []
    for job in jobs:
        if job.id in warm:
            continue
        rec = result.records.get(job.id)
        row: dict[str, Any] = {
            "id": job.id,
            "vc": job.vc,
            "gpus": job.gpus,
            "pods": list(job.pods),
            "submit": job.submit,
            "first_start": None,
            "start": None,
            "end": None,
            "preempted": 0,
            "nodes": [],
        }
        if rec is not None and rec.start is not None:
            row.update(
                first_start=rec.first_start,
                start=rec.start,
                end=rec.end,
                preempted=rec.preempted,
                nodes=[] if rec.placement is None else list(rec.placement.nodes),
            )
        out.append(row)
    return out


def write_jobs(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_text(json.dumps(rows, indent=1))


def workload_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The fields of Kueue's Workload list the calibration reads: which job attempt (a gang's pod
    group is named `j<id>-a<n>` after it, a lone pod's Workload is owned by the pod `j<id>-a<n>-0`),
    created when, and each condition's status, reason and time."""
    out = []
    for wl in doc.get("items") or []:
        meta = wl.get("metadata") or {}
        labels = meta.get("labels") or {}
        conds = {
            c.get("type"): {
                "status": c.get("status"),
                "reason": c.get("reason"),
                "time": c.get("lastTransitionTime"),
            }
            for c in (wl.get("status") or {}).get("conditions") or []
        }
        out.append(
            {
                "name": meta.get("name"),
                "namespace": meta.get("namespace"),
                "group": labels.get("kueue.x-k8s.io/pod-group-name"),
                "owners": sorted(str(o.get("name")) for o in meta.get("ownerReferences") or []),
                "created": meta.get("creationTimestamp"),
                "conditions": conds,
            }
        )
    return out
