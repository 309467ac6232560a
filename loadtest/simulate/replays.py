"""The same weeks replayed with noise no scheduler could tell apart: how far each outcome moves, and
on how many replays each target and goal holds.

    python -m loadtest.simulate.replays --trace FILE --out DIR [--replays 8] [--noise 0.001]
        [--workers 2] [--weeks N] START [START ...] [-- OPTIONS]

Each replay is `topogang simulate --week START --weeks N --run-time-noise NOISE --noise-seed K
--no-plots OPTIONS` (K = 0 .. replays - 1; `shipped` is the week shipped with the package; a window
of N weeks is named `START+Nw`, as `loadtest.simulate.weeks` names it): every run time
scaled by a factor within 0.1% of 1 by default, a few seconds on an hour. Preemption and placement
choices feed back on each other for a week, so a change that small moves a week's lost GPU-hours by
tens of percent: a single run's difference between two policies, or two versions of one, says little
until it stands out of that spread. `DIR/replays.md` gives, per week, topogang's and kueue-like's
lost GPU-hours and multi-GPU p95 queueing (median, and the range over the replays), on how many
replays topogang meets each of issue #32's two targets (lost at most kueue-like's, p95 at most
1.0x), and every goal that failed on some replay; `DIR/replays.json` holds each replay's figures.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from loadtest.simulate.weeks import run_name, simulate_week, split_options, weeks_parser, window_error

PEER = "kueue-like"


@dataclass(frozen=True, slots=True)
class Replay:
    """One replay's figures: lost GPU-hours and multi-GPU p95 queueing (hours) of topogang and the
    peer, and each goal's verdict."""

    week: str
    seed: int
    lost: float
    peer_lost: float
    p95: float
    peer_p95: float
    goals: Mapping[str, bool | None]

    @classmethod
    def read(cls, week: str, seed: int, metrics: Mapping[str, Any]) -> Replay:
        pol = metrics["policies"]

        def p95(name: str) -> float:
            multi = pol[name]["queueing"]["multi"]  # None: the week has no multi-GPU job
            return float(multi["p95"]) / 3600 if multi else 0.0

        return cls(
            week,
            seed,
            float(pol["topogang"]["lost_gpu_hours"]),
            float(pol[PEER]["lost_gpu_hours"]),
            p95("topogang"),
            p95(PEER),
            {g["id"]: g["passed"] for g in metrics["goals"]},
        )

    @property
    def lost_met(self) -> bool:
        return self.lost <= self.peer_lost

    @property
    def p95_met(self) -> bool:
        return self.p95 <= self.peer_p95


class _Job(NamedTuple):
    """One replay for a worker process: its run (a week, or a window of weeks), its noise seed."""

    trace: Path | None
    start: str
    weeks: int
    seed: int
    noise: float
    root: Path  # --out
    extra: list[str]

    @property
    def name(self) -> str:
        return run_name(self.start, self.weeks)

    @property
    def out(self) -> Path:
        return self.root / self.name / f"replay-{self.seed}"


def _one(job: _Job) -> Replay:
    options = [*job.extra, "--run-time-noise", str(job.noise), "--noise-seed", str(job.seed), "--no-plots"]
    simulate_week(job.trace, job.start, job.weeks, job.out, options)
    return Replay.read(job.name, job.seed, json.loads((job.out / "metrics.json").read_text()))


def spread(xs: Sequence[float], digits: int) -> str:
    """`median [min-max]`."""
    return f"{statistics.median(xs):,.{digits}f} [{min(xs):,.{digits}f}-{max(xs):,.{digits}f}]"


def table(replays: Sequence[Replay], noise: float) -> list[str]:
    weeks = list(dict.fromkeys(r.week for r in replays))
    n = len(replays) // max(1, len(weeks))
    lines = [
        f"{n} replays per week, run times within {noise:.2%} of the trace's; median [min-max]",
        "",
        "| week | topogang lost GPU-h | kueue-like lost GPU-h | lost <= kueue-like | "
        "topogang multi-GPU p95 (h) | kueue-like multi-GPU p95 (h) | p95 <= 1.0x | "
        "goals that failed (replays) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for week in weeks:
        rs = [r for r in replays if r.week == week]
        failed: dict[str, int] = {}
        for r in rs:
            for gid, passed in r.goals.items():
                if passed is False:
                    failed[gid] = failed.get(gid, 0) + 1
        fails = ", ".join(f"{g} ({k}/{len(rs)})" for g, k in failed.items()) or "none"
        lines.append(
            f"| {week} | {spread([r.lost for r in rs], 0)} | {spread([r.peer_lost for r in rs], 0)} | "
            f"{sum(r.lost_met for r in rs)}/{len(rs)} | {spread([r.p95 for r in rs], 2)} | "
            f"{spread([r.peer_p95 for r in rs], 2)} | {sum(r.p95_met for r in rs)}/{len(rs)} | {fails} |"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    raw, extra = split_options(argv)
    ap = weeks_parser("python -m loadtest.simulate.replays", __doc__)
    ap.add_argument("--replays", type=int, default=8)
    ap.add_argument("--noise", type=float, default=0.001, help="run-time noise per replay (default 0.001)")
    ap.add_argument("--workers", type=int, default=2, help="replays run at once (default 2)")
    ap.add_argument("--weeks", type=int, default=1, help="weeks from each START (default 1)")
    args = ap.parse_args(raw)
    if args.replays < 1 or args.workers < 1 or not 0 < args.noise < 1:
        print("replays: --replays and --workers must be positive, --noise in (0, 1)", file=sys.stderr)
        return 2
    why = window_error(args.starts, args.weeks)
    if why is not None:
        print(f"replays: {why}", file=sys.stderr)
        return 2
    jobs = [
        _Job(args.trace, week, args.weeks, seed, args.noise, args.out, extra)
        for week in args.starts
        for seed in range(args.replays)
    ]
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        replays = list(pool.map(_one, jobs))
    lines = table(replays, args.noise)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "replays.md").write_text("\n".join(lines) + "\n")
    doc = [_as_dict(r) for r in replays]
    (args.out / "replays.json").write_text(json.dumps(doc, indent=1) + "\n")
    print("\n".join(lines))
    return 0


def _as_dict(r: Replay) -> dict[str, Any]:
    return {
        "week": r.week,
        "seed": r.seed,
        "lost_gpu_hours": r.lost,
        "peer_lost_gpu_hours": r.peer_lost,
        "multi_gpu_p95_hours": r.p95,
        "peer_multi_gpu_p95_hours": r.peer_p95,
        "goals": dict(r.goals),
    }


if __name__ == "__main__":
    raise SystemExit(main())
