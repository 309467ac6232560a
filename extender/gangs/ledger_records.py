"""What the gang ledger keeps of a gang: its phases as FrameworkBarrier reads them, its identity
(a FrameworkController attempt or an affinity group), its members' facts and its counts.

Plain data, the order of the phases and of a framework's attempts; the ledger's changes live in
`extender.gangs.ledger`, the derivation of a phase and the `GangStatus` document in
`extender.gangs.ledger_status`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import Enum, StrEnum
from typing import Any, overload

from config.untrusted import whole_number
from extender.gangs.podspec import FrameworkTask
from extender.gangs.waiting import Waiting
from extender.ops.bounded import ByteLRU
from topology.reservations import Gang

API_VERSION = "topogang.io/v1alpha1"
MAX_REPLACED = 4  # Framework objects of one name remembered as deleted and re-created
MAX_PARKED = 4096  # pods of released framework attempts remembered until they are gone
MAX_PARKED_BYTES = 4 << 20  # and the names they hold, a kilobyte each on average
PARKED_BYTES = 64  # what one parked pod costs beside its names


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


@dataclass(frozen=True, slots=True)
class FrameworkAttempt:
    """A framework's current attempt: its attempt instance UID and gang, the Framework object's UID
    (`FC_FRAMEWORK_UID`; None when its pods do not carry one), and the (object UID, last attempt) of
    the objects of the same name it replaced. A Framework deleted and re-created under its name
    starts its attempt IDs again at 0, so attempt numbers order the attempts of one object only: a
    pod of another object is told apart by its UID. The replaced objects are remembered so that a
    late pod or barrier of a deleted one is stale rather than superseding its successor in turn."""

    attempt: str
    gang: str
    uid: str | None = None
    replaced: tuple[tuple[str, str], ...] = ()

    def versus(self, attempt: str, uid: str | None, deleting: bool = False) -> Versus:
        """Whether a pod of `attempt` of Framework object `uid` is this attempt, a newer or a stale
        one. When either side has no object UID (an older FrameworkController), numbers decide. A
        pod of another object that is being deleted (`deleting`: what a restart lists while the
        garbage collector removes a deleted Framework's pods) is of the deleted object."""
        if attempt == self.attempt:
            return Versus.SAME
        if self._replaced(attempt, uid):
            return Versus.STALE
        if uid is not None and self.uid is not None and uid != self.uid:
            return Versus.STALE if deleting else Versus.NEWER  # another object: a re-created Framework
        return Versus.NEWER if newer(attempt, self.attempt) else Versus.STALE

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

    def then(self, attempt: str, gang: str, uid: str | None) -> FrameworkAttempt:
        """The current attempt once a pod of `attempt` (object `uid`) is taken as it: the same
        attempt learns its object's UID if it had none; another object's is remembered as replaced."""
        if attempt == self.attempt:
            return self if uid is None or self.uid is not None else replace(self, uid=uid)
        replaced = self.replaced
        if uid is not None and self.uid is not None and uid != self.uid:
            replaced = (*replaced, (self.uid, self.attempt))[-MAX_REPLACED:]
        return FrameworkAttempt(attempt, gang, uid, replaced)


class Frameworks(dict[tuple[str, str], FrameworkAttempt]):
    """Each framework's current attempt, by (namespace, framework name)."""

    def judge(self, task: FrameworkTask, uid: str | None, deleting: bool = False) -> Seen:
        """A pod of `task`'s attempt (of Framework object `uid`) against its framework's current
        attempt, changing nothing: stale, or superseding it (`Seen.superseded`: the gang to let go)."""
        current = self.get((task.namespace, task.framework))
        got = current.versus(task.attempt, uid, deleting) if current is not None else Versus.SAME
        if current is None or got is Versus.SAME:
            return Seen()
        if got is Versus.STALE:
            return Seen(stale=current.why_stale(task.attempt, uid))
        return Seen(superseded=current.gang)

    def take(self, task: FrameworkTask, gang: str, uid: str | None) -> None:
        """`task`'s attempt is its framework's current one (judged not stale)."""
        key = (task.namespace, task.framework)
        current = self.get(key)
        fresh = FrameworkAttempt(task.attempt, gang, uid)
        self[key] = current.then(task.attempt, gang, uid) if current is not None else fresh


class Parked:
    """Pods of a framework attempt the ledger let go, by pod UID, until each pod is gone: no gang
    counts them any more, but their barriers may still poll and are to be told the attempt is stale.
    Kept whatever the release's reason: whether a newer attempt superseded theirs is read when asked
    (`GangLedger.superseded_pod`), since the filter lets the old gang go before it records the new
    attempt, and a newer attempt may come after an expiry. Bounded as every cache of names a tenant
    writes (`extender.ops.bounded`): at most `limit` pods and `max_bytes` of names, the oldest first."""

    def __init__(self, limit: int = MAX_PARKED, max_bytes: int = MAX_PARKED_BYTES) -> None:
        self.pods: ByteLRU[str, tuple[str, str, str, str]] = ByteLRU(max_bytes, limit)  # (ns, pod, fw, gang)

    def park(self, uid: str, namespace: str, pod: str, framework: str, gang: str) -> None:
        entry = (namespace, pod, framework, gang)
        self.pods.put(uid, entry, PARKED_BYTES + len(uid) + sum(len(x) for x in entry))

    def drop(self, uid: str) -> None:
        self.pods.pop(uid)

    def of(self, uid: str, namespace: str, pod: str) -> tuple[str, str] | None:
        """(framework, gang) of the parked pod with that UID, namespace and name."""
        got = self.pods.get(uid)
        if got is None or (got[0], got[1]) != (namespace, pod):
            return None
        return got[2], got[3]

    def keep(self, frameworks: AbstractSet[tuple[str, str]]) -> None:
        """Forget the pods of frameworks the ledger no longer follows (nothing is stale against them)."""
        for uid in list(self.pods):
            got = self.pods.get(uid)
            if got is not None and (got[0], got[2]) not in frameworks:
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
