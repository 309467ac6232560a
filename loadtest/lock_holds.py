"""How long the Kubernetes mode holds the verbs' lock at scale while nobody schedules: every verb
waits behind each hold, so a long one is a stall of kube-scheduler's whole cycle.

    python -m loadtest.lock_holds [--nodes 12500] [--fill 0.8] [--seconds 12] [--scrapes 3]

The scene of `loadtest.scale_recovery` (a generated cluster, `--fill` of its GPUs in bound
Philly-mix pods in the in-memory API server), the Kubernetes-mode service started on it as
`topogang serve` starts (recovery, then ready); then, for `--seconds`, every hold of the verbs'
lock is timed by who took it (the durable reservations' sync, expiry, the admission gate, the
conventions' ticks...), and `--scrapes` GETs of the open `/metrics` after a change of state each;
then three copies of the state as the admins' reads take them (`http.snapshot.Snapshots`).
Prints one line per holder: how many holds, the longest, the median. The lock is timed from the
moment it is acquired to its release, by wrapping `VersionedLock` in this process only.

At 12,500 nodes and 80% (59,045 gangs) before the core kept its gangs not whole apart
(`Reservations.unsettled`): the sync held it 160-212 ms every second, expiry 5.8 ms, a scrape
~400 ms. See the README's Benchmarks.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import statistics
import time
import traceback
from collections import defaultdict
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Literal

from config.generate import generate_yaml
from config.load import load_config
from extender.http import versionlock
from extender.http.app import build_app
from extender.http.snapshot import Snapshots
from extender.kube.service import kube_service
from loadtest.kubefake import FakeKube
from loadtest.scale_recovery import scene
from loadtest.servers import ROOT

holds: dict[str, list[float]] = defaultdict(list)


def _holder(quiet: bool) -> str:
    """Who takes the lock: the innermost frames of the product's code that led here."""
    frames = [f for f in traceback.extract_stack(limit=12)[:-2] if "/contextlib.py" not in f.filename]
    ours = [f"{Path(f.filename).stem}.{f.name}" for f in frames if "/asyncio/" not in f.filename][-3:]
    return ("quietly: " if quiet else "") + " <- ".join(reversed(ours))


def time_the_lock() -> None:
    """Wrap the verbs' lock so each hold is timed by holder (this process only)."""
    acquire, release, quietly = (
        versionlock.VersionedLock.acquire,
        versionlock.VersionedLock.release,
        versionlock.VersionedLock.quietly,
    )
    taken: dict[int, tuple[str, float]] = {}

    async def timed_acquire(self: versionlock.VersionedLock) -> Literal[True]:
        got = await acquire(self)
        taken[id(self)] = (_holder(False), time.perf_counter())
        return got

    def timed_release(self: versionlock.VersionedLock) -> None:
        who = taken.pop(id(self), None)
        if who is not None:
            holds[who[0]].append(time.perf_counter() - who[1])
        release(self)

    @contextlib.asynccontextmanager
    async def timed_quietly(self: versionlock.VersionedLock) -> AsyncIterator[None]:
        async with quietly(self):
            who, t0 = _holder(True), time.perf_counter()
            try:
                yield
            finally:
                holds[who].append(time.perf_counter() - t0)

    versionlock.VersionedLock.acquire = timed_acquire  # type: ignore[method-assign]
    versionlock.VersionedLock.release = timed_release  # type: ignore[method-assign]
    versionlock.VersionedLock.quietly = timed_quietly  # type: ignore[method-assign]


async def run(config: Path, fill: float, seconds: float, scrapes: int) -> None:
    import httpx

    loaded = load_config(str(config))
    server, pods, used, gangs = scene(loaded, fill, seed=1)
    gc.collect()
    gc.freeze()  # the scene stands for another process (the API server), as in `scale_recovery`
    print(f"{pods} bound pods in {gangs} gangs, {used} GPUs", flush=True)
    service = kube_service(loaded, FakeKube(server), freeze_after_recovery=True)
    app = build_app(service)
    s = service.scheduler
    time_the_lock()
    async with app.router.lifespan_context(app):
        while not s.ready:
            await asyncio.sleep(0.01)
        holds.clear()
        await asyncio.sleep(seconds)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
            for _ in range(scrapes):
                async with s.lock:  # as a verb's release: the state changed since the last scrape
                    pass
                await asyncio.sleep(0.2)
                assert (await c.get("/metrics")).status_code == 200
        # the copies the admins' reads (inspect, the UI, explain) are answered from, as their routes
        # take them: the first a full copy, the next ones sharing what did not change since
        # (the first of a series in steps of at most `GANGS_PER_STEP` gangs, the verbs free between)
        copies: list[str] = []
        snaps = Snapshots(s, min_interval=0.0)
        for _ in range(3):
            async with s.lock:  # as a verb's release: a new generation to copy
                pass
            await snaps.get()
            held = snaps.last_holds
            copies.append(
                f"{max(held) * 1e3:.1f} ms" + (f" (longest of {len(held)} holds)" if len(held) > 1 else "")
            )
        print("copies of the state for the admins' reads: " + ", ".join(copies))
    for who in [w for w in holds if w.startswith("lock_holds.")]:  # this script's own changes
        del holds[who]
    print(f"the verbs' lock over {seconds:.0f} s after ready, and {scrapes} scrapes of /metrics:")
    for who, ts in sorted(holds.items(), key=lambda kv: -max(kv[1])):
        ms = [t * 1e3 for t in ts]
        print(
            f"  {len(ms):5d} holds  longest {max(ms):8.2f} ms  median {statistics.median(ms):8.2f} ms  {who}"
        )


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m loadtest.lock_holds", description=__doc__)
    ap.add_argument("--nodes", type=int, default=12500)
    ap.add_argument("--fill", type=float, default=0.8)
    ap.add_argument("--seconds", type=float, default=12.0)
    ap.add_argument("--scrapes", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "results" / "lock-holds"))
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    config = out / f"cluster-{args.nodes}.yaml"
    config.write_text(generate_yaml(nodes=args.nodes, rack_size=10, vcs=12))
    asyncio.run(run(config, args.fill, args.seconds, args.scrapes))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
