"""The order in which a VC's gangs start: the oldest goes first (`topogang.vcQueueing`).

kube-scheduler takes pods of one priority oldest first, but a pod the extender turns away goes to its
unschedulable queue and the later pods go on. A VC's small gangs arriving after its big one then
take, one after another, the quota and GPUs the big gang waits for, and it can wait for days: the
simulator, run with that order (`topogang simulate --vc-queueing BestEffortFIFO`), gives VC e13805
of the shipped Philly week (32-GPU gangs behind later, smaller ones) a p95 queueing of 68.4 hours
against 12.6 on a private cluster of its quota. With `StrictFIFO` (the default, the order the
simulator's goals are measured with) a gang not yet placed waits behind the oldest gang of its VC,
at its priority or above, that waits for room it can get; `BestEffortFIFO` lets it go on, as
Kueue's ClusterQueues of that name do. Gangs of other VCs are never held back: a VC's quota is its
own.

Which gang is ahead is read from the waits the verbs keep (`Scheduler.waiting`). Only a wait for room
the gang can get holds its VC back (`Waiting.holds`, `extender.http.turned_away.holds_vc`): not a
gang that can never run, nor one waiting for bad hardware to heal, nor one that only waits behind
another (the gangs queued behind one then start together once it goes, not one requeue at a time).
One that has not been filtered for a reservation TTL holds nobody back either (its pods are gone, or
nobody asks for it), so a wait that is never asked about again cannot block its VC for good. Nor does
a gang whose namespace may not take the VC's quota (`entitlement.may_take_quota`, under the rules in
force): opportunistic gangs may name any VC, and a namespace given none must not hold a VC's own
gangs back by keeping a guest gang waiting there.

A gang's place in the queue is when its pods were created (`Holders.joined`), as the API server
wrote it: the latest `creationTimestamp` among the pods of it the verbs have read, so a gang is not
older than its newest member (creating one pod early and the rest later buys no place), and a gang
whose pods carry none (a standalone caller's) takes its place when it first waits. That is the
simulator's order (a job's submit time) and Kueue's (a Workload's creation), and it is the API
server's, not this process's: a restart or a new leader, which start with no waits, find each gang
at the place it had as soon as it is filtered again, where an order kept as "who waited first"
would put the gangs kube-scheduler happens to retry first ahead of older ones.

The gang ahead is named to the pod only when it is of the pod's own namespace; a VC shared by
several namespaces shows another namespace's gang by its size and age alone.

A namespace's bound on GPUs reserved and not yet bound (`maxReservedGpus`) keeps the same order
among the namespace's own gangs, whatever their VCs: a gang held back by it (`[TenantLimit]`) holds
its namespace's later gangs at its priority or below, so they do not take, one after another, the
bound it waits for (a gang as large as the bound goes only at a moment when none of its namespace's
gangs waits for its pods). It holds no other namespace's gangs: the bound is its namespace's own.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from config.schema import BEST_EFFORT_FIFO, STRICT_FIFO, VcQueueing
from extender.gangs.entitlement import Entitlements, may_take_quota
from extender.gangs.identity import split_key
from extender.gangs.ledger_records import wall_time
from extender.gangs.podspec import PodRequest
from extender.gangs.waiting import Waiting
from topology.decisions import WaitCode

__all__ = ["BEST_EFFORT_FIFO", "STRICT_FIFO", "Holders", "VcQueueing", "shown"]


class Holders:
    """The waits that hold their VC's later gangs back, by VC: a filter reads its own VC's few
    holders, not every waiting gang (under StrictFIFO a backed-up VC's later gangs are queued, and
    a queued gang holds nobody back). Kept beside `Scheduler.waiting` by the verbs; a holder that
    is no longer the wait recorded for its gang there is skipped."""

    def __init__(self, wall: Callable[[], float] = time.time) -> None:
        self._by_vc: dict[str, dict[str, Waiting]] = {}
        self._by_namespace: dict[str, dict[str, Waiting]] = {}  # the waits held by their namespace's bound
        self.wall = wall  # the API server's clock, which `creationTimestamp` is read on
        # when a pod's owner let it in (removed the last scheduling gate not topogang's), on `wall`'s
        # clock (Kubernetes mode: `GatedPods.let_in`): a pod kept out of the queue buys no place
        self.askable: Callable[[str], float | None] = lambda uid: None

    def joined(self, pr: PodRequest, now: float, old: Waiting | None) -> float:
        """When `pr`'s gang joined its VC's queue, on the scheduler's clock (`now`'s): its newest
        pod's creation among those read (this one's, and `old`'s, the gang's wait so far), else
        when it first waited (`old`), else now."""
        created = self._created(pr, now)
        if created is None:
            return now if old is None else old.order
        return created if old is None or old.queued is None else max(old.queued, created)

    def _created(self, pr: PodRequest, now: float) -> float | None:
        """The pod's creation on the scheduler's clock: as long before `now` as it is before the
        wall clock's now, so a pod's is the same at every read. An API server whose clock runs
        ahead of this one's shifts every pod's alike, which keeps their order. None: it has none."""
        at = None if pr.created is None else wall_time(pr.created)
        let_in = self.askable(pr.uid)
        if let_in is not None:
            at = let_in if at is None else max(at, let_in)
        return None if at is None else now - (self.wall() - at)

    def note(self, w: Waiting, old: Waiting | None = None) -> None:
        """`w` is now the gang's wait, after `old`: a holder if it holds its VC back, else no longer
        one (nor, if its spec was edited to another VC, a holder of the VC it left)."""
        if old is not None and old.vc != w.vc:
            self.drop(old.gang, old.vc)
        if w.holds:
            self._by_vc.setdefault(w.vc, {})[w.gang] = w
        else:
            self.drop(w.gang, w.vc)
        if w.reason.code is WaitCode.TENANT_LIMIT:
            self._by_namespace.setdefault(split_key(w.gang)[0], {})[w.gang] = w
        else:
            self._drop_held(w.gang)

    def _drop_held(self, gang: str) -> None:
        ns = split_key(gang)[0]
        of_ns = self._by_namespace.get(ns)
        if of_ns is not None and of_ns.pop(gang, None) is not None and not of_ns:
            del self._by_namespace[ns]

    def drop(self, gang: str, vc: str) -> None:
        of_vc = self._by_vc.get(vc)
        if of_vc is not None and of_vc.pop(gang, None) is not None and not of_vc:
            del self._by_vc[vc]
        self._drop_held(gang)

    def ahead_of(
        self,
        waiting: Mapping[str, Waiting],
        pr: PodRequest,
        now: float,
        seen_since: float,
        rules: Entitlements,
    ) -> str | None:
        """The gang `pr`'s gang waits behind (as the pod may see it named), or None: the oldest
        holder of its VC at its priority or above, seen since `seen_since`, that started waiting
        before it (the gang's own first wait, else now), and whose namespace may take the VC's quota
        under `rules` (the ones in force: a reload applies to the waits already held); or, the same
        way, the oldest gang of its own namespace held back by the namespace's bound."""
        req = pr.request
        of_vc, of_ns = self._by_vc.get(req.vc), self._by_namespace.get(pr.namespace)
        if not of_vc and not of_ns:
            return None
        first: Waiting | None = None
        for w in [*(of_vc or {}).values(), *(of_ns or {}).values()]:
            # not its own wait (older than the pod read now), nor one no longer current or seen
            if w.gang == pr.gang or w.priority < req.priority or w.last_seen < seen_since:
                continue
            if waiting.get(w.gang) is not w:
                continue
            # a guest of the VC (its namespace may not take the VC's quota) has no place in its queue
            if w.holds and not may_take_quota(rules.tenant(split_key(w.gang)[0]), w.vc):
                continue
            if first is None or (w.order, w.gang) < (first.order, first.gang):
                first = w
        # the pod's creation time is read only when some gang could be ahead of it
        if first is None or (first.order, first.gang) >= (
            self.joined(pr, now, waiting.get(pr.gang)),
            pr.gang,
        ):
            return None
        return shown(first, pr.namespace, now)


def shown(w: Waiting, namespace: str, now: float) -> str:
    """The gang ahead as a pod of `namespace` sees it: by name in its own namespace, else unnamed."""
    if split_key(w.gang)[0] == namespace:
        return f"gang {w.gang}"
    return f"an older gang of another namespace ({w.pods} pods, waiting {max(0.0, now - w.since):.0f} s)"
