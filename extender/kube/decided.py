"""A bound pod's request after a restart: what its spec says now, and what topogang decided.

A pod's annotations stay editable after its bind, so the spec read at a start may name another VC,
a higher priority or `promoteWhenQuota` than the gang was given. The (verified) bind info records
the decision, and wins (`as_decided`); a spec that no longer parses is rebuilt from it alone
(`from_bind_info`). Kept apart from `extender.kube.recovery`, which groups and adopts the pods.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from extender.gangs.bindinfo import BindInfo
from extender.gangs.identity import gang_key
from extender.gangs.podspec import PodRequest, pod_request
from extender.kube import pods as kpods
from topology.decisions import GangRequest, Member, UserError

# a pod's request as its namespace may make it, keeping the priority its gang was given (bind info's
# record, if any): `extender.gangs.entitlement.grant` with `held`; else UserError
Entitle = Callable[[PodRequest, Mapping[str, Any], "int | None"], PodRequest]


def from_bind_info(pod: Mapping[str, Any], info: BindInfo, ttl_seconds: float) -> PodRequest | None:
    """A request rebuilt from topogang's bind info alone, for a pod whose spec no longer parses or
    does not name its gang. The recorded priority is the one the gang asked for even when it ran
    downgraded (the gang comes back opportunistic by its empty cell types, `Core.adopt`), so the
    request is the one its still-pending members are filtered with. Annotations written before the
    bind info recorded it that way say -1 for a downgraded gang and are taken as they say."""
    if info.gang is None or info.vc is None:
        return None
    sizes: dict[int, int] = {}
    for p in info.placements:
        sizes[len(p.gpus)] = sizes.get(len(p.gpus), 0) + 1
    req = GangRequest(
        name=gang_key(kpods.namespace(pod), info.gang),  # HiveD's global names: the pod's namespace's
        vc=info.vc,
        members=tuple(Member(n, leaves) for leaves, n in sizes.items()),
        priority=info.priority if info.priority is not None else 0,
        ttl_seconds=ttl_seconds,
    )
    return PodRequest(
        kpods.uid(pod),
        kpods.namespace(pod),
        kpods.name(pod),
        req,
        len(info.gpus),
        info.slot_key,
        None,
        False,
        "",
    )


def as_decided(
    pod: Mapping[str, Any], pr: PodRequest, info: BindInfo | None, ttl_seconds: float, entitle: Entitle | None
) -> PodRequest | str:
    """The bound pod's request as topogang decided it. A pod's annotations stay editable after its
    bind, so the spec read now may name another VC, a higher priority or `promoteWhenQuota`: the
    VC and priority its (verified) bind info records win, and a request its namespace may not make
    (`entitle`) comes back as the bind info alone records it. A string: why neither can be adopted
    (its GPUs are then held without quota or priority)."""
    recorded = info.priority if info is not None else None
    req = pr.request
    if info is not None and info.vc is not None and req.vc != info.vc:
        req = replace(req, vc=info.vc)
    got = capped(pr if req is pr.request else replace(pr, request=req), recorded)
    if entitle is None:
        return got
    try:  # its priority settled as the filter settles it (a PriorityClass's), never above the decided one
        return capped(entitle(got, pod, recorded), recorded)
    except UserError as err:
        rebuilt = from_bind_info(pod, info, ttl_seconds) if info is not None else None
        return rebuilt if rebuilt is not None else f"its spec asks for more than its namespace may use: {err}"


def capped(pr: PodRequest, priority: int | None) -> PodRequest:
    """The request with its priority at most `priority` (the one its bind info records), if any."""
    if priority is None or pr.request.priority <= priority:
        return pr
    return replace(pr, request=replace(pr.request, priority=priority))


def spec_request(
    pod: Mapping[str, Any], namespace_vcs: Mapping[str, str] | None, ttl_seconds: float
) -> PodRequest:
    """The pod's request as its spec annotation states it, read as at filter (a `UserError` if bad)."""
    return pod_request(
        pod,
        kpods.uid(pod),
        kpods.namespace(pod),
        kpods.name(pod),
        namespace_vcs=namespace_vcs,
        ttl_seconds=ttl_seconds,
    )
