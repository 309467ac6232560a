"""Read-only views for the service: HiveD-shaped inspect documents, usage numbers, node fill.

The documents built from every cell come from `topology.inspect` (inside the core's package, the
one place that reads its cell arrays); this module adds the gang and waiting documents, built from
`Core` queries. Nothing here mutates anything; callers hold the scheduler lock.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from extender.gangs.waiting import Waiting
from extender.ops.metrics import StateSnapshot
from topology.core import Core
from topology.inspect import cluster_leaves as cluster_leaves
from topology.inspect import gangs_by_phase
from topology.inspect import lca_type as lca_type
from topology.inspect import level_usage as level_usage
from topology.inspect import node_unheld_gpus as node_unheld_gpus
from topology.inspect import physical_cluster as physical_cluster
from topology.inspect import vc_usage as vc_usage
from topology.inspect import virtual_clusters as virtual_clusters
from topology.reservations import Gang, GangPhase


# ------------------------------------------------------------------------------------ small reads
def node_fill(core: Core, node: str) -> tuple[int, int]:
    """(free healthy GPUs, GPUs) of a node; (0, 0) for a node the config does not have."""
    return core.node_fill(node)


def has_node(core: Core, node: str) -> bool:
    return core.has_node(node)


# ------------------------------------------------------------------------------------ HiveD shapes
def affinity_group(core: Core, gang: Gang, now: float) -> dict[str, Any]:
    """HiveD's `AffinityGroup` for a gang with a reservation, plus topogang's slot detail."""
    placement = core.placement_of(gang)
    physical: dict[str, list[int]] = {}
    for p in placement.pods:
        physical.setdefault(p.node, []).extend(p.gpu_indices)
    state = {GangPhase.BOUND: "Allocated", GangPhase.PREEMPTING: "Preempting"}.get(gang.phase, "Reserved")
    slots = []
    for s, p in zip(gang.slots, placement.pods, strict=True):
        slot: dict[str, Any] = {"slot": s.index, "node": p.node, "leafCellIndices": list(p.gpu_indices)}
        if s.key is not None:
            slot["slotKey"] = s.key
        slot["podUID"] = s.pod_uid
        if s.pod_name is not None:
            slot["podName"] = s.pod_name
        if s.finished:
            slot["finished"] = True
        slots.append(slot)
    req = gang.request
    asked: dict[str, Any] = {"priority": req.priority}  # what the gang asked for (`topogang diff --against`)
    if req.leaf_type is not None:
        asked["leafCellType"] = req.leaf_type
    if req.pinned_cell_id is not None:
        asked["pinnedCellId"] = req.pinned_cell_id
    if req.promote_when_quota:
        asked["promoteWhenQuota"] = True
    status: dict[str, Any] = {
        "vc": gang.request.vc,
        "priority": gang.priority,
        "request": asked,
        "state": state,
        "phase": gang.phase.value,
        "physicalPlacement": physical,
        "allocatedPods": [s.pod_uid for s in gang.slots if s.pod_uid is not None],
        "cellChain": placement.chain,
        "lcaLevel": placement.lca_level,
        "lcaCellType": lca_type(core, placement.chain, placement.lca_level),
        "slots": slots,
    }
    if gang.downgraded_by is not None:  # HiveD's field; the time is not kept, the preemptor is
        status["lazyPreemptionStatus"] = {"preemptor": gang.downgraded_by}
    pending = getattr(gang, "pending", None)
    if pending:
        status["leafCellsAwaitingVictims"] = len(pending)
    if gang.deadline is not None:
        status["reservationExpiresInSeconds"] = round(max(0.0, gang.deadline - now), 3)
    if gang.history:
        status["history"] = list(gang.history)
    return {"metadata": {"name": gang.name}, "status": status}


def waiting_group(w: Waiting, now: float) -> dict[str, Any]:
    return {
        "metadata": {"name": w.gang},
        "status": {
            "vc": w.vc,
            "priority": w.priority,
            "state": "Waiting",
            "pods": w.pods,
            "waitReason": w.reason.to_dict(),
            "waitingSeconds": round(max(0.0, now - w.since), 3),
        },
    }


def waiting_gangs(waiting: Mapping[str, Waiting]) -> list[Waiting]:
    """The gangs the verbs last told to wait (filter or preempt said no), by name."""
    return [w for _, w in sorted(waiting.items())]


def state_snapshot(core: Core, waiting: Mapping[str, Waiting], ready: bool) -> StateSnapshot:
    """What the state gauges show (`Metrics.watch_state`): gangs by phase, VC and level use."""
    phases = {**gangs_by_phase(core), "Waiting": len(waiting)}
    usage = vc_usage(core)
    for row in usage.values():
        row["free"] = max(0, row["quota"] - row["used"])
    return StateSnapshot(phases, usage, level_usage(core), cluster_leaves(core), ready)


def affinity_groups(core: Core, waiting: Mapping[str, Waiting], now: float) -> list[dict[str, Any]]:
    """HiveD's affinity-group list: the placed gangs, then those that wait and are not placed."""
    out = [affinity_group(core, g, now) for g in core.gangs()]
    placed = {g.name for g in core.gangs()}
    out += [waiting_group(w, now) for name, w in sorted(waiting.items()) if name not in placed]
    return out


def affinity_group_named(
    core: Core, waiting: Mapping[str, Waiting], name: str, now: float
) -> dict[str, Any] | None:
    g = core.gang(name)
    if g is not None:
        return affinity_group(core, g, now)
    w = waiting.get(name)
    return waiting_group(w, now) if w is not None else None


def summary(core: Core, waiting: Mapping[str, Waiting], ready: bool) -> dict[str, Any]:
    """`/v1/inspect/summary`: nodes, GPUs, gangs by phase and VC use, at a glance."""
    total, free, bad = cluster_leaves(core)
    snap = state_snapshot(core, waiting, ready)
    return {
        "ready": ready,
        "nodes": len(core.node_names()),
        "gpus": {"total": total, "free": free, "bad": bad},
        "gangs": snap.gangs_by_phase,
        "virtualClusters": snap.vc_gpus,
    }
