"""What the bench measures and how: latency percentiles per verb, a run's figures and the median
over repetitions, and the CPU, memory and machine figures read from /proc beside them."""

from __future__ import annotations

import contextlib
import os
import platform
import statistics
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

VERBS = ("filter", "prioritize", "bind", "preempt")


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


@dataclass(frozen=True)
class VerbStats:
    count: int
    p50: float
    p99: float
    max: float
    rps: float

    @staticmethod
    def of(latencies: Sequence[float], seconds: float) -> VerbStats:
        return VerbStats(
            len(latencies),
            percentile(latencies, 0.5),
            percentile(latencies, 0.99),
            max(latencies, default=0.0),
            len(latencies) / seconds if seconds else 0.0,
        )

    @staticmethod
    def median(samples: Sequence[VerbStats]) -> VerbStats:
        """Field by field, the median over repetitions."""
        return VerbStats(
            round(statistics.median(s.count for s in samples)),
            statistics.median(s.p50 for s in samples),
            statistics.median(s.p99 for s in samples),
            statistics.median(s.max for s in samples),
            statistics.median(s.rps for s in samples),
        )


@dataclass
class Run:
    """One locust run against one server: per-verb stats and the CPU share each side used."""

    verbs: dict[str, VerbStats]
    seconds: float = 0.0
    server_cpu: float = 0.0  # share of one core the server used during the run
    locust_cpu: float = 0.0

    @property
    def calls_per_second(self) -> float:
        return sum(self.verbs[v].rps for v in ("filter", "prioritize", "bind") if v in self.verbs)


def median_run(runs: Sequence[Run]) -> Run:
    verbs = {
        v: VerbStats.median([r.verbs[v] for r in runs if v in r.verbs])
        for v in VERBS
        if any(v in r.verbs for r in runs)
    }
    return Run(
        verbs,
        statistics.median(r.seconds for r in runs),
        statistics.median(r.server_cpu for r in runs),
        statistics.median(r.locust_cpu for r in runs),
    )


def cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def machine() -> dict[str, Any]:
    """What a bench's numbers were measured on, for its JSON and its table."""
    return {"cpus": os.cpu_count(), "cpu_model": cpu_model(), "python": platform.python_version()}


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process so far (Linux), or None."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CpuSampler:
    """Samples processes' CPU time 10x a second, so a run's CPU share can be read over exactly the
    window locust reports (not its start-up)."""

    def __init__(self, pids: Mapping[str, int]) -> None:
        self.pids = dict(pids)
        self.samples: list[tuple[float, dict[str, float]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            now = time.time()
            got = {k: cpu_seconds(p) for k, p in self.pids.items()}
            self.samples.append((now, {k: v for k, v in got.items() if v is not None}))
            self._stop.wait(0.1)

    @contextlib.contextmanager
    def running(self) -> Iterator[CpuSampler]:
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join()

    def share(self, key: str, start: float, stop: float) -> float:
        inside = [(t, s[key]) for t, s in self.samples if start <= t <= stop and key in s]
        if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
            return 0.0
        return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])


def rss_mib(pid: int) -> float:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0
