"""What `make bench-peers` reports: the simulator's metrics and goals, for the live arms side by side.

Every arm's jobs become the simulator's `JobRecord`s (`peers_arm`), so `simulate.metrics` computes
the same figures as `topogang simulate` does. The goals are the simulator's (`simulate.goals`: G3a,
G3c, G4, G5, P) with the real Kueue in `kueue-like`'s seat and the stock kube-scheduler in
`first-fit`'s (it places pods one by one with no quota, as first-fit does jobs); the private-cluster
baseline of G3c is the simulator's private replay of the same slice (each VC alone on its quota's
nodes, the topogang core without borrowing), cut at the same horizon. The simulator's own policies
on the same slice are shown beside the live arms when `--simulate` is given (the calibration of
`kueue-like` against the real Kueue).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from config.schema import STRICT_FIFO
from loadtest.peers_records import JOBS_FILE, job_rows, write_jobs
from loadtest.peers_slice import PeerSlice
from loadtest.simulate.engine import RunResult, simulate, simulate_private
from loadtest.simulate.goals import evaluate_goals
from loadtest.simulate.metrics import (
    ANOMALY_TOLERANCE,
    Anomaly,
    Delays,
    Goal,
    PolicyMetrics,
    policy_metrics,
    sharing_anomaly,
)
from loadtest.simulate.policies import CorePolicy
from loadtest.simulate.roster import make_policy
from loadtest.simulate.slowdown import Slowdown

# the live arms under the names the simulator's goals look for
GOAL_SEATS = {"topogang": "topogang", "kueue": "kueue-like", "stock": "first-fit"}
SHOWN = {"kueue-like": "Kueue", "first-fit": "stock kube-scheduler"}


@dataclass
class ArmFigures:
    """One column of the table: a live arm or a simulated policy."""

    name: str
    metrics: PolicyMetrics
    unstarted: int
    live: bool
    extra: dict[str, Any] = field(default_factory=dict)


def censored(result: RunResult, sl: PeerSlice) -> tuple[RunResult, int]:
    """A simulated run cut as a live arm is: the measured jobs that started by the horizon."""
    out = RunResult(result.policy, result.cluster, {}, result.dropped, result.timeline)
    out.preemptions, out.attempts = result.preemptions, result.attempts
    out.end_time, out.wall_seconds, out.refusals_tracked = result.end_time, result.wall_seconds, False
    unstarted = 0
    for job in sl.measured():
        rec = result.records.get(job.id)
        if rec is None:
            continue
        if rec.start is None or rec.start > sl.horizon:
            unstarted += 1
            continue
        out.records[job.id] = rec
    return out, unstarted


def simulated(
    sl: PeerSlice,
    cluster: Any,
    slowdown: Slowdown,
    policies: Sequence[str],
    records_to: Path | None = None,
    vc_queueing: str = STRICT_FIFO,
) -> dict[str, ArmFigures]:
    """The simulator on the same slice and cluster: `policies` and the private replay; with
    `records_to`, each policy's per-job records go to `sim-<policy>-jobs.json` there.
    `vc_queueing`: topogang's order within a VC, as the live arm's config sets it."""
    window = (0.0, sl.hours * 3600)
    jobs = list(sl.jobs)
    out: dict[str, ArmFigures] = {}
    runs: dict[str, RunResult] = {
        "private": simulate_private(
            jobs,
            cluster,
            lambda c: CorePolicy(c, borrowing=False, name="private"),
            window=window,
            slowdown=slowdown,
        )
    }
    for name in policies:
        policy = make_policy(name, cluster, vc_queueing)
        runs[name] = simulate(policy, jobs, window=window, slowdown=slowdown)
    for name, run in runs.items():
        cut, unstarted = censored(run, sl)
        if records_to is not None and name != "private":
            write_jobs(records_to / f"sim-{name}-{JOBS_FILE}", job_rows(cut, sl.jobs, sl.warm))
        out[name] = ArmFigures(f"sim {name}", policy_metrics(cut), unstarted, live=False)
    return out


def _shown(text: str) -> str:
    for seat, shown in (
        ("kueue-like/first-fit-elastic", "Kueue"),
        ("kueue-like or first-fit-elastic", "Kueue"),
        *SHOWN.items(),
    ):
        text = text.replace(seat, shown)
    return text


def anomalous(a: Anomaly, slack: float) -> bool:
    """The simulator's rule (shared p95 > 1.05x private) with `slack` trace seconds added to the
    private side: the live control plane's own submit-to-bind time, which the private replay, a
    simulation, does not have."""
    return a.shared_p95 > ANOMALY_TOLERANCE * a.private_p95 + slack


def _anomaly_goal(t: PolicyMetrics, private: PolicyMetrics, jobs: str, slack: float) -> Goal:
    gid = "G3c" if jobs == "all" else "G3c-multi"
    what = "all jobs" if jobs == "all" else "multi-GPU jobs"
    an = sharing_anomaly(t, private, jobs)
    bad = [a for a in an if anomalous(a, slack)]
    detail = ", ".join(f"{a.vc} {a.shared_p95 / 3600:.2f} h vs {a.private_p95 / 3600:.2f} h" for a in bad)
    return Goal(
        gid,
        f"no sharing anomaly, {what}: every VC's p95 queueing vs its private cluster",
        f"<= {ANOMALY_TOLERANCE:.2f}x private + {slack / 60:.0f} trace min, every VC",
        f"{len(bad)} of {len(an)} VCs above" + (f": {detail}" if bad else ""),
        not bad,
    )


def live_goals(arms: Mapping[str, ArmFigures], private: PolicyMetrics, slack: float) -> list[Goal]:
    """The simulator's goals for the live topogang arm; G3c with the control plane's `slack`."""
    seats = {GOAL_SEATS[k]: a.metrics for k, a in arms.items() if k in GOAL_SEATS}
    seats["private"] = private
    goals = []
    for g in evaluate_goals(seats):
        if g.id in ("G3c", "G3c-multi"):
            g = _anomaly_goal(seats["topogang"], private, "all" if g.id == "G3c" else "multi", slack)
        goals.append(Goal(g.id, g.text, _shown(g.target), _shown(g.value), g.passed))
    return goals


def _h(d: Delays | None, attr: str) -> str:
    return "-" if d is None else f"{getattr(d, attr) / 3600:.2f}"


def _share(m: PolicyMetrics, key: str) -> str:
    s = m.locality[key]
    return "-" if s.share is None else f"{s.share:.0%} of {s.n}"


def rows(cols: Sequence[ArmFigures], private: PolicyMetrics, slack: float) -> list[tuple[str, list[str]]]:
    out: list[tuple[str, list[str]]] = []

    def add(label: str, f: Any) -> None:
        out.append((label, [f(c) for c in cols]))

    add("jobs started (unstarted at the end)", lambda c: f"{c.metrics.completed} ({c.unstarted})")
    add("queueing mean, all (h)", lambda c: _h(c.metrics.queueing["all"], "mean"))
    add("queueing p95, all (h)", lambda c: _h(c.metrics.queueing["all"], "p95"))
    add("queueing mean, multi-GPU (h)", lambda c: _h(c.metrics.queueing["multi"], "mean"))
    add("queueing p95, multi-GPU (h)", lambda c: _h(c.metrics.queueing["multi"], "p95"))
    add("JCT mean, all (h)", lambda c: _h(c.metrics.jct.get("all"), "mean"))
    add("JCT p95, all (h)", lambda c: _h(c.metrics.jct.get("all"), "p95"))
    add("JCT mean, multi-GPU (h)", lambda c: _h(c.metrics.jct.get("multi"), "mean"))
    add("utilisation", lambda c: f"{c.metrics.utilisation:.1%}")
    add("mean stranded GPUs", lambda c: f"{c.metrics.mean_stranded_gpus:.1f}")
    add("multi-node gangs on fewest nodes, one rack", lambda c: _share(c.metrics, "multinode_min_one_rack"))
    add("<= 4-GPU jobs in one half", lambda c: _share(c.metrics, "le4_one_half"))
    add("preemptions", lambda c: str(c.metrics.preemptions))
    add("GPU-hours lost to preemption", lambda c: f"{c.metrics.lost_gpu_hours:.0f}")

    def anomaly(c: ArmFigures) -> str:
        parts = []
        for jobs in ("all", "multi"):
            an = sharing_anomaly(c.metrics, private, jobs)
            parts.append(f"{sum(anomalous(a, slack) for a in an)}/{len(an)}")
        return " / ".join(parts)

    add(f"sharing anomaly: VCs > 1.05x private + {slack / 60:.0f} min (all / multi)", anomaly)
    add(
        "scheduler CPU s (placing components)", lambda c: _num(c.extra.get("scheduler_cpu_seconds"), "{:.0f}")
    )
    add("scheduler CPU s by component", lambda c: _by_component(c.extra.get("scheduler_cpu_by_component")))
    add(
        "kube-scheduler attempts: scheduled / unschedulable",
        lambda c: _attempts(c.extra.get("scheduler_metrics")),
    )
    add("unschedulable attempts by the extender's wait", lambda c: _reasons(c.extra.get("unschedulable_by")))
    add("pods placed per scheduler CPU s", lambda c: _num(c.extra.get("pods_per_cpu_second"), "{:.1f}"))
    add("KWOK completion lag p95 (s, real)", lambda c: _num(c.extra.get("kwok_lag_p95"), "{:.1f}"))
    return out


def _by_component(parts: Mapping[str, float] | None) -> str:
    """`kube-scheduler 30.2, extender 51.8`; `-` for an arm measured before components were kept apart."""
    return _named(parts, "{:.1f}")


def _attempts(m: Mapping[str, float] | None) -> str:
    """Where an arm's scheduler CPU goes: a pod an extender turned away is retried on any cluster
    event, one Kueue has not admitted waits behind its scheduling gate and is not tried at all."""
    if not m:
        return "-"
    return f"{m.get('attempts scheduled', 0):.0f} / {m.get('attempts unschedulable', 0):.0f}"


def _reasons(counts: Mapping[str, int] | None) -> str:
    """`Queued 5707, InsufficientCapacity 2670, other 3`: what topogang's arm's failed attempts
    waited for (`other`: no extender wait named); `-` for the other arms and older runs."""
    return _named(counts, "{}")


def _named(values: Mapping[str, float] | Mapping[str, int] | None, fmt: str) -> str:
    """`name value, name value` in the mapping's order; `-` when there is nothing."""
    return "-" if not values else ", ".join(f"{name} {fmt.format(v)}" for name, v in values.items())


def _num(v: Any, fmt: str) -> str:
    return "-" if v is None else fmt.format(v)


def per_vc_rows(cols: Sequence[ArmFigures], private: PolicyMetrics) -> list[tuple[str, list[str]]]:
    out = []
    for vc in sorted(private.per_vc):
        p = private.per_vc[vc]["all"]
        cells = [_h(p, "p95")]
        for c in cols:
            d = c.metrics.per_vc.get(vc, {}).get("all")
            cells.append(_h(d, "p95"))
        out.append((vc, cells))
    return out


def markdown(
    meta: Mapping[str, Any],
    cols: Sequence[ArmFigures],
    private: PolicyMetrics,
    goals: Sequence[Goal],
    slack: float,
) -> str:
    lines = [f"# bench-peers: {meta.get('slice', '')}", ""]
    keys = (
        "cluster",
        "jobs",
        "factor",
        "horizon",
        "anomaly_slack",
        "kueue",
        "k8s",
        "locality_model",
        "machine",
        "took",
    )
    for k in keys:
        if k in meta:
            lines.append(f"- {k}: {meta[k]}")
    lines += ["", "| metric | " + " | ".join(c.name for c in cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for label, cells in rows(cols, private, slack):
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", "Per VC, p95 queueing of all its jobs (h):", ""]
    lines += ["| VC | private | " + " | ".join(c.name for c in cols) + " |", "|---" * (len(cols) + 2) + "|"]
    for vc, cells in per_vc_rows(cols, private):
        lines.append(f"| {vc} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Goals (topogang against the real Kueue and the stock kube-scheduler, the simulator's targets):",
        "",
    ]
    lines += ["| goal | target | measured | verdict |", "|---|---|---|---|"]
    for g in goals:
        verdict = {True: "PASS", False: "FAIL", None: "n/a"}[g.passed]
        lines.append(f"| {g.id} {g.text} | {g.target} | {g.value} | {verdict} |")
    return "\n".join(lines) + "\n"


def as_json(c: ArmFigures) -> dict[str, Any]:
    m = c.metrics

    def d(x: Delays | None) -> dict[str, float] | None:
        return (
            None
            if x is None
            else {"n": x.n, "mean_h": x.mean / 3600, "p50_h": x.p50 / 3600, "p95_h": x.p95 / 3600}
        )

    return {
        "name": c.name,
        "live": c.live,
        "started": m.completed,
        "unstarted": c.unstarted,
        "queueing": {k: d(v) for k, v in m.queueing.items()},
        "jct": {k: d(v) for k, v in m.jct.items()},
        "utilisation": m.utilisation,
        "mean_stranded_gpus": m.mean_stranded_gpus,
        "locality": {k: {"yes": v.yes, "n": v.n} for k, v in m.locality.items()},
        "preemptions": m.preemptions,
        "preempted_jobs": m.preempted_jobs,
        "lost_gpu_hours": m.lost_gpu_hours,
        "gpu_hours": m.gpu_hours,
        "per_vc_p95_h": {vc: d(v["all"]) for vc, v in m.per_vc.items()},
        **c.extra,
    }
