"""Topogang's pods that run on nodes the config does not have, by gang: the rest of an
all-or-nothing gang, evicted once a member of it goes.

A confirmed edit that takes out a node under a whole gang lets the gang run on (`reconfigure`, and
a confirmed start): its pods there run outside the scheduler's books, members of their gang all the
same. Once a member of such a gang goes (deleted, failed; not one that succeeded), the gang is not
whole, and the members outside can never be part of a placement again: no reservation TTL reaches
them, and a placement made afresh waits for members that are bound already. So the sync keeps them
by gang and evicts them when a member of their gang goes, as the TTL evicts a partial gang's held
members. Only bind info recovery would adopt counts (signed by this extender's key, naming a gang
of the pod's own namespace): a tenant's forged annotation names no other team's gang.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from extender.gangs import disruption
from extender.gangs.bindinfo import pod_bind_info
from extender.gangs.bindsig import BindSigner, recovery_verifier
from extender.gangs.identity import split_key
from extender.http.ports import Evictor
from extender.http.verbs import Scheduler
from extender.kube import pods as kpods


class Sync(Protocol):
    """What the index reads of the sync (`ClusterSync`): its scheduler, the pods it watches, the
    key bind info is signed with and how it evicts."""

    s: Scheduler
    pods: dict[str, Mapping[str, Any]]
    signer: BindSigner | None
    evictor: Evictor


class OffConfig:
    """The index, kept by the sync from the pods it sees (`saw`) and the nodes a reload changes."""

    def __init__(self, sync: Sync) -> None:
        self.sync = sync
        self.by_gang: dict[str, set[str]] = {}
        self.gang_of: dict[str, str] = {}

    def saw(self, pod: Mapping[str, Any]) -> None:
        """A topogang pod as it is now: kept while bound, unfinished, on a node the config lacks."""
        uid, node = kpods.uid(pod), kpods.node_name(pod)
        if node is None or kpods.finished(pod) or self.sync.s.core.has_node(node):
            self.forget(uid)
        elif uid not in self.gang_of and (gang := self._gang(pod)) is not None:
            self.gang_of[uid] = gang
            self.by_gang.setdefault(gang, set()).add(uid)

    def _gang(self, pod: Mapping[str, Any]) -> str | None:
        verify = recovery_verifier(self.sync.signer, (), adopt_unsigned=False)  # as after the start
        if verify is not None and verify(pod) is not None:
            return None
        try:
            info = pod_bind_info(kpods.pod_annotations(pod))
        except ValueError:
            return None
        if info is None or info.gang is None or split_key(info.gang)[0] != kpods.namespace(pod):
            return None
        return info.gang

    def forget(self, uid: str) -> None:
        gang = self.gang_of.pop(uid, None)
        if gang is not None:
            left = self.by_gang[gang]
            left.discard(uid)
            if not left:
                del self.by_gang[gang]

    async def going(self, uid: str, *, succeeded: bool) -> None:
        """Pod `uid` goes (called before its slot is released): unless it succeeded, its gang is not
        whole any more, and the gang's pods outside the config are evicted. They leave the index
        now: one whose deletion fails is kept, and tried again, by the sync's retry book
        (`extender.kube.eviction_retry`), not by a next member's going."""
        gang = self.gang_of.get(uid)
        if gang is None and (held := self.sync.s.core.gang_of_pod(uid)) is not None:
            gang = held.name
        self.forget(uid)
        if succeeded or gang not in self.by_gang:
            return
        rest = sorted(self.by_gang.pop(gang))
        for other in rest:
            self.gang_of.pop(other, None)
        await self.sync.evictor(rest, disruption.not_whole(gang))

    def nodes_changed(self, gone: Iterable[str], added: Iterable[str]) -> None:
        """A reload took out `gone` (their pods run outside now) and described `added` (theirs are
        adopted, `node_changes`)."""
        gone, added = set(gone), set(added)
        for pod in list(self.sync.pods.values()):
            node = kpods.node_name(pod)
            if node in gone or node in added:
                self.saw(pod)
