"""The simulator's outputs: a Markdown report, PNG plots (when matplotlib is installed) and JSON.

Files written to the output directory:
- `report.md`: goals with PASS/FAIL, every metric per policy, the per-VC sharing anomaly and lost work;
- `metrics.json`: the same numbers, raw (seconds, counts), plus the time series;
- `queueing_cdf.png`, `vc_p95.png`, `gpus_over_time.png`: the plots (skipped, with a note in the
  report, when matplotlib is missing: it is in the `load` extra, not a core dependency).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from config.schema import STRICT_FIFO
from loadtest.simulate import calibration
from loadtest.simulate.cluster import SimCluster
from loadtest.simulate.metrics import (
    ANOMALY_TOLERANCE,
    Delays,
    Goal,
    PolicyMetrics,
    Share,
    sharing_anomaly,
)
from loadtest.simulate.plots import plot
from loadtest.simulate.runinfo import RunInfo, ordered
from loadtest.simulate.slowdown import LEVELS


def _h(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds / 3600:.2f}"


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1%}"


def _share(s: Share) -> str:
    return "n/a" if s.share is None else f"{s.share:.1%} ({s.yes}/{s.n})"


def _d(d: Delays | None, what: str) -> str:
    if d is None:
        return "n/a"
    v: float = getattr(d, what)
    return _h(v)


def _refusal_cell(x: PolicyMetrics) -> str:
    if not x.refusals_tracked:
        return "n/a"
    if x.first_refusal_allocation is None:
        return "never"
    assert x.first_refusal_time is not None
    return f"{_pct(x.first_refusal_allocation)} (at {x.first_refusal_time / 3600:.1f} h)"


def _delay_cell(kind: str, group: str, stat: str) -> Callable[[PolicyMetrics], str]:
    def cell(x: PolicyMetrics) -> str:
        table = x.queueing if kind == "queueing" else x.jct if kind == "jct" else x.waiting
        return _d(table[group], stat)

    return cell


def metric_rows(m: Mapping[str, PolicyMetrics]) -> list[tuple[str, list[str]]]:
    """(label, one cell per policy) for the main table."""
    names = ordered(m)
    rows: list[tuple[str, Callable[[PolicyMetrics], str]]] = [
        ("jobs started (of admitted)", lambda x: f"{x.completed} / {x.admitted}"),
        ("jobs dropped as unschedulable", lambda x: str(sum(x.dropped.values()))),
    ]
    for group, label in (("all", "all jobs"), ("multi", "multi-GPU jobs")):
        for stat in ("mean", "p95"):
            rows.append((f"JCT {stat}, {label} (h)", _delay_cell("jct", group, stat)))
    rows.append(("GPU-hours used (lost to preemption included)", lambda x: f"{x.gpu_hours:.0f}"))
    for group, label in (("all", "all jobs"), ("multi", "multi-GPU jobs")):
        for stat in ("mean", "p50", "p95"):
            rows.append((f"queueing {stat}, {label} (h)", _delay_cell("queueing", group, stat)))
    for group, label in (("all", "all jobs"), ("multi", "multi-GPU jobs")):
        rows.append((f"waiting mean, lost runs excluded, {label} (h)", _delay_cell("waiting", group, "mean")))
    rows += [
        ("mean allocated GPUs (utilisation)", lambda x: f"{x.mean_allocated_gpus:.1f} ({x.utilisation:.1%})"),
        ("mean stranded GPUs", lambda x: f"{x.mean_stranded_gpus:.1f}"),
        (
            "allocation at first fragmentation refusal",
            _refusal_cell,
        ),
        ("<= 8-GPU jobs on one node", lambda x: _share(x.locality["le8_one_node"])),
        ("<= 4-GPU jobs in one half", lambda x: _share(x.locality["le4_one_half"])),
        ("2-4-GPU jobs in one half", lambda x: _share(x.locality["2to4_one_half"])),
        ("multi-node gangs minimal, one rack", lambda x: _share(x.locality["multinode_min_one_rack"])),
        ("preemptions (jobs preempted)", lambda x: f"{x.preemptions} ({x.preempted_jobs})"),
        ("GPU-hours lost to preemption", lambda x: f"{x.lost_gpu_hours:.0f}"),
        ("jobs whose final run was opportunistic", lambda x: str(x.opportunistic_jobs)),
        ("last job finished (days)", lambda x: f"{x.makespan / 86400:.1f}"),
        ("placement attempts", lambda x: str(x.attempts)),
        ("simulation wall time (s)", lambda x: f"{x.wall_seconds:.1f}"),
    ]
    return [(label, [fn(m[n]) for n in names]) for label, fn in rows]


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def _anomaly_table(m: Mapping[str, PolicyMetrics], jobs: str, cluster: SimCluster) -> list[str]:
    pv = m["private"]
    shared = [p for p in ordered(m) if p != "private"]
    per = {p: {a.vc: a for a in sharing_anomaly(m[p], pv, jobs)} for p in shared}
    header = ["VC", "quota (nodes)", "jobs", "private p95 (h)"] + [f"{p} p95 (h), Δ, ratio" for p in shared]
    rows = []
    for vc in sorted(pv.per_vc):
        d = pv.per_vc[vc][jobs]
        if d is None:
            continue
        row = [vc, str(cluster.quotas.get(vc, 0)), str(d.n), _h(d.p95)]
        for p in shared:
            a = per[p].get(vc)
            if a is None:
                row.append("n/a")
                continue
            ratio = "inf" if a.ratio is None else f"{a.ratio:.2f}x"
            flag = " **anomaly**" if a.anomalous else ""
            row.append(f"{_h(a.shared_p95)}, {a.diff / 3600:+.2f}, {ratio}{flag}")
        rows.append(row)
    return _table(header, rows)


def _lost_per_vc_table(m: Mapping[str, PolicyMetrics]) -> list[str]:
    """Per VC and policy that preempts: what its reclaims ended, and what its own jobs lost."""
    names = [n for n in ordered(m) if any(v["ended"] for v in m[n].lost_per_vc.values())]
    if not names:
        return ["No policy preempted anything."]
    vcs = sorted({vc for n in names for vc in m[n].lost_per_vc})
    header = ["VC"] + [f"{n}: ended by its preemptions / lost by its jobs (GPU-h)" for n in names]
    rows = []
    for vc in vcs:
        row = [vc]
        for n in names:
            v = m[n].lost_per_vc.get(vc, {"ended": 0.0, "lost": 0.0})
            share = v["ended"] / m[n].lost_gpu_hours if m[n].lost_gpu_hours else 0.0
            row.append(f"{v['ended']:.0f} ({share:.0%}) / {v['lost']:.0f}")
        rows.append(row)
    return _table(header, rows)


def _per_vc_table(m: Mapping[str, PolicyMetrics]) -> list[str]:
    names = ordered(m)
    vcs = sorted({vc for x in m.values() for vc in x.per_vc})
    header = ["VC"] + [f"{n}: mean / p95 all, mean / p95 multi (h)" for n in names]
    rows = []
    for vc in vcs:
        row = [vc]
        for n in names:
            d = m[n].per_vc.get(vc)
            if d is None:
                row.append("n/a")
                continue
            a, mu = d["all"], d["multi"]
            row.append(f"{_d(a, 'mean')} / {_d(a, 'p95')}, {_d(mu, 'mean')} / {_d(mu, 'p95')}")
        rows.append(row)
    return _table(header, rows)


def markdown(
    info: RunInfo, m: Mapping[str, PolicyMetrics], goals: Sequence[Goal], plots: Sequence[str] | None
) -> str:
    c = info.cluster
    names = ordered(m)
    lines = [
        "# topogang trace simulation: placement quality",
        "",
        f"- Trace: `{info.trace}`: {info.jobs} jobs"
        + (
            f" ({', '.join(f'{v} {k}' for k, v in sorted(info.skipped.items()))} left out)"
            if info.skipped
            else ""
        )
        + f", submitted over {info.window_hours:.1f} h.",
        f"- Cluster: {c.nodes} nodes x {c.gpus_per_node} GPUs = {c.total_gpus} GPUs, "
        f"racks of {c.rack_size} nodes, node -> 2 halves of 4 -> 2 switches of 2 -> GPU.",
        (
            "- VC quotas (whole nodes, Philly VC sizes scaled to the cluster, largest remainder): "
            if c.name == "shared"
            else f"- VC quotas (whole nodes, from `{c.name}`): "
        )
        + ", ".join(f"{vc} {n}" for vc, n in sorted(c.quotas.items(), key=lambda kv: (-kv[1], kv[0])))
        + ".",
        f"- Policies: {', '.join(names)}. Total wall time {info.wall_seconds:.1f} s.",
    ]
    if info.locality_model is not None:
        f = info.locality_model.factors
        lines.append(
            f"- Locality model `{info.locality_model.name}`: run time x "
            + ", ".join(f"{lvl} {f[lvl]:g}" for lvl in LEVELS)
            + ", relative to the closest placement the job's size allows (`loadtest/simulate/slowdown.py`)."
        )
    if info.vc_queueing != STRICT_FIFO:
        lines.append(
            f"- topogang runs with `topogang.vcQueueing: {info.vc_queueing}`: a VC's later jobs start "
            "whenever they fit, ahead of its older waiting ones (those within their VC's quota first)."
        )
    if info.checkpoint_seconds:
        lines.append(
            f"- What-if: every job saves its work every {info.checkpoint_seconds / 3600:g} h of a run and a "
            "preempted one restarts from its last save (lost GPU-hours are the runs since the last save; "
            "queueing counts a saved run as running). No policy is told: each chooses victims as always."
        )
    if info.run_time_noise is not None:
        frac, seed = info.run_time_noise
        lines.append(
            f"- Replay with noise: every run time scaled by a factor in [{1 - frac:g}, {1 + frac:g}] "
            f"(seed {seed}; `loadtest.simulate.replays` runs several)."
        )
    if info.core_fingerprint:
        lines.append(f"- Scheduling core: sha256 of `topology/*.py` = `{info.core_fingerprint[:16]}`.")
    lines += [f"- {n}" for n in info.notes]
    lines += ["", "## Goals", ""]
    result = {True: "PASS", False: "FAIL", None: "n/a"}
    lines += _table(
        ["Goal", "What", "Target", "Measured", "Result"],
        [[g.id, g.text, g.target, g.value, result[g.passed]] for g in goals],
    )
    lines += ["", *GOALS_NOTE]
    lines += ["", "## Every metric per policy", ""]
    lines += _table(["Metric", *names], [[label, *cells] for label, cells in metric_rows(m)])
    if "private" in m:
        lines += [
            "",
            "## Sharing anomaly per VC",
            "",
            f"p95 queueing of the VC's jobs in the shared cluster vs its private-cluster replay; a VC "
            f"shows the anomaly when shared > {ANOMALY_TOLERANCE:.2f}x private. All jobs:",
            "",
        ]
        lines += _anomaly_table(m, "all", c)
        lines += ["", "Multi-GPU jobs only:", ""]
        lines += _anomaly_table(m, "multi", c)
    lines += [
        "",
        "## Lost work per VC",
        "",
        "GPU-hours of running work that each VC's jobs ended by preempting (their share of the "
        "policy's loss) and that its own jobs lost. One VC's guarantee can be most of a policy's "
        "loss; a policy that loses less may do so by leaving that VC to wait (the sharing anomaly "
        "above says whether it does).",
        "",
        *_lost_per_vc_table(m),
    ]
    if "kueue-like" in m:
        cal = calibration.markdown_lines(calibration.load())
        if cal:
            lines += ["", *cal]
    lines += ["", "## Queueing per VC", ""]
    lines += _per_vc_table(m)
    lines += ["", "## Plots", ""]
    if plots is None:
        lines.append("Plots not drawn (`--no-plots`).")
    elif plots:
        lines += [f"![{p}]({p})" for p in plots]
    else:
        lines.append(
            "Plots skipped: matplotlib is not installed (`pip install matplotlib`, the `load` extra)."
        )
    lines += ["", "## Definitions", "", *DEFINITIONS]
    return "\n".join(lines) + "\n"


# Where the targets come from, stated here so the report needs no document outside the repository.
GOALS_NOTE = [
    "Every target is a ratio against baselines run in the same simulation, on the same jobs and cluster "
    "(ratios, unlike absolute numbers, survive a change of machine). The peers: kueue-like (Kueue's "
    "ClusterQueues in one cohort, borrowing and reclaim, Topology Aware Scheduling; "
    "`loadtest/simulate/kueue.py`) and first-fit-elastic (count quotas that never bind, no preemption); "
    "first-fit is the topology-unaware floor.",
    "- G3a: multi-GPU mean job completion time (queueing plus the run, stretched by the locality model) "
    "at most the best peer's and at most half of first-fit's.",
    "- G3c: no sharing anomaly, i.e. no VC's p95 queueing above 1.05x its private-cluster replay, for all "
    "its jobs and for its multi-GPU jobs alone: the guarantee HiveD (Zhao et al., OSDI '20) gives and "
    "shows count-quota schedulers break. G3d checks that a count-quota baseline does show it.",
    "- G4: time-averaged stranded GPUs at most 0.8x the best peer's, at a utilisation within 2 points of "
    "it (at different utilisations stranded GPUs are not comparable).",
    "- G5: >= 99% of <= 4-GPU jobs inside one NVLink/PCIe half, >= 99% of multi-node gangs on the fewest "
    "nodes within one rack.",
    "- P: GPU-hours lost to preemption at most 1% of the GPU-hours used.",
]

DEFINITIONS = [
    "- JCT (job completion time) = end - submit: queueing plus the run that completed, whose length is "
    "the trace's run time stretched by the locality model. GPU-hours used: GPUs held x run time, over "
    "every run, preempted ones included.",
    "- Queueing delay = start - submit, where start is the start of the run that completed: a preempted "
    "job restarts from scratch, so time lost in runs that were preempted counts as queueing. "
    '"Waiting" excludes those lost runs (time spent in the queue only).',
    "- Percentiles interpolate linearly. Multi-GPU = more than 1 GPU. Jobs of more than 8 GPUs are gangs of "
    "ceil(g/8) pods of 8 GPUs.",
    "- Each VC has a FIFO queue; only its head may start (no backfilling), and only as a whole gang; "
    "kueue-like queues as Kueue's default BestEffortFIFO does: a head that cannot start steps aside "
    "until GPUs are freed, and the VC's next job may start.",
    "- topogang: guaranteed in the VC's cells when they hold the job; else preempt opportunistic gangs when "
    "that makes it fit; else run opportunistically (priority -1) on idle cells of any VC. hived-like: the "
    "same core without borrowing. first-fit: GPU-count quota per VC, first node(s) with enough free GPUs. "
    "first-fit-elastic: the same, but a VC may exceed its count quota on idle GPUs and nothing is preempted "
    "(so no quota ever binds). kueue-like: see `loadtest/simulate/kueue.py`. private: each VC alone on "
    "exactly its quota's nodes (the topogang core "
    "inside), replayed separately.",
    "- Jobs that can never start (larger than their VC's whole quota, or of a VC without quota) are dropped "
    "at arrival, identically for every policy, and counted separately.",
    "- Stranded GPUs: free GPUs on partly used nodes (they cannot host a whole-node pod), time-averaged "
    "from the first to the last submit, like allocated GPUs. For private, the private clusters are summed.",
    "- Allocation at first fragmentation refusal: the allocated share of the cluster the first time a job "
    "with 8-GPU pods is refused although its VC has quota for it and enough GPUs are free in total, but "
    'too few whole nodes; "never" is best.',
    "- Locality: <= 8-GPU jobs on one node; <= 4-GPU jobs inside one NVLink/PCIe half (GPUs 0-3 or 4-7); "
    "gangs of more than one node on ceil(g/8) nodes, all in one rack.",
]


# ---------------------------------------------------------------------- JSON
def _jsonable(x: Any) -> Any:
    if isinstance(x, float) and x != x:  # NaN
        return None
    if isinstance(x, float) and x in (float("inf"), float("-inf")):
        return None
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_jsonable(v) for v in x]
    return x


def to_json(info: RunInfo, m: Mapping[str, PolicyMetrics], goals: Sequence[Goal]) -> dict[str, Any]:
    policies: dict[str, Any] = {}
    for name in ordered(m):
        d = asdict(m[name])
        d.pop("queueing_values", None)
        for key, s in m[name].locality.items():
            d["locality"][key]["share"] = s.share
        policies[name] = d
    anomaly: dict[str, Any] = {}
    if "private" in m:
        for name in ordered(m):
            if name == "private":
                continue
            anomaly[name] = {
                jobs: [
                    {
                        "vc": a.vc,
                        "private_p95": a.private_p95,
                        "shared_p95": a.shared_p95,
                        "diff": a.diff,
                        "ratio": a.ratio,
                        "anomalous": a.anomalous,
                    }
                    for a in sharing_anomaly(m[name], m["private"], jobs)
                ]
                for jobs in ("all", "multi")
            }
    c = info.cluster
    out: dict[str, Any] = _jsonable(
        {
            "trace": info.trace,
            "jobs": info.jobs,
            "skipped": info.skipped,
            "window_hours": info.window_hours,
            "cluster": {
                "nodes": c.nodes,
                "gpus_per_node": c.gpus_per_node,
                "rack_size": c.rack_size,
                "total_gpus": c.total_gpus,
                "quotas_nodes": dict(c.quotas),
            },
            "wall_seconds": info.wall_seconds,
            "core_fingerprint": info.core_fingerprint,
            "units": "seconds for times, GPUs for counts, shares in [0, 1]",
            "locality_model": None
            if info.locality_model is None
            else {"name": info.locality_model.name, "factors": dict(info.locality_model.factors)},
            **({} if info.vc_queueing == STRICT_FIFO else {"vc_queueing": info.vc_queueing}),
            **({"checkpoint_seconds": info.checkpoint_seconds} if info.checkpoint_seconds else {}),
            **(
                {"run_time_noise": {"fraction": info.run_time_noise[0], "seed": info.run_time_noise[1]}}
                if info.run_time_noise is not None
                else {}
            ),
            "goals": [asdict(g) for g in goals],
            "policies": policies,
            "sharing_anomaly": anomaly,
        }
    )
    return out


def write_report(
    out: Path, info: RunInfo, m: Mapping[str, PolicyMetrics], goals: Sequence[Goal], *, plots: bool = True
) -> dict[str, Path]:
    """Write every output file (the plots only with `plots`: a third of a week's run goes to
    drawing them, which a replay among many does not need); return them by kind."""
    out.mkdir(parents=True, exist_ok=True)
    drawn = plot(out, info, m) if plots else None
    md = out / "report.md"
    md.write_text(markdown(info, m, goals, drawn))
    js = out / "metrics.json"
    js.write_text(json.dumps(to_json(info, m, goals), indent=1, sort_keys=False) + "\n")
    files = {"report": md, "json": js}
    for p in drawn or ():
        files[p] = out / p
    return files
