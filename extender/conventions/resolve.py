"""One pod, every convention it follows, one gang request — with plain dicts in and out (no I/O).

`references` names the API objects the conventions would read (PodGroups, a Workload, a Spark
driver pod); the edge fetches what it can and passes them to `resolve` as `objects`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from config.names import vc_from_label_value
from extender.conventions import coscheduling, spark, volcano, workload, yunikorn
from extender.conventions.common import (
    MIN_MEMBER,
    VIRTUAL_CLUSTER,
    Claim,
    Objects,
    ObjRef,
    annotations_of,
    labels,
    pod_timeout,
    text,
)
from extender.gangs.identity import explicit_key, one_pod_key
from extender.gangs.optin import GPU_RESOURCE, pod_gpus
from extender.gangs.podspec import PodRequest, creation_text, framework_task, merge_members, spec_text
from topology.decisions import GangRequest, Member, UserError
from topology.requests import check_ranges

# highest first; an explicit topogang/HiveD spec and FrameworkController identity come before all of
# these and are `extender.gangs.podspec`'s (a pod with either never reaches this module)
ORDER = ("workload", "coscheduling", "volcano", "yunikorn", "spark")
SOFT_BACKSTOP = 2.0  # a Soft gang's core TTL is this many times its timeout (the edge softens it first)

Existing = Callable[[str], GangRequest | None]


@dataclass(frozen=True, slots=True)
class Resolved:
    """A pod's gang request from the conventions, with what the edge needs besides it."""

    request: PodRequest
    source: str  # one of ORDER, or "pod" for a plain GPU pod
    timeout: float  # how long a partial reservation is held
    soft: bool  # after the timeout, the remaining members run as ordinary pods (YuniKorn's Soft)
    size: int  # pods in the gang's core
    topology_key: str | None = None  # the PodGroup's topology key that `request.within_level` came from
    independent: bool = False  # a `basic` group's pod: its own one-pod gang, as a plain GPU pod's

    @property
    def elastic(self) -> bool:
        """Whether pods beyond the core join as extras, narrowed to its domain, and the group's
        timeout is kept at the edge: every group convention's gang. Not a pod scheduled on its own
        (a plain GPU pod, a `basic` group's pod), which no other pod's placement may narrow."""
        return self.source != "pod" and not self.independent


def applies(pod: Mapping[str, Any]) -> bool:
    """Conventions decide only for pods with neither a topogang/HiveD spec nor FrameworkController
    identity (those are `extender.gangs.podspec`'s, whatever labels they also carry)."""
    return spec_text(pod)[1] is None and framework_task(pod) is None


def references(pod: Mapping[str, Any], namespace: str) -> list[ObjRef]:
    if not applies(pod):
        return []
    out: list[ObjRef] = []
    for refs in (workload.refs, coscheduling.refs, volcano.refs, spark.refs):
        out += refs(pod, namespace)
    return out


def claims(pod: Mapping[str, Any], namespace: str, gpus: int, objects: Objects) -> list[Claim]:
    """Every convention's claim, in precedence order."""
    found = [
        workload.claim(pod, namespace, objects),
        coscheduling.claim(pod, namespace, gpus, objects),
        volcano.claim(pod, namespace, gpus, objects),
        yunikorn.claim(pod, namespace, gpus),
        spark.claim(pod, namespace, gpus, objects),
    ]
    return [c for c in found if c is not None]


def check_agree(found: list[Claim]) -> None:
    """Two conventions naming different groups, or different sizes of one group, are a user error."""
    first = found[0]
    for other in found[1:]:
        sizes = (first.size, other.size)
        if other.group != first.group or (None not in sizes and sizes[0] != sizes[1]):
            raise UserError(
                f"{first.key} / {other.key}",
                f"the pod is in two different gangs: {first.where()} and {other.where()}; "
                "remove one, or make both name the same group and size",
            )


def _vc(pod: Mapping[str, Any], namespace: str, namespace_vcs: Mapping[str, str] | None) -> str:
    labelled = text(labels(pod).get(VIRTUAL_CLUSTER))
    vc = vc_from_label_value(labelled) if labelled else text(annotations_of(pod).get(VIRTUAL_CLUSTER))
    if vc is None:
        vc = (namespace_vcs or {}).get(namespace)
    if vc is None:
        raise UserError(
            "virtualCluster",
            f"the pod names no VC ({VIRTUAL_CLUSTER}), and namespace {namespace} has no VC in "
            "topogang.namespaceVirtualClusters",
        )
    return vc


def resolve(
    pod: Mapping[str, Any],
    uid: str,
    namespace: str,
    name: str,
    *,
    namespace_vcs: Mapping[str, str] | None = None,
    ttl_seconds: float = 300.0,
    objects: Objects | None = None,
    existing: Existing | None = None,
    claim_gpus: int = 0,
) -> Resolved | None:
    """The pod's gang from the conventions it follows; None when none applies and it asks for no GPUs
    (then `extender.gangs.podspec` answers). Raises `UserError` naming the label, annotation or field.
    `claim_gpus`: what the pod's ResourceClaims ask for (DRA mode). A pod asking GPUs both ways is
    refused: a device plugin serving `nvidia.com/gpu` picks any GPUs of the node, the claim's among
    them, and a DeviceClass serving it (KEP-5004) would need a second claim for the same slot."""
    if not applies(pod):
        return None
    if claim_gpus and pod_gpus(pod):
        raise UserError(
            f"spec.resourceClaims, {GPU_RESOURCE}",
            f"the pod asks {claim_gpus} GPUs through its ResourceClaims and {pod_gpus(pod)} through "
            f"{GPU_RESOURCE}; ask them one way only (claims: drop the {GPU_RESOURCE} request and opt in "
            "with topogang.io/pod-scheduling-enable)",
        )
    gpus = pod_gpus(pod) + claim_gpus
    found = claims(pod, namespace, gpus, objects or {})
    if not found:
        if gpus <= 0:
            return None
        found = [Claim("pod", GPU_RESOURCE, one_pod_key(namespace, name), one_pod_key(namespace, name), 1)]
    check_agree(found)
    c = found[0]
    if c.leaf_number and gpus and c.leaf_number != gpus:
        raise UserError(
            GPU_RESOURCE,
            f"the pod requests {gpus} GPUs, but {c.where()} gives its members {c.leaf_number}",
        )
    leaf = gpus or c.leaf_number or 0
    if leaf <= 0:
        raise UserError(
            GPU_RESOURCE,
            f"the pod requests no GPUs; a member of {c.where()} needs a positive {GPU_RESOURCE} "
            "request (or a topogang.io/pod-scheduling-spec with leafCellNumber)",
        )
    if c.independent:  # upstream schedules it as any pod: the one-pod gang no other pod can name
        gang = one_pod_key(namespace, name)
    else:
        gang = c.gang if c.source == "pod" else explicit_key(namespace, c.gang, c.key)
    known = existing(gang) if existing is not None else None
    members: tuple[Member, ...]
    if c.source == "spark" and known is not None:
        members = known.members  # executors join what their driver reserved
    elif c.members is not None:
        members = tuple(merge_members(list(c.members)))
    elif c.pods is not None:
        members = (Member(c.pods, leaf),)
    elif known is not None:
        members = known.members
    elif c.source == "spark":  # an executor of an app with no Spark conf in sight: an ordinary pod
        gang, members = f"{gang}/{name}", (Member(1, leaf),)
    else:
        raise UserError(
            c.key,
            f"the size of group {c.group} is unknown: its PodGroup cannot be read here; give it as the "
            f"pod annotation {MIN_MEMBER}",
        )
    timeout, soft = pod_timeout(pod)
    timeout = timeout or c.ttl_seconds or ttl_seconds
    is_soft = soft if soft is not None else bool(c.soft)
    request = GangRequest(
        name=gang,
        vc=_vc(pod, namespace, namespace_vcs),
        members=members,
        priority=c.priority or 0,
        ttl_seconds=timeout * SOFT_BACKSTOP if is_soft else timeout,
        within_level=None if c.topology_key is None else workload.level_of_key(c.topology_key),
    )
    check_ranges(request, leaf, members_of=c.where(), members_field=GPU_RESOURCE)
    pr = PodRequest(uid, namespace, name, request, leaf, spec_annotation=c.key, created=creation_text(pod))
    return Resolved(pr, c.source, timeout, is_soft, request.pod_count, c.topology_key, c.independent)
