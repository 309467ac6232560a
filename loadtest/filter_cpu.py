"""The filter's own CPU time, in process: the extender's app (or the no-op's) called as ASGI, no sockets.

    python -m loadtest.filter_cpu [--nodes 1000] [--jobs 400] [--noop]

`loadtest.one_client` times filters over HTTP, where a shared machine's load moves every figure. This
drives the same 4 x 8-GPU gangs (after the same pre-fill to 30%) through the app in this process and
times each filter call in the thread's CPU time (`time.thread_time`), which other processes barely
move: the middleware, the body's parsing, the pod's request, the core's question and the answer, as
the server runs them, without uvicorn and the client. Run it on two checkouts (or with `--noop`, the
no-op extender's app) one after the other, alternating, to compare them.

`--cold` writes a buffer larger than the caches before each verb call, so each filter starts with
its data out of the CPU caches, as a server does that waits for its client between requests. In
process and warm, a placing filter's CPU is most of its cost beyond the no-op's; cold, the memory
it touches costs as much again (the no-op's filter, touching little, barely moves). That is why CPU
cuts found here show less over HTTP (`loadtest.one_client`): the cold figure is the closer one.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
from starlette.types import ASGIApp, Message

from loadtest.fleet import SPEC, Cluster, Fleet, JobMix, cluster_from, run_job
from loadtest.scaling import rack_size_for
from loadtest.servers import ROOT

KINDS = ("place", "member")


COLD_BYTES = 32 << 20  # written before each call with `--cold`: more than a server CPU's caches


class InProcess:
    """An app called as ASGI on one event loop; each filter's thread CPU time (ms) by kind."""

    def __init__(self, verbs: ASGIApp, reads: ASGIApp, *, cold: bool = False) -> None:
        self.verbs, self.reads = verbs, reads
        self.evict = bytearray(COLD_BYTES) if cold else None
        self._zeros = bytes(COLD_BYTES // 64) if cold else b""  # one byte per cache line
        self.loop = asyncio.new_event_loop()
        self.times: dict[str, list[float]] = {k: [] for k in KINDS}
        self.seen: set[str] = set()
        self.timing = False

    async def _call(self, app: ASGIApp, method: str, path: str, body: bytes | None) -> tuple[int, Any, float]:
        out: list[Message] = []
        sent = False

        async def receive() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body or b"", "more_body": False}
            await asyncio.Event().wait()  # no disconnect while the answer is written
            return {"type": "http.disconnect"}

        async def send(message: Message) -> None:
            out.append(message)

        if self.evict is not None and self.timing:
            self.evict[::64] = self._zeros  # a write per cache line, outside the timing
        headers = [(b"host", b"127.0.0.1")]
        if body is not None:
            headers += [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": method,
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": headers,
            "client": ("127.0.0.1", 40000),
            "server": ("127.0.0.1", 10000),
        }
        t0 = time.thread_time()
        await app(scope, receive, send)
        spent = time.thread_time() - t0
        status = next(int(m["status"]) for m in out if m["type"] == "http.response.start")
        raw = b"".join(m.get("body", b"") for m in out if m["type"] == "http.response.body")
        return status, orjson.loads(raw) if raw else None, spent

    def call(self, method: str, path: str, body: bytes | None = None) -> tuple[int, Any, float]:
        door = path.startswith("/v1/extender/") or (path.startswith("/v1/standalone/") and method != "GET")
        return self.loop.run_until_complete(
            self._call(self.verbs if door else self.reads, method, path, body)
        )

    def post(self, verb: str, body: bytes) -> Any:
        kind = None
        if verb == "filter" and self.timing:
            pod = orjson.loads(body)["Pod"]
            gang = orjson.loads(pod["metadata"]["annotations"][SPEC])["affinityGroup"]["name"]
            kind = "member" if gang in self.seen else "place"
            self.seen.add(gang)
        status, doc, spent = self.call("POST", f"/v1/extender/{verb}", body)
        if kind is not None:
            self.times[kind].append(spent * 1e3)
        return doc if status == 200 else None

    def delete(self, uid: str) -> None:
        self.call("DELETE", f"/v1/standalone/pods/{uid}")

    def cluster(self) -> Cluster:
        summary = self.call("GET", "/v1/inspect")[1]
        return cluster_from(summary, self.call("GET", "/v1/inspect/clusterstatus/physicalcluster")[1])


def serve(config: Path, noop: bool, cold: bool = False) -> InProcess:
    """The verbs and read apps `topogang serve` serves for `config`, started (or the no-op's app)."""
    if noop:
        from loadtest.noop import build_noop_app, node_list

        app = build_noop_app(node_list(str(config), 0))
        return InProcess(app, app, cold=cold)
    from config.load import load_config
    from extender.http.app import build_apps
    from extender.standalone import build_standalone

    service = build_standalone(load_config(str(config)))
    built = build_apps(service)
    ip = InProcess(built.verbs, built.reads, cold=cold)
    for start in service.on_start:  # ready (the background loops, expiry and reload, are not run)
        ip.loop.run_until_complete(start())
    return ip


def measure(
    config: Path, jobs: int, *, noop: bool = False, fill: float = 0.3, seed: int = 1, cold: bool = False
) -> dict[str, list[float]]:
    """Pre-fill to `fill` (the Philly mix), then schedule `jobs` 4 x 8-GPU gangs: filter CPU (ms) by kind."""
    ip = serve(config, noop, cold)
    cluster = ip.cluster()
    target, used = round(fill * cluster.total_gpus), cluster.used_gpus
    fleet, mix, rng = Fleet(cluster, 1.0), JobMix(cluster, "philly", seed=seed), random.Random(seed)
    while used < target:
        job = mix.next()
        if used + job.gpus <= target and run_job(ip.post, fleet, job, ip.delete, rng):
            used += job.gpus
    cluster = ip.cluster()
    fleet, mix, rng = Fleet(cluster, fill), JobMix(cluster, "gang4x8", seed=seed), random.Random(seed)
    ip.timing = True
    for _ in range(jobs):
        run_job(ip.post, fleet, mix.next(), ip.delete, rng)
    return ip.times


def main(argv: Sequence[str] | None = None) -> int:
    from config.generate import generate_yaml

    ap = argparse.ArgumentParser(prog="python -m loadtest.filter_cpu", description=__doc__)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--jobs", type=int, default=400, help="4-pod gangs timed after the pre-fill")
    ap.add_argument("--noop", action="store_true", help="the no-op extender's app instead")
    ap.add_argument("--cold", action="store_true", help="each call starts with the CPU caches flushed")
    ap.add_argument("--out", default=str(ROOT / "results" / "filter-cpu"))
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = out / f"cluster-{args.nodes}.yaml"
    cfg.write_text(generate_yaml(nodes=args.nodes, rack_size=rack_size_for(args.nodes)))
    times = measure(cfg, args.jobs, noop=args.noop, cold=args.cold)
    parts = [
        f"{k} n={len(times[k])} p50 {statistics.median(times[k]):.3f} ms" if times[k] else f"{k} n=0"
        for k in KINDS
    ]
    name = ("noop" if args.noop else "topogang") + (" cold" if args.cold else "")
    print(f"{name} filter CPU, {args.nodes} nodes at 30%: " + "  ".join(parts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
