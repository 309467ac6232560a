"""The processes a bench runs, all on 127.0.0.1: the extender and the no-op extender (pinned to one
core), the pre-fill that drives them like kube-scheduler, and locust against them (on the other
core), each run's figures read from locust's exact latencies and the CPU it and the server used."""

from __future__ import annotations

import contextlib
import http.client
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from loadtest.fleet import Cluster, Fleet, JobMix, cluster_from, run_job
from loadtest.measure import VERBS, CpuSampler, Run, VerbStats

HOST = "127.0.0.1"
ROOT = Path(__file__).resolve().parent.parent


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


@dataclass
class Setup:
    kids: Children
    out: Path
    server_pin: list[str]
    load_pin: list[str]
    seconds: int
    fill: float


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def stop_on_sigterm() -> None:
    """SIGTERM ends a bench as Ctrl-C does: its `finally` stops every child."""
    signal.signal(signal.SIGTERM, _interrupt)


def bench_setup(out: Path, seconds: int, fill: float) -> tuple[Setup, str]:
    """What a bench runs with: its output folder, the pinning (and its description), the children."""
    out.mkdir(parents=True, exist_ok=True)
    server_pin, load_pin, pin_text = pinning()
    stop_on_sigterm()
    return Setup(Children(), out, server_pin, load_pin, seconds, fill), pin_text


@dataclass
class Server:
    tag: str
    proc: subprocess.Popen[bytes]
    port: int
    runs: dict[int, list[Run]] = field(default_factory=dict)


def locust_argv(host: str, users: int, seconds: int, prefix: Path) -> list[str]:
    """A bounded headless locust run of `loadtest/locustfile.py` against `host`: locust's CSVs and
    the exact latencies under `prefix` (the locustfile's own options go after)."""
    return [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(ROOT / "loadtest" / "locustfile.py"),
        "--host",
        host,
        "--headless",
        *("-u", str(users), "-r", str(users), "-t", f"{seconds}s"),
        *("--stop-timeout", "2", "--only-summary", "--csv", str(prefix)),
        *("--latency-file", str(prefix.with_suffix(".latency.json"))),
    ]


def locust(s: Setup, server: Server, users: int, prefix: Path) -> Run:
    """One headless locust run; per-verb stats from its exact latencies over its own window."""
    lat = prefix.with_suffix(".latency.json")
    argv = [
        *s.load_pin,
        *locust_argv(f"http://{HOST}:{server.port}", users, s.seconds, prefix),
        *("--mix", "gang4x8", "--fill", str(s.fill), "--urgent-every", "0"),
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
