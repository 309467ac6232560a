"""`make bench-scale`'s verdict: its goals, each PASS or FAIL with the measured value, and its table."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from loadtest.measure import Run, median_run

GIB_MIB = 1024.0
RSS_GOAL_MIB = GIB_MIB  # at 80% fill
READY_GOAL_S = 10.0
RECOVERY_GOAL_S = 30.0
CORE_RATIO_GOAL = 0.6
P99_RATIO_GOAL = 2.0
SCALE_VERBS = ("filter", "prioritize", "bind")


@dataclass(frozen=True)
class Goal:
    name: str
    value: float
    target: float
    at_least: bool
    unit: str  # "x", "s", "MiB"
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.value >= self.target if self.at_least else self.value <= self.target

    def line(self) -> str:
        op = ">=" if self.at_least else "<="
        if self.unit == "x":
            value, target = f"{self.value:.2f}x", f"{self.target}x"
        elif self.unit in ("s", "MiB"):
            value, target = f"{self.value:,.1f} {self.unit}", f"{self.target:,.0f} {self.unit}"
        else:  # a count
            value, target = f"{self.value:,.0f} {self.unit}", f"{self.target:,.0f} {self.unit}"
        detail = f"  {self.detail}" if self.detail else ""
        return f"  {self.name:<44} {value:>12}  (goal {op} {target})  {'PASS' if self.ok else 'FAIL'}{detail}"

    def as_json(self) -> dict[str, Any]:
        return {
            "goal": self.name,
            "value": self.value,
            "target": self.target,
            "at_least": self.at_least,
            "unit": self.unit,
            "detail": self.detail,
            "pass": self.ok,
        }


def p99_goals(ext: Sequence[Run], noop: Sequence[Run]) -> list[Goal]:
    """Per verb, the ratio of the medians of p99 over the repetitions (extender rep i against no-op
    rep i), with the range of the per-repetition ratios."""
    out = []
    for verb in SCALE_VERBS:
        pairs = [
            (a.verbs[verb].p99, b.verbs[verb].p99)
            for a, b in zip(ext, noop, strict=False)
            if verb in a.verbs and verb in b.verbs and b.verbs[verb].p99
        ]
        if not pairs:
            continue
        value = statistics.median(p[0] for p in pairs) / statistics.median(p[1] for p in pairs)
        each = [a / b for a, b in pairs]
        detail = (
            f"[{min(each):.2f}-{max(each):.2f}] {statistics.median(p[0] for p in pairs):.2f} vs "
            f"{statistics.median(p[1] for p in pairs):.2f} ms"
        )
        out.append(Goal(f"{verb} p99 @1 user vs no-op", value, P99_RATIO_GOAL, False, "x", detail))
    return out


def scale_goals(doc: Mapping[str, Any], ext: Sequence[Run], noop: Sequence[Run]) -> list[Goal]:
    goals = []
    rss = doc.get("rss_mib", {})
    if "80%" in rss:
        goals.append(Goal("extender RSS at 80% fill", rss["80%"], RSS_GOAL_MIB, False, "MiB"))
    if doc.get("start_to_ready_s") is not None:
        goals.append(Goal("start to ready", doc["start_to_ready_s"], READY_GOAL_S, False, "s"))
    rec = doc.get("recovery") or {}
    if rec.get("seconds_to_ready") is not None:
        detail = (
            f"{rec['pods']:,} pods, {rec['gpus_recovered']:,} of {rec['gpus_bound']:,} GPUs back; "
            f"config+core {rec['seconds_config_and_core']:.1f} s, "
            f"API lists {rec['seconds_api_lists']:.1f} s, "
            f"recovery {rec['seconds_recovery']:.1f} s"
        )
        goals.append(
            Goal(
                "restart to ready, 80% fill in bound pods",
                rec["seconds_to_ready"],
                RECOVERY_GOAL_S,
                False,
                "s",
                detail,
            )
        )
    core = doc.get("core") or {}
    if core.get("ratio") is not None:
        detail = (
            f"{core['rate_large']:,.0f}/s vs {core['rate_small']:,.0f}/s "
            f"[{core['low']:.2f}-{core['high']:.2f}]"
        )
        goals.append(
            Goal(
                f"core decisions/s vs the {doc.get('meta', {}).get('small', 1000):,}-node cluster",
                core["ratio"],
                CORE_RATIO_GOAL,
                True,
                "x",
                detail,
            )
        )
    goals.extend(p99_goals(ext, noop))
    return goals


def format_scale(
    doc: Mapping[str, Any], ext: Sequence[Run], noop: Sequence[Run], goals: Sequence[Goal]
) -> str:
    meta = doc.get("meta", {})
    rss = doc.get("rss_mib", {})
    lines = [
        f"topogang bench-scale: {meta.get('nodes', '?'):,} nodes x 8 GPUs in racks of "
        f"{meta.get('rack_size', '?')}, "
        f"{meta.get('vcs', '?')} VCs; machine {meta.get('cpus', '?')} CPUs ({meta.get('cpu_model', '?')}), "
        f"pinning: {meta.get('pinning', 'none')}",
        f"load average {meta.get('load_before', '?')} before, {meta.get('load_end', '?')} at the end",
        "extender RSS MiB: "
        + ", ".join(f"{k} {v:,.0f}" for k, v in rss.items())
        + f"; start to ready {doc.get('start_to_ready_s', 0):.1f} s; fill reached "
        + ", ".join(f"{k}: {v:.1%}" for k, v in (doc.get("fill") or {}).items()),
    ]
    if ext and noop:
        e, n = median_run(ext), median_run(noop)
        lines.append(
            f"1 user, {meta.get('seconds', '?')} s a run, median of {len(ext)} (4x8-GPU gangs at 30% fill):"
        )
        lines.append(
            f"  {'verb':<11} {'topogang p50/p99/max ms':>26} {'req/s':>7}   "
            f"{'no-op p50/p99/max ms':>23} {'req/s':>7}"
        )
        for verb in SCALE_VERBS:
            a, b = e.verbs.get(verb), n.verbs.get(verb)
            if a is None or b is None:
                continue
            lines.append(
                f"  {verb:<11} {f'{a.p50:.2f}/{a.p99:.2f}/{a.max:.1f}':>26} {a.rps:>7.0f}   "
                f"{f'{b.p50:.2f}/{b.p99:.2f}/{b.max:.1f}':>23} {b.rps:>7.0f}"
            )
    core = doc.get("core") or {}
    if core:
        lines.append(
            f"core (in-process, Philly mix, steady state at {core.get('fill', 0):.0%}): "
            f"{core['rate_large']:,.0f} decisions/s at {meta.get('nodes', 0):,} nodes, "
            f"{core['rate_small']:,.0f}/s at {meta.get('small', 1000):,} (medians of {core.get('reps', '?')})"
        )
        if core.get("cpu_ratio") is not None:
            lines.append(
                f"  per CPU second: {core['cpu_rate_large']:,.0f}/s vs {core['cpu_rate_small']:,.0f}/s, "
                f"{core['cpu_ratio']:.2f}x (for information: the goal reads the wall rates)"
            )
    lines.append("goals:")
    lines.extend(g.line() for g in goals)
    return "\n".join(lines)
