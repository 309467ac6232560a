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
import ssl
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
    """A keep-alive JSON client for the pre-fill and readiness checks: the verbs and standalone's
    state changes go to `verbs_port` (over mutual TLS with `tls`, a client context), the rest to
    `port`."""

    def __init__(
        self,
        port: int,
        timeout: float = 30.0,
        verbs_port: int | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
        self.verbs: http.client.HTTPConnection = self.conn
        if tls is not None:
            self.verbs = http.client.HTTPSConnection(HOST, verbs_port or port, timeout=timeout, context=tls)
        elif verbs_port is not None and verbs_port != port:
            self.verbs = http.client.HTTPConnection(HOST, verbs_port, timeout=timeout)

    def call(self, method: str, path: str, body: bytes | None = None) -> tuple[int, Any]:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        door = path.startswith("/v1/extender/") or (path.startswith("/v1/standalone/") and method != "GET")
        conn = self.verbs if door else self.conn
        try:
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
        except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
            if method not in ("GET", "DELETE"):
                raise
            # the server let a keep-alive connection go while it sat idle (a busy machine can keep a
            # client away from one server longer than its keep-alive timeout): ask again on a new one
            conn.close()
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
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
        self.verbs.close()


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


def prefill(srv: Server, fill: float, seed: int = 1, budget_s: float = 120.0, clients: int = 2) -> float:
    """Philly-mix jobs, each pod filtered and bound, until `fill` of the GPUs is in use (or the
    time budget is spent); the share reached. Two clients, so one reads a reply (0.6 MB at 5,000
    nodes) while the server works on the other's request."""
    with contextlib.closing(srv.http()) as c:
        cluster = c.cluster()
    # whole GPUs: jobs that would overshoot are skipped, so a fractional target (0.3 of 128 GPUs) could
    # never be met and the pre-fill would spin until its budget ran out
    target = round(fill * cluster.total_gpus)
    used = [cluster.used_gpus]
    lock = threading.Lock()
    deadline = time.monotonic() + budget_s

    def client(k: int) -> None:
        fleet = Fleet(cluster, 1.0)  # never finishes anything: the jobs stay
        mix = JobMix(cluster, "philly", seed=seed + k)
        rng = random.Random(seed + k)
        with contextlib.closing(srv.http()) as c:
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
    return used_share(srv)


def used_share(srv: Server) -> float:
    with contextlib.closing(srv.http()) as c:
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
    port: int  # reads
    runs: dict[int, list[Run]] = field(default_factory=dict)
    verbs_port: int = 0  # the verbs (0: on `port`, as the no-op serves them)
    pki: MutualTls | None = None  # the verbs over mutual TLS with these certificates

    @property
    def verbs_url(self) -> str:
        return f"{'https' if self.pki else 'http'}://{HOST}:{self.verbs_port or self.port}"

    def http(self, timeout: float = 30.0) -> Http:
        return Http(self.port, timeout, self.verbs_port or None, self.pki.client() if self.pki else None)


@dataclass(frozen=True)
class MutualTls:
    """Certificates for a server's verbs over mutual TLS (`make_certificates`)."""

    dir: Path

    def server_args(self) -> list[str]:
        d = self.dir
        return [
            *("--verbs-tls-cert", str(d / "server.crt"), "--verbs-tls-key", str(d / "server.key")),
            *("--client-ca", str(d / "ca.crt"), "--verbs-allowed-names", "kube-scheduler"),
        ]

    def client(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.dir / "ca.crt"))
        ctx.load_cert_chain(str(self.dir / "client.crt"), str(self.dir / "client.key"))
        return ctx

    def locust_args(self) -> list[str]:
        """The locustfile's options for the same client certificate."""
        d = self.dir
        return [
            "--verbs-ca",
            str(d / "ca.crt"),
            "--verbs-cert",
            str(d / "client.crt"),
            "--verbs-key",
            str(d / "client.key"),
        ]


def make_certificates(d: Path) -> MutualTls:
    """A throw-away CA, a serving certificate for 127.0.0.1 and a client certificate (CN kube-scheduler)."""
    d.mkdir(parents=True, exist_ok=True)

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2",
            "-subj", "/CN=bench-ca", "-keyout", "ca.key", "-out", "ca.crt")  # fmt: skip
    for name, cn, ext in (
        ("server", "127.0.0.1", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"),
        ("client", "kube-scheduler", "extendedKeyUsage=clientAuth\n"),
    ):
        (d / f"{name}.ext").write_text(ext)
        openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", f"/CN={cn}",
                "-keyout", f"{name}.key", "-out", f"{name}.csr")  # fmt: skip
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.crt")  # fmt: skip
    return MutualTls(d)


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
        *locust_argv(server.verbs_url, users, s.seconds, prefix),
        *("--read-host", f"http://{HOST}:{server.port}"),
        *("--mix", "gang4x8", "--fill", str(s.fill), "--urgent-every", "0"),
        *(server.pki.locust_args() if server.pki else []),
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


def serve_extender(s: Setup, config: Path, tag: str, tls: MutualTls | None = None) -> Server:
    """`topogang serve` on `config`: reads and verbs on ports of their own, the verbs over mutual TLS
    with `tls`."""
    port, verbs = free_port(), free_port()
    argv = [*s.server_pin, sys.executable, "-m", "topogang_cli", "serve", "--config", str(config)]
    argv += ["--listen", f"{HOST}:{port}", "--verbs-listen", f"{HOST}:{verbs}", "--log-level", "warning"]
    p = s.kids.start([*argv, *(tls.server_args() if tls else [])], s.out / f"{tag}.server.log")
    wait_ready(port, p)
    return Server(tag, p, port, verbs_port=verbs, pki=tls)


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
