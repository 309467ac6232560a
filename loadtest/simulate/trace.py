"""Job traces: the Philly CSV (`loadtest/simulate/data/README.md`) read into jobs in submit order.

Columns used: `timestamp` (submit, cluster-local wall clock), `duration` (run time in seconds),
`num_gpus`, `cluster` (the VC). Rows are sorted by submit time, ties by VC and then by row number,
so every policy sees the same order. Times become seconds since the first submit. A job of ≤ 8 GPUs
is one pod; a bigger one is a gang of ⌈g/8⌉ pods × 8 GPUs (so 12 → 2 × 8), as on 8-GPU servers.
"""

from __future__ import annotations

import csv
import random
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

from loadtest.jobmix import pods_for

TIME_FORMAT = "%Y-%m-%d %H:%M:%S"
REQUIRED_COLUMNS = ("timestamp", "duration", "num_gpus", "cluster")


class TraceError(ValueError):
    """A trace file that cannot be read (names the row and column)."""


@dataclass(frozen=True, slots=True)
class Job:
    """One job of the trace. `id` is its position in submit order (also its FIFO rank)."""

    id: int
    vc: str
    submit: float
    duration: float
    gpus: int
    pods: tuple[int, ...]
    # saves its work every this many seconds of a run (a what-if, `--checkpoint-every`: the traces
    # do not say); None: a preempted run is lost whole
    checkpoint_seconds: int | None = None

    @property
    def name(self) -> str:
        return f"j{self.id}"

    @property
    def held_gpus(self) -> int:
        """GPUs the gang holds: `gpus` rounded up to whole 8-GPU pods above one node."""
        return sum(self.pods)

    @property
    def multi_gpu(self) -> bool:
        return self.gpus > 1


def with_run_time_noise(jobs: Sequence[Job], fraction: float, seed: int) -> list[Job]:
    """Each job's run time scaled by a factor drawn uniformly from [1 - fraction, 1 + fraction]
    (seeded): the same trace, replayed with noise no scheduler could tell apart, to see how far a
    week's outcome moves on it (`loadtest.simulate.replays`)."""
    rng = random.Random(seed)
    return [replace(j, duration=j.duration * (1.0 + rng.uniform(-fraction, fraction))) for j in jobs]


@dataclass(slots=True)
class Trace:
    jobs: list[Job]
    source: str
    start: datetime | None  # wall clock of time 0 (the first submit)
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> rows left out


def load_trace(
    path: str | Path,
    *,
    days: float | None = None,
    limit: int | None = None,
    vcs: Collection[str] | None = None,
    per_node: int = 8,
    since: datetime | None = None,
    until: datetime | None = None,
) -> Trace:
    """Read a Philly-style CSV. `since`/`until` keep jobs submitted in [since, until) (a week
    sliced from a longer trace; the rest are not counted as skipped); `days` keeps jobs submitted
    within that many days of the first kept submit; `limit` keeps the first jobs in submit order;
    `vcs` keeps only jobs of those VCs (the rest are counted in `skipped["unknown VC"]`)."""
    p = Path(path)
    rows: list[tuple[datetime, str, int, float, int]] = []
    with p.open(newline="") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in REQUIRED_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise TraceError(f"{p}: missing column(s) {', '.join(missing)}")
        for i, row in enumerate(reader, start=2):
            try:
                ts = datetime.strptime(row["timestamp"].strip(), TIME_FORMAT)
                duration = float(row["duration"])
                gpus = int(float(row["num_gpus"]))
            except ValueError as e:
                raise TraceError(f"{p}:{i}: {e}") from None
            if gpus <= 0 or duration < 0:
                raise TraceError(f"{p}:{i}: num_gpus must be positive and duration non-negative")
            if (since is not None and ts < since) or (until is not None and ts >= until):
                continue
            rows.append((ts, row["cluster"].strip(), i, duration, gpus))
    rows.sort(key=lambda r: (r[0], r[1], r[2]))
    skipped: dict[str, int] = {}
    start = rows[0][0] if rows else None
    jobs: list[Job] = []
    for ts, vc, _line, duration, gpus in rows:
        assert start is not None
        submit = (ts - start).total_seconds()
        if days is not None and submit >= days * 86400:
            skipped["after --days"] = skipped.get("after --days", 0) + 1
            continue
        if vcs is not None and vc not in vcs:
            skipped["unknown VC"] = skipped.get("unknown VC", 0) + 1
            continue
        if limit is not None and len(jobs) >= limit:
            skipped["after --limit"] = skipped.get("after --limit", 0) + 1
            continue
        jobs.append(Job(len(jobs), vc, submit, duration, gpus, tuple(pods_for(gpus, per_node))))
    return Trace(jobs, str(p), start, skipped)
