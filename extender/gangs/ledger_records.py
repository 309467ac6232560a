"""What the gang ledger keeps of a gang: its phases as FrameworkBarrier reads them, its identity
(a FrameworkController attempt or an affinity group), its members' facts and its counts.

Plain data and the order of the phases; the ledger's changes live in `extender.gangs.ledger`, the
derivation of a phase and the `GangStatus` document in `extender.gangs.ledger_status`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, overload

from config.untrusted import whole_number
from extender.gangs.waiting import Waiting
from topology.reservations import Gang

API_VERSION = "topogang.io/v1alpha1"


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
