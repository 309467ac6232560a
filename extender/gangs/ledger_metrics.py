"""The gang ledger's Prometheus gauges (registered beside the scheduler's own, `extender.ops.metrics`)."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from extender.gangs.ledger import GangLedger


class LedgerCollector(Collector):
    """Prometheus gauges of the ledger: gangs by ledger phase and long-poll waiters. Collected while
    /metrics holds the scheduler lock, so in time independent of the number of gangs' states."""

    def __init__(self, ledger: GangLedger) -> None:
        self.ledger = ledger

    def collect(self) -> Iterable[Metric]:
        gangs = GaugeMetricFamily(
            "topogang_ledger_gangs", "Gangs in the ledger, by ledger phase.", labels=["phase"]
        )
        for phase, n in self.ledger.phase_counts().items():
            gangs.add_metric([phase], n)
        yield gangs
        waiters = GaugeMetricFamily("topogang_ledger_waiters", "Long-polls of /v1/gangs waiting now.")
        waiters.add_metric([], self.ledger.waiters)
        yield waiters
