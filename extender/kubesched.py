"""kube-scheduler's side of the extender protocol: the one imitation that `topogang replay`, the
locust users and the bench's pre-fill (`loadtest.fleet`) and the soak drive the extender with.

kube-scheduler with `nodeCacheCapable: true` runs, for each pod, a scheduling cycle:

    filter (the pod + every node name) -> prioritize (the survivors, when more than one)
    -> the best score (the first such node in filter's order);
    a filter with FailedNodes (preemption may help) -> preempt, naming its dry run's victims (the
    lower-priority pods bound on those nodes) -> the victims the extender keeps are deleted
    -> filter again, once;

then a binding cycle: bind on the chosen node.

The steps are written once and do no I/O: `place`, `schedule` and `preempt` are generators that
yield each extender call (`Call`) and are sent its decoded reply. `drive` feeds them from a
synchronous transport (HTTP: replay, locust), `drive_async` from an asynchronous one (the soak calls
the verbs in-process, and they are coroutines). What differs between the users is injected: the
transport (`Extender`, `AsyncExtender`), what kube-scheduler knows of the bound pods and how it
deletes victims (`Preemption`), and the `Rules` in which the soak departs from kube-scheduler.
"""

from __future__ import annotations

from collections.abc import Awaitable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeVar

T = TypeVar("T")
Verb = Literal["filter", "prioritize", "bind", "preempt"]
Pod = Mapping[str, Any]

PHYSICAL_CLUSTER = "/v1/inspect/clusterstatus/physicalcluster"


# ------------------------------------------------------------------------------------ the cluster
def node_names(physical: object) -> list[str]:
    """Every `nodeName` in a HiveD-shaped physical cluster status (`GET PHYSICAL_CLUSTER`: cells
    nest in `cellChildren`), in the order of the tree; how clients learn a server's nodes."""
    out: list[str] = []
    seen: set[str] = set()
    stack: list[object] = [physical]
    while stack:
        cur = stack.pop()
        if isinstance(cur, list):
            stack.extend(reversed(cur))
        elif isinstance(cur, dict):
            name = cur.get("nodeName")
            if isinstance(name, str) and name and name not in seen:
                seen.add(name)
                out.append(name)
            if cur.get("isNodeLevel") is not True or name is None:
                stack.append(cur.get("cellChildren") or [])
    return out


# ------------------------------------------------------------------------------------ the parts
@dataclass(frozen=True)
class Call:
    """One extender call the cycle makes; `send` makes it on a transport."""

    verb: Verb
    pod: Pod
    names: Sequence[str] = ()  # filter, prioritize
    node: str = ""  # bind
    victims: Mapping[str, Any] | None = None  # preempt: NodeNameToMetaVictims

    def send(self, ext: Extender | AsyncExtender) -> Any:
        """The transport's reply (an awaitable for an `AsyncExtender`)."""
        if self.verb == "filter":
            return ext.filter(self.pod, self.names)
        if self.verb == "prioritize":
            return ext.prioritize(self.pod, self.names)
        if self.verb == "bind":
            return ext.bind(self.pod, self.node)
        return ext.preempt(self.pod, self.victims or {})


class Extender(Protocol):
    """A synchronous transport: each verb's decoded reply, None when the call failed, or `Refused`."""

    def filter(self, pod: Pod, names: Sequence[str]) -> Any: ...
    def prioritize(self, pod: Pod, names: Sequence[str]) -> Any: ...
    def bind(self, pod: Pod, node: str) -> Any: ...
    def preempt(self, pod: Pod, victims: Mapping[str, Any]) -> Any: ...


class AsyncExtender(Protocol):
    """The same, with coroutines (the verbs called in-process)."""

    def filter(self, pod: Pod, names: Sequence[str]) -> Awaitable[Any]: ...
    def prioritize(self, pod: Pod, names: Sequence[str]) -> Awaitable[Any]: ...
    def bind(self, pod: Pod, node: str) -> Awaitable[Any]: ...
    def preempt(self, pod: Pod, victims: Mapping[str, Any]) -> Awaitable[Any]: ...


class Preemption(Protocol):
    """What kube-scheduler knows of the pods bound per node, and how it deletes victims."""

    def dry_run(self, nodes: Sequence[str], priority: int) -> dict[str, Any]:
        """NodeNameToMetaVictims: on each candidate node, the lower-priority pods (`meta_victims`)."""
        ...

    def evict(self, chosen: Mapping[str, Any]) -> None:
        """Delete victims of the extender's answer (kube-scheduler: those of `fewest_victims`)."""
        ...


@dataclass(frozen=True)
class Refused:
    """An extender call answered with an HTTP error status (preempt has no Error field)."""

    status: int
    body: Any


@dataclass(frozen=True)
class Rules:
    """Where an imitation departs from kube-scheduler (the soak probes more than kube-scheduler does)."""

    prioritize_one: bool = False  # prioritize even when filter passed a single node
    refilter: bool = True  # filter again after the victims are deleted


KUBE_SCHEDULER = Rules()


@dataclass(frozen=True)
class Outcome:
    """How a cycle ended: `node` when the pod was bound (or, for `place`, chosen), and as text."""

    node: str | None
    text: str
    rejected: bool = False


Cycle = Generator[Call, Any, T]


def pod_priority(pod: Pod) -> int:
    return int((pod.get("spec") or {}).get("priority", 0))


def meta_victims(per_node: Iterable[tuple[str, Sequence[str]]]) -> dict[str, Any]:
    """NodeNameToMetaVictims from (node, victim UIDs), in that order; nodes without victims left out."""
    return {n: {"Pods": [{"UID": u} for u in uids], "NumPDBViolations": 0} for n, uids in per_node if uids}


def fewest_victims(chosen: Mapping[str, Any]) -> str:
    """The node kube-scheduler picks among the extender's candidates: fewest victims, then name."""
    return min(chosen, key=lambda n: (len(chosen[n].get("Pods") or []), n))


def best_node(names: Sequence[str], scores: object) -> str:
    """The highest score; among equal scores the first node in filter's order (no usable scores:
    the first node)."""
    if not isinstance(scores, list) or not scores:
        return names[0]
    rank = {n: i for i, n in enumerate(names)}
    best = max(scores, key=lambda h: (h.get("Score", 0), -rank.get(h.get("Host"), len(rank))))
    return str(best["Host"])


# ------------------------------------------------------------------------------------ the cycle
def place(
    pod: Pod, nodes: Sequence[str], side: Preemption, rules: Rules = KUBE_SCHEDULER, *, retry: bool = True
) -> Cycle[str | Outcome]:
    """The scheduling cycle: the chosen node, or the `Outcome` of a pod that cannot be placed now."""
    r = yield Call("filter", pod, names=nodes)
    if not isinstance(r, Mapping):
        return Outcome(None, "filter failed")
    if r.get("Error"):
        return Outcome(None, f"rejected: {r['Error']}", rejected=True)
    passed: list[str] = list(r.get("NodeNames") or [])
    if passed:
        if len(passed) == 1 and not rules.prioritize_one:  # kube-scheduler skips prioritize then
            return passed[0]
        return best_node(passed, (yield Call("prioritize", pod, names=passed)))
    failed: Mapping[str, str] = r.get("FailedNodes") or {}
    unresolvable: Mapping[str, str] = r.get("FailedAndUnresolvableNodes") or {}
    reason = next(iter(failed.values()), None) or next(iter(unresolvable.values()), "no node")
    if not (failed and retry):
        return Outcome(None, f"waits: {reason}")
    stopped = yield from preempt(pod, list(failed), side, reason)
    if stopped is not None:
        return stopped
    if not rules.refilter:
        return Outcome(None, f"waits (victims deleted): {reason}")
    return (yield from place(pod, nodes, side, rules, retry=False))


def preempt(pod: Pod, nodes: Sequence[str], side: Preemption, reason: str = "") -> Cycle[Outcome | None]:
    """Preemption with the extender: None once victims were deleted, else why not."""
    victims = side.dry_run(nodes, pod_priority(pod))
    if not victims:
        return Outcome(None, f"waits (no lower-priority pod to preempt): {reason}")
    r = yield Call("preempt", pod, victims=victims)
    if isinstance(r, Refused):
        return Outcome(None, f"preempt failed (HTTP {r.status}): {r.body}")
    chosen: Mapping[str, Any] = (r.get("NodeNameToMetaVictims") or {}) if isinstance(r, Mapping) else {}
    if not chosen:
        return Outcome(None, f"waits (preempt named no victims): {reason}")
    side.evict(chosen)
    return None


def schedule(
    pod: Pod, nodes: Sequence[str], side: Preemption, rules: Rules = KUBE_SCHEDULER
) -> Cycle[Outcome]:
    """Both cycles, one after the other: `place`, then bind on the chosen node."""
    node = yield from place(pod, nodes, side, rules)
    if isinstance(node, Outcome):
        return node
    b = yield Call("bind", pod, node=node)
    if not isinstance(b, Mapping):
        return Outcome(None, "bind failed")
    if b.get("Error"):
        return Outcome(None, f"bind failed: {b['Error']}")
    return Outcome(node, f"bound to {node}")


def drive(cycle: Cycle[T], ext: Extender) -> T:
    """Run a cycle over a synchronous transport."""
    try:
        call = next(cycle)
        while True:
            call = cycle.send(call.send(ext))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def drive_async(cycle: Cycle[T], ext: AsyncExtender) -> T:
    """Run a cycle over an asynchronous transport."""
    try:
        call = next(cycle)
        while True:
            call = cycle.send(await call.send(ext))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
