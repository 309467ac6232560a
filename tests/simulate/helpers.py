"""Tiny clusters and hand-written jobs for the simulator's tests."""

from __future__ import annotations

from collections.abc import Iterable

from loadtest.jobmix import pods_for
from loadtest.simulate.cluster import SimCluster, shared_cluster
from loadtest.simulate.engine import RunResult, simulate
from loadtest.simulate.roster import make_policy
from loadtest.simulate.trace import Job


def jobs(*specs: tuple[str, float, float, int]) -> list[Job]:
    """Jobs from (vc, submit, duration, gpus), numbered in the order given (= submit order)."""
    return [Job(i, vc, t, d, g, tuple(pods_for(g))) for i, (vc, t, d, g) in enumerate(specs)]


def tiny(quotas: dict[str, int], nodes: int = 2, rack_size: int = 2) -> SimCluster:
    return shared_cluster(quotas, nodes=nodes, rack_size=rack_size)


def run(policy: str, cluster: SimCluster, js: Iterable[Job]) -> RunResult:
    return simulate(make_policy(policy, cluster), list(js))


def starts(result: RunResult) -> dict[int, float]:
    out = {}
    for jid, rec in sorted(result.records.items()):
        assert rec.start is not None
        out[jid] = rec.start
    return out
