"""What a simulator run was, and the order its policies are shown in: shared by the report, its JSON and
its plots, so each lists the policies the same way."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from config.schema import STRICT_FIFO
from loadtest.simulate.cluster import SimCluster
from loadtest.simulate.slowdown import Slowdown

ORDER = ("topogang", "hived-like", "first-fit", "first-fit-elastic", "kueue-like", "private")


@dataclass(slots=True)
class RunInfo:
    """What was simulated, for the report's header."""

    trace: str
    jobs: int
    skipped: dict[str, int]
    window_hours: float
    cluster: SimCluster
    policies: list[str]
    wall_seconds: float
    core_fingerprint: str = ""
    notes: list[str] = field(default_factory=list)
    locality_model: Slowdown | None = None
    vc_queueing: str = STRICT_FIFO  # topogang's `topogang.vcQueueing` (`--vc-queueing`)
    checkpoint_seconds: int | None = None  # every job saves its work this often (`--checkpoint-every`)
    run_time_noise: tuple[float, int] | None = None  # (fraction, seed) of `--run-time-noise`


def ordered(m: Mapping[str, object]) -> list[str]:
    """The policies of `m`, the known ones in ORDER first, then the rest by name."""
    return [p for p in ORDER if p in m] + sorted(p for p in m if p not in ORDER)
