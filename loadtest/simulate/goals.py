"""The goals a run is judged by, each PASS/FAIL against baselines measured in the same run.

- G3a: multi-GPU mean job completion time (queueing plus the stretched run) <= 1.0x the best peer
  (the lower of kueue-like and first-fit-elastic) and <= 0.5x first-fit.
- G3c: no sharing anomaly: for every VC, the p95 queueing of its jobs <= 1.05x its private-cluster
  replay, for all its jobs (G3c) and for its multi-GPU jobs alone (G3c-multi).
- G4: time-averaged stranded GPUs <= 0.8x the best peer (the peer with fewer stranded GPUs), with
  utilisation within 2 points of that peer's; both utilisations are shown.
- G5a: >= 99% of <= 4-GPU jobs inside one NVLink/PCIe half. G5b: >= 99% of multi-node gangs on the
  fewest nodes, in one rack.
- P: GPU-hours lost to preemption <= 1% of the GPU-hours used.
- G3d (a check of the comparison, not of topogang): a count-quota baseline shows the anomaly.
"""

from __future__ import annotations

from collections.abc import Mapping

from loadtest.simulate.metrics import ANOMALY_TOLERANCE, Goal, PolicyMetrics, sharing_anomaly

PEERS = ("kueue-like", "first-fit-elastic")
UTILISATION_BAND = 0.02
LOST_SHARE = 0.01


def _x(a: float, b: float) -> str:
    return "n/a" if b <= 0 else f"{a / b:.2f}x"


def _jct_goal(t: PolicyMetrics, m: Mapping[str, PolicyMetrics]) -> Goal:
    text = "multi-GPU mean JCT vs the best peer and first-fit"
    target = "<= 1.0x best of kueue-like/first-fit-elastic, <= 0.5x first-fit"
    tj = t.jct.get("multi")
    peers = [(m[p].jct["multi"], p) for p in PEERS if p in m and m[p].jct.get("multi") is not None]
    ff = m.get("first-fit")
    fj = ff.jct.get("multi") if ff is not None else None
    if tj is None or not peers or fj is None:
        return Goal("G3a", text, target, "n/a (needs kueue-like or first-fit-elastic, and first-fit)", None)
    best, name = min(peers, key=lambda x: (x[0].mean if x[0] else 0.0, x[1]))
    assert best is not None
    ok = tj.mean <= best.mean and tj.mean <= 0.5 * fj.mean
    value = (
        f"{tj.mean / 3600:.2f} h vs {name} {best.mean / 3600:.2f} h = {_x(tj.mean, best.mean)}; "
        f"vs first-fit {fj.mean / 3600:.2f} h = {_x(tj.mean, fj.mean)}"
    )
    return Goal("G3a", text, target, value, ok)


def _anomaly_goal(t: PolicyMetrics, pv: PolicyMetrics, jobs: str) -> Goal:
    gid = "G3c" if jobs == "all" else "G3c-multi"
    what = "all jobs" if jobs == "all" else "multi-GPU jobs"
    an = sharing_anomaly(t, pv, jobs)
    bad = [a for a in an if a.anomalous]
    worst = max((a.ratio if a.ratio is not None else float("inf") for a in an), default=0.0)
    detail = ", ".join(f"{a.vc} {a.shared_p95 / 3600:.1f} h vs {a.private_p95 / 3600:.1f} h" for a in bad)
    return Goal(
        gid,
        f"no sharing anomaly, {what}: every VC's p95 queueing vs its private cluster",
        f"<= {ANOMALY_TOLERANCE:.2f}x private, every VC",
        f"{len(bad)} of {len(an)} VCs above (worst {worst:.2f}x)" + (f": {detail}" if bad else ""),
        not bad,
    )


def _stranded_goal(t: PolicyMetrics, m: Mapping[str, PolicyMetrics]) -> Goal:
    text = "mean stranded GPUs vs the best peer, at utilisation within 2 points"
    target = "<= 0.8x best peer, utilisation within +-2 pp"
    peers = [m[p] for p in PEERS if p in m]
    if not peers:
        return Goal("G4", text, target, "n/a (needs kueue-like or first-fit-elastic)", None)
    best = min(peers, key=lambda x: (x.mean_stranded_gpus, x.policy))
    gap = t.utilisation - best.utilisation
    ok = t.mean_stranded_gpus <= 0.8 * best.mean_stranded_gpus and abs(gap) <= UTILISATION_BAND
    value = (
        f"{t.mean_stranded_gpus:.1f} vs {best.policy} {best.mean_stranded_gpus:.1f} = "
        f"{_x(t.mean_stranded_gpus, best.mean_stranded_gpus)}; utilisation {t.utilisation:.1%} vs "
        f"{best.utilisation:.1%} ({gap * 100:+.1f} pp)"
    )
    return Goal("G4", text, target, value, ok)


def _locality_goals(t: PolicyMetrics) -> list[Goal]:
    out = []
    for gid, key, text in (
        ("G5a", "le4_one_half", "<= 4-GPU jobs inside one NVLink/PCIe half"),
        ("G5b", "multinode_min_one_rack", "multi-node gangs on the fewest nodes, in one rack"),
    ):
        sh = t.locality[key]
        if sh.share is None:
            out.append(Goal(gid, text, ">= 99%", "no such jobs", None))
        else:
            out.append(Goal(gid, text, ">= 99%", f"{sh.share:.1%} of {sh.n}", sh.share >= 0.99))
    return out


def _preemption_goal(t: PolicyMetrics) -> Goal:
    share = t.lost_gpu_hours / t.gpu_hours if t.gpu_hours > 0 else 0.0
    return Goal(
        "P",
        "GPU-hours lost to preemption vs GPU-hours used",
        "<= 1%",
        f"{t.lost_gpu_hours:.0f} of {t.gpu_hours:.0f} GPU-h = {share:.2%}",
        share <= LOST_SHARE,
    )


def evaluate_goals(m: Mapping[str, PolicyMetrics], subject: str = "topogang") -> list[Goal]:
    """Every goal for `subject` against the baselines present in `m`."""
    t = m.get(subject)
    if t is None:
        return []
    goals = [_jct_goal(t, m)]
    pv = m.get("private")
    if pv is None:
        for gid in ("G3c", "G3c-multi"):
            goals.append(Goal(gid, "no sharing anomaly (needs the private replay)", "<= 1.05x", "n/a", None))
    else:
        goals += [_anomaly_goal(t, pv, "all"), _anomaly_goal(t, pv, "multi")]
    goals.append(_stranded_goal(t, m))
    goals += _locality_goals(t)
    goals.append(_preemption_goal(t))
    if pv is not None:
        seen = []
        for name in ("first-fit", "first-fit-elastic", "kueue-like"):
            b = m.get(name)
            if b is not None:
                bad = sorted(
                    {a.vc for jobs in ("all", "multi") for a in sharing_anomaly(b, pv, jobs) if a.anomalous}
                )
                seen.append((name, bad))
        if seen:
            goals.append(
                Goal(
                    "G3d",
                    "check of the comparison: a count-quota baseline shows the anomaly",
                    ">= 1 VC",
                    "; ".join(f"{n}: {len(b)} VCs" + (f" ({', '.join(b)})" if b else "") for n, b in seen),
                    any(b for _, b in seen),
                )
            )
    return goals
