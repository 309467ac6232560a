"""Promotions made durable: the bind info of a promoted gang's pods, re-written with its quota cells.

The core promotes an opportunistic gang that asked for it (`promoteWhenQuota`) inside a release
call (`topology/promotion.py`); from then on it is guaranteed, in memory. What a restart reads back
is the pods' bind info (`extender.gangs.bindinfo`), whose `preassignedCellTypes` were written empty
at bind: until they name the quota cells the gang now holds, a restart brings it back opportunistic
(`recovery.was_promoted` reads them). So the scheduler's periodic pass (`Scheduler.expire`, every
few seconds, on the leader only) takes the gangs the core promoted since the last pass
(`Core.take_promoted`) and re-writes each bound pod's annotations through the mode's binder: a merge
patch of the pod in Kubernetes mode (`KubeBinder.annotate`), the in-memory record standalone.

A write that fails is logged and stays pending for the next pass; nothing else waits on it. A gang
released meanwhile is dropped. A written gang that a lazy preemption downgrades later is written
again, with the empty cell types it then has, so a restart does not hand it quota its preemptor holds.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Protocol, runtime_checkable

from extender.gangs.bindsig import BindSigner, signed_bind_annotations
from extender.gangs.ledger import GangLedger
from extender.http.podcache import PodCache
from extender.http.ports import BindTarget, FencedError
from extender.ops.metrics import Metrics
from topology.core import Core
from topology.decisions import Bind

log = logging.getLogger("topogang.extender")

Locate = Callable[[str], "tuple[str, str] | None"]  # pod UID -> (namespace, name)


@runtime_checkable
class Annotator(Protocol):
    """A binder that can re-write a bound pod's annotations."""

    async def annotate(self, target: BindTarget, annotations: Mapping[str, str]) -> None: ...


Write = tuple[str, BindTarget, dict[str, str]]  # gang, pod, annotations


def known_names(pods: PodCache, ledger: GangLedger) -> Locate:
    """A pod's namespace and name from what the scheduler was told of it (filter, or the ledger)."""

    def locate(uid: str) -> tuple[str, str] | None:
        pr = pods.get(uid)
        if pr is not None:
            return pr.namespace, pr.name
        f = ledger.pods.get(uid)
        return (f.namespace, f.name) if f is not None else None

    return locate


class PromotionWriter:
    """Gangs whose pods' bind info must be re-written, and those written as promoted."""

    def __init__(self, binder: object, *locate: Locate, metrics: Metrics) -> None:
        self.annotator = binder if isinstance(binder, Annotator) else None
        self.writes = metrics.promotion_writes  # per pod written, by result
        self.pending: dict[str, None] = {}  # insertion-ordered: oldest promotion first
        self.written: set[str] = set()  # gangs whose pods' records say guaranteed
        self.failures = 0
        self.locate = list(locate)  # where a pod UID's namespace and name are known, first hit wins
        self._unnamed: set[str] = set()  # gangs of the last `due` with a pod it could not name
        # signs the bind info of every Binding (`Scheduler.bind`) and every write-back (`bindsig`)
        self.signer: BindSigner | None = None

    def due(self, core: Core) -> list[Write]:
        """The annotations to write now (the caller holds the scheduler lock)."""
        promoted = core.take_promoted()
        if self.annotator is None:  # a binder that cannot re-write (a test's): nothing to keep
            return []
        self.pending.update(dict.fromkeys(promoted))
        self._unnamed.clear()
        for name in sorted(self.written):
            g = core.gang(name)
            if g is None:
                self.written.discard(name)
            elif g.priority < 0:  # downgraded again since: its records must say so
                self.pending[name] = None
        out: list[Write] = []
        for name in list(self.pending):
            g = core.gang(name)
            if g is None:
                del self.pending[name]
                continue
            placement = core.placement_of(g)
            where = {p.slot: p for p in placement.pods}
            bound = [sl for sl in g.slots if sl.pod_uid is not None and not sl.finished and sl.index in where]
            if not bound:  # nothing left whose record could say anything
                del self.pending[name]
                continue
            for sl in bound:
                p = where[sl.index]
                assert sl.pod_uid is not None
                at = self._locate(sl.pod_uid)
                if at is None:
                    log.warning("gang %s: pod %s is not known by name; its bind info waits", name, sl.pod_uid)
                    self._unnamed.add(name)
                    continue
                bind = Bind(sl.pod_uid, sl.index, p.node, p.gpu_indices, placement)
                ann = signed_bind_annotations(self.signer, bind, sl.key)
                out.append((name, BindTarget(at[0], at[1], sl.pod_uid), ann))
        return out

    def _locate(self, uid: str) -> tuple[str, str] | None:
        for fn in self.locate:
            got = fn(uid)
            if got is not None:
                return got
        return None

    async def write(self, writes: list[Write], core: Core) -> None:
        """Write them; a gang all of whose pods were written leaves `pending`."""
        if self.annotator is None:
            return
        failed = set(self._unnamed)
        for gang, target, patch in writes:
            try:
                await self.annotator.annotate(target, patch)
                self.writes.labels("ok").inc()
            except FencedError:
                return  # not this replica's to write now (a standby): its passes as leader write them
            except Exception as exc:  # the next pass tries again
                self.failures += 1
                self.writes.labels("failed").inc()
                failed.add(gang)
                pod = f"{target.namespace}/{target.name}"
                log.warning("gang %s: re-writing the bind info of %s failed: %s", gang, pod, exc)
        for gang in {w[0] for w in writes} - failed:
            self.pending.pop(gang, None)
            g = core.gang(gang)
            if g is not None and g.priority >= 0:
                self.written.add(gang)
                log.info("gang %s: promoted; its pods' bind info now names its quota cells", gang)
            else:
                self.written.discard(gang)
