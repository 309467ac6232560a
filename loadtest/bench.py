"""The extender against a no-op extender on the same stack, same payloads, same run (goals G1, G2).

    python -m loadtest.bench [--seconds 15] [--reps 3] [--out results/bench] [--no-scaling] [--tls]
    (or: make bench, make bench TLS=1)

1. Generates the 1,000-node x 8-GPU cluster (`config.generate`), starts `topogang serve` on it and
   pre-fills it to 30% over HTTP (Philly-mix jobs, each pod filtered and bound like kube-scheduler).
2. Starts `python -m loadtest.noop` on the same node list. Both servers are pinned to one core and
   locust to the other with `taskset` (when there are 2 cores); only one server is loaded at a time.
3. Runs locust headless (`loadtest/locustfile.py`, 4-pod x 8-GPU gangs: G1's shape; jobs finish as
   new ones arrive, and a stopping run deletes what it left, so the fill stays at 30%) at 1 and 16
   users for a fixed time, alternating no-op and extender, `--reps` times; each number is the median
   over the repetitions, so a burst of load from elsewhere on the machine moves one sample, not the
   result, and hits both servers alike.
4. Scaling: in-process gang decisions/s (`loadtest.bench_core`) and HTTP filter p99 at 100, 1,000
   and 5,000 nodes, and the extender's RSS at 5,000 nodes.

With `--tls` a third server joins the rotation: the same extender with its verbs over mutual TLS,
as the chart serves them to kube-scheduler (a throw-away CA, a serving certificate, a client
certificate whose name is on `--verbs-allowed-names`; `loadtest.servers.make_certificates`), each
locust user on one keep-alive connection. A second table compares it with the plain-HTTP extender of
the same run, verb by verb, with the 1-user p99 ratio against its goal (<= 1.2x).

Prints one table (p50/p99/max per verb, requests/s, each server's CPU share, ratios vs the goals,
PASS/FAIL), then the scaling table, and writes `bench.json` plus locust's CSVs under `--out`. Only
127.0.0.1; every child is killed on exit; the whole run takes about 6 minutes.

Here the run's order; the parts have their own modules: `loadtest.servers` (the processes and the
pre-fill), `loadtest.measure` (the figures), `loadtest.goals` (the verdict and its table) and
`loadtest.scaling` (the scaling table).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from loadtest.goals import format_table, format_tls, goals, tls_goals
from loadtest.measure import Run, load_average, machine, median_run, rss_mib
from loadtest.scaling import format_scaling, rack_size_for, scaling_rows
from loadtest.servers import (
    ROOT,
    alternate,
    bench_setup,
    make_certificates,
    prefill,
    serve_extender,
    serve_noop,
    used_share,
)

USERS = (1, 16)


def _runs_json(runs: Mapping[int, Sequence[Run]]) -> dict[str, Any]:
    return {
        str(u): {"median": asdict(median_run(rs)), "runs": [asdict(r) for r in rs]} for u, rs in runs.items()
    }


def main(argv: Sequence[str] | None = None) -> int:
    from config.generate import generate_yaml

    ap = argparse.ArgumentParser(prog="python -m loadtest.bench", description=__doc__)
    ap.add_argument("--seconds", type=int, default=15, help="per locust run (default %(default)s)")
    ap.add_argument("--reps", type=int, default=3, help="runs per server and user count (median)")
    ap.add_argument("--fill", type=float, default=0.3)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--out", default=str(ROOT / "results" / "bench"))
    ap.add_argument("--no-scaling", action="store_true", help="skip the 100/1,000/5,000-node table")
    ap.add_argument("--tls", action="store_true", help="also the extender's verbs over mutual TLS, vs plain")
    args = ap.parse_args(argv)
    out = Path(args.out)
    s, pin_text = bench_setup(out, args.seconds, args.fill)
    kids = s.kids
    configs: dict[int, Path] = {}

    def say(msg: str) -> None:
        print(f"bench: {msg}", flush=True)

    def config_for(nodes: int) -> Path:
        if nodes not in configs:
            configs[nodes] = out / f"cluster-{nodes}.yaml"
            configs[nodes].write_text(generate_yaml(nodes=nodes, rack_size=rack_size_for(nodes)))
        return configs[nodes]

    started = time.monotonic()
    load_before = load_average()
    try:
        cfg = config_for(args.nodes)
        say(f"extender and no-op on {args.nodes} nodes, pre-fill to {args.fill:.0%} (load {load_before})")
        ext = serve_extender(s, cfg, "topogang")
        reached = prefill(ext, args.fill)
        mtls = None
        if args.tls:
            say("the same extender with its verbs over mutual TLS, pre-filled alike")
            mtls = serve_extender(s, cfg, "mtls", tls=make_certificates(out / "pki"))
            prefill(mtls, args.fill)
        noop = serve_noop(s, cfg)
        say(f"locust at {' and '.join(map(str, USERS))} users, {args.seconds} s a run, {args.reps} reps")
        alternate(s, [noop, ext, *([mtls] if mtls else [])], USERS, args.reps, say)
        fill_after = used_share(ext)
        rss = rss_mib(ext.proc.pid)
        kids.stop(noop.proc)
        if mtls:
            kids.stop(mtls.proc)
        kids.stop(ext.proc)
        meta: dict[str, Any] = {
            "nodes": args.nodes,
            "fill": reached,
            "fill_after": fill_after,
            "seconds": args.seconds,
            "reps": args.reps,
            "pinning": pin_text,
            **machine(),
            "load_before": load_before,
            "load_after": load_average(),
        }
        table = format_table(ext.runs, noop.runs, meta)
        scaling: list[dict[str, Any]] = []
        if not args.no_scaling:
            try:
                scaling_rows(s, args.nodes, args.fill, config_for, ext, noop, rss, reached, say, scaling)
            except (RuntimeError, OSError) as exc:  # the main table still gets printed
                say(f"scaling stopped: {exc}")
        meta["load_end"] = load_average()
        print()
        print(table)
        if mtls:
            print()
            print(format_tls(mtls.runs, ext.runs))
        if scaling:
            print()
            print(format_scaling(scaling))
        print(f"\n(took {time.monotonic() - started:.0f} s; load average now {load_average()}; JSON and")
        print(f" locust CSVs in {out})")
        doc = {
            "meta": meta,
            "topogang": _runs_json(ext.runs),
            "noop": _runs_json(noop.runs),
            "goals": [
                {"goal": g.name, "value": g.value, "target": g.target, "range": [g.low, g.high], "pass": g.ok}
                for g in goals(ext.runs, noop.runs)
            ],
            "scaling": scaling,
        }
        if mtls:
            doc["mtls"] = _runs_json(mtls.runs)
            doc["tls_goals"] = [
                {"goal": g.name, "value": g.value, "target": g.target, "range": [g.low, g.high], "pass": g.ok}
                for g in tls_goals(mtls.runs, ext.runs)
            ]
        (out / "bench.json").write_text(json.dumps(doc, indent=2))
        return 0
    except KeyboardInterrupt:
        print("bench: interrupted", file=sys.stderr)
        return 130
    finally:
        kids.stop_all()


if __name__ == "__main__":
    raise SystemExit(main())
