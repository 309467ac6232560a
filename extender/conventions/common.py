"""What one convention says about a pod (a `Claim`), and the API objects a claim may need."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from extender.gangs.optin import gpu_count
from topology.decisions import Member, UserError

# topogang's own keys for pods that use another scheduler's convention
MIN_MEMBER = "topogang.io/min-member"  # the group's size when its PodGroup cannot be read
TIMEOUT = "topogang.io/gang-timeout-seconds"  # how long a partial reservation is held
STYLE = "topogang.io/gang-scheduling-style"  # Hard (default) | Soft, as YuniKorn's gangSchedulingStyle
VIRTUAL_CLUSTER = "topogang.io/virtual-cluster"  # label or annotation; else the namespace's VC

MAX_GANG_PODS = 100_000
# the longest timeout a pod or PodGroup may ask for: coscheduling's scheduleTimeoutSeconds is an int32,
# and a deadline past it (doubled for Soft) is one no GangReservation or ledger timestamp can write
MAX_TIMEOUT_SECONDS = float(2**31 - 1)


@dataclass(frozen=True, slots=True)
class ObjRef:
    """An API object a claim reads: `kind` is one of `KINDS`."""

    kind: str
    namespace: str
    name: str


KINDS = ("coscheduling", "volcano", "workload", "podgroup", "pod")

# what a resolver is given: the objects it asked for (None = not readable); a missing key = not asked
Objects = Mapping[ObjRef, Mapping[str, Any] | None]


@dataclass(frozen=True, slots=True)
class Claim:
    """One convention's view of a pod's gang.

    `pods` is the number of GPU pods in the gang's core (minMember), None when unknown; `members`,
    when set, is the whole core's shape (YuniKorn task groups, a Spark driver and its executors);
    `leaf_number` is this pod's GPUs when the convention states them."""

    source: str  # "coscheduling", "volcano", ...
    key: str  # the label or annotation that names the group, for messages
    group: str  # the group as the pod names it
    gang: str  # the gang's name in the core
    pods: int | None
    members: tuple[Member, ...] | None = None
    leaf_number: int | None = None
    ttl_seconds: float | None = None
    soft: bool | None = None
    priority: int | None = None  # the gang's priority when the convention gives one (else 0)
    topology_key: str | None = None  # a node label: the whole gang within one of its domains
    # a group whose pods are scheduled one by one (a `basic` PodGroup): each pod its own one-pod gang
    independent: bool = False

    @property
    def size(self) -> int | None:
        if self.members is not None:
            return sum(m.pod_number for m in self.members)
        return self.pods

    def where(self) -> str:
        return f"{self.source} ({self.key}={self.group}" + (
            f", {self.size} pods)" if self.size is not None else ")"
        )


def meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    m = obj.get("metadata")
    return m if isinstance(m, dict) else {}


def labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    v = meta(obj).get("labels")
    return v if isinstance(v, dict) else {}


def annotations_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    v = meta(obj).get("annotations")
    return v if isinstance(v, dict) else {}


def spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    v = obj.get("spec")
    return v if isinstance(v, dict) else {}


def text(value: object) -> str | None:
    if isinstance(value, str) and value.strip():
        return value.strip()
    return None


def count(value: object, field: str, *, minimum: int = 1) -> int | None:
    """A positive whole number from an object or annotation field; `UserError` when malformed."""
    if value is None:
        return None
    n = gpu_count(value)
    if n is None or n < minimum or n > MAX_GANG_PODS:
        raise UserError(field, f"expected a whole number of at least {minimum}, got {value!r}")
    return n


def seconds(value: object, field: str) -> float | None:
    if value is None:
        return None
    try:
        s = float(str(value).strip())
    except ValueError:
        raise UserError(field, f"expected a number of seconds, got {value!r}") from None
    if not s > 0 or s != s or s == float("inf"):
        raise UserError(field, f"expected a positive number of seconds, got {value!r}")
    if s > MAX_TIMEOUT_SECONDS:
        raise UserError(field, f"expected at most {MAX_TIMEOUT_SECONDS:.0f} seconds, got {value!r}")
    return s


def style(value: object, field: str) -> bool | None:
    """True for Soft, False for Hard (case-insensitive), None when absent."""
    if value is None:
        return None
    t = str(value).strip().lower()
    if t == "soft":
        return True
    if t == "hard":
        return False
    raise UserError(field, f"expected Soft or Hard, got {value!r}")


def pod_min_member(pod: Mapping[str, Any]) -> int | None:
    return count(annotations_of(pod).get(MIN_MEMBER), MIN_MEMBER)


def pod_timeout(pod: Mapping[str, Any]) -> tuple[float | None, bool | None]:
    ann = annotations_of(pod)
    return seconds(ann.get(TIMEOUT), TIMEOUT), style(ann.get(STYLE), STYLE)


def gpu_resource(resources: object) -> int | None:
    """`nvidia.com/gpu` from a resource list ({cpu, memory, nvidia.com/gpu: 2})."""
    if not isinstance(resources, dict):
        return None
    value = resources.get("nvidia.com/gpu")
    return gpu_count(value) if value is not None else None
