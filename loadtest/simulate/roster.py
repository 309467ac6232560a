"""Every policy `topogang simulate` can run, by name (the private replay is built by the engine)."""

from __future__ import annotations

from config.schema import STRICT_FIFO
from loadtest.simulate.cluster import SimCluster
from loadtest.simulate.kueue import KueueLikePolicy
from loadtest.simulate.policies import CorePolicy, ElasticFirstFitPolicy, FirstFitPolicy, Policy


def make_policy(name: str, cluster: SimCluster, vc_queueing: str = STRICT_FIFO) -> Policy:
    """`vc_queueing`: topogang's `topogang.vcQueueing` (the other policies keep their own order)."""
    if name == "topogang":
        return CorePolicy(cluster, borrowing=True, vc_queueing=vc_queueing)
    if name == "hived-like":
        return CorePolicy(cluster, borrowing=False)
    if name == "first-fit":
        return FirstFitPolicy(cluster)
    if name == "first-fit-elastic":
        return ElasticFirstFitPolicy(cluster)
    if name == "kueue-like":
        return KueueLikePolicy(cluster)
    raise ValueError(f"unknown policy {name!r}")
