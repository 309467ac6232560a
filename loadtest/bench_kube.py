"""The real kube-scheduler with topogang, against the same kube-scheduler with no extender.

    python -m loadtest.bench_kube [--nodes 1000] [--jobs 600] [--out results/bench-kube]
        (or: make bench-kube)

1. Brings up the e2e control plane (`scripts/e2e/cluster-up.sh`: etcd, kube-apiserver,
   kube-scheduler at the version scripts/e2e/versions.sh pins, with the project's scheduler
   config, KWOK) with `--nodes` fake nodes of 8 GPUs from a generated topology (racks of 8), and
   starts `topogang serve` in Kubernetes mode on it (the admin's kubeconfig).
2. topogang run: submits `--jobs` jobs of the Philly week's size mix (1-32 GPUs; more than 8 GPUs
   is a gang of 8-GPU pods, FrameworkController-shaped as in the load tests) to the `topogang`
   profile, every pod as fast as the submitting threads can create them, and watches them bind.
3. Every pod deleted; the extender stopped; a second kube-scheduler started from the same config
   without the extender (profile `stock`); the same jobs submitted again as plain pods that
   request `nvidia.com/gpu` only.
4. Reports, per run: pods bound per second (all pods over the time from the first creation to the
   last bind), gang submit -> all members bound p50/p99, and from kube-scheduler's own /metrics
   the scheduling attempts by result and the extender's errors; and, throughout the topogang run,
   whether any gang was seen partially bound for longer than the reservation TTL.

Goals: topogang's pods/s >= 0.7x stock's; no gang partially bound past its TTL. Writes
`bench-kube.json` and the components' logs under `--out`; tears the cluster down on exit.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import random
import shutil
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from loadtest import kube_dra
from loadtest.fleet import Cluster, Job, JobMix, pod_for
from loadtest.kube_plane import ControlPlane
from loadtest.kube_report import (
    KUBE_RATIO_GOAL,
    PhaseResult,
    extender_metrics,
    format_kube,
    kube_goals,
    scheduler_metrics,
)
from loadtest.kubeapi import KubeHttp, PodWatch, scheduler_context, tls_context
from loadtest.measure import cpu_seconds, load_average, machine
from loadtest.servers import ROOT, Children, Http, stop_on_sigterm

RUN_LABEL = "topogang.io/bench-run"
GANG_LABEL = "topogang.io/bench-gang"
SIZE_LABEL = "topogang.io/bench-size"
ENABLE = "topogang.io/pod-scheduling-enable"


def say(msg: str) -> None:
    print(f"bench-kube: {msg}", flush=True)


def job_pods(
    job: Job, run: str, phase: str, profile: str, dra: bool = False
) -> list[tuple[str, dict[str, Any], dict[str, Any] | None]]:
    """(namespace, Pod, its ResourceClaim) for each member: the load tests' pod (`fleet.pod_for`),
    with requests a KWOK node can hold; the topogang profile's pods opt in, the stock ones request
    GPUs only; with `dra`, the GPUs through a claim (`loadtest.kube_dra`)."""
    topogang = profile.startswith("topogang")
    out = []
    gang = f"{phase}-{job.name}"
    for i in range(len(job.pods)):
        pod = pod_for(job, i, "")
        meta = pod["metadata"]
        meta.pop("uid")
        meta["name"] = f"{phase}-{meta['name']}"
        meta["labels"].update({RUN_LABEL: run, GANG_LABEL: gang, SIZE_LABEL: str(len(job.pods))})
        gpus = str(job.pods[i])
        limits = {"nvidia.com/gpu": gpus, **({ENABLE: "1"} if topogang else {})}
        ns = meta["namespace"] if topogang else "stock"
        meta["namespace"] = ns
        if not topogang:
            meta["annotations"] = {
                k: v for k, v in meta["annotations"].items() if not k.startswith("topogang.io/")
            }
        spec = pod["spec"]
        spec.pop("priority", None)
        spec["schedulerName"] = profile
        spec["terminationGracePeriodSeconds"] = 0
        spec["containers"] = [
            {
                "name": "trainer",
                "image": "fake.invalid/train:1",
                "resources": {"requests": {"nvidia.com/gpu": gpus}, "limits": limits},
            }
        ]
        pod.pop("status", None)
        out.append((ns, pod, kube_dra.through_claim(pod, job.pods[i]) if dra else None))
    return out


class Tracker:
    """What the watch saw: when each pod was created and bound, per gang; partial gangs over time."""

    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self.lock = threading.Lock()
        self.bound_at: dict[str, float] = {}  # pod name -> first seen bound
        self.size: dict[str, int] = {}
        self.gang_bound: dict[str, int] = {}
        self.first_bound: dict[str, float] = {}  # gang -> its first member's bind
        self.last_bound: dict[str, float] = {}  # gang -> its last member's bind so far
        self.longest_partial = 0.0
        self.violations: list[str] = []
        self.done = threading.Event()
        self.expected = 0

    def on_pod(self, kind: str, pod: dict[str, Any], t: float) -> None:
        meta = pod.get("metadata") or {}
        name = f"{meta.get('namespace')}/{meta.get('name')}"
        node = (pod.get("spec") or {}).get("nodeName")
        if kind == "DELETED" or not node:
            return
        labels = meta.get("labels") or {}
        gang = labels.get(GANG_LABEL, name)
        with self.lock:
            if name in self.bound_at:
                return
            self.bound_at[name] = t
            self.size[gang] = int(labels.get(SIZE_LABEL, "1"))
            self.gang_bound[gang] = self.gang_bound.get(gang, 0) + 1
            self.first_bound.setdefault(gang, t)
            self.last_bound[gang] = t
            if self.gang_bound[gang] == self.size[gang]:
                self.longest_partial = max(self.longest_partial, t - self.first_bound[gang])
                if t - self.first_bound[gang] > self.ttl:
                    self.violations.append(f"gang {gang}: partial for {t - self.first_bound[gang]:.1f} s")
            if len(self.bound_at) >= self.expected:
                self.done.set()

    def partial_now(self, t: float) -> list[tuple[str, float]]:
        """Gangs partially bound at time t, with for how long."""
        with self.lock:
            return [(g, t - self.first_bound[g]) for g, n in self.gang_bound.items() if n < self.size[g]]


Work = tuple[str, str, dict[str, Any], dict[str, Any] | None]  # gang, namespace, pod, its claim


def submit(api_port: int, env: dict[str, str], pods: list[Work], threads: int) -> dict[str, float]:
    """Create the pods (gang by gang, in order; a pod's claim just before it) from `threads`
    threads; each gang's submit time (before its first member's creation)."""
    ctx = tls_context(env)
    work: queue.Queue[Work] = queue.Queue()
    for item in pods:
        work.put(item)
    submitted: dict[str, float] = {}
    errors: list[str] = []
    lock = threading.Lock()

    def worker() -> None:
        with contextlib.closing(KubeHttp(api_port, ctx)) as api:
            while True:
                try:
                    gang, ns, pod, claim = work.get_nowait()
                except queue.Empty:
                    return
                with lock:
                    submitted.setdefault(gang, time.monotonic())
                if claim is not None:
                    status, doc = api.call("POST", f"{kube_dra.API}/namespaces/{ns}/resourceclaims", claim)
                    if status >= 300:
                        errors.append(f"claim HTTP {status}: {str(doc)[:200]}")
                status, doc = api.call("POST", f"/api/v1/namespaces/{ns}/pods", pod)
                if status >= 300:
                    errors.append(f"HTTP {status}: {str(doc)[:200]}")

    ts = [threading.Thread(target=worker, daemon=True) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise RuntimeError(f"{len(errors)} pods not created, e.g. {errors[0]}")
    return submitted


def run_phase(
    name: str,
    jobs: list[Job],
    run: str,
    env: dict[str, str],
    sched_port: int,
    profile: str,
    ttl: float,
    timeout: float,
    threads: int,
    metrics_out: Path | None = None,
    extender: tuple[int, int] | None = None,
    dra: bool = False,
) -> PhaseResult:
    """One run: submit every job's pods, watch them bind, read the schedulers' metrics around it;
    `extender` is the extender's (pid, port) when it takes part; `dra`: GPUs through claims."""
    api_port = int(env["API_PORT"])
    ctx = tls_context(env)
    pods = [
        (f"{name}-{job.name}", ns, pod, claim)
        for job in jobs
        for ns, pod, claim in job_pods(job, run, name, profile, dra)
    ]
    tracker = Tracker(ttl)
    tracker.expected = len(pods)
    watch = PodWatch(api_port, ctx, f"{RUN_LABEL}={run}", tracker.on_pod)
    with contextlib.closing(KubeHttp(sched_port, scheduler_context(env))) as m:
        before = scheduler_metrics(m.text("/metrics", forbidden_for=30.0), profile)
    before.update(_extender_side(extender))
    cpu_before = cpu_seconds(extender[0]) or 0.0 if extender else 0.0
    watch.start()
    t0 = time.monotonic()
    submitted = submit(api_port, env, pods, threads)
    t_submitted = time.monotonic()
    deadline = t0 + timeout
    while not tracker.done.wait(0.5):
        now = time.monotonic()
        for gang, since in tracker.partial_now(now):
            if since > ttl and not any(v.startswith(f"gang {gang}:") for v in tracker.violations):
                tracker.violations.append(
                    f"gang {gang}: partial for more than {since:.0f} s (seen while waiting)"
                )
        if watch.error is not None:
            raise RuntimeError(f"the pod watch failed: {watch.error!r}")
        if now > deadline:
            break
    watch.close()
    with contextlib.closing(KubeHttp(sched_port, scheduler_context(env))) as m:
        text = m.text("/metrics", forbidden_for=30.0)
    after = scheduler_metrics(text, profile)
    after.update(_extender_side(extender))
    cpu_used = (cpu_seconds(extender[0]) or 0.0) - cpu_before if extender else 0.0
    if metrics_out is not None:
        metrics_out.write_text(text)
    end = time.monotonic()
    with tracker.lock:
        gang_times = sorted(
            tracker.last_bound[g] - submitted[g]
            for g in submitted
            if g in tracker.last_bound and tracker.gang_bound[g] == tracker.size[g]
        )
    for gang, since in tracker.partial_now(end):
        if since > ttl and not any(v.startswith(f"gang {gang}:") for v in tracker.violations):
            tracker.violations.append(f"gang {gang}: partial for {since:.0f} s at the end")
    last = max(tracker.bound_at.values(), default=end)
    return PhaseResult(
        name=name,
        profile=profile,
        pods=len(pods),
        gangs=len(jobs),
        multi_pod_gangs=sum(1 for j in jobs if len(j.pods) > 1),
        bound=len(tracker.bound_at),
        seconds=last - t0,
        submit_seconds=t_submitted - t0,
        gang_seconds=gang_times,
        longest_partial=tracker.longest_partial,
        partial_at_end=len(tracker.partial_now(end)),
        violations=tracker.violations,
        metrics={k: after.get(k, 0.0) - before.get(k, 0.0) for k in after},
        extender_cpu_seconds=cpu_used,
    )


def _extender_side(extender: tuple[int, int] | None) -> dict[str, float]:
    if extender is None:
        return {}
    with contextlib.closing(Http(extender[1])) as c:
        c.conn.request("GET", "/metrics")
        return extender_metrics(c.conn.getresponse().read().decode())


def delete_all(env: dict[str, str], run: str, namespaces: Sequence[str], timeout: float = 120.0) -> None:
    ctx = tls_context(env)
    with contextlib.closing(KubeHttp(int(env["API_PORT"]), ctx, timeout)) as api:
        for ns in namespaces:
            api.ok(
                "DELETE",
                f"/api/v1/namespaces/{ns}/pods",
                {"gracePeriodSeconds": 0},
                {"labelSelector": f"{RUN_LABEL}={run}"},
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            left = api.ok("GET", "/api/v1/pods", query={"labelSelector": f"{RUN_LABEL}={run}", "limit": "1"})
            if not left.get("items"):
                # the DRA runs' claims (those kube-scheduler allocated keep its finalizer: no
                # controller-manager runs here to release them, so they go last, with the cluster)
                for ns in namespaces:
                    query = {"labelSelector": f"{RUN_LABEL}={run}"}
                    api.call("DELETE", f"{kube_dra.API}/namespaces/{ns}/resourceclaims", None, query)
                return
            time.sleep(0.5)
    raise RuntimeError(f"pods of run {run} still there {timeout:.0f} s after their deletion")


def dra_runs(
    plane: ControlPlane,
    core: Any,
    topology: Path,
    jobs: list[Job],
    run: str,
    ttl: float,
    args: argparse.Namespace,
    stock_port: int,
    out: Path,
) -> list[PhaseResult]:
    """The same jobs with GPUs through ResourceClaims: the stock profile's DynamicResources plugin
    allocating them, then topogang's DRA mode (`loadtest.kube_dra`)."""
    phases = []
    namespaces = ["stock", *core.vc_names()]
    kube_dra.publish(plane.env, dict(zip(core.node_names(), core.node_gpu_counts(), strict=True)))
    ext = plane.extender(topology, "--dra")
    cfg = kube_dra.scheduler_config(
        plane.workdir / "scheduler.yaml", plane.workdir / "scheduler-dra.yaml", "topogang-dra", extender=True
    )
    _, port = plane.scheduler(cfg, "topogang-dra")
    say(f"topogang-dra run: claims allocated by topogang (load {load_average()})")
    phases.append(
        run_phase(
            "topogang-dra", jobs, run, plane.env, port, "topogang-dra", ttl, args.timeout, args.threads,
            out / "metrics-topogang-dra.txt", (ext.pid, plane.read_port), dra=True,
        )
    )  # fmt: skip
    say(f"  {phases[-1].summary()}")
    delete_all(plane.env, run, namespaces)
    plane.kids.stop(ext)
    say(f"stock-dra run: claims allocated by kube-scheduler's DynamicResources (load {load_average()})")
    phases.append(
        run_phase(
            "stock-dra", jobs, run, plane.env, stock_port, "stock", ttl, args.timeout, args.threads,
            out / "metrics-stock-dra.txt", dra=True,
        )
    )  # fmt: skip
    say(f"  {phases[-1].summary()}")
    delete_all(plane.env, run, namespaces)
    return phases


def main(argv: Sequence[str] | None = None) -> int:
    from config.generate import generate_yaml
    from config.load import load_config
    from topology.core import Core

    ap = argparse.ArgumentParser(prog="python -m loadtest.bench_kube", description=__doc__)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--jobs", type=int, default=600, help="jobs of the Philly mix, submitted in each run")
    ap.add_argument("--vcs", type=int, default=4)
    ap.add_argument("--threads", type=int, default=8, help="threads creating pods")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds a run may take to bind everything")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-dra", action="store_true", help="skip the DRA runs (GPUs through ResourceClaims)")
    ap.add_argument("--out", default=str(ROOT / "results" / "bench-kube"))
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    kids = Children()
    stop_on_sigterm()
    started = time.monotonic()
    topology = out / f"cluster-{args.nodes}.yaml"
    topology.write_text(generate_yaml(nodes=args.nodes, rack_size=8, vcs=args.vcs))
    loaded = load_config(topology)
    core = Core(loaded.spec)
    cluster = Cluster(
        list(core.node_names()), {v: core.vc_quota(v) for v in core.vc_names()}, core.gpu_count, 0
    )
    mix = JobMix(cluster, "philly", seed=args.seed)
    mix.rng = random.Random(args.seed)
    jobs = [mix.next() for _ in range(args.jobs)]
    ttl = float(loaded.extras.reservation_ttl_seconds)
    run = mix.run
    meta: dict[str, Any] = {
        "nodes": args.nodes,
        "gpus": core.gpu_count,
        "jobs": args.jobs,
        "pods": sum(len(j.pods) for j in jobs),
        "gpus_requested": sum(j.gpus for j in jobs),
        "ttl_seconds": ttl,
        "threads": args.threads,
        **machine(),
        "load_before": load_average(),
    }
    workdir = Path(os.environ.get("TMPDIR", "/tmp")) / f"topogang-bench-kube-{os.getpid()}"
    plane = ControlPlane(kids, workdir, topology, out)
    phases: list[PhaseResult] = []
    error = ""
    try:
        say(f"control plane with {args.nodes:,} KWOK nodes (load {load_average()})")
        plane.up()
        meta["k8s"] = plane.env.get("K8S_VERSION", "?")
        plane.namespaces(["topogang-system", "stock", *core.vc_names()])
        plane.reservation_crd()
        ext = plane.extender(topology)
        say(f"topogang run: {args.jobs} jobs, {meta['pods']} pods (load {load_average()})")
        phases.append(
            run_phase(
                "topogang",
                jobs,
                run,
                plane.env,
                int(plane.env["SCHED_PORT"]),
                "topogang",
                ttl,
                args.timeout,
                args.threads,
                out / "metrics-topogang.txt",
                (ext.pid, plane.read_port),
            )
        )
        say(f"  {phases[-1].summary()}")
        delete_all(plane.env, run, ["stock", *core.vc_names()])
        kids.stop(ext)
        _, stock_port = plane.stock_scheduler()
        say(f"stock run: the same jobs, no extender (load {load_average()})")
        phases.append(
            run_phase(
                "stock",
                jobs,
                run,
                plane.env,
                stock_port,
                "stock",
                ttl,
                args.timeout,
                args.threads,
                out / "metrics-stock.txt",
            )
        )
        say(f"  {phases[-1].summary()}")
        delete_all(plane.env, run, ["stock", *core.vc_names()])
        if not args.no_dra:
            phases += dra_runs(plane, core, topology, jobs, run, ttl, args, stock_port, out)
    except KeyboardInterrupt:
        print("bench-kube: interrupted", file=sys.stderr)
        return 130
    except (RuntimeError, OSError) as exc:
        error = str(exc)
        say(f"stopped: {exc}")
    finally:
        kids.stop_all()
        plane.close()
        shutil.rmtree(workdir, ignore_errors=True)
    meta["load_end"] = load_average()
    goals = kube_goals(phases)
    print()
    if error:
        print(f"bench-kube: incomplete ({error})")
    print(format_kube(meta, phases, goals))
    print(f"\n(took {time.monotonic() - started:.0f} s; JSON and logs in {out})")
    doc = {
        "meta": meta,
        "phases": [p.as_json() for p in phases],
        "goals": [g.as_json() for g in goals],
        "ratio_goal": KUBE_RATIO_GOAL,
        "error": error,
    }
    (out / "bench-kube.json").write_text(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
