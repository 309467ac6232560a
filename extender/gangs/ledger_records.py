"""What the gang ledger keeps of a gang: its phases as FrameworkBarrier reads them, its identity
(a FrameworkController attempt or an affinity group), its members' facts and its counts.

Plain data, the order of the phases and of a framework's attempts; the ledger's changes live in
`extender.gangs.ledger`, the derivation of a phase and the `GangStatus` document in
`extender.gangs.ledger_status`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import Enum, StrEnum
from typing import Any, NamedTuple, overload

from config.untrusted import whole_number
from extender.gangs.podspec import FrameworkTask, pod_annotations
from extender.gangs.waiting import Waiting
from extender.ops.bounded import ByteLRU
from topology.reservations import Gang

API_VERSION = "topogang.io/v1alpha1"
MAX_REPLACED = 4  # Framework objects of one name remembered as deleted and re-created
MAX_PARKED = 4096  # pods of released framework attempts remembered until they are gone
MAX_PARKED_BYTES = 4 << 20  # and the names they hold, a kilobyte each on average
PARKED_BYTES = 64  # what one parked pod costs beside its names
FC_FRAMEWORK_UID = "FC_FRAMEWORK_UID"


class Phase(StrEnum):
    PENDING = "Pending"
    RESERVED = "Reserved"
    BINDING = "Binding"
    BOUND = "Bound"
    READY = "Ready"
    BROKEN = "Broken"
    EXPIRED = "Expired"


ORDER = {Phase.PENDING: 0, Phase.RESERVED: 1, Phase.BINDING: 2, Phase.BOUND: 3, Phase.READY: 4}
TERMINAL = frozenset({Phase.BROKEN, Phase.EXPIRED})


def parse_phase(text: str) -> Phase | None:
    """A phase name, case-insensitive (`ready`, `Ready`); None when it names no phase."""
    for p in Phase:
        if p.value.lower() == text.strip().lower():
            return p
    return None


def reached(phase: Phase, target: Phase) -> bool:
    """Whether a long-poll waiting for `target` may return: the phase is at or past it in
    Pending < Reserved < Binding < Bound < Ready, or it is a failure phase (Broken, Expired)."""
    if phase in TERMINAL or target in TERMINAL:
        return phase in TERMINAL or phase is target
    return ORDER[phase] >= ORDER[target]


def wall_time(text: str) -> float | None:
    """An API server timestamp (RFC 3339, UTC when it names no zone) as a Unix time; None when the
    text reads as no time."""
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        return None
    return (at if at.tzinfo is not None else at.replace(tzinfo=UTC)).timestamp()


@overload
def rfc3339(t: float) -> str: ...
@overload
def rfc3339(t: None) -> None: ...
def rfc3339(t: float | None) -> str | None:
    """A Unix time as the Kubernetes API writes times (RFC 3339, UTC, seconds); None stays None."""
    if t is None:
        return None
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def attempt_id(attempt: str) -> int | None:
    """The attempt number of an attempt instance UID (`{attemptID}_{configMapUID}`); None when its
    head is no plain number (the pod's annotation is its owner's to write: `whole_number`)."""
    return whole_number(attempt.split("_", 1)[0])


def newer(a: str, b: str) -> bool:
    """Whether attempt instance UID `a` supersedes `b` (a higher attempt ID; when either has none,
    any different attempt is the newer one: the latest seen wins)."""
    ia, ib = attempt_id(a), attempt_id(b)
    if ia is None or ib is None or ia == ib:
        return a != b
    return ia > ib


class Versus(Enum):
    """A pod's framework attempt against the framework's current one."""

    SAME = "same"  # the current attempt, or none is known yet
    NEWER = "newer"  # it supersedes the current attempt
    STALE = "stale"  # the current attempt supersedes it


def framework_uid(pod: Mapping[str, Any]) -> str | None:
    """The UID of the Framework object a task pod is of (`FC_FRAMEWORK_UID`), when it carries one."""
    uid = pod_annotations(pod).get(FC_FRAMEWORK_UID)
    return uid if isinstance(uid, str) and uid else None


def created_at(pod: Mapping[str, Any]) -> float | None:
    """The pod's `creationTimestamp` as a Unix time (the API server's to write, never the tenant's);
    None when it has none or none that reads as a time."""
    meta = pod.get("metadata")
    text = meta.get("creationTimestamp") if isinstance(meta, dict) else None
    return wall_time(text) if isinstance(text, str) and len(text) <= 64 else None


def _deleting(pod: Mapping[str, Any]) -> bool:
    meta = pod.get("metadata")
    return isinstance(meta, dict) and meta.get("deletionTimestamp") is not None


@dataclass(frozen=True, slots=True)
class FrameworkAttempt:
    """A framework's current attempt: its attempt instance UID and gang, the Framework object's UID
    (`FC_FRAMEWORK_UID`; None when its pods do not carry one), and the (object UID, last attempt) of
    the objects of the same name it replaced. A Framework deleted and re-created under its name
    starts its attempt IDs again at 0, so attempt numbers order the attempts of one object only: a
    pod of another object is told apart by its UID. The replaced objects are remembered so that a
    late pod or barrier of a deleted one is stale rather than superseding its successor in turn.
    `created` and `deleting`: the creation time of the pod it was taken from, and whether a list
    showed that pod being deleted (what orders two objects' pods listed together, `_other_object`)."""

    attempt: str
    gang: str
    uid: str | None = None
    replaced: tuple[tuple[str, str], ...] = ()
    created: float | None = None
    deleting: bool = False

    def versus(
        self,
        attempt: str,
        uid: str | None,
        deleting: bool = False,
        created: float | None = None,
        *,
        listing: bool = False,
    ) -> Versus:
        """Whether a pod of `attempt` of Framework object `uid` is this attempt, a newer or a stale
        one. When either side has no object UID (an older FrameworkController), numbers decide. A
        pod of another object is ordered against this one by `_other_object` (`listing`: the pod
        comes from a list or watch, not from a filter)."""
        if attempt == self.attempt:
            return Versus.SAME
        if self._replaced(attempt, uid):
            return Versus.STALE
        if uid is not None and self.uid is not None and uid != self.uid:
            return self._other_object(uid, deleting, created, listing)
        return Versus.NEWER if newer(attempt, self.attempt) else Versus.STALE

    def _other_object(self, uid: str, deleting: bool, created: float | None, listing: bool) -> Versus:
        """A pod of another Framework object of the same name. Names are unique in a namespace, so
        the older object was deleted before the newer one could be created, and FrameworkController
        creates an object's pods only while it exists: every pod of the newer object is younger
        than every pod of the older. Yet the older one's pods can outlive it unmarked (the garbage
        collector deletes them some time after their owner, an orphaning deletion never), so a
        restart may list pods of both, in an order that says nothing (by name). So the younger pod's
        object is the newer, whatever the order. When the timestamps cannot tell (one second apart
        at most, their resolution, or missing): a filtered pod is the latest seen, as the running
        path has always decided; of listed pods, one being deleted is of the deleted object, and
        then the greater object UID wins, an arbitrary rule but one that does not hang on the
        listing order."""
        if created is not None and self.created is not None and created != self.created:
            return Versus.NEWER if created > self.created else Versus.STALE
        if not listing:
            return Versus.NEWER
        if deleting != self.deleting:
            return Versus.STALE if deleting else Versus.NEWER
        return Versus.NEWER if uid > (self.uid or "") else Versus.STALE

    def stale(self, attempt: str) -> bool:
        """Whether a barrier's `attempt` (which names no object) is superseded: the last attempt of
        a replaced object, or an older attempt by number (a newer one is merely not seen yet)."""
        if attempt == self.attempt:
            return False
        return self._replaced(attempt, None) or not newer(attempt, self.attempt)

    def why_stale(self, attempt: str, uid: str | None = None, of: str = "") -> str:
        """The words of a 409 or a refused pod (`of`: which framework, when the path does not say)."""
        again = " of the Framework re-created under that name" if self._replaced(attempt, uid) else ""
        return f"attempt {attempt}{of} is superseded by attempt {self.attempt}{again}"

    def _replaced(self, attempt: str, uid: str | None) -> bool:
        """Whether `attempt`, or object `uid`, is of an object this one replaced."""
        return any(attempt == a or uid == u for u, a in self.replaced)

    def then(
        self, attempt: str, gang: str, uid: str | None, created: float | None = None, deleting: bool = False
    ) -> FrameworkAttempt:
        """The current attempt once a pod of `attempt` (object `uid`) is taken as it: the same
        attempt learns its object's UID and creation if it had none, and that a pod of it is not
        being deleted; another object's is remembered as replaced."""
        if attempt == self.attempt:
            return replace(
                self,
                uid=self.uid or uid,
                created=self.created if self.created is not None else created,
                deleting=self.deleting and deleting,
            )
        return FrameworkAttempt(attempt, gang, uid, self._and_replaced(uid), created, deleting)

    def outranked(self, attempt: str, uid: str | None) -> FrameworkAttempt:
        """This attempt still current after a listed pod of another object (`uid`, `attempt`) lost to
        it: that object is remembered as replaced, as it would be had it been listed first."""
        if uid is None or self.uid is None or uid == self.uid or self._replaced(attempt, uid):
            return self
        return replace(self, replaced=(*self.replaced, (uid, attempt))[-MAX_REPLACED:])

    def _and_replaced(self, uid: str | None) -> tuple[tuple[str, str], ...]:
        if uid is not None and self.uid is not None and uid != self.uid:
            return (*self.replaced, (self.uid, self.attempt))[-MAX_REPLACED:]
        return self.replaced


class Frameworks(dict[tuple[str, str], FrameworkAttempt]):
    """Each framework's current attempt, by (namespace, framework name)."""

    def judge(self, task: FrameworkTask, pod: Mapping[str, Any], *, listing: bool = False) -> Seen:
        """A pod of `task`'s attempt against its framework's current attempt, changing nothing: stale,
        or superseding it (`Seen.superseded`: the gang to let go). `listing`: the pod comes from a
        list or watch, whose deletion mark counts (a filtered pod is never being deleted)."""
        current = self.get((task.namespace, task.framework))
        if current is None or task.attempt == current.attempt:  # the current attempt (`versus`: SAME)
            return Seen()
        deleting = listing and _deleting(pod)
        got = current.versus(task.attempt, framework_uid(pod), deleting, created_at(pod), listing=listing)
        if got is Versus.SAME:
            return Seen()
        if got is Versus.STALE:
            return Seen(stale=current.why_stale(task.attempt, framework_uid(pod)))
        return Seen(superseded=current.gang)

    def take(self, task: FrameworkTask, gang: str, pod: Mapping[str, Any], *, listing: bool = False) -> None:
        """`task`'s attempt is its framework's current one (judged not stale)."""
        key = (task.namespace, task.framework)
        current = self.get(key)
        if current is not None and task.attempt == current.attempt:
            # the current attempt again (every filter of its pods): the pod is read only for what
            # the attempt does not know yet, and nothing is written when it learns nothing (`then`)
            uid = current.uid or framework_uid(pod)
            created = current.created if current.created is not None else created_at(pod)
            deleting = current.deleting and listing and _deleting(pod)
            if (uid, created, deleting) != (current.uid, current.created, current.deleting):
                self[key] = replace(current, uid=uid, created=created, deleting=deleting)
            return
        uid, created, deleting = framework_uid(pod), created_at(pod), listing and _deleting(pod)
        fresh = FrameworkAttempt(task.attempt, gang, uid, (), created, deleting)
        self[key] = current.then(task.attempt, gang, uid, created, deleting) if current is not None else fresh

    def listed(self, task: FrameworkTask, gang: str, pod: Mapping[str, Any]) -> None:
        """A pod a list or watch brings, of a gang the ledger has no record of (what a restart
        learns frameworks from): its attempt is taken as current unless stale, and a losing object
        is remembered as replaced, so that the pods listed end in one state whatever their order."""
        if self.judge(task, pod, listing=True).stale is None:
            self.take(task, gang, pod, listing=True)
            return
        key = (task.namespace, task.framework)
        self[key] = self[key].outranked(task.attempt, framework_uid(pod))


class ParkedPod(NamedTuple):
    """A pod the ledger let go of, kept for its barrier: its namespace and name, its gang's name as
    the paths read it (a framework's, or a gang's without its namespace) and key, and whether the
    gang is a framework attempt."""

    namespace: str
    pod: str
    name: str
    gang: str
    framework: bool


class Parked:
    """Pods of gangs the ledger let go whose barriers may still poll, by pod UID, until each pod is
    gone: a framework attempt's, whatever the release's reason (to be told the attempt is stale
    once a newer one replaced it), and an expired gang's of any kind (to be told it Expired while
    its tombstone lasts, `expired`). No gang counts them any more. Whether a newer attempt
    superseded theirs is read when asked (`GangLedger.superseded_pod`), since the filter lets the
    old gang go before it records the new attempt, and a newer attempt may come after an expiry.
    Bounded as every cache of names a tenant writes (`extender.ops.bounded`): at most `limit` pods
    and `max_bytes` of names, the oldest first."""

    def __init__(self, limit: int = MAX_PARKED, max_bytes: int = MAX_PARKED_BYTES) -> None:
        self.pods: ByteLRU[str, ParkedPod] = ByteLRU(max_bytes, limit)

    def park(self, uid: str, facts: PodFacts, rec: Record) -> None:
        fw = rec.ident.attempt is not None
        entry = ParkedPod(facts.namespace, facts.name, rec.ident.name, rec.gang, fw)
        self.pods.put(uid, entry, PARKED_BYTES + len(uid) + sum(len(x) for x in entry[:4]))

    def drop(self, uid: str) -> None:
        self.pods.pop(uid)

    def of(self, uid: str, namespace: str, pod: str) -> ParkedPod | None:
        """The parked pod with that UID, namespace and name."""
        got = self.pods.get(uid)
        return got if got is not None and (got.namespace, got.pod) == (namespace, pod) else None

    def expired(self, uid: str, namespace: str, pod: str, records: Mapping[str, Record]) -> Record | None:
        """The tombstone of the expired gang the parked pod was a member of, while it lasts and is
        the one that counted the pod (not a gang of that name placed afresh since, which the pod is
        no member of)."""
        got = self.of(uid, namespace, pod)
        rec = records.get(got.gang) if got is not None else None
        return rec if rec is not None and rec.tombstone is not None and uid in rec.pods else None

    def keep(self, frameworks: AbstractSet[tuple[str, str]], records: Mapping[str, Record]) -> None:
        """Forget the pods nothing will be said of: a framework attempt's whose framework the ledger
        no longer follows (nothing is stale against it), another gang's whose tombstone is gone."""
        for uid in list(self.pods):
            got = self.pods.get(uid)
            if got is None:
                continue
            if got.framework and (got.namespace, got.name) in frameworks:
                continue
            if not got.framework and self.expired(uid, got.namespace, got.pod, records) is not None:
                continue
            self.pods.pop(uid)


@dataclass(slots=True)
class PodFacts:
    """What the edge knows about one member pod."""

    uid: str
    namespace: str
    name: str
    gang: str
    role: str | None = None
    index: int | None = None
    ip: str | None = None
    host_ip: str | None = None
    deleting: bool = False


@dataclass(slots=True)
class Identity:
    namespace: str
    name: str  # the framework name, or the affinity group's name without its namespace prefix
    framework_uid: str | None = None
    attempt: str | None = None  # FC_FRAMEWORK_ATTEMPT_INSTANCE_UID; None for a gang not from FC

    def to_dict(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "name": self.name,
            "frameworkUID": self.framework_uid,
            "attemptInstanceUID": self.attempt,
        }


@dataclass(slots=True)
class Counts:
    expected: int = 0
    reserved: int = 0
    bound: int = 0
    with_ip: int = 0
    binding: int = 0


@dataclass(slots=True)
class Record:
    """The ledger's memory of one gang (keyed by the core's gang name)."""

    gang: str
    ident: Identity
    vc: str
    expected: int
    leaf_total: int = 0
    opportunistic: bool = False
    phase: Phase = Phase.PENDING
    never_fits: bool = False
    reason: str = ""
    user_error: str | None = None
    version: int = 0
    reserved_at: float | None = None
    bound_at: float | None = None
    ready_at: float | None = None
    expired_at: float | None = None
    last_seen: float = 0.0
    was_bound: bool = False
    pods: set[str] = field(default_factory=set)
    tombstone: dict[str, Any] | None = None
    last_gang: Gang | None = None  # the core's gang when last seen (what a tombstone shows)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    phase_changed: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass(frozen=True, slots=True)
class Seen:
    """What `GangLedger.seen` found: a stale attempt (refuse the pod) or an older attempt's gang to
    release (the caller deletes it from the core and evicts what it names)."""

    stale: str | None = None
    superseded: str | None = None


@dataclass(frozen=True, slots=True)
class Known:
    """What the verb's one answer from the core said of a gang: its reservation (None: it has none)
    and its VC's quota. The ledger reads it instead of asking the core again; a reservation the
    core has let go since (`Gang.gone`) is asked for afresh."""

    gang: Gang | None
    vc_quota: int | None = None


WaitingOf = Callable[[str], Waiting | None]
# (record, members as (namespace, name, uid), why): told of every phase a gang enters, for Events
TransitionHook = Callable[[Record, list[tuple[str, str, str]], str], None]
