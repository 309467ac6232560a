"""The extender against a no-op extender on the same stack, same payloads, same run (goals G1, G2).

    python -m loadtest.bench [--seconds 15] [--reps 3] [--out results/bench] [--no-scaling]
    (or: make bench)

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

Prints one table (p50/p99/max per verb, requests/s, each server's CPU share, ratios vs the goals,
PASS/FAIL), then the scaling table, and writes `bench.json` plus locust's CSVs under `--out`. Only
127.0.0.1; every child is killed on exit; the whole run takes about 6 minutes.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import platform
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import orjson

from loadtest.fleet import Cluster, Fleet, JobMix, cluster_from, run_job

HOST = "127.0.0.1"
VERBS = ("filter", "prioritize", "bind", "preempt")
USERS = (1, 16)
G1_16 = 1.5  # filter p99 <= 1.5x no-op at 16 users
G1_1 = 2.0  # <= 2x at 1 user
G2B = 0.4  # filter+prioritize+bind calls/s >= 0.4x the no-op's
SCALING_NODES = (100, 1000, 5000)
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

    @staticmethod
    def median(samples: Sequence[VerbStats]) -> VerbStats:
        """Field by field, the median over repetitions."""
        return VerbStats(
            round(statistics.median(s.count for s in samples)),
            statistics.median(s.p50 for s in samples),
            statistics.median(s.p99 for s in samples),
            statistics.median(s.max for s in samples),
            statistics.median(s.rps for s in samples),
        )


@dataclass
class Run:
    """One locust run against one server: per-verb stats and the CPU share each side used."""

    verbs: dict[str, VerbStats]
    seconds: float = 0.0
    server_cpu: float = 0.0  # share of one core the server used during the run
    locust_cpu: float = 0.0

    @property
    def calls_per_second(self) -> float:
        return sum(self.verbs[v].rps for v in ("filter", "prioritize", "bind") if v in self.verbs)


def median_run(runs: Sequence[Run]) -> Run:
    verbs = {
        v: VerbStats.median([r.verbs[v] for r in runs if v in r.verbs])
        for v in VERBS
        if any(v in r.verbs for r in runs)
    }
    return Run(
        verbs,
        statistics.median(r.seconds for r in runs),
        statistics.median(r.server_cpu for r in runs),
        statistics.median(r.locust_cpu for r in runs),
    )


@dataclass(frozen=True)
class Goal:
    name: str
    value: float
    target: float
    low: float  # the ratio's range over the repetitions
    high: float

    @property
    def at_least(self) -> bool:
        return self.name.startswith("G2")

    @property
    def ok(self) -> bool:
        return self.value >= self.target if self.at_least else self.value <= self.target


def _ratio(a: float, b: float) -> float:
    return a / b if b else 0.0


def goals(ext: Mapping[int, Sequence[Run]], noop: Mapping[int, Sequence[Run]]) -> list[Goal]:
    """Ratios of medians; the range is over the repetitions (extender rep i vs no-op rep i)."""
    out = []
    for users, target in ((16, G1_16), (1, G1_1)):
        e, n = ext.get(users, ()), noop.get(users, ())
        pairs = [(a.verbs["filter"].p99, b.verbs["filter"].p99) for a, b in zip(e, n, strict=False)]
        pairs = [p for p in pairs if p[1]]
        if pairs:
            value = _ratio(statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs))
            each = [_ratio(*p) for p in pairs]
            out.append(Goal(f"G1 filter p99 @{users} users", value, target, min(each), max(each)))
    e, n = ext.get(16, ()), noop.get(16, ())
    pairs = [(a.calls_per_second, b.calls_per_second) for a, b in zip(e, n, strict=False)]
    pairs = [p for p in pairs if p[1]]
    if pairs:
        value = _ratio(statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs))
        each = [_ratio(*p) for p in pairs]
        out.append(Goal("G2b filter+prioritize+bind calls/s @16", value, G2B, min(each), max(each)))
    return out


def format_table(
    ext: Mapping[int, Sequence[Run]], noop: Mapping[int, Sequence[Run]], meta: Mapping[str, Any]
) -> str:
    """The one table: per users and verb, the extender next to the no-op (medians), then the goals."""
    lines = [
        f"topogang bench: {meta.get('nodes', '?')} nodes x 8 GPUs, fill {meta.get('fill', 0.3):.0%} "
        f"({meta.get('fill_after', meta.get('fill', 0.3)):.0%} after the runs), "
        f"{meta.get('seconds', '?')} s per run, median of {meta.get('reps', '?')} runs each",
        f"machine: {meta.get('cpus', '?')} CPUs ({meta.get('cpu_model', '?')}), pinning: "
        f"{meta.get('pinning', 'none')}; load average {meta.get('load_before', '?')} before, "
        f"{meta.get('load_after', '?')} after",
        f"{'users':>5} {'verb':<11} {'topogang p50/p99/max ms':>26} {'req/s':>7}   "
        f"{'no-op p50/p99/max ms':>23} {'req/s':>7}   {'p99 ratio':>9}",
    ]
    for users in sorted(set(ext) | set(noop)):
        e_run = median_run(ext[users]) if ext.get(users) else Run({})
        n_run = median_run(noop[users]) if noop.get(users) else Run({})
        for verb in VERBS:
            e, n = e_run.verbs.get(verb), n_run.verbs.get(verb)
            if e is None and n is None:
                continue

            def cell(s: VerbStats | None) -> str:
                return f"{s.p50:.2f}/{s.p99:.2f}/{s.max:.1f}" if s else "-"

            ratio = f"{e.p99 / n.p99:.2f}x" if e and n and n.p99 else "-"
            lines.append(
                f"{users:>5} {verb:<11} {cell(e):>26} {e.rps if e else 0:>7.0f}   "
                f"{cell(n):>23} {n.rps if n else 0:>7.0f}   {ratio:>9}"
            )
        e_cpu = f"server CPU {e_run.server_cpu:4.0%}, locust {e_run.locust_cpu:4.0%}"
        n_cpu = f"server CPU {n_run.server_cpu:4.0%}, locust {n_run.locust_cpu:4.0%}"
        lines.append(f"{users:>5} {'f+p+b /s':<11} {e_run.calls_per_second:>7.0f}  {e_cpu}")
        lines.append(f"{'':>5} {'':<11} {'':>7}  {'':<28}  no-op {n_run.calls_per_second:.0f}  {n_cpu}")
    lines.append("goals (ratios of medians vs the no-op extender, same run; range over the repetitions):")
    for g in goals(ext, noop):
        op = ">=" if g.at_least else "<="
        lines.append(
            f"  {g.name:<40} {g.value:5.2f}x  [{g.low:.2f}-{g.high:.2f}]  (goal {op} {g.target}x)  "
            f"{'PASS' if g.ok else 'FAIL'}"
        )
    return "\n".join(lines)


def format_scaling(rows: Sequence[Mapping[str, Any]]) -> str:
    lines = [
        "scaling (in-process: loadtest.bench_core, Philly mix; HTTP: 16 users, 4x8-GPU gangs, pre-filled):",
        f"{'nodes':>6} {'rack':>5} {'decisions/s':>12} {'vs first-fit':>13} {'fill':>5} "
        f"{'filter p99 ms':>14} {'no-op p99 ms':>13} {'RSS MiB':>8}",
    ]
    for r in rows:
        rss = f"{r['rss_mib']:.0f}" if r.get("rss_mib") else "-"
        p99 = f"{r['filter_p99_ms']:.2f}" if r.get("filter_p99_ms") is not None else "-"
        base = f"{r['noop_p99_ms']:.2f}" if r.get("noop_p99_ms") is not None else "-"
        fill = f"{r['fill']:.0%}" if r.get("fill") is not None else "-"
        lines.append(
            f"{r['nodes']:>6} {r['rack_size']:>5} {r['core_rate']:>12,.0f} {r['ratio']:>12.2f}x {fill:>5} "
            f"{p99:>14} {base:>13} {rss:>8}"
        )
    return "\n".join(lines)


def rack_size_for(nodes: int) -> int:
    """Racks of 8 nodes when they divide the cluster, else the next size that does (100 -> 10)."""
    return next(r for r in range(8, nodes + 1) if nodes % r == 0) if nodes >= 8 else nodes


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
        return ["taskset", "-c", str(a)], ["taskset", "-c", str(b)], f"servers cpu {a}, locust cpu {b}"
    return [], [], "none (needs taskset and 2 cores)"


def cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process so far (Linux), or None."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CpuSampler:
    """Samples processes' CPU time 10x a second, so a run's CPU share can be read over exactly the
    window locust reports (not its start-up)."""

    def __init__(self, pids: Mapping[str, int]) -> None:
        self.pids = dict(pids)
        self.samples: list[tuple[float, dict[str, float]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            now = time.time()
            got = {k: cpu_seconds(p) for k, p in self.pids.items()}
            self.samples.append((now, {k: v for k, v in got.items() if v is not None}))
            self._stop.wait(0.1)

    @contextlib.contextmanager
    def running(self) -> Iterator[CpuSampler]:
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join()

    def share(self, key: str, start: float, stop: float) -> float:
        inside = [(t, s[key]) for t, s in self.samples if start <= t <= stop and key in s]
        if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
            return 0.0
        return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])


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


def prefill(port: int, fill: float, seed: int = 1, budget_s: float = 120.0, clients: int = 2) -> float:
    """Philly-mix jobs, each pod filtered and bound, until `fill` of the GPUs is in use (or the
    time budget is spent); the share reached. Two clients, so one reads a reply (0.6 MB at 5,000
    nodes) while the server works on the other's request."""
    with contextlib.closing(Http(port)) as c:
        cluster = c.cluster()
    target = fill * cluster.total_gpus
    used = [cluster.used_gpus]
    lock = threading.Lock()
    deadline = time.monotonic() + budget_s

    def client(k: int) -> None:
        fleet = Fleet(cluster, 1.0)  # never finishes anything: the jobs stay
        mix = JobMix(cluster, "philly", seed=seed + k)
        rng = random.Random(seed + k)
        with contextlib.closing(Http(port)) as c:
            while time.monotonic() < deadline:
                job = mix.next()
                with lock:
                    if used[0] >= target:
                        return
                    if used[0] + job.gpus > target:
                        continue
                    used[0] += job.gpus  # booked before it is placed: no overshoot
                if not run_job(c.post, fleet, job, c.delete, rng):
                    with lock:
                        used[0] -= job.gpus

    threads = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return used_share(port)


def used_share(port: int) -> float:
    with contextlib.closing(Http(port)) as c:
        cluster = c.cluster()
    return cluster.used_gpus / cluster.total_gpus if cluster.total_gpus else 0.0


def rss_mib(pid: int) -> float:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


# ---------------------------------------------------------------------------------------- runs
@dataclass
class Setup:
    kids: Children
    out: Path
    server_pin: list[str]
    load_pin: list[str]
    seconds: int
    fill: float


@dataclass
class Server:
    tag: str
    proc: subprocess.Popen[bytes]
    port: int
    runs: dict[int, list[Run]] = field(default_factory=dict)


def locust(s: Setup, server: Server, users: int, prefix: Path) -> Run:
    """One headless locust run; per-verb stats from its exact latencies over its own window."""
    lat = prefix.with_suffix(".latency.json")
    argv = [
        *s.load_pin,
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(ROOT / "loadtest" / "locustfile.py"),
        "--host",
        f"http://{HOST}:{server.port}",
        "--headless",
        "-u",
        str(users),
        "-r",
        str(users),
        "-t",
        f"{s.seconds}s",
        "--stop-timeout",
        "2",
        "--only-summary",
        "--csv",
        str(prefix),
        "--mix",
        "gang4x8",
        "--fill",
        str(s.fill),
        "--urgent-every",
        "0",
        "--latency-file",
        str(lat),
    ]
    lat.unlink(missing_ok=True)
    p = s.kids.start(argv, prefix.with_suffix(".log"))
    sampler = CpuSampler({"server": server.proc.pid, "locust": p.pid})
    with sampler.running():
        try:
            p.wait(s.seconds + 60)
        except subprocess.TimeoutExpired:
            s.kids.stop(p)
            raise RuntimeError(f"locust did not stop: see {prefix.with_suffix('.log')}") from None
    s.kids.stop(p)
    if not lat.exists():
        raise RuntimeError(f"locust wrote no latencies: see {prefix.with_suffix('.log')}")
    doc = orjson.loads(lat.read_bytes())
    start, stop = doc["window"]
    seconds = max(1e-3, stop - start)
    data = doc["latencies"]
    return Run(
        {v: VerbStats.of(data[v], seconds) for v in VERBS if data.get(v)},
        seconds,
        sampler.share("server", start, stop),
        sampler.share("locust", start, stop),
    )


def serve_extender(s: Setup, config: Path, tag: str) -> Server:
    port = free_port()
    argv = [*s.server_pin, sys.executable, "-m", "topogang_cli", "serve", "--config", str(config)]
    p = s.kids.start(
        [*argv, "--listen", f"{HOST}:{port}", "--log-level", "warning"], s.out / f"{tag}.server.log"
    )
    wait_ready(port, p)
    return Server(tag, p, port)


def serve_noop(s: Setup, config: Path, tag: str = "noop") -> Server:
    port = free_port()
    argv = [*s.server_pin, sys.executable, "-m", "loadtest.noop", "--port", str(port)]
    p = s.kids.start([*argv, "--config", str(config)], s.out / f"{tag}.server.log")
    wait_ready(port, p)
    return Server(tag, p, port)


def alternate(
    s: Setup, servers: Sequence[Server], users: Sequence[int], reps: int, say: Callable[[str], None]
) -> None:
    """Every (rep, users) runs each server in turn, so drift in the machine's load hits all alike."""
    for rep in range(reps):
        for u in users:
            for srv in servers:
                run = locust(s, srv, u, s.out / f"{srv.tag}_u{u}_r{rep + 1}")
                srv.runs.setdefault(u, []).append(run)
                f = run.verbs.get("filter")
                say(
                    f"  rep {rep + 1} {srv.tag:<8} {u:>2} users: filter p99 "
                    f"{f.p99 if f else 0:.2f} ms, f+p+b {run.calls_per_second:.0f}/s, "
                    f"server CPU {run.server_cpu:.0%}"
                )


def scaling_rows(
    s: Setup,
    main_nodes: int,
    fill: float,
    config_for: Callable[[int], Path],
    ext: Server,
    noop: Server,
    rss: float,
    main_fill: float,
    say: Callable[[str], None],
    rows: list[dict[str, Any]],
) -> None:
    """In-process decisions/s, HTTP filter p99 (one shorter run each, 16 users) and RSS per size;
    the main size reuses the main runs. Appends to `rows` as it goes."""
    from loadtest.bench_core import bench as core_bench

    short = replace(s, seconds=max(5, s.seconds * 2 // 3))
    for nodes in SCALING_NODES:
        say(f"scaling at {nodes} nodes ...")
        r = core_bench(nodes, fill, 3000, 7, rack_size=rack_size_for(nodes))
        row: dict[str, Any] = {
            "nodes": nodes,
            "rack_size": rack_size_for(nodes),
            "core_rate": r["core_rate"],
            "ratio": r["ratio"],
        }
        if nodes == main_nodes and ext.runs.get(16) and noop.runs.get(16):
            row["filter_p99_ms"] = median_run(ext.runs[16]).verbs["filter"].p99
            row["noop_p99_ms"] = median_run(noop.runs[16]).verbs["filter"].p99
            row["rss_mib"] = rss
            row["fill"] = main_fill
        else:
            srv = serve_extender(short, config_for(nodes), f"topogang-{nodes}")
            base = serve_noop(short, config_for(nodes), f"noop-{nodes}")
            try:
                row["fill"] = prefill(srv.port, fill)
                alternate(short, [base, srv], (16,), 1, say)
                row["rss_mib"] = rss_mib(srv.proc.pid)
            finally:
                s.kids.stop(base.proc)
                s.kids.stop(srv.proc)
            row["filter_p99_ms"] = srv.runs[16][0].verbs["filter"].p99
            row["noop_p99_ms"] = base.runs[16][0].verbs["filter"].p99
        rows.append(row)


def _sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


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
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    server_pin, load_pin, pin_text = pinning()
    kids = Children()
    signal.signal(signal.SIGTERM, _sigterm)
    s = Setup(kids, out, server_pin, load_pin, args.seconds, args.fill)
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
        reached = prefill(ext.port, args.fill)
        noop = serve_noop(s, cfg)
        say(f"locust at {' and '.join(map(str, USERS))} users, {args.seconds} s a run, {args.reps} reps")
        alternate(s, [noop, ext], USERS, args.reps, say)
        fill_after = used_share(ext.port)
        rss = rss_mib(ext.proc.pid)
        kids.stop(noop.proc)
        kids.stop(ext.proc)
        meta: dict[str, Any] = {
            "nodes": args.nodes,
            "fill": reached,
            "fill_after": fill_after,
            "seconds": args.seconds,
            "reps": args.reps,
            "pinning": pin_text,
            "cpus": os.cpu_count(),
            "cpu_model": cpu_model(),
            "python": platform.python_version(),
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
        (out / "bench.json").write_text(json.dumps(doc, indent=2))
        return 0
    except KeyboardInterrupt:
        print("bench: interrupted", file=sys.stderr)
        return 130
    finally:
        kids.stop_all()


if __name__ == "__main__":
    raise SystemExit(main())
