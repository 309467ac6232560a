"""Gang reservations as `GangReservation` objects: what must outlive the process, and its decoding.

HiveD keeps reservations only in memory, so a restart (or a fail-over) forgets every gang that has
cells reserved but no member bound yet, and every preemption in flight: victims are already being
deleted for a preemptor nobody remembers. Here such a reservation is written to the API server when
it is made and read back at start. A gang with a bound member needs no object: its pods' bind
annotations carry the whole placement (`extender.kube.recovery`), so the object is deleted then.

Except while a lazy preemption has it downgraded to opportunistic. HiveD never promotes such a gang
again (`topology.promotion`), but nothing in its pods can say it was downgraded: the bind info is
written at bind, before any downgrade, and a pod's annotations are its owner's to write. A restart
would adopt it as any opportunistic gang, promoted at the next release that frees its VC's quota.
So its object stays, or is written, for as long as the gang is downgraded, naming its preemptor
(`DOWNGRADED_BY`), and is read back into the adopted gang (`topology.recovery.keep_downgraded`).
The record is tenant-proof where a pod's annotation is not: the objects live in the extender's own
namespace, whose writes on them the chart grants to the extender's service account alone (its Role),
and what it holds comes from the core, never from a pod. It goes with the gang (released, evicted)
or with the downgrade (undone), at the next sync that finds the core no longer needs it.

Wall-clock time is stored (`expiresAt`) because the monotonic clock means nothing to the next
process; it is converted back to the scheduler's clock on restore. Pure functions: no I/O.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from topology.core import Core
from topology.decisions import AdoptedPod, GangPlacement, GangRequest, Member
from topology.reservations import Gang, GangPhase

GROUP = "topogang.io"
VERSION = "v1alpha1"
KIND = "GangReservation"
PLURAL = "gangreservations"
API_VERSION = f"{GROUP}/{VERSION}"
GANG_LABEL = "topogang.io/gang-hash"
# on the object, the gang a lazy preemption downgraded it for: an annotation, not a spec field, so
# the CRD's structural schema (which prunes fields it does not declare) keeps it as it is
DOWNGRADED_BY = "topogang.io/downgraded-by"


def collection_path(namespace: str) -> str:
    return f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}"


def object_path(namespace: str, name: str) -> str:
    return f"{collection_path(namespace)}/{name}"


def object_name(gang: str) -> str:
    """A valid object name for any gang name (`ns/name/attempt` has slashes, may be long): a readable
    prefix plus a hash of the whole name, so two gangs never share an object. The stem drops the
    namespace's slash (`team-a/train` and `team/a-train` read alike), so the hash alone tells such
    gangs apart: 128 bits of it, as a tenant who names its gang may search for one whose hash
    matches another team's (48 bits, as before, are a few hours of one GPU); at most 63 characters."""
    digest = hashlib.sha256(gang.encode()).hexdigest()[:32]
    stem = re.sub(r"[^a-z0-9-]+", "-", gang.lower()).strip("-")[:30].strip("-")
    return f"{stem}-{digest}" if stem else f"gang-{digest}"


def needs_object(gang: Gang) -> bool:
    """Whether only an object can bring this reservation back as it was: it preempts (victims are
    being deleted for it), or it is not whole yet. With no member bound no annotation records it;
    with some bound, the members' bind info records where it is but not its deadline, which a
    restart must keep (the TTL caps how long a gang holds cells while not whole). Or it runs
    downgraded by a lazy preemption, which nothing else records (see the module). A gang being
    evicted needs none: a restart holds its pods' GPUs until they are gone, and promotes nothing."""
    if gang.phase is GangPhase.PREEMPTING:
        return True
    if gang.evicting:
        return False
    return gang.phase is GangPhase.RESERVED or gang.downgraded_by is not None


def needs_write_through(gang: Gang) -> bool:
    """Whether the verb must wait for this reservation's object before it answers.

    A gang of one pod that preempts nobody is bound in the very scheduling cycle that reserved it: a
    fail-over before that bind loses nothing that matters (its pod is still pending, and the next
    leader places it afresh), so writing it inside kube-scheduler's one-pod-at-a-time cycle would
    only halve the cluster's scheduling rate. The once-a-second sync still writes it if it lingers.
    A gang of several pods, or one whose victims are being deleted, is written before the answer.
    """
    if not needs_object(gang):
        return False
    return gang.phase is GangPhase.PREEMPTING or len(gang.slots) > 1


def _stamp(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def encode(core: Core, gang: Gang, *, clock_now: float, wall_now: datetime) -> dict[str, Any]:
    """The object's body for a gang's reservation."""
    req = gang.request
    expires = None
    if gang.deadline is not None:
        expires = _stamp(wall_now + timedelta(seconds=max(0.0, gang.deadline - clock_now)))
    slots = []
    for s in gang.slots:
        node, gpus = core.slot_place(s)
        slot: dict[str, Any] = {
            "node": node,
            "gpus": list(gpus),
            "cellTypes": list(core.quota_cell_types(gang, s.leaves)),
        }
        if s.key is not None:
            slot["key"] = s.key
        slots.append(slot)
    metadata: dict[str, Any] = {"name": object_name(gang.name)}
    if gang.downgraded_by is not None:
        metadata["annotations"] = {DOWNGRADED_BY: gang.downgraded_by}
    # the CRD's phases are a reservation's (Preempting, Reserved): a whole gang's object, kept only
    # for its downgrade, has none
    status = {"phase": gang.phase.value} if gang.phase is not GangPhase.BOUND else {}
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": metadata,
        "spec": {
            "gang": gang.name,
            "virtualCluster": req.vc,
            # the request's, as in the bind info: a downgraded gang is told by its empty cellTypes
            "priority": req.priority,
            "members": [{"podNumber": m.pod_number, "leafCellNumber": m.leaf_number} for m in req.members],
            "leafCellType": req.leaf_type,
            "pinnedCellId": req.pinned_cell_id,
            "lazyPreemptionEnable": req.lazy_preemption,
            "gangReleaseEnable": req.gang_release,
            "promoteWhenQuota": req.promote_when_quota,
            "ttlSeconds": req.ttl_seconds,
            "slotKeys": list(req.slot_keys) if req.slot_keys is not None else None,
            "slots": slots,
            "expiresAt": expires,
        },
        "status": {**status, "reservedAt": _stamp(wall_now)},
    }


Fingerprint = tuple[str, str, str, str]
UNKNOWN: Fingerprint = ("", "", "", "")  # an object read back, not yet written by this process


def downgraded_by(obj: Mapping[str, Any]) -> str | None:
    """The preemptor an object records its gang was downgraded for, if any."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    by = annotations.get(DOWNGRADED_BY) if isinstance(annotations, Mapping) else None
    return str(by) if by is not None else None


def fingerprint(body: Mapping[str, Any]) -> Fingerprint:
    """What, when changed, is worth a write: the placement is fixed once made, so only the phase
    (Preempting -> Reserved -> none once whole), the deadline (restarted once the victims are gone)
    and the cells the gang is held through move; the last when a lazy preemption downgrades it to
    opportunistic, which a restart must see, or it would take back the quota cells its preemptor now
    holds; and with them the preemptor it was downgraded for, or it would be promoted."""
    spec, status = body.get("spec") or {}, body.get("status") or {}
    cells = [s.get("cellTypes") for s in spec.get("slots") or () if isinstance(s, Mapping)]
    by = downgraded_by(body) or ""
    return str(status.get("phase", "")), str(spec.get("expiresAt", "")), repr(cells), by


@dataclass(frozen=True, slots=True)
class Restorable:
    request: GangRequest
    slots: list[AdoptedPod]
    expires_at: datetime | None
    downgraded_by: str | None = None  # the preemptor of a lazy preemption that downgraded the gang
    whole: bool = False  # every slot was claimed: the object records the downgrade, no reservation

    def same_gang(self, placement: GangPlacement) -> bool:
        """Whether a gang adopted under this object's name is the one it records: every slot it holds
        is one the object lists. The object of a gang that ended outlives it until the next sync,
        and a new gang of that name (a job submitted again) may run elsewhere meanwhile."""
        recorded = {(s.node, tuple(sorted(s.gpu_indices))) for s in self.slots}
        held = {(p.node, tuple(sorted(p.gpu_indices))) for p in placement.pods}
        return bool(held) and held <= recorded


class BadReservationError(ValueError):
    """An object that cannot be read back (edited by hand, or from another version)."""


def _field(spec: Mapping[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    v = spec.get(key)
    if isinstance(v, bool) or not isinstance(v, kind):
        raise BadReservationError(f"spec.{key}: expected {getattr(kind, '__name__', kind)}, got {v!r}")
    return v


def decode(obj: Mapping[str, Any]) -> Restorable:
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        raise BadReservationError("spec: missing")
    members = _field(spec, "members", list)
    try:
        ms = tuple(Member(int(m["podNumber"]), int(m["leafCellNumber"])) for m in members)
    except (KeyError, TypeError, ValueError) as exc:
        raise BadReservationError(f"spec.members: {exc}") from None
    keys = spec.get("slotKeys")
    request = GangRequest(
        name=_field(spec, "gang", str),
        vc=_field(spec, "virtualCluster", str),
        members=ms,
        priority=_field(spec, "priority", int),
        leaf_type=spec.get("leafCellType") or None,
        pinned_cell_id=spec.get("pinnedCellId") or None,
        lazy_preemption=bool(spec.get("lazyPreemptionEnable")),
        gang_release=bool(spec.get("gangReleaseEnable")),
        promote_when_quota=bool(spec.get("promoteWhenQuota")),
        ttl_seconds=float(_field(spec, "ttlSeconds", (int, float))),
        slot_keys=tuple(str(k) for k in keys) if isinstance(keys, list) else None,
    )
    slots = []
    for i, s in enumerate(_field(spec, "slots", list)):
        try:
            gpus = tuple(int(g) for g in s["gpus"])
            types = tuple(str(t) for t in s.get("cellTypes") or ())
            slots.append(AdoptedPod("", str(s["node"]), gpus, None, s.get("key"), types))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise BadReservationError(f"spec.slots[{i}]: {exc}") from None
    if len(slots) != request.pod_count:
        raise BadReservationError(f"spec.slots: {len(slots)} slots for {request.pod_count} pods")
    expires = spec.get("expiresAt")
    when = None
    if expires:
        try:
            when = datetime.strptime(str(expires), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        except ValueError:
            raise BadReservationError(f"spec.expiresAt: not an RFC 3339 time: {expires!r}") from None
    by = downgraded_by(obj)
    if by is not None and not by:
        raise BadReservationError(f"metadata.annotations[{DOWNGRADED_BY}]: empty")
    status = obj.get("status")
    whole = not isinstance(status, Mapping) or not status.get("phase")
    return Restorable(request, slots, when, by, whole)


def deadline_of(r: Restorable, *, clock_now: float, wall_now: datetime) -> float | None:
    if r.expires_at is None:
        return None
    return clock_now + (r.expires_at - wall_now).total_seconds()
