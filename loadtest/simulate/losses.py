"""Where a week's GPU-hours lost to preemption sit: which preemptors end which victims, after how long.

    python -m loadtest.simulate.losses [--trace FILE] [--week START] [--replays N] [--noise F]
        [--policies topogang kueue-like] [--by size|vc]

The report's one figure, GPU-hours lost, does not say what a change to the core should aim at. This
replays a week (the shipped one by default) through each policy, `--replays` times with run times
scaled within `--noise` of the trace's (the seeds `topogang simulate --noise-seed` uses, 0 first),
and groups every preemption by the preemptor's size and the victim's (GPUs): how many victims, the
GPU-hours they lost, and how long they had run. Preemptors of 16 GPUs and more reclaiming whole
nodes in one rack, or small jobs ending long multi-GPU guests in their VC's cells, read differently
from Kueue's reclaim of its youngest borrowers anywhere.

With `--by vc` the same preemptions are grouped by the preemptor's VC and the victim's instead: whose
reclaims cost what, and whose work they end. On the shipped week one VC's reclaims can be most of a
policy's loss, and a peer that loses less may do so by leaving that VC to wait (the report's sharing
anomaly per VC says whether it does).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from loadtest.simulate.cli import DEFAULT_TRACE, POLICIES, build_cluster, week_span
from loadtest.simulate.engine import RunResult, simulate
from loadtest.simulate.roster import make_policy
from loadtest.simulate.slowdown import make_slowdown
from loadtest.simulate.trace import Job, load_trace, with_run_time_noise

CLASSES = ((1, "1"), (4, "2-4"), (8, "5-8"), (15, "9-15"), (None, "16+"))  # GPUs, at most
# what a preemption is grouped by: a key of the job, and the table's name for it
KEYS: dict[str, tuple[Callable[[Job], str], str]] = {
    "size": (lambda job: size_class(job.held_gpus), "GPUs"),
    "vc": (lambda job: job.vc, "VC"),
}


def size_class(gpus: int) -> str:
    return next(name for top, name in CLASSES if top is None or gpus <= top)


@dataclass(slots=True)
class Group:
    """The victims of one (preemptor class, victim class) pair, over every replay."""

    victims: int = 0
    lost_gpu_seconds: float = 0.0
    ran_seconds: float = 0.0

    def add(self, lost: float, ran: float) -> None:
        self.victims += 1
        self.lost_gpu_seconds += lost
        self.ran_seconds += ran


def groups(results: Iterable[RunResult], by: str = "size") -> dict[tuple[str, str], Group]:
    """Every preemption of `results`, by (preemptor's key, victim's key), the key one of `KEYS`."""
    key_of = KEYS[by][0]
    out: dict[tuple[str, str], Group] = {}
    for r in results:
        for e in r.evictions:
            key = (key_of(r.records[e.by].job), key_of(r.records[e.victim].job))
            out.setdefault(key, Group()).add(e.lost_gpu_seconds, e.ran)
    return out


def table(policy: str, by: dict[tuple[str, str], Group], replays: int, key: str = "size") -> list[str]:
    """One policy's groups, most GPU-hours first, and the totals."""
    total = sum(g.lost_gpu_seconds for g in by.values()) / 3600.0
    victims = sum(g.victims for g in by.values())
    name = KEYS[key][1]
    lines = [
        f"{policy}: {total:,.0f} GPU-h lost over {replays} replay(s), {victims} victims",
        f"| preemptor {name} | victim {name} | victims | GPU-h lost | share | victims' mean run (h) |",
        "|---|---|---|---|---|---|",
    ]
    for (pre, vic), g in sorted(by.items(), key=lambda kv: -kv[1].lost_gpu_seconds):
        share = g.lost_gpu_seconds / 3600.0 / total if total else 0.0
        lines.append(
            f"| {pre} | {vic} | {g.victims} | {g.lost_gpu_seconds / 3600.0:,.0f} | {share:.0%} "
            f"| {g.ran_seconds / g.victims / 3600.0:.2f} |"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m loadtest.simulate.losses", description=__doc__)
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--week", default=None, help="YYYY-MM-DD: the 7 days from then (default: all)")
    ap.add_argument("--replays", type=int, default=1, help="noise seeds 0 .. N-1 (default 1)")
    ap.add_argument("--noise", type=float, default=0.001, help="run-time noise per replay (0: none)")
    ap.add_argument("--by", choices=sorted(KEYS), default="size", help="group by job size (default) or VC")
    ap.add_argument(  # the private replay is one cluster per VC: it preempts nothing
        "--policies",
        nargs="+",
        default=["topogang", "kueue-like"],
        choices=[p for p in POLICIES if p != "private"],
    )
    args = ap.parse_args(argv)
    if args.replays < 1 or not 0 <= args.noise < 1:
        ap.error("--replays must be at least 1 and --noise in [0, 1)")
    since, until = week_span(args.week, 1)
    jobs0 = load_trace(args.trace, since=since, until=until).jobs
    if not jobs0:
        ap.error(f"no jobs in {args.trace}" + (f" from {args.week}" if args.week else ""))
    cluster, slowdown = build_cluster(None, None, None), make_slowdown("published")
    runs: dict[str, list[RunResult]] = {p: [] for p in args.policies}
    for seed in range(args.replays):
        jobs = with_run_time_noise(jobs0, args.noise, seed) if args.noise else list(jobs0)
        window = (jobs[0].submit, jobs[-1].submit)
        for p in args.policies:
            runs[p].append(simulate(make_policy(p, cluster), jobs, window=window, slowdown=slowdown))
    for p in args.policies:
        print("\n".join(table(p, groups(runs[p], args.by), args.replays, args.by)))
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
