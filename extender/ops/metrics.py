"""Prometheus metrics of one extender instance, in a registry of its own.

Request latency per verb and decisions per verb and outcome are counted as calls happen; gauges of
the core's state (gangs by phase, GPUs per VC, free cells per chain and level) are computed when
/metrics is scraped, so the hot path pays nothing for them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(frozen=True, slots=True)
class StateSnapshot:
    """What the gauges show, read from the core under the scheduler lock."""

    gangs_by_phase: dict[str, int] = field(default_factory=dict)
    vc_gpus: dict[str, dict[str, int]] = field(default_factory=dict)
    cells: list[tuple[str, int, str, int, int]] = field(default_factory=list)
    cluster: tuple[int, int, int] = (0, 0, 0)
    ready: bool = False


class _StateCollector(Collector):
    def __init__(self, snapshot: Callable[[], StateSnapshot]) -> None:
        self._snapshot = snapshot

    def collect(self) -> Iterable[Metric]:
        s = self._snapshot()
        gangs = GaugeMetricFamily(
            "topogang_gangs", "Gangs known to the scheduler, by phase.", labels=["phase"]
        )
        for phase, n in sorted(s.gangs_by_phase.items()):
            gangs.add_metric([phase], n)
        yield gangs
        vc = GaugeMetricFamily(
            "topogang_vc_gpus",
            "GPUs per virtual cluster: quota, used (guaranteed), free (quota - used), opportunistic.",
            labels=["vc", "state"],
        )
        for name, row in sorted(s.vc_gpus.items()):
            for state in ("quota", "used", "free", "opportunistic"):
                vc.add_metric([name, state], row.get(state, 0))
        yield vc
        free = GaugeMetricFamily(
            "topogang_cells_free",
            "Wholly free cells per chain and level.",
            labels=["chain", "level", "cell_type"],
        )
        total = GaugeMetricFamily(
            "topogang_cells", "Cells per chain and level.", labels=["chain", "level", "cell_type"]
        )
        for chain, level, cell_type, n_free, n in s.cells:
            free.add_metric([chain, str(level), cell_type], n_free)
            total.add_metric([chain, str(level), cell_type], n)
        yield free
        yield total
        gpus = GaugeMetricFamily("topogang_cluster_gpus", "GPUs of the whole cluster.", labels=["state"])
        for state, n in zip(("total", "free", "bad"), s.cluster, strict=True):
            gpus.add_metric([state], n)
        yield gpus
        ready = GaugeMetricFamily("topogang_ready", "1 once recovery is done and verbs are served.")
        ready.add_metric([], 1 if s.ready else 0)
        yield ready


class Metrics:
    """The instruments of one extender; `render()` is the /metrics body."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.latency = Histogram(
            "topogang_extender_request_duration_seconds",
            "Time to answer an extender call, by verb.",
            ["verb"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.decisions = Counter(
            "topogang_extender_decisions",
            "Extender answers by verb and outcome.",
            ["verb", "outcome"],
            registry=self.registry,
        )
        self.expiries = Counter(
            "topogang_reservation_expiries",
            "Gang reservations released because their members did not all arrive in time.",
            registry=self.registry,
        )
        self.releases = Counter(
            "topogang_gang_releases", "Gangs released, by reason.", ["reason"], registry=self.registry
        )
        self.reservation_writes = Counter(
            "topogang_reservation_writes",
            "GangReservation objects written to the API server, by result.",
            ["result"],
            registry=self.registry,
        )
        self.unverified_pods = Counter(
            "topogang_unverified_bind_info",
            "Bound pods whose bind info topogang did not write (forged, edited, or HiveD's without the "
            "opt-in): their GPUs are held, with no quota or priority, until they are gone.",
            registry=self.registry,
        )
        self.outside_gpus = Gauge(
            "topogang_outside_gpus",
            "nvidia.com/gpu held by bound, not finished pods that are not topogang's on the config's "
            "nodes: as many GPUs of their nodes are marked bad until those pods are gone.",
            registry=self.registry,
        )
        self.dra_mismatch = Gauge(
            "topogang_dra_node_mismatch",
            "Nodes whose ResourceSlices contradict the config (DRA mode): their GPUs are not given out.",
            registry=self.registry,
        )
        self.promotion_writes = Counter(
            "topogang_promotion_writes",
            "Bind info of a promoted gang's pods re-written (so a restart keeps it guaranteed), by result.",
            ["result"],
            registry=self.registry,
        )
        self.requeues = Counter(
            "topogang_requeues",
            "Pods the filter turned away for lack of room, marked (an annotation patch) so that "
            "kube-scheduler filters them again once room may have freed, by outcome.",
            ["outcome"],
            registry=self.registry,
        )
        self.admission_lifts = Counter(
            "topogang_admission_gate_lifts",
            "Pods whose topogang.io/admission scheduling gate the leader lifted (or tried to), by "
            "outcome (lifted, gone, failed).",
            ["outcome"],
            registry=self.registry,
        )
        self.admission_gated = Gauge(
            "topogang_admission_gated_pods",
            "Pods kept behind the topogang.io/admission scheduling gate at the last pass: their gang "
            "waits behind an older gang of its VC (StrictFIFO).",
            registry=self.registry,
        )
        self.internal_errors = Counter(
            "topogang_internal_errors",
            "Requests that met an unexpected exception (answered with a clear error, logged), by route.",
            ["route"],
            registry=self.registry,
        )
        self.leader = Gauge(
            "topogang_leader", "1 while this replica holds the leader Lease.", registry=self.registry
        )
        self.evictions = Counter(
            "topogang_evictions",
            "Pods topogang ended, by DisruptionTarget reason and outcome (marked, unmarked, not deleted).",
            ["reason", "outcome"],
            registry=self.registry,
        )
        self.events = Counter(
            "topogang_events",
            "Kubernetes Events by reason and result (written, or suppressed as a repeat).",
            ["reason", "result"],
            registry=self.registry,
        )
        self.snapshot_hold = Histogram(
            "topogang_read_snapshot_lock_seconds",
            "How long each hold of the verbs' lock by a copy of the state for readers (inspect, "
            "cluster view, explain) lasted: one per copy, several for the first after a start or a "
            "reload, which is taken in steps; the documents are rendered from the copy outside it.",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.refused = Counter(
            "topogang_requests_refused",
            "Requests refused before any work: by route class and reason (too_many: 429 over a "
            "caller's or the route's limit; overloaded: 503 over the server's; content_type: 415; "
            "host: 421).",
            ["route", "reason"],
            registry=self.registry,
        )
        self._state: _StateCollector | None = None

    def watch_state(self, snapshot: Callable[[], StateSnapshot]) -> None:
        if self._state is not None:
            self.registry.unregister(self._state)
        self._state = _StateCollector(snapshot)
        self.registry.register(self._state)

    def render(self) -> bytes:
        return generate_latest(self.registry)
