"""How the verbs learn a pod's gang request, and keep it for the bind that carries only names.

From the pod's own spec (HiveD's or topogang's annotation; a FrameworkController pod's with its
Framework), else from the conventions (PodGroups, YuniKorn, Spark, GPU pods: `extender.conventions`).
A request is cached per pod UID and spec text (`PodCache`) once the verb's question to the core has
accepted it (a pod that holds a slot keeps the identity it was bound with: `topology.asks`, so a
refused request never replaces the holder's): reading hands the verb what to keep (`Unkept`). The
scheduler is seen here as a `Reader`: what reading takes of it; reading asks nothing of the core.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from extender.conventions.edge import Conventions, Host, base_gang
from extender.gangs.entitlement import Gate, grant
from extender.gangs.identity import one_pod_key
from extender.gangs.podspec import (
    FrameworkTask,
    PodRequest,
    annotation_of,
    is_enabled,
    pod_request,
    spec_text,
)
from extender.http import wire
from extender.http.answers import user_error
from extender.http.podcache import PodCache
from extender.http.ports import FrameworkLookup, PodLookup
from topology.asks import MemberAsk
from topology.decisions import UserError


class Reader(Host, Protocol):
    """What reading a request takes of the scheduler (`extender.http.verbs.Scheduler`)."""

    @property
    def conventions(self) -> Conventions: ...
    @property
    def pods(self) -> PodCache: ...
    @property
    def framework_lookup(self) -> FrameworkLookup | None: ...
    @property
    def pod_lookup(self) -> PodLookup | None: ...
    @property
    def entitlement(self) -> Gate: ...
    @property
    def max_pods(self) -> int: ...
    @property
    def unkept(self) -> Unkept: ...
    async def request_of(self, pod: wire.WirePod) -> PodRequest: ...


class Unkept:
    """Requests read but not yet cached, by pod UID, with the spec text each was read from: the verb
    keeps one (`keep`) once the core accepted it, or drops it. Bounded: a verb that ends early leaves
    its entry, replaced by the pod's next read."""

    def __init__(self, limit: int = 4096) -> None:
        self.limit = limit
        self._held: dict[str, tuple[PodRequest, str | None, int]] = {}

    def hold(self, pr: PodRequest, text: str | None, epoch: int) -> None:
        """`epoch`: the cache's when the read began (a reload may land before the verb keeps it)."""
        if len(self._held) >= self.limit:
            self._held.clear()
        self._held[pr.uid] = (pr, text, epoch)

    def settled(self, pr: PodRequest) -> None:
        """The request as its namespace may make it (a PriorityClass's priority settled) replaces
        the one held as read: a bind claims with what it keeps, and the gang was placed as granted."""
        held = self._held.get(pr.uid)
        if held is not None and held[0] is not pr:
            self._held[pr.uid] = (pr, held[1], held[2])

    def keep(self, pods: PodCache, uid: str) -> None:
        """Cache the request the pod's last read found, as granted (the entitlement is checked again
        on every read), if it was not read from the cache."""
        held = self._held.pop(uid, None)
        if held is not None:
            pods.remember(*held)

    def drop(self, uid: str) -> None:
        self._held.pop(uid, None)


async def read(s: Reader, pod: wire.WirePod) -> PodRequest:
    """The pod's gang request (cached per UID and spec text), as its namespace may make it
    (`extender.gangs.entitlement`, checked on every read: a reload may change the rules). Raises
    `UserError`."""
    granted = s.entitlement.check(await _read(s, pod), pod.raw)
    s.unkept.settled(granted)
    return granted


async def _read(s: Reader, pod: wire.WirePod) -> PodRequest:
    _, text = spec_text(pod.raw)
    epoch = s.pods.epoch  # before any await: the config this read is made with
    if text is None:  # gangs from PodGroups, YuniKorn, Spark, GPU pods (extender.conventions)
        got = await s.conventions.request_of(s, pod)
        if got is not None:  # not read from the cache: an elastic member or a Soft gang's may change
            s.unkept.hold(got, None, epoch)
            return got
    cached = s.pods.read_from(pod.uid, text)
    if cached is not None:
        return cached
    pr = parse(s, pod, None)
    task = framework_shaped(pr)
    if task is not None and s.framework_lookup:
        fw = await s.framework_lookup(task.namespace, task.framework)
        if fw is None:  # not cached: the Framework may be readable next time
            return pr
        pr = parse(s, pod, fw)
    s.unkept.hold(pr, text, epoch)
    return pr


def framework_shaped(pr: PodRequest) -> FrameworkTask | None:
    """The task, when the pod is a FrameworkController task whose spec names no gang: its gang is
    shaped by its Framework object (read when it can be), so its own spec alone names only its
    one-pod gang."""
    shaped = pr.task is not None and pr.request.name == one_pod_key(pr.namespace, pr.name)
    return pr.task if shaped else None


def member_ask(pr: PodRequest, nodes: frozenset[str] | None) -> MemberAsk:
    """The core's question about a member: the pod's request, `nodes` as its suggested nodes."""
    rank = pr.task.index if pr.task is not None else None
    return MemberAsk(pr.narrowed_to(nodes), pr.uid, pr.leaf_number, pr.slot_key, rank)


def left_gang(pods: PodCache, before: PodRequest | None, pr: PodRequest) -> str | None:
    """The gang a pod left, when it now names another (a pending pod's annotations and labels can
    be edited, a UID reused) and no other pod of it is known: a reservation that no pod is left to
    claim goes now, as when its last pod is deleted, rather than holding its cells until its TTL.
    A convention's pod moving between its gang and the one-pod gangs derived from it (an elastic
    extra, a softened member) does so by design: that is no leaving. Any other move is one, a spec
    gang left for a convention's (a GPU pod's one-pod gang) as much as for another spec gang."""
    if before is None or before.gang == pr.gang:
        return None
    if not (before.from_spec or pr.from_spec) and base_gang(before.gang) == base_gang(pr.gang):
        return None
    return None if pods.others_in(before.gang, pr.uid) else before.gang


def moved_away(s: Reader, pr: PodRequest) -> str | None:
    """Why prioritize or preempt refuses a read that moves the pod out of a gang no other pod of
    it is known in (`left_gang`), or None. Only a filter that asks the core moves a pod to another
    gang: it lets the gang left go (`FilterAsk.abandon`); a filter that turns a stale framework
    attempt away asks nothing. kube-scheduler filters a pod before it prioritizes it or preempts
    for it, so such a read is a reused UID or a spec edited since; kept, it would leave the old
    reservation to no pod, and deleting the pod would no longer let it go before its TTL. The read
    is dropped: the pod stays its gang's."""
    left = left_gang(s.pods, s.pods.get(pr.uid), pr)  # reading caches nothing: the verb keeps it
    if left is None:
        return None
    s.unkept.drop(pr.uid)
    return (
        f"topogang: pod {pr.key} was filtered into gang {left}, and its spec now names gang "
        f"{pr.gang}: only a filter moves a pod to another gang"
    )


def explained(s: Reader, pod: wire.WirePod) -> PodRequest:
    """The request `POST /v1/explain` asks about: the pod's own spec, held to its namespace's
    entitlement as the filter would hold it (no cache, no conventions, no Event)."""
    return grant(s.entitlement.rules, parse(s, pod), pod.raw)


def parse(s: Reader, pod: wire.WirePod, framework: Mapping[str, Any] | None = None) -> PodRequest:
    """The request the pod's own spec makes on this scheduler's cluster (no cache, no conventions)."""
    return pod_request(
        pod.raw,
        pod.uid,
        pod.namespace,
        pod.name,
        namespace_vcs=s.namespace_vcs,
        ttl_seconds=s.ttl_seconds,
        framework=framework,
        max_pods=s.max_pods,
    )


async def for_bind(s: Reader, args: wire.BindingArgs) -> PodRequest | str:
    """The request of a pod that bind names but whose filter is not remembered (a restart between
    them), read from the API server; a string says why there is none (the bind's error)."""
    other = s.pods.uid_of(args.pod_namespace, args.pod_name)
    if s.pod_lookup is None:
        if other is not None:
            return (
                f"topogang: stale PodUID {args.pod_uid}: pod {args.pod_namespace}/{args.pod_name} "
                f"was filtered with UID {other}"
            )
        return (
            f"topogang: Pod cannot be bound without a scheduling placement: {args.key} was never "
            "filtered by topogang"
        )
    pod = await s.pod_lookup(args.pod_namespace, args.pod_name)
    if pod is None:
        return f"topogang: pod {args.pod_namespace}/{args.pod_name} does not exist"
    try:
        wp = wire.parse_pod(pod)
    except wire.WireError as err:
        return f"topogang: pod {args.pod_namespace}/{args.pod_name} from the API server: {err}"
    if wp.uid != args.pod_uid:
        return (
            f"topogang: stale PodUID {args.pod_uid}: pod {args.pod_namespace}/{args.pod_name} "
            f"now has UID {wp.uid}"
        )
    if not is_enabled(pod):
        return f"topogang: pod {args.key} does not opt in to topogang (no pod-scheduling-enable limit)"
    status = pod.get("status")
    phase = status.get("phase") if isinstance(status, Mapping) else None
    if phase in ("Succeeded", "Failed"):  # released when it finished: nothing may claim for it
        return f"topogang: pod {args.key} has finished ({phase})"
    try:
        return await s.request_of(wp)
    except UserError as err:
        return user_error(wp.key, annotation_of(pod), err)


def may_preempt(pod: Mapping[str, Any]) -> bool:
    """Whether filter-time preemption (Kubernetes mode) may evict for this pod: kube-scheduler's own
    dry run only reaches the preempt verb when its in-tree filters see the node full, which pods
    that request only the virtual opt-in resource never make it see. A pod may refuse
    (`preemptionPolicy: Never`)."""
    spec = pod.get("spec")
    return not (isinstance(spec, dict) and spec.get("preemptionPolicy") == "Never")
