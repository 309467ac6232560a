"""GPUs held by pods that are not topogang's.

topogang's kube-scheduler profile leaves `nvidia.com/gpu` to the extender (`ignoredByScheduler`), so
nothing in that profile counts a device-plugin GPU that a pod without topogang's opt-in holds: one
the default scheduler placed, or one created with `spec.nodeName`. The kubelet has given those GPUs
away all the same, and a topogang pod bound onto them fails with UnexpectedAdmissionError. So, in
Kubernetes mode, every bound, not finished pod that is not topogang's and asks for the GPU resource
on a node of the config takes that many GPUs of its node out of topogang's hands: the highest-
numbered GPUs no gang holds are marked bad, through the same call as an allocatable shortfall, until
the pod finishes or is deleted. The device plugin does not say which GPUs it gave the pod; any free
ones stand for them, since only their number matters to what fits.

This module is the bookkeeping (which pod holds how many GPUs where, counted as topogang counts its
own pods: `extender.gangs.optin.pod_gpus`) and the choice of GPUs; the sync (`extender.kube.sync`)
feeds it pod events and applies the choice to the core.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from extender.kube import pods as kpods


@dataclass(frozen=True, slots=True)
class Held:
    """A pod that is not topogang's, holding `gpus` GPUs of `node`."""

    uid: str
    namespace: str
    name: str
    node: str
    gpus: int


def highest(unheld: Iterable[int], gpus: int) -> frozenset[int]:
    """The `gpus` highest GPU indices of `unheld` (fewer if there are not as many)."""
    return frozenset(sorted(unheld, reverse=True)[: max(0, gpus)])


class OutsidePods:
    """The pods that are not topogang's and hold GPUs of the config's nodes, by UID."""

    def __init__(self) -> None:
        self.held: dict[str, Held] = {}
        self.per_node: dict[str, int] = {}  # node -> GPUs its outside pods hold
        self.marked: dict[str, frozenset[int]] = {}  # node -> GPU indices marked bad for them
        self.short: set[str] = set()  # nodes where fewer GPUs were free than such pods hold

    def hold(self, pod: Mapping[str, Any], node: str, gpus: int) -> Held | None:
        """Record a bound pod holding `gpus` GPUs of `node`; the record when it is new, else None."""
        uid = kpods.uid(pod)
        if uid in self.held:
            return None
        held = Held(uid, kpods.namespace(pod), kpods.name(pod), node, gpus)
        self.held[uid] = held
        self.per_node[node] = self.per_node.get(node, 0) + gpus
        return held

    def forget(self, uid: str) -> Held | None:
        """The pod is finished or gone: its record, if it had one."""
        held = self.held.pop(uid, None)
        if held is not None:
            left = self.per_node.get(held.node, 0) - held.gpus
            if left > 0:
                self.per_node[held.node] = left
            else:
                self.per_node.pop(held.node, None)
        return held

    def gpus_on(self, node: str) -> int:
        return self.per_node.get(node, 0)

    def choose(self, node: str, unheld: Iterable[int]) -> frozenset[int]:
        """The GPUs of `node` to mark bad now, out of those no gang holds; remembered for the
        reads, and the node noted as short when there were not enough."""
        gpus = self.gpus_on(node)
        picks = highest(unheld, gpus)
        if picks:
            self.marked[node] = picks
        else:
            self.marked.pop(node, None)
        if len(picks) < gpus:
            self.short.add(node)
        else:
            self.short.discard(node)
        return picks

    def pods_on(self, node: str) -> list[Held]:
        return [h for h in self.held.values() if h.node == node]
