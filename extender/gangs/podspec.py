"""The pod contract: which pods are ours, and the gang request each one carries.

A pod opts in with a positive resource limit `topogang.io/pod-scheduling-enable` (or HiveD's
`hivedscheduler.microsoft.com/pod-scheduling-enable`) on any container or init container, and
describes itself in the annotation `topogang.io/pod-scheduling-spec` (or HiveD's key), YAML or JSON,
with HiveD's fields and defaults (HiveD's doc/user-manual.md; every field in docs/pod-spec.md):

    virtualCluster, priority (0), pinnedCellId, leafCellType, leafCellNumber, gangReleaseEnable,
    lazyPreemptionEnable, ignoreK8sSuggestedNodes, affinityGroup {name, members [{podNumber,
    leafCellNumber}]}; the pre-v0.3 names gpuType / gpuNumber are read too.

`affinityGroup: null` is a one-pod gang named `pod:<pod>`. Gang names are per namespace: every name is
read in the pod's own namespace (`extender.gangs.identity`). topogang additions: an empty
`virtualCluster` falls back to the namespace's VC (`topogang.namespaceVirtualClusters`); members may
name their `taskRole`, which gives every FrameworkController task its own slot (`<role>/<index>`);
`promoteWhenQuota: true` lets an opportunistic gang become guaranteed where it runs once its VC has
quota for it (`topology/promotion.py`; HiveD never promotes), and lets a guaranteed gang start as a
guest in free room rather than preempt running guests in its VC's cells (`topology/room.py`).

FrameworkController pods (annotations `FC_FRAMEWORK_NAMESPACE`, `FC_FRAMEWORK_NAME`,
`FC_FRAMEWORK_ATTEMPT_INSTANCE_UID`, `FC_TASKROLE_NAME`, `FC_TASK_INDEX`) form one gang per framework
attempt, `<framework>/<attempt instance uid>` in the framework's namespace (which must be the pod's
own: a pod cannot join another namespace's framework), so a new attempt never collides with the
remains of the old one. With no `affinityGroup`, the Framework object (when the edge can read it)
gives the gang's shape: one member per task role that opts in.

Every bad spec raises `UserError` naming the field, with HiveD's wording where HiveD has one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from config.untrusted import SPEC_LIMITS, UntrustedError, read_flat_json, read_yaml, text_size, whole_number
from extender.gangs.identity import check_text, explicit_key, one_pod_key
from extender.gangs.optin import gpu_opt_in
from extender.gangs.specfields import (
    at_most,
    read_members,
    role_leaves,
    slot_ranges,
    spec_bool,
    spec_int,
    spec_str,
)
from extender.ops.bounded import ByteLRU
from topology.decisions import GangRequest, Member, UserError
from topology.requests import check_name, check_ranges

ENABLE_RESOURCES = ("topogang.io/pod-scheduling-enable", "hivedscheduler.microsoft.com/pod-scheduling-enable")
SPEC_ANNOTATIONS = ("topogang.io/pod-scheduling-spec", "hivedscheduler.microsoft.com/pod-scheduling-spec")
MAX_SPEC_BYTES = SPEC_LIMITS.max_bytes
# a gang of more pods than this can run on no cluster (the largest are ~100k GPUs); the scheduler
# passes its own cluster's GPU count, so slot keys are never expanded for a gang that cannot fit
MAX_PODS = 131_072
SPEC_CACHE_BYTES = 4 * 1024 * 1024  # thousands of distinct specs: HiveD's are a few hundred bytes

FC_NAMESPACE = "FC_FRAMEWORK_NAMESPACE"
FC_FRAMEWORK = "FC_FRAMEWORK_NAME"
FC_ATTEMPT = "FC_FRAMEWORK_ATTEMPT_INSTANCE_UID"
FC_ROLE = "FC_TASKROLE_NAME"
FC_INDEX = "FC_TASK_INDEX"

_QUANTITY = re.compile(r"^\s*([+-]?(\d+(\.\d*)?|\.\d+))([eE][+-]?\d+)?\s*([A-Za-z]*)\s*$")


@dataclass(frozen=True, slots=True)
class FrameworkTask:
    """The FrameworkController identity of a task pod."""

    namespace: str
    framework: str
    attempt: str
    role: str
    index: int

    @property
    def gang(self) -> str:
        return f"{self.namespace}/{self.framework}/{self.attempt}"

    @property
    def slot_key(self) -> str:
        return f"{self.role}/{self.index}"


@dataclass(frozen=True, slots=True)
class PodRequest:
    """One pod's part in its gang: the gang's request (identical for every member), this pod's GPUs,
    and its slot key when the gang's slots are named."""

    uid: str
    namespace: str
    name: str
    request: GangRequest
    leaf_number: int
    slot_key: str | None = None
    task: FrameworkTask | None = None
    ignore_suggested_nodes: bool = False
    spec_annotation: str = SPEC_ANNOTATIONS[0]  # where the request came from, for its errors
    priority_asked: bool = False  # the spec names a priority (its default 0 asks for nothing)
    # the pod's `metadata.creationTimestamp` as the API server wrote it: its gang's place in its
    # VC's order (`extender.gangs.vc_order`), read only when that order is asked
    created: str | None = None

    @property
    def gang(self) -> str:
        return self.request.name

    @property
    def key(self) -> str:
        return f"{self.uid}({self.namespace}/{self.name})"

    @property
    def from_spec(self) -> bool:
        """Whether the request is the pod's own spec annotation's (not a convention's)."""
        return self.spec_annotation in SPEC_ANNOTATIONS

    def narrowed_to(self, nodes: frozenset[str] | None) -> GangRequest:
        """The gang's request with kube-scheduler's candidate nodes as its suggested nodes (unless
        the pod ignores them), narrowed by the request's own (an elastic gang's domain)."""
        own = self.request.suggested_nodes
        theirs = None if self.ignore_suggested_nodes else nodes
        suggested = theirs if own is None else own if theirs is None else theirs & own
        last = _last_narrowed[0] if _last_narrowed else None
        if last is not None and last[0] is self.request and last[1] is suggested:
            return last[2]  # the gang's previous member, asked with the same node list
        got = replace(self.request, suggested_nodes=suggested)
        _last_narrowed[:] = [(self.request, suggested, got)]
        return got


# The last request narrowed, with its node set and the copy: a gang's members share one request
# (`_parts`) and kube-scheduler sends one node list (shared by `NodeLists`), so a member filtered
# after another of its gang reuses the copy. One entry: it holds no node list the lists let go.
_last_narrowed: list[tuple[GangRequest, frozenset[str] | None, GangRequest]] = []


# ------------------------------------------------------------------------------------------- opt-in
def positive_quantity(value: object) -> bool:
    """Whether a resource quantity (`1`, `"2"`, `"500m"`) is greater than zero."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int | float):
        return value > 0
    if not isinstance(value, str):
        return False
    if (number := whole_number(value)) is not None:  # "1", as almost every opt-in limit is written
        return number > 0
    m = _QUANTITY.match(value)
    if m is None:
        return False
    try:
        return float(m.group(1) + (m.group(4) or "")) > 0
    except ValueError:
        return False


def is_enabled(pod: Mapping[str, Any]) -> bool:
    """A container or init container has a positive `…/pod-scheduling-enable` limit, or the pod is
    of topogang's profile (`schedulerName: topogang`) and requests `nvidia.com/gpu`."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return False
    for group in ("containers", "initContainers"):
        containers = spec.get(group)
        if not isinstance(containers, list):
            continue
        for c in containers:
            res = c.get("resources") if isinstance(c, dict) else None
            limits = res.get("limits") if isinstance(res, dict) else None
            if isinstance(limits, dict) and any(positive_quantity(limits.get(k)) for k in ENABLE_RESOURCES):
                return True
    return gpu_opt_in(pod)


def pod_annotations(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = pod.get("metadata")
    ann = meta.get("annotations") if isinstance(meta, dict) else None
    return ann if isinstance(ann, dict) else {}


def creation_text(pod: Mapping[str, Any]) -> str | None:
    """The pod's `metadata.creationTimestamp`, as text (parsed only when its VC's order is asked)."""
    meta = pod.get("metadata")
    created = meta.get("creationTimestamp") if isinstance(meta, dict) else None
    return created if isinstance(created, str) else None


def framework_task(pod: Mapping[str, Any]) -> FrameworkTask | None:
    """The FrameworkController identity from the pod's annotations, when it has all of it."""
    ann = pod_annotations(pod)
    values = [ann.get(k) for k in (FC_NAMESPACE, FC_FRAMEWORK, FC_ATTEMPT, FC_ROLE, FC_INDEX)]
    if not all(isinstance(v, str) and v for v in values):
        return None
    ns, fw, attempt, role, index = (str(v) for v in values)
    if not (index.isascii() and index.isdigit()) or len(index) > 9:  # int() refuses "²" and 5,000 digits
        return None
    meta = pod.get("metadata")
    own = (meta.get("namespace") if isinstance(meta, dict) else None) or "default"
    if ns != own:  # FrameworkController creates a framework's pods in its namespace: this is no task of it
        return None
    return FrameworkTask(ns, fw, attempt, role, int(index))


def spec_text(pod: Mapping[str, Any]) -> tuple[str, str | None]:
    """(annotation key, text) of the pod's scheduling spec; topogang's key wins over HiveD's."""
    ann = pod_annotations(pod)
    for key in SPEC_ANNOTATIONS:
        v = ann.get(key)
        if isinstance(v, str) and v.strip():
            return key, v
    return SPEC_ANNOTATIONS[0], None


# ---------------------------------------------------------------------------------- field parsing
def annotation_of(pod: Mapping[str, Any]) -> str:
    """The spec annotation a pod's error names (the default one when it has none)."""
    return spec_text(pod)[0]


_specs: ByteLRU[str, dict[str, Any] | UntrustedError] = ByteLRU(SPEC_CACHE_BYTES, 4096)


def _read(text: str) -> dict[str, Any] | UntrustedError:
    """The spec document, read once per text (every member of a gang, and most single pods, carry the
    same spec; even libyaml costs ~0.2 ms a parse): what was read, or why it was refused. The cache is
    bounded in bytes (a document costs about three times its text)."""
    got = _specs.get(text)
    if got is None:
        try:
            doc = read_flat_json(text, SPEC_LIMITS)
            if doc is None:
                doc = read_yaml(text, SPEC_LIMITS)
            got = doc if isinstance(doc, dict) else UntrustedError("", _not_a_mapping(doc))
        except UntrustedError as exc:
            got = exc
        _specs.put(text, got, 3 * text_size(text) + 512)
    return got


def _not_a_mapping(doc: object) -> str:
    if doc is None:
        return "Annotation does not exist or is empty"
    return "expected a mapping of fields (virtualCluster, leafCellNumber, ...)"


def parse_spec(text: str, annotation: str = SPEC_ANNOTATIONS[0]) -> Mapping[str, Any]:
    """The spec document as a mapping (legacy gpu* keys renamed), shared with every reader of the
    same text: read it, never change it (a copy per read cost more than the rest of the parse).
    `UserError` names the field inside the spec (or the annotation, for the whole text)."""
    got = _read(text)
    if isinstance(got, UntrustedError):
        raise UserError(got.path or annotation, got.message)
    spec: Mapping[str, Any] = got
    for old, new in (("gpuType", "leafCellType"), ("gpuNumber", "leafCellNumber")):
        if new not in spec and old in spec:
            renamed = {k: v for k, v in spec.items() if k != old}  # the shared document stays as read
            renamed[new] = spec[old]
            spec = renamed
    return spec


def merge_members(members: list[Member]) -> list[Member]:
    """HiveD merges members of equal leafCellNumber (their podNumbers add up)."""
    order: list[int] = []
    count: dict[int, int] = {}
    for m in members:
        if m.leaf_number not in count:
            order.append(m.leaf_number)
            count[m.leaf_number] = 0
        count[m.leaf_number] += m.pod_number
    return [Member(count[n], n) for n in order]


def framework_members(framework: Mapping[str, Any]) -> list[tuple[str, int, int]]:
    """(task role, taskNumber, leafCellNumber) for each role of a Framework whose pods opt in."""
    spec = framework.get("spec")
    roles = spec.get("taskRoles") if isinstance(spec, dict) else None
    out: list[tuple[str, int, int]] = []
    for role in roles if isinstance(roles, list) else []:
        if not isinstance(role, dict) or not isinstance(role.get("name"), str):
            continue
        number = role.get("taskNumber", 1)
        task = role.get("task")
        template = task.get("pod") if isinstance(task, dict) else None
        if not isinstance(template, dict) or not isinstance(number, int) or number <= 0:
            continue
        if not is_enabled(template):
            continue
        key, text = spec_text(template)
        if text is None:
            continue
        try:
            leaves = spec_int(parse_spec(text, key), "leafCellNumber", "leafCellNumber")
        except UserError:
            continue
        if leaves is not None and leaves > 0:
            out.append((role["name"], number, leaves))
    return out


# ------------------------------------------------------------------------------------ the request
@dataclass(frozen=True, slots=True)
class _GangPart:
    """What a spec text makes of its gang for the pods of one namespace (and FrameworkController
    attempt): the same for every member, so it is read once per gang, not once per pod (`_parts`)."""

    request: GangRequest
    leaf_number: int
    role_leaves: Mapping[str, int] | None  # each task role's leaf cells, when the slots are named
    ignore_suggested_nodes: bool
    priority_asked: bool
    late_error: UserError | None = None  # a bad ignoreK8sSuggestedNodes: named after the pod's slot


# Keyed by everything `_gang_part` reads besides the pod's own identity: (spec text, annotation,
# namespace, the namespace's VC, TTL, max pods, the FrameworkController gang). Only requests with an
# `affinityGroup` are kept (a one-pod gang is named after its pod; a Framework-shaped one reads the
# Framework), and only good ones: a bad spec is read, and refused, every time.
_parts: ByteLRU[tuple[object, ...], _GangPart] = ByteLRU(SPEC_CACHE_BYTES, 4096)


def pod_request(
    pod: Mapping[str, Any],
    uid: str,
    namespace: str,
    name: str,
    *,
    namespace_vcs: Mapping[str, str] | None = None,
    ttl_seconds: float = 300.0,
    framework: Mapping[str, Any] | None = None,
    max_pods: int = MAX_PODS,
) -> PodRequest:
    """The pod's gang request. Raises `UserError` naming the field for every bad spec. A gang of
    more than `max_pods` pods (the scheduler passes its cluster's GPU count) is refused before
    anything is built per pod. The gang's part is read once per spec text and gang (`_parts`); each
    pod's own checks (its namespace, its task's slot) run on every read."""
    annotation, text = spec_text(pod)
    if text is None:
        raise UserError(annotation, "Annotation does not exist or is empty")
    task = framework_task(pod)
    vc_default = (namespace_vcs or {}).get(namespace)
    key = (text, annotation, namespace, vc_default, ttl_seconds, max_pods, task.gang if task else None)
    part = _parts.get(key)
    if part is None:
        part, shared = _gang_part(
            pod, text, annotation, namespace, name, task, vc_default, ttl_seconds, framework, max_pods
        )
        if shared and part.late_error is None:
            slots = part.request.slot_keys
            _parts.put(key, part, 3 * text_size(text) + 512 + 96 * (len(slots) if slots else 0))
    else:  # the checks that came before it passed for this key: the pod's own namespace is next
        _check_framework_namespace(pod, namespace)
    request, leaf_number = part.request, part.leaf_number
    slot_keys, slot_key = request.slot_keys, None
    if slot_keys is not None and task is not None:
        slot_key = task.slot_key
        if slot_key not in slot_keys:
            raise UserError(
                "affinityGroup.members",
                f"task {slot_key} is not a slot of gang {request.name} (slots: {slot_ranges(slot_keys)})",
            )
        role_leaves = part.role_leaves or {}
        if role_leaves.get(task.role) != leaf_number:
            raise UserError(
                "leafCellNumber",
                f"{leaf_number}, but the gang's member for task role {task.role} has "
                f"leafCellNumber {role_leaves.get(task.role)}",
            )
    if part.late_error is not None:
        raise part.late_error
    return PodRequest(
        uid=uid,
        namespace=namespace,
        name=name,
        request=request,
        leaf_number=leaf_number,
        slot_key=slot_key,
        task=task,
        ignore_suggested_nodes=part.ignore_suggested_nodes,
        spec_annotation=annotation,
        priority_asked=part.priority_asked,
        created=creation_text(pod),
    )


def _gang_part(
    pod: Mapping[str, Any],
    text: str,
    annotation: str,
    namespace: str,
    name: str,
    task: FrameworkTask | None,
    vc_default: str | None,
    ttl_seconds: float,
    framework: Mapping[str, Any] | None,
    max_pods: int,
) -> tuple[_GangPart, bool]:
    """The gang's request as the spec makes it, every range checked, and whether it may be shared
    by the gang's other pods (it has an `affinityGroup`). Raises `UserError`."""
    spec = parse_spec(text, annotation)
    vc = spec_str(spec, "virtualCluster", "virtualCluster")
    if vc is None:
        vc = vc_default
        if vc is None:
            raise UserError(
                "virtualCluster",
                f"VirtualCluster is empty, and namespace {namespace} has no VC in "
                "topogang.namespaceVirtualClusters",
            )
    priority = spec_int(spec, "priority", "priority", 0)
    assert priority is not None
    leaf_number = spec_int(spec, "leafCellNumber", "leafCellNumber") or 0
    pinned = spec_str(spec, "pinnedCellId", "pinnedCellId")
    leaf_type = None if pinned is not None else spec_str(spec, "leafCellType", "leafCellType")
    _check_framework_namespace(pod, namespace)
    if task is not None:  # what its gang's key and slot key are made of: annotations, the tenant's
        for value, key in ((task.framework, FC_FRAMEWORK), (task.attempt, FC_ATTEMPT), (task.role, FC_ROLE)):
            check_text(value, key)
        check_text(task.gang, FC_FRAMEWORK)  # the key they make, bounded as every gang's
    group = spec.get("affinityGroup")
    slot_keys: tuple[str, ...] | None = None
    if group is None:
        fw_members = framework_members(framework) if framework is not None and task is not None else []
        if task is not None and fw_members:
            gang = task.gang
            members = [Member(n, leaves) for _role, n, leaves in fw_members]
            at_most(members, max_pods, "taskRoles[].taskNumber")
            slot_keys = tuple(f"{role}/{i}" for role, n, _ in fw_members for i in range(n))
        else:
            gang = one_pod_key(namespace, name)
            members = [Member(1, leaf_number)]
    else:
        if not isinstance(group, dict):
            raise UserError("affinityGroup", "expected a mapping with name and members, or null")
        group_name = spec_str(group, "name", "affinityGroup.name") or ""
        check_name(group_name)
        members, roles = read_members(group)
        at_most(members, max_pods, "affinityGroup.members")
        named = [r for r in roles if r is not None]
        if named and len(named) != len(roles):
            i = roles.index(None)
            raise UserError(
                f"affinityGroup.members[{i}].taskRole",
                "is missing: name the task role on every member or none",
            )
        if named:
            if len(set(named)) != len(named):
                raise UserError("affinityGroup.members", "a taskRole is listed twice")
            slot_keys = tuple(
                f"{r}/{i}" for r, m in zip(named, members, strict=True) for i in range(m.pod_number)
            )
        gang = task.gang if task is not None else explicit_key(namespace, group_name, "affinityGroup.name")
        for i, r in enumerate(roles):
            check_text(r or "", f"affinityGroup.members[{i}].taskRole")
    request = GangRequest(
        name=gang,
        vc=vc,
        members=tuple(members),
        priority=priority,
        leaf_type=leaf_type,
        pinned_cell_id=pinned,
        lazy_preemption=spec_bool(spec, "lazyPreemptionEnable", "lazyPreemptionEnable", False),
        gang_release=spec_bool(spec, "gangReleaseEnable", "gangReleaseEnable", False),
        ttl_seconds=ttl_seconds,
        slot_keys=slot_keys,
        promote_when_quota=spec_bool(spec, "promoteWhenQuota", "promoteWhenQuota", False),
    )
    check_ranges(request, leaf_number)  # as written: members merge only once each is known good
    if slot_keys is None and len(members) > 1:
        request = replace(request, members=tuple(merge_members(members)))
    late_error, ignore = None, False
    try:
        ignore = spec_bool(spec, "ignoreK8sSuggestedNodes", "ignoreK8sSuggestedNodes", False)
    except UserError as err:
        late_error = err
    part = _GangPart(
        request=request,
        leaf_number=leaf_number,
        role_leaves=role_leaves(slot_keys, members) if slot_keys is not None else None,
        ignore_suggested_nodes=ignore,
        priority_asked=spec.get("priority") is not None,
        late_error=late_error,
    )
    return part, isinstance(group, dict)


def _check_framework_namespace(pod: Mapping[str, Any], namespace: str) -> None:
    """A FrameworkController pod lives in its framework's namespace: one claiming another's would
    join (or read) that namespace's gang, so it is refused, naming the annotation."""
    claimed = pod_annotations(pod).get(FC_NAMESPACE)
    if claimed not in (None, "") and claimed != namespace:
        raise UserError(
            FC_NAMESPACE,
            f"{str(claimed)[:80]!r} is not the pod's own namespace {namespace!r}: a FrameworkController "
            "pod runs in its framework's namespace",
        )
