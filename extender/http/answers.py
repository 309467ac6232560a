"""What the verbs tell kube-scheduler (and, through its events, people) about a pod that cannot go.

HiveD's wording for user errors; a waiting gang's reason once, on one node, and short pointers to it
on the others (kube-scheduler groups identical messages, and a 1,000-node answer should not repeat a
paragraph 1,000 times); the nodes where preemption helps apart from those where nothing does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from extender.gangs.identity import split_key
from topology.decisions import UserError, Victim, Wait, WaitCode
from topology.wait_reasons import held_by

PREEMPTION_CODES = (WaitCode.PREEMPTIBLE, WaitCode.PREEMPTING)


class VerbError(Exception):
    """A request the verb rejects with an HTTP status (preempt has no Error field)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def user_error(pod_key: str, annotation: str, err: UserError) -> str:
    """HiveD's user-error wording, naming the pod, the annotation and the field."""
    return f"topogang: User Error: [{pod_key}]: {annotation}: {err.field}: {err.message}"


def wait_text(gang: str, w: Wait) -> str:
    return f"topogang: gang {gang} waits [{w.reason.code.value}]: {w.reason.message}"


def preemption_nodes(w: Wait) -> dict[str, tuple[str, ...]]:
    """The nodes where preemption helps a waiting gang (they go to FailedNodes), with the victims.

    Only nodes that hold victims of the core's plan: the core's `reserve` already searched for a
    preemption plan, so for any other wait no preemption can help. Listing a node without victims
    would make kube-scheduler's dry run fail there ("expected at least one victim pod on node") and
    log an error every cycle, so every other node goes to FailedAndUnresolvableNodes."""
    if w.reason.code not in PREEMPTION_CODES:
        return {}
    return w.victims_by_node()


def slots_taken(
    gang: str, slot_key: str | None, holder: str | None, leaf_number: int, going: str | None = None
) -> str:
    """Why a member of a placed gang waits: the gang is `going` ("evicted", "preempted": no pod
    joins it meanwhile), its named slot's holder is alive, or every slot of its shape is claimed."""
    taken = (
        f"the gang is being {going}, and no new pod joins it meanwhile; this pod waits until that is over"
        if going is not None
        else held_by(gang, slot_key, holder)
        if holder is not None
        else f"every slot of {leaf_number} leaf cells is claimed by another member"
    )
    return f"topogang: gang {gang} waits [{WaitCode.RESERVED.value}]: {taken}"


def slot_rejected(gang: str, slot_nodes: Iterable[str]) -> str:
    return (
        f"topogang: gang {gang} holds this pod's slot on {some(sorted(slot_nodes))}, which "
        "kube-scheduler's own filters rejected"
    )


def some(items: Sequence[str], limit: int = 8) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def victims_shown(namespace: str, victims: Sequence[Victim]) -> str:
    """A node's victims as a pod of `namespace` may read them: kube-scheduler copies the filter's
    texts into that pod's Events and conditions, which anyone who reads its namespace sees, so the
    pod UIDs of another namespace's gangs are only counted (as `vc_order.shown` leaves another
    namespace's gang unnamed)."""
    own = [v.pod_uid for v in victims if namespace and split_key(v.gang)[0] == namespace]
    others = len(victims) - len(own)
    if not own:
        return f"{others} preemptible {'pod' if others == 1 else 'pods'} of other namespaces"
    shown = f"preemptible pods: {some(own)}"
    return shown + (f" and {others} of other namespaces" if others else "")


def waiting_nodes(
    gang: str,
    w: Wait,
    text: str,
    names: Sequence[str],
    unknown: Mapping[str, str],
    *,
    evicts_itself: bool,
) -> tuple[dict[str, str], dict[str, str]]:
    """A waiting gang's failed and unresolvable nodes: the whole reason (`text`) on the first node,
    a pointer to it on the others. With filter-time preemption (`evicts_itself`) the extender
    evicts the victims itself: kube-scheduler's dry run would only find no victims of its own on
    these nodes and log an error every cycle, so none goes to FailedNodes. Victims are named only
    to a pod of their own namespace (`victims_shown`)."""
    short = f"topogang: gang {gang} waits [{w.reason.code.value}] (reason on one node)"
    namespace = split_key(gang)[0]
    by_node: dict[str, list[Victim]] = {}
    for v in w.victims:
        by_node.setdefault(v.node, []).append(v)
    preemptible = {} if evicts_itself else preemption_nodes(w)
    failed: dict[str, str] = {}
    unresolvable: dict[str, str] = {}
    first = True
    for n in names:
        if n in unknown:
            unresolvable[n] = unknown[n]
            continue
        msg = text if first else short
        if n in by_node:
            msg = f"topogang: node({n}) has {victims_shown(namespace, by_node[n])}; {msg}"
        first = False
        if n in preemptible:
            failed[n] = msg
        else:
            unresolvable[n] = msg
    return failed, unresolvable
