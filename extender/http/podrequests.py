"""How the verbs learn a pod's gang request, and keep it for the bind that carries only names.

From the pod's own spec (HiveD's or topogang's annotation; a FrameworkController pod's with its
Framework), else from the conventions (PodGroups, YuniKorn, Spark, GPU pods: `extender.conventions`).
A request is cached per pod UID and spec text (`PodCache`), and a pod that holds a slot keeps the
identity it was bound with. The scheduler is seen here as a `Reader`: what reading takes of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from extender.conventions.edge import Conventions, Host
from extender.gangs.entitlement import Gate, grant
from extender.gangs.identity import one_pod_key
from extender.gangs.podspec import PodRequest, annotation_of, is_enabled, pod_request, spec_text
from extender.http import wire
from extender.http.answers import user_error
from extender.http.podcache import PodCache
from extender.http.ports import FrameworkLookup, PodLookup
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
    async def request_of(self, pod: wire.WirePod) -> PodRequest: ...


async def read(s: Reader, pod: wire.WirePod) -> PodRequest:
    """The pod's gang request (cached per UID and spec text), as its namespace may make it
    (`extender.gangs.entitlement`, checked on every read: a reload may change the rules). Raises
    `UserError`."""
    return s.entitlement.check(await _read(s, pod), pod.raw)


async def _read(s: Reader, pod: wire.WirePod) -> PodRequest:
    _, text = spec_text(pod.raw)
    if text is None:  # gangs from PodGroups, YuniKorn, Spark, GPU pods (extender.conventions)
        got = await s.conventions.request_of(s, pod)
        if got is not None:  # not cached: an elastic member or a Soft gang's may change
            s.pods.remember(s.pods.same_identity(s.core, got), None)
            return got
    cached = s.pods.read_from(pod.uid, text)
    if cached is not None:
        return cached
    pr = parse(s, pod, None)
    if pr.task is not None and pr.request.name == one_pod_key(pod.namespace, pod.name) and s.framework_lookup:
        fw = await s.framework_lookup(pr.task.namespace, pr.task.framework)
        if fw is None:  # not cached: the Framework may be readable next time
            return s.pods.same_identity(s.core, pr)
        pr = parse(s, pod, fw)
    s.pods.remember(s.pods.same_identity(s.core, pr), text)
    return pr


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
        max_pods=s.core.gpu_count,
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
