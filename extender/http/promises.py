"""Slots promised for a while to the pod that filter or prioritize pointed at them.

kube-scheduler binds one pod at a time, but filters the next member while the last is still being
bound: without a promise the next member would be steered to the same slot and lose it at bind.
A promise lasts `TENTATIVE_SECONDS` and binds nothing: a claim keeps it, a gang's release drops its
promises, and any left past their time go at expiry.
"""

from __future__ import annotations

from extender.gangs.podspec import PodRequest
from extender.http.podcache import POD_CACHE_SIZE
from topology.asks import Slots
from topology.decisions import PodPlacement

TENTATIVE_SECONDS = 10.0  # how long a slot stays promised to the pod prioritize pointed at it
MAX_PROMISES = 4 * POD_CACHE_SIZE // 10  # more than this, and the stale ones are dropped at once


class Promises:
    """(gang, slot) -> (pod UID, when promised)."""

    def __init__(self) -> None:
        self._held: dict[tuple[str, int], tuple[str, float]] = {}

    def __len__(self) -> int:
        return len(self._held)

    def promise(self, pr: PodRequest, answer: Slots, now: float) -> PodPlacement | None:
        """The slot this pod should take (its rank's slot when free, as the core's answer names
        it), promised to it for a while so the next member is steered elsewhere while this one is
        being bound."""
        slots = answer.slots
        if not slots:
            return None
        gang = pr.gang
        for p in slots:
            held = self._held.get((gang, p.slot))
            if held is not None and held[0] == pr.uid:
                self._held[(gang, p.slot)] = (pr.uid, now)
                return p
        order = list(slots)
        ranked = answer.rank_slot
        if ranked is not None:
            order.sort(key=lambda p: (p.slot != ranked, p.slot))
        choice = order[0]
        for p in order:
            held = self._held.get((gang, p.slot))
            if held is None or held[0] == pr.uid or now - held[1] > TENTATIVE_SECONDS:
                choice = p
                break
        self._held[(gang, choice.slot)] = (pr.uid, now)
        if len(self._held) > MAX_PROMISES:
            self.expire(now)
        return choice

    def claimed(self, gang: str, slot: int) -> None:
        """The slot is claimed: a promise has nothing left to keep."""
        self._held.pop((gang, slot), None)

    def drop_gang(self, gang: str) -> None:
        """The gang's reservation is gone, and its promises with it."""
        self._held = {k: v for k, v in self._held.items() if k[0] != gang}

    def expire(self, now: float) -> None:
        """Promises past their time bind nothing; the gang of one may have gone inside the core
        (outbid by a preemptor) without `drop_gang` hearing of it."""
        self._held = {k: v for k, v in self._held.items() if now - v[1] <= TENTATIVE_SECONDS}
