"""The extender against a no-op extender on the same stack, same payloads, same run (goals G1, G2).

    python -m loadtest.bench [--seconds 20] [--out results/bench] [--no-scaling]     (or: make bench)

1. Generates the 1,000-node x 8-GPU cluster (`config.generate`), starts `topogang serve` on it and
   pre-fills it to 30% over HTTP (Philly-mix jobs, each pod filtered and bound like kube-scheduler).
2. Starts `python -m loadtest.noop` on the same node list.
3. Runs locust headless (`loadtest/locustfile.py`, 4-pod x 8-GPU gangs: G1's shape; jobs finish as
   new ones arrive, so the fill stays at 30%) against each, at 1 and 16 users, for a fixed time.
   Each server is pinned to one core and locust to another with `taskset` when there are 2 cores.
4. Scaling: in-process gang decisions/s (`loadtest.bench_core`) and HTTP filter p99 at 100, 1,000
   and 5,000 nodes, and the extender's RSS at 5,000 nodes.

Prints one table (p50/p99/max per verb, requests/s, ratios vs the goals, PASS/FAIL) and writes
`bench.json` plus locust's CSVs under `--out`. Only 127.0.0.1; every child is killed on exit.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from loadtest.kubesched import Cluster, Fleet, JobMix, cluster_from, run_job

HOST = "127.0.0.1"
VERBS = ("filter", "prioritize", "bind", "preempt")
G1_16 = 1.5  # filter p99 <= 1.5x no-op at 16 users
G1_1 = 2.0  # <= 2x at 1 user
G2B = 0.4  # filter+prioritize+bind calls/s >= 0.4x the no-op's
ROOT = Path(__file__).resolve().parent.parent


# ---------------------------------------------------------------------------------------- numbers
def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


@dataclass(frozen=True)
class VerbStats:
    count: int
    p50: float
    p99: float
    max: float
    rps: float

    @staticmethod
    def of(latencies: Sequence[float], seconds: float) -> VerbStats:
        return VerbStats(
            len(latencies),
            percentile(latencies, 0.5),
            percentile(latencies, 0.99),
            max(latencies, default=0.0),
            len(latencies) / seconds if seconds else 0.0,
        )


Run = dict[str, VerbStats]  # verb -> stats, for one (server, users) run


def calls_per_second(run: Run) -> float:
    return sum(run[v].rps for v in ("filter", "prioritize", "bind") if v in run)


@dataclass(frozen=True)
class Goal:
    name: str
    value: float
    target: float

    @property
    def ok(self) -> bool:
        return self.value >= self.target if self.name.startswith("G2") else self.value <= self.target


def goals(ext: Mapping[int, Run], noop: Mapping[int, Run]) -> list[Goal]:
    out = []
    for users, target in ((16, G1_16), (1, G1_1)):
        if users in ext and users in noop and "filter" in ext[users] and "filter" in noop[users]:
            base = noop[users]["filter"].p99
            out.append(
                Goal(
                    f"G1 filter p99 @{users} users", ext[users]["filter"].p99 / base if base else 0.0, target
                )
            )
    if 16 in ext and 16 in noop:
        base = calls_per_second(noop[16])
        out.append(
            Goal(
                "G2b filter+prioritize+bind calls/s @16", calls_per_second(ext[16]) / base if base else 0, G2B
            )
        )
    return out


def format_table(ext: Mapping[int, Run], noop: Mapping[int, Run], meta: Mapping[str, Any]) -> str:
    """The one table: per verb and users, the extender next to the no-op, then the goals."""
    lines = [
        f"topogang bench: {meta.get('nodes', '?')} nodes x 8 GPUs, fill {meta.get('fill', 0.3):.0%}, "
        f"{meta.get('seconds', '?')} s per run, pinning: {meta.get('pinning', 'none')}",
        f"{'users':>5} {'verb':<11} {'topogang p50/p99/max ms':>26} {'req/s':>8}   "
        f"{'no-op p50/p99/max ms':>23} {'req/s':>8}   {'p99 ratio':>9}",
    ]
    for users in sorted(set(ext) | set(noop)):
        for verb in VERBS:
            e, n = ext.get(users, {}).get(verb), noop.get(users, {}).get(verb)
            if e is None and n is None:
                continue

            def cell(s: VerbStats | None) -> str:
                return f"{s.p50:.2f}/{s.p99:.2f}/{s.max:.1f}" if s else "-"

            ratio = f"{e.p99 / n.p99:.2f}x" if e and n and n.p99 else "-"
            lines.append(
                f"{users:>5} {verb:<11} {cell(e):>26} {e.rps if e else 0:>8.0f}   "
                f"{cell(n):>23} {n.rps if n else 0:>8.0f}   {ratio:>9}"
            )
        e_cps = calls_per_second(ext.get(users, {}))
        n_cps = calls_per_second(noop.get(users, {}))
        lines.append(f"{users:>5} {'f+p+b /s':<11} {e_cps:>26.0f} {'':>8}   {n_cps:>23.0f}")
    lines.append("goals (ratios vs the no-op extender, same run):")
    for g in goals(ext, noop):
        op = ">=" if g.name.startswith("G2") else "<="
        lines.append(f"  {g.name:<42} {g.value:6.2f}x  (goal {op} {g.target}x)  {'PASS' if g.ok else 'FAIL'}")
    return "\n".join(lines)


def format_scaling(rows: Sequence[Mapping[str, Any]]) -> str:
    lines = [
        "scaling (in-process: loadtest.bench_core; HTTP: 16 users, 4x8-GPU gangs, 30% fill):",
        f"{'nodes':>6} {'decisions/s':>12} {'vs first-fit':>13} {'filter p99 ms':>14} {'RSS MiB':>8}",
    ]
    for r in rows:
        rss = f"{r['rss_mib']:.0f}" if r.get("rss_mib") else "-"
        p99 = f"{r['filter_p99_ms']:.2f}" if r.get("filter_p99_ms") is not None else "-"
        lines.append(f"{r['nodes']:>6} {r['core_rate']:>12,.0f} {r['ratio']:>12.2f}x {p99:>14} {rss:>8}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------- processes
class Children:
    """Every child process; all killed (process groups) on exit, Ctrl-C or error."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, argv: Sequence[str], log: Path) -> subprocess.Popen[bytes]:
        with log.open("wb") as out:
            p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=ROOT)
        self.procs.append(p)
        return p

    def stop(self, p: subprocess.Popen[bytes]) -> None:
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait(5)
        if p in self.procs:
            self.procs.remove(p)

    def stop_all(self) -> None:
        for p in list(self.procs):
            self.stop(p)


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def pinning() -> tuple[list[str], list[str], str]:
    """taskset prefixes for (server, load generator) and a description."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if len(cpus) >= 2 and shutil.which("taskset"):
        a, b = cpus[0], cpus[1]
        return ["taskset", "-c", str(a)], ["taskset", "-c", str(b)], f"server cpu {a}, locust cpu {b}"
    return [], [], "none (needs taskset and 2 cores)"


class Http:
    """A keep-alive JSON client for the pre-fill and readiness checks."""

    def __init__(self, port: int, timeout: float = 30.0) -> None:
        self.conn = http.client.HTTPConnection(HOST, port, timeout=timeout)

    def call(self, method: str, path: str, body: bytes | None = None) -> tuple[int, Any]:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        self.conn.request(method, path, body=body, headers=headers)
        resp = self.conn.getresponse()
        raw = resp.read()
        return resp.status, orjson.loads(raw) if raw else None

    def post(self, verb: str, body: bytes) -> Any:
        status, doc = self.call("POST", f"/v1/extender/{verb}", body)
        return doc if status == 200 else None

    def delete(self, uid: str) -> None:
        self.call("DELETE", f"/v1/standalone/pods/{uid}")

    def cluster(self) -> Cluster:
        return cluster_from(
            self.call("GET", "/v1/inspect")[1],
            self.call("GET", "/v1/inspect/clusterstatus/physicalcluster")[1],
        )

    def close(self) -> None:
        self.conn.close()


def wait_ready(port: int, proc: subprocess.Popen[bytes], seconds: float = 120.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server on port {port} exited with {proc.returncode}")
        try:
            with contextlib.closing(Http(port, 2.0)) as c:
                if c.call("GET", "/readyz")[0] == 200:
                    return
        except (OSError, http.client.HTTPException):
            pass
        time.sleep(0.2)
    raise RuntimeError(f"server on port {port} not ready after {seconds:.0f} s")


def prefill(port: int, fill: float, seed: int = 1, budget_s: float = 120.0) -> float:
    """Philly-mix jobs, each pod filtered and bound, until `fill` of the GPUs is in use; the share
    reached."""
    with contextlib.closing(Http(port)) as c:
        cluster = c.cluster()
        fleet = Fleet(cluster, 1.0)  # never finishes anything: the jobs stay
        mix = JobMix(cluster, "philly", seed=seed)
        rng = random.Random(seed)
        used = cluster.used_gpus
        deadline = time.monotonic() + budget_s
        while used < fill * cluster.total_gpus and time.monotonic() < deadline:
            job = mix.next()
            if used + job.gpus > fill * cluster.total_gpus:
                continue
            if run_job(c.post, fleet, job, c.delete, rng):
                used += job.gpus
        return used / cluster.total_gpus


def rss_mib(pid: int) -> float:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def locust(
    kids: Children, pin: list[str], port: int, users: int, seconds: int, prefix: Path, fill: float
) -> Run:
    """One headless locust run; per-verb stats from its exact latencies."""
    lat = prefix.with_suffix(".latency.json")
    argv = [
        *pin,
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(ROOT / "loadtest" / "locustfile.py"),
        "--host",
        f"http://{HOST}:{port}",
        "--headless",
        "-u",
        str(users),
        "-r",
        str(users),
        "-t",
        f"{seconds}s",
        "--stop-timeout",
        "2",
        "--only-summary",
        "--csv",
        str(prefix),
        "--mix",
        "gang4x8",
        "--fill",
        str(fill),
        "--urgent-every",
        "0",
        "--latency-file",
        str(lat),
    ]
    p = kids.start(argv, prefix.with_suffix(".log"))
    try:
        p.wait(seconds + 60)
    except subprocess.TimeoutExpired:
        kids.stop(p)
        raise RuntimeError(f"locust did not stop: see {prefix.with_suffix('.log')}") from None
    kids.stop(p)
    data = orjson.loads(lat.read_bytes()) if lat.exists() else {}
    return {v: VerbStats.of(data[v], seconds) for v in VERBS if data.get(v)}


# ---------------------------------------------------------------------------------------- main
@dataclass
class Setup:
    kids: Children
    out: Path
    server_pin: list[str]
    load_pin: list[str]
    seconds: int
    fill: float


def serve(s: Setup, config: Path, tag: str) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    argv = [*s.server_pin, sys.executable, "-m", "topogang_cli", "serve", "--config", str(config)]
    p = s.kids.start(
        [*argv, "--listen", f"{HOST}:{port}", "--log-level", "warning"], s.out / f"{tag}.server.log"
    )
    wait_ready(port, p)
    return p, port


def extender_runs(
    s: Setup, config: Path, tag: str, users: Sequence[int]
) -> tuple[dict[int, Run], float, float]:
    p, port = serve(s, config, tag)
    try:
        reached = prefill(port, s.fill)
        runs = {
            u: locust(s.kids, s.load_pin, port, u, s.seconds, s.out / f"{tag}_u{u}", s.fill) for u in users
        }
        return runs, reached, rss_mib(p.pid)
    finally:
        s.kids.stop(p)


def noop_runs(s: Setup, config: Path, users: Sequence[int]) -> dict[int, Run]:
    port = free_port()
    argv = [
        *s.server_pin,
        sys.executable,
        "-m",
        "loadtest.noop",
        "--port",
        str(port),
        "--config",
        str(config),
    ]
    p = s.kids.start(argv, s.out / "noop.server.log")
    try:
        wait_ready(port, p)
        return {
            u: locust(s.kids, s.load_pin, port, u, s.seconds, s.out / f"noop_u{u}", s.fill) for u in users
        }
    finally:
        s.kids.stop(p)


def _sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    from config.generate import generate_yaml
    from loadtest.bench_core import bench as core_bench

    ap = argparse.ArgumentParser(prog="python -m loadtest.bench", description=__doc__)
    ap.add_argument("--seconds", type=int, default=20, help="per locust run (default %(default)s)")
    ap.add_argument("--fill", type=float, default=0.3)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--out", default=str(ROOT / "results" / "bench"))
    ap.add_argument("--no-scaling", action="store_true", help="skip the 100/1,000/5,000-node table")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    server_pin, load_pin, pin_text = pinning()
    kids = Children()
    signal.signal(signal.SIGTERM, _sigterm)
    s = Setup(kids, out, server_pin, load_pin, args.seconds, args.fill)
    configs: dict[int, Path] = {}

    def config_for(nodes: int) -> Path:
        if nodes not in configs:
            configs[nodes] = out / f"cluster-{nodes}.yaml"
            configs[nodes].write_text(generate_yaml(nodes=nodes))
        return configs[nodes]

    started = time.monotonic()
    try:
        cfg = config_for(args.nodes)
        print(
            f"bench: extender on {args.nodes} nodes, pre-fill to {args.fill:.0%}, locust 1 and 16 users ...",
            flush=True,
        )
        ext, reached, rss = extender_runs(s, cfg, "topogang", (1, 16))
        print("bench: no-op extender ...", flush=True)
        noop = noop_runs(s, cfg, (1, 16))
        meta = {"nodes": args.nodes, "fill": reached, "seconds": args.seconds, "pinning": pin_text}
        table = format_table(ext, noop, meta)
        scaling: list[dict[str, Any]] = []
        if not args.no_scaling:
            short = Setup(kids, out, server_pin, load_pin, max(5, args.seconds // 2), args.fill)
            for nodes in (100, 1000, 5000):
                print(f"bench: scaling at {nodes} nodes ...", flush=True)
                r = core_bench(nodes, args.fill, 3000, 7)
                row: dict[str, Any] = {"nodes": nodes, "core_rate": r["core_rate"], "ratio": r["ratio"]}
                if nodes == args.nodes:
                    row["filter_p99_ms"] = ext[16]["filter"].p99 if "filter" in ext.get(16, {}) else None
                    row["rss_mib"] = rss
                else:
                    runs, _, row["rss_mib"] = extender_runs(
                        short, config_for(nodes), f"topogang-{nodes}", (16,)
                    )
                    row["filter_p99_ms"] = runs[16]["filter"].p99 if "filter" in runs.get(16, {}) else None
                scaling.append(row)
        print()
        print(table)
        if scaling:
            print()
            print(format_scaling(scaling))
        print(f"\n(took {time.monotonic() - started:.0f} s; JSON and locust CSVs in {out})")
        doc = {
            "meta": meta,
            "topogang": {u: {v: vars(st) for v, st in r.items()} for u, r in ext.items()},
            "noop": {u: {v: vars(st) for v, st in r.items()} for u, r in noop.items()},
            "goals": [
                {"goal": g.name, "value": g.value, "target": g.target, "pass": g.ok} for g in goals(ext, noop)
            ],
            "scaling": scaling,
        }
        (out / "bench.json").write_text(json.dumps(doc, indent=2))
        return 0
    except KeyboardInterrupt:
        print("bench: interrupted", file=sys.stderr)
        return 130
    finally:
        kids.stop_all()


if __name__ == "__main__":
    raise SystemExit(main())
