"""How far the simulator's `kueue-like` is from the real Kueue on the same slice: the calibration table.

    python -m loadtest.bench_peers --arms kueue --simulate --out DIR   # the live Kueue, ~12 min
    python -m loadtest.kueue_calibration DIR [--lag S --gap S] [--recorded DIR2]
        [--out loadtest/simulate/data/kueue-calibration.json]

Reads `DIR/bench-peers.json` (the live `kueue` column and the simulator's `sim kueue-like` on the
same slice and cluster) and, when the run wrote them, the per-job records (`DIR/kueue/jobs.json`,
`DIR/sim-kueue-like-jobs.json`) and Kueue's Workloads (`DIR/kueue/workloads.json`). Writes one JSON:
every metric of the bench's table for both, their ratio and whether they are more than 10% apart,
how long Kueue took to admit (from its Workloads: creation to quota reservation, real seconds), the
queueing of the jobs the simulation starts at once (the live control plane's own latency), the run's
machine load and Kueue version, and the sha256 of `loadtest/simulate/kueue.py` it was measured with
(so a report can say when the imitation changed after its calibration). `topogang simulate` prints
that file beside its own table (`simulate.report`); why each line differs is in
`loadtest/simulate/kueue.py`'s docstring.

The what-if column replays the slice through kueue-like with the live control plane's delays in
trace time (the slice's factor): a lag from submit until the job is queued (`--lag`, real seconds;
for a run with records, the measured median of submit to Workload creation plus quota reservation
to the last pod bound), a gap between two admissions (`--gap`; measured: one over the most
Workloads Kueue reserved quota for in one second) and Kueue's 1 s requeue batch period. It is not
kueue-like (which admits at the instant, as every simulated policy does) but tells how much of the
difference those delays account for. `--recorded DIR2` adds a second run that recorded Kueue's
Workloads, with its own measured what-if.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from loadtest.peers_records import JOBS_FILE, WORKLOADS_FILE
from loadtest.peers_report import ArmFigures, as_json, censored
from loadtest.peers_slice import PeerSlice, cut_slice
from loadtest.simulate.calibration import CALIBRATION_FILE, KUEUE_SOURCE, TOLERANCE
from loadtest.simulate.cli import DEFAULT_TRACE
from loadtest.simulate.cluster import shared_cluster
from loadtest.simulate.engine import simulate
from loadtest.simulate.kueue import REQUEUE_BATCH_SECONDS, KueueLikePolicy
from loadtest.simulate.metrics import policy_metrics
from loadtest.simulate.slowdown import make_slowdown

LIVE = "kueue"
SIM = "sim kueue-like"


def _metric_rows(live: dict[str, Any], sim: dict[str, Any]) -> list[dict[str, Any]]:
    def q(c: dict[str, Any], kind: str, group: str, stat: str) -> float | None:
        d = (c.get(kind) or {}).get(group)
        return None if d is None else float(d[stat])

    def loc(c: dict[str, Any], key: str) -> float | None:
        s = (c.get("locality") or {}).get(key) or {}
        return None if not s.get("n") else s["yes"] / s["n"]

    specs: list[tuple[str, str, Any]] = [
        ("jobs started", "count", lambda c: float(c["started"])),
        ("queueing mean, all (h)", "h", lambda c: q(c, "queueing", "all", "mean_h")),
        ("queueing p95, all (h)", "h", lambda c: q(c, "queueing", "all", "p95_h")),
        ("queueing mean, multi-GPU (h)", "h", lambda c: q(c, "queueing", "multi", "mean_h")),
        ("queueing p95, multi-GPU (h)", "h", lambda c: q(c, "queueing", "multi", "p95_h")),
        ("JCT mean, all (h)", "h", lambda c: q(c, "jct", "all", "mean_h")),
        ("JCT p95, all (h)", "h", lambda c: q(c, "jct", "all", "p95_h")),
        ("JCT mean, multi-GPU (h)", "h", lambda c: q(c, "jct", "multi", "mean_h")),
        ("utilisation", "share", lambda c: float(c["utilisation"])),
        ("mean stranded GPUs", "gpus", lambda c: float(c["mean_stranded_gpus"])),
        ("multi-node gangs on fewest nodes, one rack", "share", lambda c: loc(c, "multinode_min_one_rack")),
        ("preemptions", "count", lambda c: float(c["preemptions"])),
        ("GPU-hours lost to preemption", "gpu_h", lambda c: float(c["lost_gpu_hours"])),
    ]
    out = []
    for name, unit, f in specs:
        real, imitation = f(live), f(sim)
        ratio = None if real in (None, 0.0) or imitation is None else imitation / real
        apart = None
        if real is not None and imitation is not None:
            apart = abs(imitation - real) > TOLERANCE * max(abs(real), 1e-9)
        out.append(
            {
                "metric": name,
                "unit": unit,
                "real": real,
                "kueue_like": imitation,
                "ratio": ratio,
                "apart": apart,
            }
        )
    return out


def _quantiles(xs: list[float]) -> dict[str, float] | None:
    if not xs:
        return None
    s = sorted(xs)

    def at(p: float) -> float:
        k = p * (len(s) - 1)
        lo = int(k)
        hi = min(lo + 1, len(s) - 1)
        return s[lo] + (s[hi] - s[lo]) * (k - lo)

    return {"n": len(s), "mean": sum(s) / len(s), "p50": at(0.5), "p95": at(0.95), "max": s[-1]}


def _stamp(x: str | None) -> float | None:
    return None if not x else datetime.fromisoformat(x.replace("Z", "+00:00")).timestamp()


def admission_delays(workloads: list[dict[str, Any]]) -> dict[str, Any]:
    """Kueue's own record: real seconds from a Workload's creation to its quota reservation, over
    the Workloads that got quota; and how many were evicted (preempted)."""
    waits = []
    evicted = 0
    for wl in workloads:
        conds = wl.get("conditions") or {}
        created = _stamp(wl.get("created"))
        reserved = conds.get("QuotaReserved") or {}
        admitted = conds.get("Admitted") or {}
        # a finished Workload keeps QuotaReserved True, Admitted carries the same time
        t = _stamp(reserved.get("time")) if reserved.get("status") == "True" else None
        if t is None and admitted.get("status") == "True":
            t = _stamp(admitted.get("time"))
        if created is not None and t is not None:
            waits.append(t - created)
        if (conds.get("Evicted") or {}).get("status") == "True" or (conds.get("Preempted") or {}).get(
            "status"
        ) == "True":
            evicted += 1
    return {"workloads": len(workloads), "creation_to_quota_s": _quantiles(waits), "evicted": evicted}


def immediate_starts(live: list[dict[str, Any]], sim: list[dict[str, Any]], factor: float) -> dict[str, Any]:
    """The jobs the simulation starts the moment they arrive (their first start at submit): how
    long the live arm took to start them, in real seconds (trace seconds / the slice's factor).
    Nothing stops them but the control plane, so this is its latency, not the policy's."""
    sim_now = {r["id"] for r in sim if r["first_start"] is not None and r["first_start"] - r["submit"] < 1.0}
    lags = [
        (r["first_start"] - r["submit"]) / factor
        for r in live
        if r["id"] in sim_now and r["first_start"] is not None
    ]
    never = sum(1 for r in live if r["id"] in sim_now and r["first_start"] is None)
    return {"jobs": len(sim_now), "live_first_start_s": _quantiles(lags), "live_never_started": never}


def pipeline(live: list[dict[str, Any]], workloads: list[dict[str, Any]], factor: float) -> dict[str, Any]:
    """The live control plane's delays per job, real seconds, from a run's records: submit to the
    Workload's creation, creation to quota reservation, reservation to the last pod bound (first
    attempts only), and the most Workloads given quota in one second. The harness's clock and
    Kueue's are matched by the earliest creation (the submit-to-creation figures are from there)."""
    jobs = {r["id"]: r for r in live}
    seen = []
    for wl in workloads:
        name = wl.get("group") or next(iter(wl.get("owners") or []), "")
        m = re.match(r"j(\d+)-a0(?:-\d+)?$", name or "")
        conds = wl.get("conditions") or {}
        q = conds.get("QuotaReserved") or {}
        if not m or int(m.group(1)) not in jobs or q.get("status") != "True":
            continue
        created, reserved = _stamp(wl.get("created")), _stamp(q.get("time"))
        if created is not None and reserved is not None:
            seen.append((jobs[int(m.group(1))], created, reserved))
    if not seen:
        return {}
    t0 = min(created - r["submit"] / factor for r, created, _ in seen)
    to_created, to_quota, to_bound = [], [], []
    for r, created, reserved in seen:
        to_created.append(created - t0 - r["submit"] / factor)
        to_quota.append(reserved - created)
        if r["first_start"] is not None:
            to_bound.append(t0 + r["first_start"] / factor - reserved)
    per_second: dict[int, int] = {}
    for _, _, reserved in seen:
        per_second[int(reserved)] = per_second.get(int(reserved), 0) + 1
    return {
        "submit_to_workload_s": _quantiles(to_created),
        "workload_to_quota_s": _quantiles(to_quota),
        "quota_to_bound_s": _quantiles(to_bound),
        "most_admissions_in_one_second": max(per_second.values()),
    }


def what_if(sl: PeerSlice, lag: float, gap: float) -> dict[str, Any]:
    """kueue-like on the slice with the live delays (real seconds, stretched by the factor), cut
    and measured as the bench cuts a live arm; as bench-peers.json's columns."""
    cluster = shared_cluster()
    policy = KueueLikePolicy(
        cluster,
        requeue_delay=REQUEUE_BATCH_SECONDS * sl.factor,
        arrival_delay=lag * sl.factor,
        admission_gap=gap * sl.factor,
    )
    run = simulate(policy, list(sl.jobs), window=(0.0, sl.hours * 3600), slowdown=make_slowdown("published"))
    cut, unstarted = censored(run, sl)
    return as_json(ArmFigures("what-if", policy_metrics(cut), unstarted, live=False))


def _slice_of(meta: dict[str, Any]) -> PeerSlice:
    sl = cut_slice(DEFAULT_TRACE, shared_cluster())
    if meta.get("slice") != sl.source:
        raise SystemExit(
            f"the run's slice ({meta.get('slice')}) is not the default bench slice ({sl.source})"
        )
    return sl


def calibrate(
    bench: Path, lag: float | None = None, gap: float | None = None, load: str | None = None
) -> dict[str, Any]:
    doc = json.loads((bench / "bench-peers.json").read_text())
    cols = {c["name"]: c for c in doc["columns"]}
    if LIVE not in cols or SIM not in cols:
        raise SystemExit(f"{bench}: bench-peers.json needs the '{LIVE}' and '{SIM}' columns (--simulate)")
    meta = doc["meta"]
    live = cols[LIVE]
    factor = float(str(meta["factor"]).split("x")[0])
    out: dict[str, Any] = {
        "what": "the simulator's kueue-like against the real Kueue: same slice, cluster and jobs",
        "command": "python -m loadtest.bench_peers --arms kueue --simulate --out DIR && "
        "python -m loadtest.kueue_calibration DIR",
        "slice": meta.get("slice"),
        "jobs": meta.get("jobs"),
        "factor": meta.get("factor"),
        "kueue": meta.get("kueue") or live.get("kueue"),
        "k8s": meta.get("k8s"),
        "machine": meta.get("machine"),
        # the Kueue arm's own (an arm reused from an older harness did not record it: --load)
        "load": live.get("load") or load,
        "kueue_like_sha256": hashlib.sha256(KUEUE_SOURCE.read_bytes()).hexdigest(),
        "tolerance": TOLERANCE,
        "rows": _metric_rows(live, cols[SIM]),
        "unstarted": {"real": live.get("unstarted"), "kueue_like": cols[SIM].get("unstarted")},
    }
    live_dir = bench / LIVE
    if (live_dir / WORKLOADS_FILE).is_file():
        out["kueue_admission"] = admission_delays(json.loads((live_dir / WORKLOADS_FILE).read_text()))
    sim_jobs = bench / f"sim-kueue-like-{JOBS_FILE}"
    measured: dict[str, Any] = {}
    if (live_dir / JOBS_FILE).is_file() and sim_jobs.is_file():
        live_jobs = json.loads((live_dir / JOBS_FILE).read_text())
        out["immediate_starts"] = immediate_starts(live_jobs, json.loads(sim_jobs.read_text()), factor)
        if (live_dir / WORKLOADS_FILE).is_file():
            measured = pipeline(live_jobs, json.loads((live_dir / WORKLOADS_FILE).read_text()), factor)
            out["pipeline"] = measured
    source = "given"
    if lag is None and gap is None and measured:
        lag = measured["submit_to_workload_s"]["p50"] + measured["quota_to_bound_s"]["p50"]
        gap = 1.0 / measured["most_admissions_in_one_second"]
        source = "measured on this run"
    if lag is not None or gap is not None:
        sl = _slice_of(meta)
        wi = what_if(sl, lag or 0.0, gap or 0.0)
        out["what_if"] = {
            "lag_s": lag or 0.0,
            "gap_s": gap or 0.0,
            "requeue_s": REQUEUE_BATCH_SECONDS,
            "source": source,
            "rows": [r["kueue_like"] for r in _metric_rows(live, wi)],
        }
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m loadtest.kueue_calibration", description=__doc__)
    ap.add_argument(
        "bench", type=Path, help="a bench-peers --out directory with the kueue arm and --simulate"
    )
    ap.add_argument("--out", type=Path, default=CALIBRATION_FILE)
    ap.add_argument("--lag", type=float, default=None, help="what-if: submit to queued, real s")
    ap.add_argument("--gap", type=float, default=None, help="what-if: between two admissions, real s")
    ap.add_argument("--recorded", type=Path, default=None, help="a second run, with Kueue's Workloads")
    ap.add_argument("--load", default=None, help="the Kueue arm's load average, if its run did not record it")
    args = ap.parse_args(argv)
    got = calibrate(args.bench, args.lag, args.gap, args.load)
    if args.recorded is not None:
        got["recorded_run"] = calibrate(args.recorded)
    args.out.write_text(json.dumps(got, indent=1) + "\n")
    for r in got["rows"]:
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}x"
        flag = " (apart)" if r["apart"] else ""
        print(f"{r['metric']}: real {r['real']}, kueue-like {r['kueue_like']}, {ratio}{flag}")
    print(f"(written to {args.out})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
