"""Letting go of a gang whose job went before it started: every pod deleted before any was bound,
or a newer framework attempt superseding it. The verbs call these under their lock."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol

from extender.gangs import disruption
from extender.http.podcache import PodCache
from extender.http.ports import Evictor
from extender.ops.background import spawn
from topology.core import Core
from topology.decisions import Released

log = logging.getLogger("topogang.extender")


class Holder(Protocol):
    """What letting go reads of the verbs' state."""

    @property
    def core(self) -> Core: ...

    pods: PodCache
    evictor: Evictor | None


def abandoned(s: Holder, gang: str, deleted: str) -> Released | None:
    """The reservation (or preemption) of a gang none of whose pods is bound or known alive any
    more: the job was deleted before it started, so its cells go now rather than at its TTL, and
    victims of its preemption are spared. A pod of it seen later simply places the gang afresh."""
    g = s.core.gang(gang)
    if g is None or any(slot.pod_uid is not None or slot.finished for slot in g.slots):
        return None
    if s.pods.others_in(gang, deleted):
        return None
    log.info("gang %s: every pod deleted before any was bound; reservation released", gang)
    return s.core.delete_gang(gang)


def superseded(s: Holder, released: Sequence[Released], old: str, new: str) -> None:
    """A pod of a newer framework attempt arrived: the older attempt's gang went (the filter's
    question let it go), and any of its pods still holding cells are evicted."""
    for r in released:
        if r.gang != old:
            continue
        log.info("gang %s is superseded by %s; released", old, new)
        if r.evict_pod_uids and s.evictor is not None:
            spawn(s.evictor(r.evict_pod_uids, disruption.superseded(new)))
