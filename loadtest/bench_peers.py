"""topogang, the real Kueue and the stock kube-scheduler on the same cluster and the same jobs.

    python -m loadtest.bench_peers [--arms topogang kueue stock] [--start-hours 96] [--hours 12]
        [--factor 120] [--drain-hours 6] [--limit N] [--simulate] [--out results/bench-peers]
        (or: make bench-peers)

Each arm runs on a fresh e2e control plane (`scripts/e2e/cluster-up.sh`: etcd, kube-apiserver,
kube-scheduler, KWOK) holding the simulator's default cluster as KWOK nodes (80 x 8 GPUs, racks of 8,
rack and hostname labels; `peers_cluster`), and replays a slice of the shipped Philly week compressed
in time (`peers_slice`: which slice and why) through `peers_arm`:
- **topogang**: the extender in Kubernetes mode from the cluster's config (`topogang serve
  --kubeconfig --config`) behind kube-scheduler's `topogang` profile; pods carry the spec annotation;
- **kueue**: Kueue (`scripts/e2e/build-bins.sh kueue`, out of cluster: `kueue_plane`) with a
  ClusterQueue per VC (its nominal quota, one cohort, borrowing, reclaimWithinCohort: Any), a
  Topology of rack and hostname and a ResourceFlavor using it, a LocalQueue per VC namespace; jobs
  are pods (pod groups for gangs) with the preferred-rack TAS annotation on multi-node gangs; the
  stock kube-scheduler places the pods Kueue admitted;
- **stock**: the stock kube-scheduler alone (the same profile without the extender), pods
  requesting GPUs only: the floor.

KWOK ends each pod at its traced run time stretched by the simulator's locality model for the
placement it got. The report (`peers_report`) is the simulator's: queueing, JCT, utilisation,
stranded GPUs, locality, preemptions and lost GPU-hours, the sharing anomaly per VC against the
simulator's private replay of the slice, the scheduling components' CPU, and the simulator's
goals with the real Kueue as the peer. `--simulate` adds the simulator's own policies on the same
slice beside the live arms. Writes `bench-peers.md`, `bench-peers.json` (each live arm's `gangs`: every
multi-node gang attempt by attempt, where its pods went; also one line per measured gang in the log)
and each arm's logs under `--out`; every arm stops by itself at the slice's horizon.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pickle
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from config.schema import STRICT_FIFO, VC_QUEUEINGS
from loadtest.kube_plane import ControlPlane
from loadtest.kube_report import scheduler_metrics, wait_reasons
from loadtest.kubeapi import KubeHttp, scheduler_context, tls_context
from loadtest.kueue_plane import KueueError, KueueProcess
from loadtest.measure import cpu_seconds, load_average, machine
from loadtest.peers_arm import ArmOutcome, ArmRun
from loadtest.peers_cluster import (
    COMPLETE_STAGE,
    RACK_LABEL,
    kueue_objects,
    namespace_of,
    rack_name,
    topology_config,
)
from loadtest.peers_jobs import gang_line
from loadtest.peers_pods import ARMS
from loadtest.peers_records import (
    JOBS_FILE,
    WORKLOADS_FILE,
    WORKLOADS_PATH,
    job_rows,
    workload_rows,
    write_jobs,
)
from loadtest.peers_report import ArmFigures, as_json, live_goals, markdown, simulated
from loadtest.peers_slice import (
    DEFAULT_DRAIN_HOURS,
    DEFAULT_FACTOR,
    DEFAULT_HOURS,
    DEFAULT_START_HOURS,
    PeerSlice,
    cut_slice,
)
from loadtest.servers import ROOT, Children, stop_on_sigterm
from loadtest.simulate.cli import DEFAULT_TRACE
from loadtest.simulate.cluster import SimCluster, shared_cluster
from loadtest.simulate.metrics import policy_metrics
from loadtest.simulate.slowdown import make_slowdown

ARM_PICKLE = "arm.pickle"
# kube-scheduler's longest backoff in the deployed config (podMaxBackoffSeconds): the time a live control
# plane may take to bind a pod that could start at once, which the simulator's private replay never takes
LATENCY_SLACK_SECONDS = 10.0


def say(msg: str) -> None:
    print(f"bench-peers: {msg}", flush=True)


def _label_racks(plane: ControlPlane, cluster: SimCluster) -> None:
    with contextlib.closing(KubeHttp(int(plane.env["API_PORT"]), tls_context(plane.env))) as api:
        for n, name in enumerate(cluster.node_names):
            api.conn.request(
                "PATCH",
                f"/api/v1/nodes/{name}",
                body=json.dumps({"metadata": {"labels": {RACK_LABEL: rack_name(cluster, n)}}}),
                headers={"Content-Type": "application/merge-patch+json"},
            )
            resp = api.conn.getresponse()
            body = resp.read()
            if resp.status >= 300:
                raise RuntimeError(f"labelling node {name}: HTTP {resp.status}: {body[:200]!r}")


def _scheduler_pid(workdir: Path) -> int | None:
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int((workdir / "run" / "kube-scheduler.pid").read_text().split()[0])
    return None


def _kueue_setup(
    plane: ControlPlane, cluster: SimCluster, kids: Children, workdir: Path, logs: Path
) -> KueueProcess:
    kq = KueueProcess(kids, plane.env, workdir, logs)
    kq.start()
    with contextlib.closing(KubeHttp(int(plane.env["API_PORT"]), tls_context(plane.env))) as api:
        for path, body in kueue_objects(cluster):
            api.ok("POST", path, body)
        deadline = time.monotonic() + 60
        while True:  # every ClusterQueue Active: the flavor and topology were accepted
            got = api.ok("GET", "/apis/kueue.x-k8s.io/v1beta2/clusterqueues")
            inactive = [
                cq["metadata"]["name"]
                for cq in got.get("items") or []
                if not any(
                    c.get("type") == "Active" and c.get("status") == "True"
                    for c in (cq.get("status") or {}).get("conditions") or []
                )
            ]
            if not inactive:
                return kq
            if time.monotonic() > deadline:
                raise KueueError(
                    f"ClusterQueues not active after 60 s: {', '.join(inactive)} (see kueue.log)"
                )
            time.sleep(0.5)


def run_arm(
    arm: str, sl: PeerSlice, cluster: SimCluster, out: Path, run: str, model: str, *, gate: bool = False
) -> tuple[ArmOutcome, dict[str, Any]]:
    """One arm on its own control plane; (what the replay saw, the components' figures). `gate`:
    topogang's pods are created behind its admission gate (`extender.kube.admission_gate`)."""
    logs = out / arm
    logs.mkdir(parents=True, exist_ok=True)
    topology = out / "cluster.yaml"
    stage = out / "kwok-pod-complete-at.yaml"
    os.environ["TOPOGANG_E2E_KWOK_STAGES"] = str(stage)
    workdir = Path(os.environ.get("TMPDIR", "/tmp")) / f"topogang-bench-peers-{os.getpid()}-{arm}"
    kids = Children()
    plane = ControlPlane(kids, workdir, topology, logs)
    extra: dict[str, Any] = {}
    try:
        say(f"{arm}: control plane with {cluster.nodes} KWOK nodes (load {load_average()})")
        plane.up()
        extra["k8s"] = plane.env.get("K8S_VERSION", "?")
        _label_racks(plane, cluster)
        plane.namespaces([namespace_of(vc) for vc in sorted(cluster.quotas)])
        parts: dict[str, int | None]  # the placing components' processes, by name
        profile = "stock"
        sched_port = 0
        if arm == "topogang":
            plane.reservation_crd()
            if gate:
                plane.admission_gate()
            ext = plane.extender(topology)
            parts = {"kube-scheduler": _scheduler_pid(workdir), "extender": ext.pid}
            profile, sched_port = "topogang", int(plane.env["SCHED_PORT"])
        else:
            stock, sched_port = plane.stock_scheduler()
            parts = {"kube-scheduler": stock.pid}
            if arm == "kueue":
                kq = _kueue_setup(plane, cluster, kids, workdir, logs)
                assert kq.proc is not None
                parts["kueue"] = kq.proc.pid
                extra["kueue"] = kq.version
        pids = {name: pid for name, pid in parts.items() if pid is not None}
        cpu0 = {name: cpu_seconds(pid) or 0.0 for name, pid in pids.items()}
        with contextlib.closing(KubeHttp(sched_port, scheduler_context(plane.env))) as m:
            # the scheduler serves before it has loaded the client CA: a first read may be anonymous
            before = scheduler_metrics(m.text("/metrics", forbidden_for=30.0), profile)
        extra["load"] = {"replay_start": load_average()}
        say(
            f"{arm}: replaying {len(sl.jobs)} jobs ({len(sl.warm)} warm) at {sl.factor:g}x "
            f"(load {extra['load']['replay_start']})"
        )
        outcome = ArmRun(arm, sl, cluster, make_slowdown(model), plane.env, run, say).execute()
        # per component, so a change in the total says whose it is (the extender's, kube-scheduler's)
        by_part = {name: (cpu_seconds(pid) or 0.0) - cpu0[name] for name, pid in pids.items()}
        cpu = sum(by_part.values())
        extra["load"]["replay_end"] = load_average()
        write_jobs(logs / JOBS_FILE, job_rows(outcome.result, sl.jobs, sl.warm))
        if arm == "kueue":
            with contextlib.closing(KubeHttp(int(plane.env["API_PORT"]), tls_context(plane.env))) as api:
                doc = api.ok("GET", WORKLOADS_PATH)
            (logs / WORKLOADS_FILE).write_text(json.dumps(workload_rows(doc), indent=1))
        with contextlib.closing(KubeHttp(sched_port, scheduler_context(plane.env))) as m:
            text = m.text("/metrics", forbidden_for=30.0)
        after = scheduler_metrics(text, profile)
        (logs / "kube-scheduler-metrics.txt").write_text(text)
        extra["scheduler_metrics"] = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
        extra["scheduler_cpu_seconds"] = cpu
        if arm == "topogang":  # the profile with the extender; the stock one logs elsewhere
            extra["unschedulable_by"] = _wait_reasons(workdir / "logs" / "kube-scheduler.log")
        extra["scheduler_cpu_by_component"] = by_part
        extra["pods_created"] = outcome.pods_created
        extra["pods_bound"] = outcome.pods_bound
        extra["pods_per_cpu_second"] = outcome.pods_bound / cpu if cpu > 0 else None
        lag = sorted(outcome.kwok_lag)
        extra["kwok_lag_p95"] = lag[int(0.95 * (len(lag) - 1))] if lag else None
        extra["real_seconds"] = outcome.real_seconds
        extra["resubmitted_guaranteed"] = outcome.resubmitted
        extra["refused_quota_resubmitted_opportunistic"] = outcome.refused
        extra["placements_without_gpu_indices"] = outcome.no_indices
        extra["errors"] = outcome.errors[:20]
        by_id = {j.id: j for j in sl.jobs}
        extra["unstarted_jobs"] = [
            f"j{i} {by_id[i].vc} {by_id[i].gpus} GPUs submitted {by_id[i].submit / 3600:.1f} h"
            for i in outcome.unstarted
        ]
        extra["error_count"] = len(outcome.errors)
        extra["gangs"] = outcome.gangs
        for g in outcome.gangs:
            if not g["warm"]:
                say(f"{arm}: {gang_line(g)}")
        return outcome, extra
    finally:
        kids.stop_all()
        plane.close()
        shutil.rmtree(workdir, ignore_errors=True)


def _wait_reasons(log: Path) -> dict[str, int] | None:
    """kube-scheduler's failed attempts by the extender's wait code (`kube_report.wait_reasons`);
    None when its log is not there."""
    try:
        with log.open(encoding="utf-8", errors="replace") as fh:
            return wait_reasons(fh)
    except OSError:
        return None


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m loadtest.bench_peers", description=__doc__)
    ap.add_argument(
        "--arms",
        nargs="*",
        choices=ARMS,
        default=list(ARMS),
        help="arms to run live (none: only --reuse and --simulate)",
    )
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument(
        "--start-hours", type=float, default=DEFAULT_START_HOURS, help="slice start, hours into the trace"
    )
    ap.add_argument("--hours", type=float, default=DEFAULT_HOURS, help="slice length in trace hours")
    ap.add_argument(
        "--factor", type=float, default=DEFAULT_FACTOR, help="time compression (trace s per real s)"
    )
    ap.add_argument(
        "--drain-hours", type=float, default=DEFAULT_DRAIN_HOURS, help="trace hours after the slice"
    )
    ap.add_argument("--limit", type=int, default=None, help="only the slice's first N jobs (smoke runs)")
    ap.add_argument("--nodes", type=int, default=None, help="nodes (default: the simulator's 80)")
    ap.add_argument("--locality-model", choices=("published", "none"), default="published")
    ap.add_argument("--simulate", action="store_true", help="also the simulator's policies on the same slice")
    ap.add_argument(
        "--vc-queueing",
        choices=VC_QUEUEINGS,
        default=STRICT_FIFO,
        help="topogang.vcQueueing of topogang's arm (and of the simulator's topogang)",
    )
    ap.add_argument(
        "--admission-gate",
        action="store_true",
        help="topogang's pods created behind its admission gate (deploy/admission-gate.yaml)",
    )
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "bench-peers")
    ap.add_argument(
        "--reuse",
        type=Path,
        default=None,
        metavar="DIR",
        help="report the arms not run now from an earlier run's --out DIR (same slice and cluster)",
    )
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    stop_on_sigterm()
    started = time.monotonic()
    cluster = shared_cluster() if args.nodes is None else shared_cluster(nodes=args.nodes)
    sl = cut_slice(
        args.trace,
        cluster,
        start_hours=args.start_hours,
        hours=args.hours,
        factor=args.factor,
        drain_hours=args.drain_hours,
        limit=args.limit,
    )
    (out / "cluster.yaml").write_text(topology_config(cluster, vc_queueing=args.vc_queueing))
    (out / "kwok-pod-complete-at.yaml").write_text(COMPLETE_STAGE)
    slowdown = make_slowdown(args.locality_model)
    run = f"peers-{os.getpid()}"
    meta: dict[str, Any] = {
        "slice": sl.source,
        "cluster": f"{cluster.nodes} nodes x {cluster.gpus_per_node} GPUs, racks of {cluster.rack_size}, "
        f"{len(cluster.quotas)} VCs",
        "jobs": f"{len(sl.jobs)} ({len(sl.warm)} warm-started, {len(sl.measured())} measured; "
        f"dropped {sl.dropped or 'none'})",
        "factor": f"{sl.factor:g}x (slice {sl.real_seconds(sl.hours * 3600):.0f} s real, "
        f"horizon {sl.real_seconds(sl.horizon):.0f} s)",
        "horizon": f"{sl.horizon / 3600:g} trace hours",
        "locality_model": slowdown.name,
        "machine": machine(),
        "load_before": load_average(),
        "vc_queueing": args.vc_queueing,
        "admission_gate": args.admission_gate,
    }
    say(f"{meta['slice']}: {meta['jobs']}; {meta['factor']}")
    figures: dict[str, ArmFigures] = {}
    errors: dict[str, str] = {}
    for arm in args.arms:
        try:
            outcome, extra = run_arm(
                arm, sl, cluster, out, run, args.locality_model, gate=args.admission_gate
            )
        except KeyboardInterrupt:
            print("bench-peers: interrupted", file=sys.stderr)
            return 130
        except (RuntimeError, OSError, ValueError) as exc:
            errors[arm] = str(exc)
            say(f"{arm}: stopped: {exc}")
            continue
        for key in ("k8s", "kueue"):
            if key in extra:
                meta[key] = extra[key]
        fig = ArmFigures(arm, policy_metrics(outcome.result), len(outcome.unstarted), True, extra)
        with (out / arm / ARM_PICKLE).open("wb") as fh:
            pickle.dump(fig, fh)
        figures[arm] = fig
        say(
            f"{arm}: done in {outcome.real_seconds:.0f} s, {fig.metrics.completed} started, "
            f"{fig.unstarted} not"
        )
    if args.reuse is not None:
        for arm in ARMS:
            saved = args.reuse / arm / ARM_PICKLE
            if arm not in figures and saved.is_file():
                with saved.open("rb") as fh:
                    figures[arm] = pickle.load(fh)  # the bench's own output, from --reuse
                figures[arm].extra["reused_from"] = str(args.reuse)
                say(f"{arm}: figures of an earlier run of the same slice ({saved})")
    cols = [figures[a] for a in ARMS if a in figures]
    say(
        "the simulator's private replay of the slice (G3c's baseline)"
        + (" and its policies" if args.simulate else "")
    )
    sims = simulated(
        sl,
        cluster,
        slowdown,
        ["topogang", "kueue-like", "first-fit"] if args.simulate else [],
        records_to=out,
        vc_queueing=args.vc_queueing,
    )
    private = sims.pop("private").metrics
    cols += list(sims.values())
    slack = LATENCY_SLACK_SECONDS * sl.factor
    meta["anomaly_slack"] = (
        f"{LATENCY_SLACK_SECONDS:g} real s = {slack / 60:.0f} trace min added to the private p95 (G3c)"
    )
    goals = live_goals(figures, private, slack)
    meta["took"] = f"{time.monotonic() - started:.0f} s"
    meta["load_end"] = load_average()
    text = markdown(meta, cols, private, goals, slack)
    if errors:
        text += "\nArms that did not complete: " + "; ".join(f"{k}: {v}" for k, v in errors.items()) + "\n"
    (out / "bench-peers.md").write_text(text)
    doc = {
        "meta": meta,
        "columns": [as_json(c) for c in cols],
        "goals": [
            {"id": g.id, "text": g.text, "target": g.target, "value": g.value, "passed": g.passed}
            for g in goals
        ],
        "errors": errors,
    }
    (out / "bench-peers.json").write_text(json.dumps(doc, indent=2, default=str))
    print()
    print(text)
    print(f"(JSON, table and logs in {out})")
    return 0 if not errors else 1


if __name__ == "__main__":
    raise SystemExit(main())
