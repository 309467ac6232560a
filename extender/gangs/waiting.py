"""A gang the scheduler is keeping waiting: what the ledger, the snapshots and the read views say of it.

It lives with the gangs, not the HTTP views, because the ledger records it too and the ledger sits below
the routes that serve it.
"""

from __future__ import annotations

from dataclasses import dataclass

from extender.gangs.podspec import PodRequest
from topology.decisions import WaitReason


@dataclass(frozen=True, slots=True)
class Waiting:
    """A gang that has no reservation because its last filter or preempt said wait."""

    gang: str
    vc: str
    priority: int
    pods: int
    reason: WaitReason
    since: float
    last_seen: float
    holds: bool = False  # it waits for room it can get: later gangs of its VC wait behind it (`vc_order`)
    # its place in its VC's queue, on the scheduler's clock (`vc_order.Holders.joined`); None: `since`
    queued: float | None = None

    @classmethod
    def of(
        cls, pr: PodRequest, reason: WaitReason, since: float, now: float, holds: bool, queued: float
    ) -> Waiting:
        """The wait of `pr`'s gang, seen waiting `now` (its VC, priority and size are its request's)."""
        req = pr.request
        return cls(pr.gang, req.vc, req.priority, req.pod_count, reason, since, now, holds, queued)

    @property
    def order(self) -> float:
        """When the gang joined its VC's queue: the key of its VC's order (`vc_order`)."""
        return self.since if self.queued is None else self.queued
