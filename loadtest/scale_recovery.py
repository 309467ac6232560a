"""A restart at scale: how long the Kubernetes mode takes from start to ready when the cluster
already runs `--fill` of its GPUs in bound pods.

    python -m loadtest.scale_recovery --config cluster.yaml [--fill 0.8] [--seed 1] [--json out.json]

The scene is set the way a cluster looks after the extender ran for a while: Philly-mix jobs
(`loadtest.fleet`, the pods the load tests send) placed by the core and each member claimed, every
pod stored bound in the in-memory API server (`loadtest.kubefake`, the soak's) with the annotations
the binder writes (`extender.gangs.bindinfo.bind_annotations`), beside one Ready node object per
node. Then the clock starts and the extender starts as a process would: the config read and the
core built (`kube_service`), nodes and pods listed, every gang rebuilt from its pods' annotations
(`extender.kube.recovery`, through `ClusterSync.start`), persisted reservations read back; the
clock stops when the service turns ready. The recovered core must hold exactly the GPUs the scene
holds, or the run says so (and exits 1).

Runs in its own process (`loadtest.bench_scale` starts it), so the scene's memory is not counted
in anything else.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from config.load import LoadedConfig, load_config
from extender.gangs.bindinfo import bind_annotations
from extender.gangs.podspec import pod_request
from extender.http.app import build_app
from extender.http.views import summary
from extender.kube.service import kube_service
from loadtest.fleet import Cluster, JobMix, pod_for
from loadtest.kubefake import FakeApiServer, FakeKube
from topology.core import Core
from topology.decisions import Wait

MISSES = 2000  # jobs in a row that do not fit before the fill is taken as reached


def node_object(name: str, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "spec": {},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "capacity": {"nvidia.com/gpu": str(gpus)},
            "allocatable": {"nvidia.com/gpu": str(gpus)},
        },
    }


def bound_pods(loaded: LoadedConfig, fill: float, seed: int) -> tuple[list[dict[str, Any]], int, int]:
    """Philly-mix jobs placed and bound until `fill` of the GPUs is used: (pods, GPUs, gangs)."""
    core = Core(loaded.spec)
    vcs = loaded.extras.namespace_virtual_clusters
    cluster = Cluster(
        list(core.node_names()), {v: core.vc_quota(v) for v in core.vc_names()}, core.gpu_count, 0
    )
    mix = JobMix(cluster, "philly", seed=seed)
    target = fill * core.gpu_count
    pods: list[dict[str, Any]] = []
    used = gangs = misses = 0
    while used < target and misses < MISSES:
        job = mix.next()
        if used + job.gpus > target:
            misses += 1
            continue
        job.uids = [f"{job.name}-{i}" for i in range(len(job.pods))]
        members = [pod_for(job, i, uid) for i, uid in enumerate(job.uids)]
        requests = [
            pod_request(p, uid, p["metadata"]["namespace"], p["metadata"]["name"], namespace_vcs=vcs)
            for p, uid in zip(members, job.uids, strict=True)
        ]
        if isinstance(core.reserve(requests[0].request, 0.0), Wait):
            misses += 1
            continue
        misses = 0
        for p, pr in zip(members, requests, strict=True):
            d = core.claim(pr.gang, pr.uid, pr.leaf_number, 0.0, slot_key=pr.slot_key, pod_name=pr.name)
            p["spec"]["nodeName"] = d.node
            p["metadata"]["annotations"].update(bind_annotations(d, pr.slot_key))
            p["status"] = {"phase": "Running", "podIP": "10.128.0.1"}
            pods.append(p)
        used += job.gpus
        gangs += 1
    return pods, used, gangs


class _TimedKube(FakeKube):
    """The fake API server's client, with the time its lists take (the copy it hands out stands in
    for the real server's encoding and the client's decoding) kept apart."""

    listing = 0.0

    async def list(
        self, path: str, query: Sequence[tuple[str, str]] = ()
    ) -> tuple[list[dict[str, Any]], str]:
        t0 = time.perf_counter()
        try:
            return await super().list(path, query)
        finally:
            self.listing += time.perf_counter() - t0


async def _restart(config: str, server: FakeApiServer) -> dict[str, Any]:
    """Start the Kubernetes-mode service on `server` as a process would, until it is ready."""
    t0 = time.perf_counter()
    loaded = load_config(config)
    kube = _TimedKube(server)
    service = kube_service(loaded, kube, clock=time.monotonic, freeze_after_recovery=True)  # as serve
    built = time.perf_counter()
    app = build_app(service)
    s = service.scheduler
    async with app.router.lifespan_context(app):
        while not s.ready:
            await asyncio.sleep(0.005)
        ready = time.perf_counter()
        async with s.lock:
            doc = summary(s.core, s.waiting, s.ready)
    return {
        "seconds_to_ready": ready - t0,
        "seconds_config_and_core": built - t0,
        "seconds_api_lists": kube.listing,
        "seconds_recovery": ready - built - kube.listing,
        "summary": doc,
    }


def scene(loaded: LoadedConfig, fill: float, seed: int) -> tuple[FakeApiServer, int, int, int]:
    """The in-memory API server holding a Ready node object per node and `fill` of the GPUs in
    bound pods: (server, pods, GPUs bound, gangs)."""
    pods, used, gangs = bound_pods(loaded, fill, seed)
    server = FakeApiServer()
    core = Core(loaded.spec)
    for name, n in zip(core.node_names(), core.node_gpu_counts(), strict=True):
        server.put(f"/api/v1/nodes/{name}", node_object(name, n))
    del core
    for p in pods:
        meta = p["metadata"]
        server.put(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}", p)
    return server, len(pods), used, gangs


async def scene_and_restart(config: str, fill: float, seed: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    server, n_pods, used, gangs = scene(load_config(config), fill, seed)
    scene_seconds = time.perf_counter() - t0
    # the scene stands for another process (the API server): out of the collector's sight, as it
    # would be, so that collecting the restarting extender's garbage does not walk 60,000 pods
    gc.collect()
    gc.freeze()
    got = await _restart(config, server)
    counts = got.pop("summary").get("gpus") or {}
    recovered = int(counts.get("total", 0)) - int(counts.get("free", 0))
    return {
        "fill": fill,
        "pods": n_pods,
        "gangs": gangs,
        "gpus_bound": used,
        "gpus_recovered": recovered,
        **got,
        "scene_seconds": scene_seconds,
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m loadtest.scale_recovery", description=__doc__)
    ap.add_argument("--config", required=True)
    ap.add_argument("--fill", type=float, default=0.8)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", default="", help="write the figures here too")
    args = ap.parse_args(argv)
    out = asyncio.run(scene_and_restart(args.config, args.fill, args.seed))
    text = json.dumps(out, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text)
    if out["gpus_recovered"] != out["gpus_bound"]:
        print(f"recovered {out['gpus_recovered']} GPUs of {out['gpus_bound']} bound", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
