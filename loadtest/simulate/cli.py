"""`topogang simulate`: replay a GPU-cluster trace through several policies and write a report.

    topogang simulate [--trace FILE] [--week START [--weeks N]] [--days N] [--limit N]
                      [--policies P ...] [--locality-model published|none] [--slowdown L=F,...]
                      [--nodes N] [--rack-size N] [--config FILE] [--vc-queueing Q] [--out DIR]

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
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import TextIO

import topology
from config.schema import STRICT_FIFO, VC_QUEUEINGS
from loadtest.simulate.cluster import DEFAULT_NODES, DEFAULT_RACK_SIZE, SimCluster, shared_cluster
from loadtest.simulate.config_cluster import ConfigError, config_cluster
from loadtest.simulate.engine import RunResult, simulate, simulate_private
from loadtest.simulate.goals import evaluate_goals
from loadtest.simulate.metrics import PolicyMetrics, policy_metrics
from loadtest.simulate.policies import CorePolicy
from loadtest.simulate.report import write_report
from loadtest.simulate.roster import make_policy
from loadtest.simulate.runinfo import RunInfo
from loadtest.simulate.slowdown import MODELS, make_slowdown
from loadtest.simulate.trace import TraceError, load_trace, with_run_time_noise

POLICIES = ("topogang", "hived-like", "first-fit", "first-fit-elastic", "kueue-like", "private")
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


def week_span(week: str | None, weeks: int) -> tuple[datetime | None, datetime | None]:
    """[START, START + N weeks) for `--week START --weeks N`; (None, None) without --week."""
    if weeks <= 0:
        raise ValueError("--weeks must be positive")
    if week is None:
        return None, None
    try:
        start = datetime.strptime(week, "%Y-%m-%d")
    except ValueError:
        raise ValueError(f"--week: {week!r} is not a date YYYY-MM-DD") from None
    return start, start + timedelta(weeks=weeks)


def build_cluster(config: Path | None, nodes: int | None, rack_size: int | None) -> SimCluster:
    """The cluster to simulate: the user's topogang YAML, or the Philly-sized default, resized."""
    if config is not None:
        if nodes is not None or rack_size is not None:
            raise ValueError("--config describes the whole cluster: leave out --nodes and --rack-size")
        return config_cluster(config)
    n = DEFAULT_NODES if nodes is None else nodes
    r = DEFAULT_RACK_SIZE if rack_size is None else rack_size
    if n <= 0 or r <= 0:
        raise ValueError("--nodes and --rack-size must be positive")
    if n % r:
        raise ValueError(f"--nodes {n} does not fill racks of --rack-size {r}")
    return shared_cluster(nodes=n, rack_size=r)


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
        "--week",
        default=None,
        metavar="START",
        help="only jobs submitted in the 7 days from START (YYYY-MM-DD), e.g. a week of a longer trace",
    )
    ap.add_argument(
        "--weeks", type=int, default=1, metavar="N", help="with --week: N weeks from START (default 1)"
    )
    ap.add_argument(
        "--locality-model",
        choices=sorted(MODELS),
        default="published",
        help="how run times stretch with placement spread: 'published' (default, factors from "
        "published measurements, see loadtest/simulate/slowdown.py) or 'none' (run times as traced)",
    )
    ap.add_argument(
        "--slowdown",
        default=None,
        metavar="LEVEL=F,...",
        help="override run-time factors per spread level (half, node, rack, racks), e.g. rack=1.3",
    )
    ap.add_argument(
        "--nodes",
        type=int,
        default=None,
        metavar="N",
        help=f"8-GPU nodes in the cluster (default {DEFAULT_NODES})",
    )
    ap.add_argument(
        "--rack-size",
        type=int,
        default=None,
        metavar="N",
        help=f"nodes per rack (default {DEFAULT_RACK_SIZE})",
    )
    ap.add_argument(
        "--config",
        type=Path,
        default=None,
        metavar="FILE",
        help="simulate the cluster and VC quotas of this topogang YAML instead (its VC names must be "
        "the trace's VC names)",
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
    ap.add_argument(
        "--vc-queueing",
        choices=VC_QUEUEINGS,
        default=STRICT_FIFO,
        help="topogang's topogang.vcQueueing: StrictFIFO (default; a VC's later jobs wait behind its "
        "oldest waiting one) or BestEffortFIFO (they start whenever they fit)",
    )
    ap.add_argument(
        "--checkpoint-every",
        type=float,
        default=None,
        metavar="HOURS",
        help="what-if: every job saves its work this often and a preempted one restarts from its last "
        "save (no policy is told; each chooses its victims as it always does); default: jobs never save",
    )
    ap.add_argument(
        "--run-time-noise",
        type=float,
        default=None,
        metavar="FRACTION",
        help="scale every run time by a factor drawn from [1 - FRACTION, 1 + FRACTION] (seeded by "
        "--noise-seed): a replay of the same week no scheduler could tell apart",
    )
    ap.add_argument("--noise-seed", type=int, default=None, metavar="N", help="seed of --run-time-noise (0)")
    ap.add_argument("--no-plots", action="store_true", help="write the report and JSON without the plots")
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
    if args.run_time_noise is not None and not 0 <= args.run_time_noise < 1:
        print("topogang simulate: --run-time-noise must be at least 0 and below 1", file=sys.stderr)
        return 2
    if args.noise_seed is not None and args.run_time_noise is None:
        print("topogang simulate: --noise-seed needs --run-time-noise", file=sys.stderr)
        return 2
    every = None if args.checkpoint_every is None else round(args.checkpoint_every * 3600)
    if every is not None and every <= 0:
        print("topogang simulate: --checkpoint-every must be at least a second", file=sys.stderr)
        return 2
    try:
        since, until = week_span(args.week, args.weeks)
        slowdown = make_slowdown(args.locality_model, args.slowdown)
        cluster = build_cluster(args.config, args.nodes, args.rack_size)
    except (ValueError, OSError, ConfigError) as e:
        print(f"topogang simulate: {e}", file=sys.stderr)
        return 2
    try:
        trace = load_trace(args.trace, days=args.days, limit=args.limit, since=since, until=until)
    except (OSError, TraceError) as e:
        print(f"topogang simulate: cannot read the trace: {e}", file=sys.stderr)
        return 2
    if not trace.jobs:
        where = "" if since is None else f" submitted from {args.week} for {args.weeks} week(s)"
        print(f"topogang simulate: no jobs in {args.trace}{where}", file=sys.stderr)
        return 2
    policies = list(dict.fromkeys(args.policies))
    jobs = trace.jobs
    if every is not None:
        jobs = [replace(j, checkpoint_seconds=every) for j in jobs]
    noise = None if args.run_time_noise is None else (args.run_time_noise, args.noise_seed or 0)
    if noise is not None:
        jobs = with_run_time_noise(jobs, *noise)
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
                slowdown=slowdown,
            )
        else:
            results[name] = simulate(
                make_policy(name, cluster, args.vc_queueing),
                jobs,
                window=window,
                progress=step,
                slowdown=slowdown,
            )
        progress.update(name, offset + len(jobs), force=True)
    progress.close()
    metrics: dict[str, PolicyMetrics] = {name: policy_metrics(r) for name, r in results.items()}
    goals = evaluate_goals(metrics)
    info = RunInfo(
        trace=trace_label(args.trace) + ("" if since is None else f", {args.weeks} week(s) from {args.week}"),
        jobs=len(jobs),
        skipped=trace.skipped,
        window_hours=(window[1] - window[0]) / 3600,
        cluster=cluster,
        policies=policies,
        wall_seconds=time.perf_counter() - wall,
        core_fingerprint=core_fingerprint(),
        locality_model=slowdown,
        vc_queueing=args.vc_queueing,
        checkpoint_seconds=every,
        run_time_noise=noise,
    )
    files = write_report(args.out, info, metrics, goals, plots=not args.no_plots)
    for g in goals:
        verdict = {True: "PASS", False: "FAIL", None: "n/a "}[g.passed]
        print(f"{verdict}  {g.id}  {g.text}: {g.value} (target {g.target})")
    print(f"simulated {len(jobs)} jobs x {len(policies)} policies in {info.wall_seconds:.1f} s")
    for kind, path in files.items():
        print(f"wrote {path}  ({kind})")
    return 0
