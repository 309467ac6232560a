"""What a `Scheduler` is given to reach the world outside the core: it writes Bindings, looks up pods
and Frameworks, evicts and tells a pod's watchers why it waits, only through these. Kubernetes mode
plugs in the API server (`extender.kube`), standalone mode an in-memory binder, tests their fakes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from extender.gangs.disruption import Disruption
from extender.gangs.podspec import PodRequest


class BindError(Exception):
    """The Binding could not be written; the message says why."""


class FencedError(BindError):
    """This replica may not write to the cluster now (a standby, or a leader whose Lease lapsed):
    nothing was tried, and the leader writes it."""


class BindUnknownError(BindError):
    """The Binding got no answer and the pod could not be read back: it may have been applied, so
    its slot stays claimed (the pod may run there) until the pod is bound again or goes."""


@dataclass(frozen=True, slots=True)
class BindTarget:
    namespace: str
    name: str
    uid: str


class Binder(Protocol):
    """Writes the Binding (node + annotations) for a pod; idempotent for the same pod and node."""

    async def bind(self, target: BindTarget, node: str, annotations: Mapping[str, str]) -> None: ...


PodLookup = Callable[[str, str], Awaitable[Mapping[str, Any] | None]]
FrameworkLookup = Callable[[str, str], Awaitable[Mapping[str, Any] | None]]
Evictor = Callable[[Sequence[str], Disruption], Awaitable[None]]  # pod uids, and why they go
WaitNotifier = Callable[[PodRequest, str], None]
# the API server's own copy of a pod, by (uid, namespace, name) of the pod a verb names; None: unknown
PodSource = Callable[[str, str, str], Awaitable[Mapping[str, Any] | None]]
