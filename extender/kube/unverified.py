"""Bound pods whose bind info is not topogang's decision, and the GPUs they claim.

Recovery (`extender.kube.recovery`) does not adopt such a pod: it holds the GPUs the pod claims as
a one-pod gang with no quota and no priority (`hold_unverified`), after the genuine gangs, so a
claim copied from a running pod takes none of that pod's GPUs. The claim still stands: the pod
runs where it says, and once the genuine pod on those GPUs is gone they are in use by it alone.
`Claims` keeps each claim that is not wholly held and holds it again each time the scheduler's lock
is taken to change the state, before anything is placed, and between a filter's release of a gang
and its placement (`extender.http.filtercall`), so nobody is placed on GPUs such a pod uses.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from extender.gangs.identity import split_key
from extender.gangs.podspec import PodRequest
from extender.http.verbs import Scheduler
from topology.core import Core
from topology.decisions import OPPORTUNISTIC_PRIORITY, AdoptedPod, GangRequest, Member

log = logging.getLogger("topogang.kube")
UNVERIFIED = "unverified"


@dataclass(frozen=True, slots=True)
class Unverified:
    """A bound pod whose bind info topogang did not write: held, not adopted."""

    uid: str
    namespace: str
    name: str
    node: str
    gpus: tuple[int, ...]
    reason: str

    @property
    def gang(self) -> str:
        """The gang that holds its GPUs: a colon no namespace can hold, so no tenant's key meets it."""
        return f"{UNVERIFIED}:{self.namespace}/{self.name}"


def hold_unverified(core: Core, u: Unverified, now: float) -> None:
    """Hold an unverified pod's GPUs until it is gone: a one-pod gang, opportunistic (no quota,
    no priority), being evicted (it never expires, is no preemption victim, frees as the pod goes).
    Nothing evicts it: the admin decides (the Warning Event and /v1/inspect name it). GPUs it
    claims that another gang holds are left to it (`Claims` holds them once they free)."""
    vcs = core.vc_names()
    if not vcs or not u.gpus:
        return
    req = GangRequest(
        name=u.gang,
        vc=vcs[0],
        members=(Member(1, len(u.gpus)),),
        priority=OPPORTUNISTIC_PRIORITY,
    )
    core.adopt(req, [AdoptedPod(u.uid, u.node, u.gpus, u.name)], now, evicting=True)


def holder(core: Core, claims: Claims, uid: str, cached: PodRequest | None) -> tuple[str, str] | None:
    """The namespace and name of a pod the core holds GPUs for, or whose claim waits: its cached
    request's, else read from its slot (the name its bind or adoption recorded, the namespace its
    gang's name carries), since not every such pod's request is cached (a task shaped by a Framework
    object not read yet is read afresh each time). A relist asks the API server whether it is gone."""
    if cached is not None:
        return cached.namespace, cached.name
    u = claims.contested.get(uid)
    if u is not None:
        return u.namespace, u.name
    g = core.gang_of_pod(uid)
    slot = g.slot_of(uid) if g is not None else None
    if g is None or slot is None or not slot.pod_name:
        return None
    return split_key(g.name.removeprefix(f"{UNVERIFIED}:"))[0], slot.pod_name


def held_gpus(core: Core, gang: str) -> frozenset[int]:
    """The GPU indices the named gang's slots hold."""
    g = core.gang(gang)
    return frozenset(gpu for s in (g.slots if g is not None else ()) for gpu in core.slot_place(s)[1])


class Claims:
    """Unverified pods whose claimed GPUs another gang held when they were held, by UID."""

    def __init__(self) -> None:
        self.contested: dict[str, Unverified] = {}
        self.free_then: dict[str, int] = {}  # uid -> its node's free GPUs right after its last hold

    @classmethod
    def guarding(cls, s: Scheduler) -> Claims:
        """Claims that the scheduler holds again each time its lock is taken to change the state,
        before anything is placed: GPUs freed by any release (a pod gone, a reservation expired)
        go to the claim first."""
        claims = cls()

        def before_the_verbs() -> None:
            if claims.contested:
                claims.freed(s.core, s.clock())

        s.lock.on_acquire = before_the_verbs
        s.lock.pending = lambda: bool(claims.contested)
        return claims

    def tell(
        self, core: Core, held: Iterable[Unverified], on_unverified: Callable[[Unverified], None]
    ) -> None:
        """Recovery just held these: each is logged and told (`on_unverified`), and kept while
        contested."""
        for u in held:
            log.warning(
                "pod %s/%s claims GPUs %s of %s without topogang's decision (%s): held, not adopted",
                u.namespace,
                u.name,
                list(u.gpus),
                u.node,
                u.reason,
            )
            on_unverified(u)
            self.held(core, u)

    def held(self, core: Core, u: Unverified) -> None:
        """`u` was just held: kept while some GPU it claims is another gang's, to be held again."""
        missing = frozenset(u.gpus) - held_gpus(core, u.gang)
        if not missing:
            self.gone(u.uid)
            return
        if u.uid not in self.contested:
            log.warning(
                "pod %s/%s claims GPUs %s of %s that another gang holds: held for it once they free",
                u.namespace,
                u.name,
                sorted(missing),
                u.node,
            )
        self.contested[u.uid] = u
        self.free_then[u.uid] = core.node_fill(u.node)[0]

    def gone(self, uid: str) -> None:
        self.contested.pop(uid, None)
        self.free_then.pop(uid, None)

    def freed(self, core: Core, now: float) -> None:
        """GPUs may have freed: each contested claim whose node has more free GPUs than right after
        its last hold (which took every free one it claims) is held again, whole where it can be
        (its hold let go and taken again at once, under the scheduler's lock)."""
        for uid, u in list(self.contested.items()):
            if core.node_fill(u.node)[0] <= self.free_then[uid]:
                continue
            core.release_pod(uid, now)
            hold_unverified(core, u, now)
            self.held(core, u)
