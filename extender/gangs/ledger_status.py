"""A gang's phase and its `GangStatus` document, derived afresh from the core and the edge's facts.

Nothing is stored here: the phase is read from the core's gang (slots claimed, finished) and the
ledger's member facts (Bindings in flight, pod IPs, deletions) each time, so a change nobody
reported still shows up at the next read (`GangLedger.refresh`).
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from typing import Any

from config.untrusted import whole_number
from extender.gangs.ledger_records import (
    API_VERSION,
    Counts,
    Known,
    Phase,
    PodFacts,
    Record,
    WaitingOf,
    rfc3339,
)
from topology.core import Core
from topology.decisions import WaitCode
from topology.inspect import lca_type
from topology.reservations import Gang, GangPhase


def evaluate(
    core: Core,
    rec: Record,
    waiting: WaitingOf,
    pods: Mapping[str, PodFacts],
    inflight: AbstractSet[str],
    *,
    gang: Gang | None = None,
    known: Known | None = None,
) -> tuple[Phase, Counts, str, bool]:
    """(phase, counts, reason, neverFits) of a gang now (`known`: what the core just answered of
    it, read instead of asking again)."""
    if rec.tombstone is not None:
        return Phase.EXPIRED, Counts(expected=rec.expected), rec.reason, False
    g = gang or (known.gang if known is not None else core.gang(rec.gang))
    if g is not None:
        rec.last_gang = g
    if g is None:
        counts = Counts(expected=rec.expected)
        if rec.user_error is not None:
            return Phase.PENDING, counts, rec.user_error, True
        w = waiting(rec.gang)
        if w is None:
            return Phase.PENDING, counts, "waiting for a member to be filtered", False
        text = f"[{w.reason.code.value}] {w.reason.message}"
        quota = known.vc_quota if known is not None and known.vc_quota is not None else core.vc_quota(rec.vc)
        too_big = not rec.opportunistic and rec.leaf_total > quota
        never = w.reason.code is WaitCode.INSUFFICIENT_QUOTA and too_big  # the reason says so too
        return Phase.PENDING, counts, text, never
    counts = Counts(expected=len(g.slots))
    if g.phase is GangPhase.PREEMPTING:
        text = f"[{WaitCode.PREEMPTING.value}] waiting for {len(g.victims)} preempted gangs to leave"
        return Phase.PENDING, counts, text, False
    counts.reserved = counts.expected
    deleting = False
    for s in g.slots:
        if s.pod_uid is None:
            if s.finished:
                counts.bound += 1
                counts.with_ip += 1
            continue
        if s.pod_uid in inflight:
            counts.binding += 1
            continue
        counts.bound += 1
        facts = pods.get(s.pod_uid)
        if facts is not None and facts.deleting:
            deleting = True
        elif facts is not None and facts.ip:
            counts.with_ip += 1
    claimed = counts.bound + counts.binding
    if rec.was_bound and (claimed < counts.expected or deleting):
        lost = counts.expected - claimed
        what = f"{lost} member(s) lost" if lost else "a member is being deleted"
        return Phase.BROKEN, counts, f"{what} after the gang was bound; waiting for the retry", False
    if counts.binding:
        return Phase.BINDING, counts, "", False
    if counts.bound == counts.expected:
        if counts.with_ip == counts.expected and not deleting:
            return Phase.READY, counts, "", False
        return Phase.BOUND, counts, "waiting for every member's pod IP", False
    return Phase.RESERVED, counts, f"{counts.bound} of {counts.expected} members bound", False


def document(
    core: Core,
    rec: Record,
    waiting: WaitingOf,
    pods: Mapping[str, PodFacts],
    inflight: AbstractSet[str],
    offset: float,
    *,
    gang: Gang | None = None,
) -> dict[str, Any]:
    """The `GangStatus` document of a gang (`gang`: the core's gang as it was just before its
    release, for a tombstone; `offset`: wall clock minus the monotonic one)."""
    if rec.tombstone is not None:
        return dict(rec.tombstone)
    phase, counts, reason, never = evaluate(core, rec, waiting, pods, inflight, gang=gang)
    g = gang or core.gang(rec.gang)
    doc: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": "GangStatus",
        "gang": {**rec.ident.to_dict(), "gang": rec.gang},
        "namespace": rec.ident.namespace,
        "name": rec.ident.name,
        "phase": phase.value,
        "ready": phase is Phase.READY,
        "reason": reason,
        "neverFits": never,
        "expected": counts.expected,
        "reserved": counts.reserved,
        "bound": counts.bound,
        "withPodIP": counts.with_ip,
        "placement": None,
        "members": [],
        "reservedAt": None,
        "boundAt": rfc3339(rec.bound_at) if phase in (Phase.BOUND, Phase.READY) else None,
        "readyAt": rfc3339(rec.ready_at) if phase is Phase.READY else None,
        "expiresAt": None,
        "resourceVersion": str(rec.version),
    }
    if g is None:
        doc["members"] = [_pending_member(pods[u]) for u in sorted(rec.pods) if u in pods]
        return doc
    placement = core.placement_of(g)
    chain = placement.chain
    doc["placement"] = {
        "virtualCluster": g.request.vc,
        "chain": chain,
        "lcaCellType": lca_type(core, chain, g.lca_level),
        "nodes": list(placement.nodes),
        "priority": g.priority,
    }
    doc["reservedAt"] = rfc3339(g.created + offset)
    doc["expiresAt"] = rfc3339(g.deadline + offset) if g.deadline is not None else None
    members = []
    for s, p in zip(g.slots, placement.pods, strict=True):
        facts = pods.get(s.pod_uid) if s.pod_uid is not None else None
        role, index = _task_of(s.key, facts)
        if s.pod_uid is None:
            state = "Finished" if s.finished else "Free"
        elif s.pod_uid in inflight:
            state = "Binding"
        elif facts is not None and facts.deleting:
            state = "Deleting"
        else:
            state = "Bound"
        members.append(
            {
                "taskRole": role,
                "taskIndex": index,
                "rank": s.index,
                "podName": s.pod_name if s.pod_uid is not None else None,
                "podUID": s.pod_uid,
                "node": p.node,
                "gpus": list(p.gpu_indices),
                "podIP": facts.ip if facts is not None and state == "Bound" else None,
                "hostIP": facts.host_ip if facts is not None else None,
                "state": state,
            }
        )
    doc["members"] = members
    return doc


def _pending_member(f: PodFacts) -> dict[str, Any]:
    return {
        "taskRole": f.role,
        "taskIndex": f.index,
        "rank": None,
        "podName": f.name,
        "podUID": f.uid,
        "node": None,
        "gpus": [],
        "podIP": None,
        "hostIP": None,
        "state": "Pending",
    }


def _task_of(key: str | None, facts: PodFacts | None) -> tuple[str | None, int | None]:
    """(task role, task index) of a slot: its key (`role/index`) when named, else its pod's."""
    if key is not None:
        role, _, index = key.rpartition("/")
        number = whole_number(index, 9)
        if role and number is not None:
            return role, number
    if facts is not None:
        return facts.role, facts.index
    return None, None
