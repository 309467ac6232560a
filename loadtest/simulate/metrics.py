"""Placement-quality metrics of a run and the sharing anomaly (the goals built on them: `goals.py`).

Definitions (all times in seconds):
- queueing delay = start − submit, where start is the start of the run that completed (a preempted
  job restarts from scratch, so its lost runs count as waiting); "waiting" excludes lost runs;
- percentiles interpolate linearly between order statistics (numpy's default);
- multi-GPU jobs: more than one GPU;
- locality: ≤ 8-GPU jobs on one node; ≤ 4-GPU jobs inside one NVLink/PCIe half (also shown for
  2–4-GPU jobs alone, where the question is not trivially yes); gangs of more than one node on the
  fewest nodes possible, all in one rack;
- time averages (allocated and stranded GPUs) are taken over the window from the first to the last
  submit; stranded GPUs are free GPUs on partly used nodes (they cannot host a whole-node pod);
- sharing anomaly of a VC: its p95 queueing in the shared cluster minus (and divided by) its p95 in
  its private-cluster replay; a VC shows the anomaly when shared > 1.05 × private.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from loadtest.simulate.engine import JobRecord, RunResult
from loadtest.simulate.policies import locality

ANOMALY_TOLERANCE = 1.05


def percentile(values: Sequence[float], q: float) -> float:
    """The `q`-th percentile (0–100) with linear interpolation; `values` must not be empty."""
    if not values:
        raise ValueError("percentile of no values")
    v = sorted(values)
    k = (len(v) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


@dataclass(frozen=True, slots=True)
class Delays:
    n: int
    mean: float
    p50: float
    p95: float
    max: float


def delays(values: Sequence[float]) -> Delays | None:
    if not values:
        return None
    return Delays(
        len(values), sum(values) / len(values), percentile(values, 50), percentile(values, 95), max(values)
    )


@dataclass(frozen=True, slots=True)
class Share:
    yes: int
    n: int

    @property
    def share(self) -> float | None:
        return self.yes / self.n if self.n else None


def _share(flags: Iterable[bool | None]) -> Share:
    vals = [f for f in flags if f is not None]
    return Share(sum(vals), len(vals))


@dataclass(slots=True)
class PolicyMetrics:
    policy: str
    admitted: int
    completed: int
    dropped: dict[str, int]
    queueing: dict[str, Delays | None]  # "all", "multi"
    waiting: dict[str, Delays | None]
    per_vc: dict[str, dict[str, Delays | None]]
    locality: dict[str, Share]
    mean_allocated_gpus: float
    utilisation: float
    mean_stranded_gpus: float
    first_refusal_allocation: float | None
    first_refusal_time: float | None
    refusals_tracked: bool
    preemptions: int
    preempted_jobs: int
    lost_gpu_hours: float
    opportunistic_jobs: int
    makespan: float
    attempts: int
    wall_seconds: float
    series: dict[str, list[float]] = field(default_factory=dict)
    queueing_values: dict[str, list[float]] = field(default_factory=dict)
    jct: dict[str, Delays | None] = field(default_factory=dict)  # "all", "multi"
    gpu_hours: float = 0.0  # GPU-hours held by runs, completed and lost
    # per VC, GPU-hours: "ended" by its jobs' preemptions of others, "lost" by its own preempted jobs.
    # One team's guarantee can be most of a week's lost work, and a peer may lose less by leaving
    # that team to wait (its sharing anomaly says whether it does).
    lost_per_vc: dict[str, dict[str, float]] = field(default_factory=dict)


def _split(records: Iterable[JobRecord], value: str) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"all": [], "multi": []}
    for r in records:
        v = r.queueing if value == "queueing" else r.waited if value == "waiting" else r.jct
        out["all"].append(v)
        if r.job.multi_gpu:
            out["multi"].append(v)
    return out


def policy_metrics(result: RunResult) -> PolicyMetrics:
    cluster = result.cluster
    done = sorted(result.completed(), key=lambda r: r.job.id)
    q = _split(done, "queueing")
    w = _split(done, "waiting")
    per_vc: dict[str, dict[str, Delays | None]] = {}
    for vc in sorted({r.job.vc for r in done}):
        vq = _split((r for r in done if r.job.vc == vc), "queueing")
        per_vc[vc] = {"all": delays(vq["all"]), "multi": delays(vq["multi"])}
    locs = []
    for r in done:
        assert r.placement is not None
        locs.append((r.job, locality(cluster, r.job, r.placement)))
    loc = {
        "le8_one_node": _share(x.one_node for _, x in locs),
        "le4_one_half": _share(x.one_half for _, x in locs),
        "2to4_one_half": _share(x.one_half for j, x in locs if j.gpus > 1),
        "multinode_min_one_rack": _share(x.min_nodes_one_rack for _, x in locs),
    }
    tl = result.timeline
    hours, alloc, stranded = tl.series()
    return PolicyMetrics(
        policy=result.policy,
        admitted=len(result.records),
        completed=len(done),
        dropped={k: len(v) for k, v in sorted(result.dropped.items())},
        queueing={k: delays(v) for k, v in q.items()},
        waiting={k: delays(v) for k, v in w.items()},
        per_vc=per_vc,
        locality=loc,
        mean_allocated_gpus=tl.mean_allocated(),
        utilisation=tl.mean_allocated() / cluster.total_gpus,
        mean_stranded_gpus=tl.mean_stranded(),
        first_refusal_allocation=result.first_refusal_allocation,
        first_refusal_time=result.first_refusal_time,
        refusals_tracked=result.refusals_tracked,
        preemptions=result.preemptions,
        preempted_jobs=sum(1 for r in done if r.preempted),
        lost_gpu_hours=sum(r.lost_gpu_seconds for r in done) / 3600,
        opportunistic_jobs=sum(1 for r in done if r.placement is not None and r.placement.opportunistic),
        makespan=result.end_time,
        attempts=result.attempts,
        wall_seconds=result.wall_seconds,
        series={"hours": hours, "allocated": alloc, "stranded": stranded},
        queueing_values=q,
        jct={k: delays(v) for k, v in _split(done, "jct").items()},
        gpu_hours=sum(r.run_seconds * r.job.held_gpus + r.lost_gpu_seconds for r in done) / 3600,
        lost_per_vc=lost_per_vc(result),
    )


def lost_per_vc(result: RunResult) -> dict[str, dict[str, float]]:
    """GPU-hours each VC's preemptions ended ("ended") and its own jobs lost ("lost"), VCs sorted."""
    out: dict[str, dict[str, float]] = {}
    for e in result.evictions:
        hours = e.lost_gpu_seconds / 3600
        for vc, key in ((result.records[e.by].job.vc, "ended"), (result.records[e.victim].job.vc, "lost")):
            out.setdefault(vc, {"ended": 0.0, "lost": 0.0})[key] += hours
    return dict(sorted(out.items()))


# ---------------------------------------------------------------------- sharing anomaly
@dataclass(frozen=True, slots=True)
class Anomaly:
    vc: str
    private_p95: float
    shared_p95: float

    @property
    def diff(self) -> float:
        return self.shared_p95 - self.private_p95

    @property
    def ratio(self) -> float | None:
        """shared ÷ private; 1.0 when both are 0, None (infinite) when only private is 0."""
        if self.private_p95 > 0:
            return self.shared_p95 / self.private_p95
        return 1.0 if self.shared_p95 <= 0 else None

    @property
    def anomalous(self) -> bool:
        return self.shared_p95 > ANOMALY_TOLERANCE * self.private_p95


def sharing_anomaly(shared: PolicyMetrics, private: PolicyMetrics, jobs: str = "all") -> list[Anomaly]:
    """Per VC that has `jobs` ("all" or "multi") in both runs: p95 queueing shared vs private."""
    out = []
    for vc in sorted(set(shared.per_vc) & set(private.per_vc)):
        s, p = shared.per_vc[vc][jobs], private.per_vc[vc][jobs]
        if s is None or p is None:
            continue
        out.append(Anomaly(vc, p.p95, s.p95))
    return out


# ---------------------------------------------------------------------- goals
@dataclass(frozen=True, slots=True)
class Goal:
    id: str
    text: str
    target: str
    value: str
    passed: bool | None  # None: not measurable in this run (a baseline is missing)
