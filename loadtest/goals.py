"""The bench's verdict: goals G1 and G2 as ratios of the extender's medians to the no-op's, and the
one table that shows them beside the per-verb figures."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from loadtest.measure import VERBS, Run, VerbStats, median_run

G1_16 = 1.5  # filter p99 <= 1.5x no-op at 16 users
G1_1 = 2.0  # <= 2x at 1 user
G2B = 0.4  # filter+prioritize+bind calls/s >= 0.4x the no-op's
ONE_CLIENT = 1.5  # `loadtest.one_client`: all-filter p99 at 1 user <= 1.5x the no-op's, median of the rounds


@dataclass(frozen=True)
class Goal:
    name: str
    value: float
    target: float
    low: float  # the ratio's range over the repetitions
    high: float

    @property
    def at_least(self) -> bool:
        return self.name.startswith("G2")

    @property
    def ok(self) -> bool:
        return self.value >= self.target if self.at_least else self.value <= self.target

    @property
    def verdict(self) -> str:
        return "PASS" if self.ok else "FAIL"


def _ratio(a: float, b: float) -> float:
    return a / b if b else 0.0


def goals(ext: Mapping[int, Sequence[Run]], noop: Mapping[int, Sequence[Run]]) -> list[Goal]:
    """Ratios of medians; the range is over the repetitions (extender rep i vs no-op rep i)."""
    out = []
    for users, target in ((16, G1_16), (1, G1_1)):
        e, n = ext.get(users, ()), noop.get(users, ())
        pairs = [(a.verbs["filter"].p99, b.verbs["filter"].p99) for a, b in zip(e, n, strict=False)]
        pairs = [p for p in pairs if p[1]]
        if pairs:
            value = _ratio(statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs))
            each = [_ratio(*p) for p in pairs]
            out.append(Goal(f"G1 filter p99 @{users} users", value, target, min(each), max(each)))
    e, n = ext.get(16, ()), noop.get(16, ())
    pairs = [(a.calls_per_second, b.calls_per_second) for a, b in zip(e, n, strict=False)]
    pairs = [p for p in pairs if p[1]]
    if pairs:
        value = _ratio(statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs))
        each = [_ratio(*p) for p in pairs]
        out.append(Goal("G2b filter+prioritize+bind calls/s @16", value, G2B, min(each), max(each)))
    return out


def format_table(
    ext: Mapping[int, Sequence[Run]], noop: Mapping[int, Sequence[Run]], meta: Mapping[str, Any]
) -> str:
    """The one table: per users and verb, the extender next to the no-op (medians), then the goals."""
    lines = [
        f"topogang bench: {meta.get('nodes', '?')} nodes x 8 GPUs, fill {meta.get('fill', 0.3):.0%} "
        f"({meta.get('fill_after', meta.get('fill', 0.3)):.0%} after the runs), "
        f"{meta.get('seconds', '?')} s per run, median of {meta.get('reps', '?')} runs each",
        f"machine: {meta.get('cpus', '?')} CPUs ({meta.get('cpu_model', '?')}), pinning: "
        f"{meta.get('pinning', 'none')}; load average {meta.get('load_before', '?')} before, "
        f"{meta.get('load_after', '?')} after",
        f"{'users':>5} {'verb':<11} {'topogang p50/p99/max ms':>26} {'req/s':>7}   "
        f"{'no-op p50/p99/max ms':>23} {'req/s':>7}   {'p99 ratio':>9}",
    ]
    for users in sorted(set(ext) | set(noop)):
        e_run = median_run(ext[users]) if ext.get(users) else Run({})
        n_run = median_run(noop[users]) if noop.get(users) else Run({})
        for verb in VERBS:
            e, n = e_run.verbs.get(verb), n_run.verbs.get(verb)
            if e is None and n is None:
                continue

            def cell(s: VerbStats | None) -> str:
                return f"{s.p50:.2f}/{s.p99:.2f}/{s.max:.1f}" if s else "-"

            ratio = f"{e.p99 / n.p99:.2f}x" if e and n and n.p99 else "-"
            lines.append(
                f"{users:>5} {verb:<11} {cell(e):>26} {e.rps if e else 0:>7.0f}   "
                f"{cell(n):>23} {n.rps if n else 0:>7.0f}   {ratio:>9}"
            )
        e_cpu = f"server CPU {e_run.server_cpu:4.0%}, locust {e_run.locust_cpu:4.0%}"
        n_cpu = f"server CPU {n_run.server_cpu:4.0%}, locust {n_run.locust_cpu:4.0%}"
        lines.append(f"{users:>5} {'f+p+b /s':<11} {e_run.calls_per_second:>7.0f}  {e_cpu}")
        lines.append(f"{'':>5} {'':<11} {'':>7}  {'':<28}  no-op {n_run.calls_per_second:.0f}  {n_cpu}")
    lines.append("goals (ratios of medians vs the no-op extender, same run; range over the repetitions):")
    for g in goals(ext, noop):
        op = ">=" if g.at_least else "<="
        lines.append(
            f"  {g.name:<40} {g.value:5.2f}x  [{g.low:.2f}-{g.high:.2f}]  "
            f"(goal {op} {g.target}x)  {g.verdict}"
        )
    return "\n".join(lines)


def _cell(s: VerbStats) -> str:
    return f"{s.p50:.2f}/{s.p99:.2f}/{s.max:.1f}"


TLS_1 = 1.2  # the verbs' 1-user p99 over mutual TLS <= 1.2x plain HTTP


def tls_goals(tls: Mapping[int, Sequence[Run]], plain: Mapping[int, Sequence[Run]]) -> list[Goal]:
    """Per verb, the 1-user p99 over mutual TLS against the same extender over plain HTTP, as the
    ratio of medians over the repetitions (range: rep i against rep i)."""
    out = []
    for verb in ("filter", "prioritize", "bind"):
        pairs = [
            (a.verbs[verb].p99, b.verbs[verb].p99)
            for a, b in zip(tls.get(1, ()), plain.get(1, ()), strict=False)
            if verb in a.verbs and verb in b.verbs and b.verbs[verb].p99
        ]
        if pairs:
            value = _ratio(statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs))
            each = [_ratio(*p) for p in pairs]
            out.append(Goal(f"T {verb} p99 @1 user, mTLS / plain", value, TLS_1, min(each), max(each)))
    return out


def format_tls(tls: Mapping[int, Sequence[Run]], plain: Mapping[int, Sequence[Run]]) -> str:
    """The verbs over mutual TLS beside the same extender over plain HTTP (medians), then the
    1-user ratios against their goal."""
    lines = [
        "the verbs over mutual TLS (client certificate, allowed names) vs plain HTTP, same run, keep-alive:",
        f"{'users':>5} {'verb':<11} {'mTLS p50/p99/max ms':>23} {'req/s':>7}   "
        f"{'plain p50/p99/max ms':>23} {'req/s':>7}   {'p99 ratio':>9}",
    ]
    for users in sorted(set(tls) & set(plain)):
        t_run, p_run = median_run(tls[users]), median_run(plain[users])
        for verb in VERBS:
            t, p = t_run.verbs.get(verb), p_run.verbs.get(verb)
            if t is None or p is None:
                continue
            ratio = f"{t.p99 / p.p99:.2f}x" if p.p99 else "-"
            lines.append(
                f"{users:>5} {verb:<11} {_cell(t):>23} {t.rps:>7.0f}   "
                f"{_cell(p):>23} {p.rps:>7.0f}   {ratio:>9}"
            )
    for g in tls_goals(tls, plain):
        lines.append(
            f"  {g.name:<40} {g.value:5.2f}x  [{g.low:.2f}-{g.high:.2f}]  (goal <= {g.target}x)  {g.verdict}"
        )
    return "\n".join(lines)
