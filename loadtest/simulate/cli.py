"""`topogang simulate`: replay a GPU-cluster trace through several policies and write a report.

    topogang simulate [--trace FILE] [--days N] [--limit N] [--policies P ...] [--out DIR]

Defaults: the Philly week shipped with the package (`loadtest/simulate/data/`, provenance and the
paper to cite in its README.md), every policy, output in `results/simulate/` under the current
directory. Progress goes to stderr; the goals and
the paths of the files written go to stdout. Exit status 0 when the report was written (whatever
the goals say), 2 on bad arguments or an unreadable trace.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

import topology
from loadtest.simulate.cluster import shared_cluster
from loadtest.simulate.engine import RunResult, simulate, simulate_private
from loadtest.simulate.metrics import PolicyMetrics, evaluate_goals, policy_metrics
from loadtest.simulate.policies import CorePolicy, make_policy
from loadtest.simulate.report import RunInfo, write_report
from loadtest.simulate.trace import TraceError, load_trace

POLICIES = ("topogang", "hived-like", "first-fit", "first-fit-elastic", "private")
# package data (pyproject.toml), so a clone and an installed wheel both have it
DEFAULT_TRACE = Path(__file__).resolve().parent / "data" / "philly_jobs_week_2017-10-23.csv"
DEFAULT_OUT = Path("results") / "simulate"


class Progress:
    """A plain-text progress bar on one line of `stream`, redrawn with carriage returns."""

    def __init__(
        self, total: int, stream: TextIO | None = None, enabled: bool = True, width: int = 30
    ) -> None:
        self.total = max(1, total)
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.width = width
        self.started = time.perf_counter()
        self._last = 0.0
        self._drawn = False

    def update(self, label: str, done: int, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        if not force and now - self._last < 0.1:
            return
        self._last = now
        frac = min(1.0, done / self.total)
        filled = int(frac * self.width)
        bar = "#" * filled + "-" * (self.width - filled)
        self.stream.write(
            f"\r[{bar}] {frac:6.1%}  {label:<11} {done}/{self.total} jobs  {now - self.started:6.1f}s"
        )
        self.stream.flush()
        self._drawn = True

    def close(self) -> None:
        if self.enabled and self._drawn:
            self.stream.write("\n")
            self.stream.flush()


def core_fingerprint() -> str:
    """sha256 over the scheduling core's sources, so a report names the core it measured."""
    h = hashlib.sha256()
    for p in sorted(Path(topology.__file__).parent.glob("*.py")):
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def trace_label(path: Path) -> str:
    """How the report names the trace: the shipped one by its file name (no path of this machine in
    a report that may be shared), any other as the user gave it."""
    if path.resolve() == DEFAULT_TRACE:
        return f"{DEFAULT_TRACE.name} (the Philly week shipped with topogang)"
    return str(path)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="topogang simulate",
        description="Replay a GPU-cluster job trace through several scheduling policies on the same "
        "simulated cluster and write a placement-quality report (Markdown, PNG plots, JSON).",
    )
    ap.add_argument(
        "--trace", type=Path, default=DEFAULT_TRACE, help="Philly-style CSV (default: the shipped week)"
    )
    ap.add_argument(
        "--days", type=float, default=None, metavar="N", help="only jobs submitted in the first N days"
    )
    ap.add_argument(
        "--limit", type=int, default=None, metavar="N", help="only the first N jobs in submit order"
    )
    ap.add_argument(
        "--policies",
        nargs="+",
        choices=POLICIES,
        default=list(POLICIES),
        metavar="POLICY",
        help=f"policies to run, side by side (default: all of {', '.join(POLICIES)})",
    )
    ap.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help="output directory (default: results/simulate)"
    )
    ap.add_argument("--no-progress", action="store_true", help="do not draw the progress bar on stderr")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(list(argv) if argv is not None else None)
    if args.days is not None and args.days <= 0:
        print("topogang simulate: --days must be positive", file=sys.stderr)
        return 2
    if args.limit is not None and args.limit <= 0:
        print("topogang simulate: --limit must be positive", file=sys.stderr)
        return 2
    try:
        trace = load_trace(args.trace, days=args.days, limit=args.limit)
    except (OSError, TraceError) as e:
        print(f"topogang simulate: cannot read the trace: {e}", file=sys.stderr)
        return 2
    if not trace.jobs:
        print(f"topogang simulate: no jobs in {args.trace}", file=sys.stderr)
        return 2
    policies = list(dict.fromkeys(args.policies))
    cluster = shared_cluster()
    jobs = trace.jobs
    window = (jobs[0].submit, jobs[-1].submit)
    progress = Progress(len(jobs) * len(policies), enabled=not args.no_progress)
    wall = time.perf_counter()
    results: dict[str, RunResult] = {}
    for i, name in enumerate(policies):
        offset = i * len(jobs)

        def step(done: int, _total: int, name: str = name, offset: int = offset) -> None:
            progress.update(name, offset + done)

        if name == "private":
            results[name] = simulate_private(
                jobs,
                cluster,
                lambda c: CorePolicy(c, borrowing=False, name="private"),
                window=window,
                progress=step,
            )
        else:
            results[name] = simulate(make_policy(name, cluster), jobs, window=window, progress=step)
        progress.update(name, offset + len(jobs), force=True)
    progress.close()
    metrics: dict[str, PolicyMetrics] = {name: policy_metrics(r) for name, r in results.items()}
    goals = evaluate_goals(metrics)
    info = RunInfo(
        trace=trace_label(args.trace),
        jobs=len(jobs),
        skipped=trace.skipped,
        window_hours=(window[1] - window[0]) / 3600,
        cluster=cluster,
        policies=policies,
        wall_seconds=time.perf_counter() - wall,
        core_fingerprint=core_fingerprint(),
    )
    files = write_report(args.out, info, metrics, goals)
    for g in goals:
        verdict = {True: "PASS", False: "FAIL", None: "n/a "}[g.passed]
        print(f"{verdict}  {g.id}  {g.text}: {g.value} (target {g.target})")
    print(f"simulated {len(jobs)} jobs x {len(policies)} policies in {info.wall_seconds:.1f} s")
    for kind, path in files.items():
        print(f"wrote {path}  ({kind})")
    return 0
