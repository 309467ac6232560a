"""The 1-user filter over HTTP, split by kind: the member that places its gang, and the members after.

    python -m loadtest.one_client [--nodes 1000] [--jobs 400] [--rounds 3] [--tls] [--against CHECKOUT]
        [--reuse-servers]

`make bench`'s 1-user p99 on a shared machine is mostly the machine's tails. This drives both servers
the way one kube-scheduler loop does, without locust: one keep-alive client schedules 4 x 8-GPU gangs
(filter, prioritize and bind per member, as `loadtest.fleet` does) on the pre-filled cluster, and
times each filter call. One filter in four places a gang, so the p99 of all filters is the placing
filter's tail; the per-kind figures show where the extender's own time goes. The servers run as in
`make bench` (pinned to one core); the no-op and the extender take the same jobs in turn, job by job,
`--rounds` times, each round on freshly started and pre-filled servers (`--reuse-servers` keeps the
first round's).

`--against CHECKOUT` serves the extender of another checkout too (say a worktree of an older commit:
`git worktree add ../old <rev>`), a third server taking the same jobs in turn: a change's effect
measured within one run, the machine's noise on both alike.

`--tls` compares the extender's verbs over mutual TLS (as the chart serves them to kube-scheduler:
a client certificate checked against the allowed names) with the same extender over plain HTTP,
instead of the no-op: one keep-alive connection each, so the handshake is paid once, as
kube-scheduler's pooled connections pay it.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from loadtest.fleet import SPEC, Fleet, JobMix, run_job
from loadtest.goals import ONE_CLIENT, Goal
from loadtest.scaling import rack_size_for
from loadtest.servers import (
    HOST,
    ROOT,
    Server,
    Setup,
    bench_setup,
    free_port,
    make_certificates,
    prefill,
    serve_extender,
    serve_noop,
    wait_ready,
)

KINDS = ("place", "member")  # the filters
OTHER = ("prioritize", "bind")  # the other verbs, timed too


def _quantile(xs: Sequence[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(p * len(s)))] if s else 0.0


class Driver:
    """One client of one server: its own connections, fleet, job mix and latencies (ms) by kind."""

    def __init__(self, srv: Server, seed: int) -> None:
        self.c = srv.http()
        cluster = self.c.cluster()
        self.fleet = Fleet(cluster, 0.3)
        self.mix = JobMix(cluster, "gang4x8", seed=seed)
        self.rng = random.Random(seed)
        self.times: dict[str, list[float]] = {k: [] for k in (*KINDS, *OTHER)}
        self.seen: set[str] = set()

    def post(self, verb: str, body: bytes) -> Any:
        kind = None
        if verb == "filter":
            pod = orjson.loads(body)["Pod"]
            gang = orjson.loads(pod["metadata"]["annotations"][SPEC])["affinityGroup"]["name"]
            kind = "member" if gang in self.seen else "place"
            self.seen.add(gang)
        t0 = time.perf_counter()
        got = self.c.post(verb, body)
        kind = kind or (verb if verb in OTHER else None)
        if kind is not None:
            self.times[kind].append((time.perf_counter() - t0) * 1e3)
        return got

    def job(self) -> None:
        run_job(self.post, self.fleet, self.mix.next(), self.c.delete, self.rng)

    def finish(self) -> dict[str, list[float]]:
        """Delete the jobs left running (the next round starts from the same fill); the latencies."""
        for job in self.fleet.leftovers():
            for uid in job.uids:
                self.c.delete(uid)
        self.c.close()
        return self.times


def drive(servers: Sequence[Server], jobs: int, seed: int) -> list[dict[str, list[float]]]:
    """Schedule `jobs` 4 x 8-GPU gangs through each server, the same jobs, job by job in turn (the
    order rotated every job, so each server follows each other alike: two swap every job), so
    whatever else the machine does falls on all alike; each server's latencies (ms) by kind."""
    drivers = [Driver(srv, seed) for srv in servers]
    for j in range(jobs):
        k = j % len(drivers)
        for d in drivers[k:] + drivers[:k]:
            d.job()
    return [d.finish() for d in drivers]


def serve_checkout(s: Setup, config: Path, tag: str, root: Path) -> Server:
    """`topogang serve` from another checkout of the project (its own code, this run's config and
    pinning), so an older commit's extender takes the same jobs in the same run."""
    port, verbs = free_port(), free_port()
    argv = [*s.server_pin, "env", "-C", str(root), f"PYTHONPATH={root}", sys.executable, "-m", "topogang_cli"]
    argv += ["serve", "--config", str(config.resolve()), "--listen", f"{HOST}:{port}"]
    argv += ["--verbs-listen", f"{HOST}:{verbs}", "--log-level", "warning"]
    p = s.kids.start(argv, s.out / f"{tag}.server.log")
    wait_ready(port, p)
    return Server(tag, p, port, verbs_port=verbs)


def start_servers(s: Setup, cfg: Path, args: argparse.Namespace) -> list[Server]:
    """The baseline (the no-op, or with `--tls` the extender over plain HTTP), the extender, and with
    `--against` the other checkout's, each pre-filled. Started anew for every round by default: a
    server process can be slow at placing for its whole life (by ~0.45 ms at the p50, cause unknown;
    the README's Benchmarks), so rounds sharing processes are not independent samples."""
    ext = serve_extender(s, cfg, "topogang")
    prefill(ext, args.fill)
    if args.tls:
        base = ext
        ext = serve_extender(s, cfg, "mtls", tls=make_certificates(Path(args.out) / "pki"))
        prefill(ext, args.fill)
    else:
        base = serve_noop(s, cfg)
    servers = [base, ext]
    if args.against:
        servers.append(serve_checkout(s, cfg, "against", Path(args.against).resolve()))
        prefill(servers[-1], args.fill)
    return servers


def line(name: str, times: dict[str, list[float]]) -> str:
    every = [t for k in KINDS for t in times[k]]
    parts = [
        f"{k} p50/p90/p99 {_quantile(times[k], 0.5):.3f}/{_quantile(times[k], 0.9):.3f}/"
        f"{_quantile(times[k], 0.99):.3f}"
        for k in (*KINDS, *OTHER)
        if k in KINDS or times.get(k)
    ]
    return f"{name:<9} {'  '.join(parts)}  all-filter p99 {_quantile(every, 0.99):.3f} ms"


def verdict(base: str, base_p99: Sequence[float], ratios: Sequence[float]) -> str:
    """The goal's line: the median of the rounds' ratios against `ONE_CLIENT`, with the no-op's own
    p99 per round beside it. The ratio divides by the no-op's tail, which on a shared machine is
    mostly the machine's: a round whose no-op p99 is loud (well above its quiet ~1 ms) gives a low
    ratio for nothing the extender did, so the line shows what each round divided by."""
    goal = Goal(
        "all-filter p99 @1 user / no-op, median of the rounds",
        statistics.median(ratios),
        ONE_CLIENT,
        min(ratios),
        max(ratios),
    )
    tails = ", ".join(f"{x:.3f}" for x in base_p99)
    return (
        f"the ratios' denominators, {base}'s all-filter p99 per round: {tails} ms\n"
        f"goal: {goal.name}: {goal.value:.2f}x [{goal.low:.2f}-{goal.high:.2f}] "
        f"(target <= {goal.target}x): {goal.verdict}\n"
    )


def main(argv: Sequence[str] | None = None) -> int:
    from config.generate import generate_yaml

    ap = argparse.ArgumentParser(prog="python -m loadtest.one_client", description=__doc__)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--fill", type=float, default=0.3)
    ap.add_argument("--jobs", type=int, default=400, help="4-pod gangs per round and server")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "results" / "one-client"))
    ap.add_argument("--tls", action="store_true", help="mutual TLS on the verbs against plain HTTP")
    ap.add_argument(
        "--against",
        metavar="CHECKOUT",
        help="also serve the extender of another checkout (an older commit's worktree), taking the same jobs",
    )
    ap.add_argument(
        "--reuse-servers",
        action="store_true",
        help="keep the servers of the first round for every round (default: fresh processes each round)",
    )
    args = ap.parse_args(argv)
    out = Path(args.out)
    s, pin_text = bench_setup(out, 0, args.fill)
    cfg = out / f"cluster-{args.nodes}.yaml"
    cfg.write_text(generate_yaml(nodes=args.nodes, rack_size=rack_size_for(args.nodes)))
    try:
        servers = start_servers(s, cfg, args)
        base, ext = servers[0], servers[1]
        fresh = "the same servers every round" if args.reuse_servers else "fresh servers each round"
        print(f"one client, {args.nodes} nodes at {args.fill:.0%}, 4 x 8-GPU gangs, {fresh}", end="")
        print(f"; pinning: {pin_text}")
        ratios: dict[str, list[float]] = {srv.tag: [] for srv in servers[1:]}
        base_p99: list[float] = []
        for r in range(args.rounds):
            if r and not args.reuse_servers:
                s.kids.stop_all()
                servers = start_servers(s, cfg, args)
            p99: dict[str, float] = {}
            for srv, times in zip(servers, drive(servers, args.jobs, seed=r + 1), strict=True):
                p99[srv.tag] = _quantile([t for k in KINDS for t in times[k]], 0.99)
                print(line(srv.tag, times), flush=True)
            base_p99.append(p99[base.tag])
            for tag in ratios:
                ratios[tag].append(p99[tag] / p99[base.tag] if p99[base.tag] else 0.0)
        for tag, xs in ratios.items():
            print(
                f"all-filter p99 ratio of {tag} to {base.tag} per round: "
                + ", ".join(f"{x:.2f}x" for x in xs)
            )
        if not args.tls:  # against the no-op: the 1-user goal
            print(verdict(base.tag, base_p99, ratios[ext.tag]), end="")
        return 0
    finally:
        s.kids.stop_all()


if __name__ == "__main__":
    raise SystemExit(main())
