"""`make bench-kube`'s figures: one run's result, kube-scheduler's own metrics, the goals and the table."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from loadtest.measure import percentile
from loadtest.scale_report import Goal

KUBE_RATIO_GOAL = 0.7  # topogang's pods/s >= 0.7x the stock scheduler's
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def extender_metrics(text: str) -> dict[str, float]:
    """From topogang's /metrics: the time it took to answer each verb (sum and count), and the
    GangReservation objects it wrote (each new gang's, before its filter answers)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m is not None and m.group(1) == "topogang_reservation_writes_total":
            labels = dict(_LABEL.findall(m.group(2) or ""))
            out[f"reservation writes {labels.get('result', '?')}"] = float(m.group(3))
        if m is None or not m.group(1).startswith("topogang_extender_request_duration_seconds_"):
            continue
        kind = m.group(1).rsplit("_", 1)[1]
        labels = dict(_LABEL.findall(m.group(2) or ""))
        if kind in ("sum", "count"):
            out[f"extender {labels.get('verb', '?')} {kind}"] = float(m.group(3))
    return out


_UNSCHEDULABLE = "Unable to schedule pod"
_WAIT = re.compile(r"waits \[([A-Za-z]+)\]")


def wait_code(message: str) -> str | None:
    """The first wait code (`topology.decisions.WaitCode`) a kube-scheduler message names, as the
    extender words its waits (`extender.http.answers`: "gang G waits [Code]: ..."); None when it
    names none."""
    m = _WAIT.search(message)
    return m.group(1) if m is not None else None


def wait_reasons(lines: Iterable[str]) -> dict[str, int]:
    """kube-scheduler's failed attempts in its log, by the extender's wait code (`Queued`,
    `InsufficientCapacity`, ...; `other` when the message names none, e.g. kube-scheduler's own
    filters refused every node): which waits the retries are spent on, which its metrics do not
    say. Each attempt counts once, under the first code its message names."""
    out: dict[str, int] = {}
    for line in lines:
        if _UNSCHEDULABLE not in line:
            continue
        code = wait_code(line) or "other"
        out[code] = out.get(code, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))


def scheduler_metrics(text: str, profile: str) -> dict[str, float]:
    """From kube-scheduler's /metrics: this profile's scheduling attempts by result
    (`scheduler_schedule_attempts_total`), and every counter and histogram count with "extender"
    in its name (per label set), e.g. the extender's errors."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m is None:
            continue
        name, labels_text, value = m.group(1), m.group(2) or "", m.group(3)
        labels = dict(_LABEL.findall(labels_text))
        try:
            number = float(value)
        except ValueError:
            continue
        if name == "scheduler_schedule_attempts_total" and labels.get("profile") == profile:
            out[f"attempts {labels.get('result', '?')}"] = number
        elif name.startswith("scheduler_scheduling_algorithm_duration_seconds_") and name.endswith(
            ("sum", "count")
        ):
            out[f"algorithm {name.rsplit('_', 1)[1]}"] = number
        elif "extender" in name and not name.endswith(("_bucket", "_sum")):
            out[f"{name}{labels_text}"] = number
    return out


@dataclass
class PhaseResult:
    name: str
    profile: str
    pods: int
    gangs: int
    multi_pod_gangs: int
    bound: int
    seconds: float  # first creation -> last bind
    submit_seconds: float  # first creation -> last creation done
    gang_seconds: list[float] = field(default_factory=list)  # per gang, submit -> all members bound
    longest_partial: float = 0.0  # a gang's first member bound -> its last, the longest seen
    partial_at_end: int = 0
    violations: list[str] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)  # deltas over the run
    extender_cpu_seconds: float = 0.0  # the extender process's CPU over the run (topogang run)

    @property
    def pods_per_second(self) -> float:
        return self.bound / self.seconds if self.seconds > 0 else 0.0

    def mean_ms(self, what: str) -> float:
        """Mean of a timed metric over the run, in ms ("algorithm", "extender filter", ...)."""
        n = self.metrics.get(f"{what} count", 0.0)
        return 1e3 * self.metrics.get(f"{what} sum", 0.0) / n if n else 0.0

    def gang_p(self, q: float) -> float:
        return percentile(self.gang_seconds, q)

    def summary(self) -> str:
        return (
            f"{self.bound}/{self.pods} pods bound in {self.seconds:.1f} s ({self.pods_per_second:.1f}/s), "
            f"gang all bound p50 {self.gang_p(0.5):.2f} s p99 {self.gang_p(0.99):.2f} s"
        )

    def as_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["pods_per_second"] = self.pods_per_second
        doc["gang_p50_s"] = self.gang_p(0.5)
        doc["gang_p99_s"] = self.gang_p(0.99)
        doc["gang_seconds"] = [round(x, 4) for x in self.gang_seconds]
        return doc


def kube_goals(phases: Sequence[PhaseResult]) -> list[Goal]:
    by = {p.name: p for p in phases}
    out = []
    for tg_name, stock_name, what in (
        ("topogang", "stock", "topogang pods bound/s vs the stock scheduler"),
        (
            "topogang-dra",
            "stock-dra",
            "DRA: topogang allocating claims, pods bound/s vs stock DynamicResources",
        ),
    ):
        tg, stock = by.get(tg_name), by.get(stock_name)
        if tg is not None and stock is not None and stock.pods_per_second:
            detail = f"{tg.pods_per_second:.1f} vs {stock.pods_per_second:.1f} pods/s"
            if tg.bound < tg.pods or stock.bound < stock.pods:
                detail += f"; bound {tg.bound}/{tg.pods} and {stock.bound}/{stock.pods}"
            ratio = tg.pods_per_second / stock.pods_per_second if tg.bound == tg.pods else 0.0
            out.append(Goal(what, ratio, KUBE_RATIO_GOAL, True, "x", detail))
    for tg_name in ("topogang", "topogang-dra"):
        tg = by.get(tg_name)
        if tg is not None:
            detail = f"longest partial {tg.longest_partial:.2f} s; " + (
                "; ".join(tg.violations[:3]) if tg.violations else "none seen"
            )
            label = "gangs partially bound past their TTL" + ("" if tg_name == "topogang" else " (DRA)")
            out.append(Goal(label, len(tg.violations), 0, False, "gangs", detail))
    return out


def format_kube(meta: Mapping[str, Any], phases: Sequence[PhaseResult], goals: Sequence[Goal]) -> str:
    lines = [
        f"topogang bench-kube: kube-apiserver + kube-scheduler {meta.get('k8s', '?')}, "
        f"{meta.get('nodes', 0):,} KWOK nodes x 8 GPUs; {meta.get('jobs', 0)} Philly-mix jobs "
        f"({meta.get('pods', 0)} pods, {meta.get('gpus_requested', 0):,} GPUs) per run, "
        f"{meta.get('threads', '?')} submitting threads",
        f"machine: {meta.get('cpus', '?')} CPUs ({meta.get('cpu_model', '?')}); load average "
        f"{meta.get('load_before', '?')} before, {meta.get('load_end', '?')} at the end; reservation TTL "
        f"{meta.get('ttl_seconds', 0):.0f} s",
        f"{'run':<12} {'bound':>10} {'seconds':>8} {'pods/s':>7} {'submit s':>9} "
        f"{'gang all-bound p50/p99 s':>25} {'attempts (kube-scheduler)':<40}",
    ]
    for p in phases:
        attempts = ", ".join(
            f"{k.split(' ', 1)[1]} {v:.0f}" for k, v in sorted(p.metrics.items()) if k.startswith("attempts ")
        )
        lines.append(
            f"{p.name:<12} {f'{p.bound}/{p.pods}':>10} {p.seconds:>8.1f} {p.pods_per_second:>7.1f} "
            f"{p.submit_seconds:>9.1f} {f'{p.gang_p(0.5):.2f}/{p.gang_p(0.99):.2f}':>25} "
            f"{attempts or '-':<40}"
        )
    for p in phases:
        line = f"  {p.name}: kube-scheduler's scheduling algorithm {p.mean_ms('algorithm'):.1f} ms a pod"
        if p.profile.startswith("topogang"):
            verbs = [
                v for v in ("filter", "prioritize", "bind", "preempt") if p.metrics.get(f"extender {v} count")
            ]
            line += "; the extender's own answer: " + ", ".join(
                f"{v} {p.mean_ms(f'extender {v}'):.2f} ms x{p.metrics[f'extender {v} count']:.0f}"
                for v in verbs
            )
            writes = p.metrics.get("reservation writes ok", 0) + p.metrics.get("reservation writes error", 0)
            line += f"; GangReservation writes {writes:.0f}"
            per_pod = 1e3 * p.extender_cpu_seconds / max(1, p.pods)
            line += f"; extender CPU {p.extender_cpu_seconds:.1f} s ({per_pod:.1f} ms a pod)"
        lines.append(line)
    for p in phases:
        ext = {
            k: v
            for k, v in p.metrics.items()
            if not k.startswith(("attempts ", "algorithm ", "extender ", "reservation ")) and v
        }
        if ext:
            lines.append(f"  {p.name}: kube-scheduler's extender metrics over the run:")
            lines.extend(f"    {k} {v:.0f}" for k, v in sorted(ext.items()))
        elif p.profile.startswith("topogang"):
            lines.append(f"  {p.name}: kube-scheduler's extender metrics over the run: none non-zero")
    lines.append("goals:")
    lines.extend(g.line() for g in goals)
    return "\n".join(lines)
