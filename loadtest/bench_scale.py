"""topogang on a 100,000-GPU cluster: memory, start-up, restart, core speed and latency at scale.

    python -m loadtest.bench_scale [--nodes 12500] [--rack-size 10] [--vcs 12] [--seconds 10]
        [--reps 3] [--out results/bench-scale]          (or: make bench-scale)

1. Generates the cluster (`config.generate`: racks of `--rack-size` nodes, 8 GPUs a node in two
   halves of two PCIe switches, `--vcs` VCs sharing ~90% of the nodes), starts `topogang serve` on
   it, and reads the time from the process's start to its `/readyz`, and its RSS.
2. Pre-fills it to 30% over HTTP (Philly-mix jobs, each pod filtered and bound like
   kube-scheduler) and starts the no-op extender (`loadtest.noop`) on the same 12,500-name node
   list; then locust at 1 user, alternating no-op and extender `--reps` times (as `make bench`,
   servers on one core and locust on the other): filter, prioritize and bind p99 as ratios of the
   medians.
3. Pre-fills on to 80% and reads the RSS again.
4. A restart with 80% of the GPUs in bound pods (`loadtest.scale_recovery`, its own process): the
   in-memory API server the soak uses holds the pods with the annotations the binder writes, and
   the Kubernetes mode starts on it, through the same list, recovery and readiness as a real
   restart; the time from start to ready.
5. The core's decisions/s at steady state at 30% fill (`loadtest.bench_core.steady_rate`) on this
   cluster and on a 1,000-node one of the same shape, alternating, `--reps` times: the ratio of the
   medians.

Prints the figures and the goals PASS/FAIL, and writes `bench-scale.json` (plus the clusters,
locust's CSVs and the servers' logs) under `--out`. Takes ~8 minutes on 2 cores; every child is
stopped on exit.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from loadtest.measure import Run, load_average, machine, rss_mib
from loadtest.scale_report import format_scale, scale_goals
from loadtest.servers import ROOT, Children, alternate, bench_setup, prefill, serve_extender, serve_noop

FILLS = (0.3, 0.8)


def core_ratio(large: Path, small: Path, fill: float, decisions: int, reps: int) -> dict[str, Any]:
    """Steady-state decisions/s on both clusters, alternating; the ratio of the medians."""
    from config.load import load_config
    from loadtest.bench_core import steady_rate

    specs = {"large": load_config(large).spec, "small": load_config(small).spec}
    rates: dict[str, list[float]] = {"large": [], "small": []}
    cpu: dict[str, list[float]] = {"large": [], "small": []}
    fill_reached = 0.0
    for rep in range(reps):
        for key in ("small", "large"):
            got = steady_rate(specs[key], fill, decisions, seed=7 + rep)
            rates[key].append(got["rate"])
            cpu[key].append(got["cpu_rate"])
            if key == "large":
                fill_reached = got["fill"]
    each = [a / b for a, b in zip(rates["large"], rates["small"], strict=True) if b]
    large_rate, small_rate = statistics.median(rates["large"]), statistics.median(rates["small"])
    # per CPU second too: on a machine shared with other work the wall rates swing with its load
    large_cpu, small_cpu = statistics.median(cpu["large"]), statistics.median(cpu["small"])
    return {
        "rate_large": large_rate,
        "rate_small": small_rate,
        "ratio": large_rate / small_rate if small_rate else 0.0,
        "low": min(each, default=0.0),
        "high": max(each, default=0.0),
        "cpu_rate_large": large_cpu,
        "cpu_rate_small": small_cpu,
        "cpu_ratio": large_cpu / small_cpu if small_cpu else 0.0,
        "reps": reps,
        "decisions": decisions,
        "fill": fill_reached,
        "rates": rates,
        "cpu_rates": cpu,
    }


def recovery(kids: Children, config: Path, fill: float, out: Path) -> dict[str, Any]:
    """`loadtest.scale_recovery` in its own process; its figures."""
    target = out / "recovery.json"
    target.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "loadtest.scale_recovery", "--config", str(config), "--fill", str(fill)]
    p = kids.start([*argv, "--json", str(target)], out / "recovery.log")
    try:
        p.wait(900)
    except subprocess.TimeoutExpired:
        kids.stop(p)
        raise RuntimeError(f"the restart did not finish in 15 minutes: see {out / 'recovery.log'}") from None
    kids.stop(p)
    if not target.exists():
        raise RuntimeError(f"the restart wrote no figures: see {out / 'recovery.log'}")
    doc: dict[str, Any] = json.loads(target.read_text())
    return doc


def main(argv: Sequence[str] | None = None) -> int:
    from config.generate import generate_yaml

    ap = argparse.ArgumentParser(prog="python -m loadtest.bench_scale", description=__doc__)
    ap.add_argument("--nodes", type=int, default=12500)
    ap.add_argument("--rack-size", type=int, default=10)
    ap.add_argument("--vcs", type=int, default=12)
    ap.add_argument("--seconds", type=int, default=10, help="per locust run (default %(default)s)")
    ap.add_argument("--reps", type=int, default=3, help="locust runs per server, and core runs per size")
    ap.add_argument("--decisions", type=int, default=5000, help="timed core decisions per run")
    ap.add_argument("--small", type=int, default=1000, help="the core's reference cluster (nodes)")
    ap.add_argument("--out", default=str(ROOT / "results" / "bench-scale"))
    args = ap.parse_args(argv)
    out = Path(args.out)
    s, pin_text = bench_setup(out, args.seconds, FILLS[0])
    kids = s.kids
    started = time.monotonic()

    def say(msg: str) -> None:
        print(f"bench-scale: {msg}", flush=True)

    large = out / f"cluster-{args.nodes}.yaml"
    large.write_text(generate_yaml(nodes=args.nodes, rack_size=args.rack_size, vcs=args.vcs))
    small = out / f"cluster-{args.small}.yaml"
    small_rack = args.rack_size if args.small % args.rack_size == 0 else 8
    small.write_text(generate_yaml(nodes=args.small, rack_size=small_rack, vcs=args.vcs))
    doc: dict[str, Any] = {
        "meta": {
            "nodes": args.nodes,
            "rack_size": args.rack_size,
            "vcs": args.vcs,
            "small": args.small,
            "seconds": args.seconds,
            "reps": args.reps,
            "pinning": pin_text,
            **machine(),
            "load_before": load_average(),
        },
        "rss_mib": {},
        "fill": {},
    }
    ext_runs: list[Run] = []
    noop_runs: list[Run] = []
    try:
        say(f"serving {args.nodes:,} nodes (load {load_average()})")
        t0 = time.monotonic()
        ext = serve_extender(s, large, "topogang")
        doc["start_to_ready_s"] = time.monotonic() - t0
        doc["rss_mib"]["start"] = rss_mib(ext.proc.pid)
        say(
            f"ready in {doc['start_to_ready_s']:.1f} s, RSS {doc['rss_mib']['start']:.0f} MiB; "
            "pre-fill to 30%"
        )
        doc["fill"]["30%"] = prefill(ext, FILLS[0], budget_s=600)
        doc["rss_mib"]["30%"] = rss_mib(ext.proc.pid)
        noop = serve_noop(s, large)
        say(f"locust at 1 user, {args.seconds} s a run, {args.reps} reps (load {load_average()})")
        alternate(s, [noop, ext], (1,), args.reps, say)
        ext_runs, noop_runs = ext.runs.get(1, []), noop.runs.get(1, [])
        kids.stop(noop.proc)
        say(f"pre-fill to 80% (load {load_average()})")
        doc["fill"]["80%"] = prefill(ext, FILLS[1], budget_s=900)
        doc["rss_mib"]["80%"] = rss_mib(ext.proc.pid)
        kids.stop(ext.proc)
        say(f"restart with 80% of the GPUs in bound pods (load {load_average()})")
        doc["recovery"] = recovery(kids, large, FILLS[1], out)
        say(f"core at {args.nodes:,} and {args.small:,} nodes (load {load_average()})")
        doc["core"] = core_ratio(large, small, FILLS[0], args.decisions, args.reps)
    except KeyboardInterrupt:
        print("bench-scale: interrupted", file=sys.stderr)
        return 130
    except (RuntimeError, OSError) as exc:  # what was measured still gets printed, the rest FAILs
        say(f"stopped: {exc}")
        doc["error"] = str(exc)
    finally:
        kids.stop_all()
    doc["meta"]["load_end"] = load_average()
    goals = scale_goals(doc, ext_runs, noop_runs)
    if doc.get("error"):
        print(f"\nbench-scale: incomplete ({doc['error']}); goals not measured are missing below")
    print()
    print(format_scale(doc, ext_runs, noop_runs, goals))
    print(f"\n(took {time.monotonic() - started:.0f} s; JSON, locust CSVs and logs in {out})")
    doc["topogang"] = [asdict(r) for r in ext_runs]
    doc["noop"] = [asdict(r) for r in noop_runs]
    doc["goals"] = [g.as_json() for g in goals]
    (out / "bench-scale.json").write_text(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
