"""Apache YuniKorn: annotations `yunikorn.apache.org/task-group-name`, `yunikorn.apache.org/task-groups`
(JSON list of `{name, minMember, minResource, ...}`) and `yunikorn.apache.org/schedulingPolicyParameters`
(`placeholderTimeoutInSeconds=N gangSchedulingStyle=Soft|Hard`); the application is the label
`applicationId` (or `yunikorn.apache.org/app-id`, or Spark's `spark-app-selector`).

The whole application is one gang: one member per task group that asks for GPUs (`minMember` pods
of `minResource` `nvidia.com/gpu` each). topogang sees one pod at a time, so every member pod carries
the task-groups annotation (YuniKorn needs it only on the originator)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from config.untrusted import ANNOTATION_LIMITS, UntrustedError, read_json
from extender.conventions.common import (
    Claim,
    annotations_of,
    count,
    gpu_resource,
    labels,
    seconds,
    style,
    text,
)
from topology.decisions import Member, UserError

TASK_GROUP_NAME = "yunikorn.apache.org/task-group-name"
TASK_GROUPS = "yunikorn.apache.org/task-groups"
POLICY = "yunikorn.apache.org/schedulingPolicyParameters"
APP_LABELS = ("applicationId", "yunikorn.apache.org/app-id", "spark-app-selector")
DEFAULT_TIMEOUT = 15 * 60.0
DEFAULT_SOFT = True  # YuniKorn's default style


def app_id(pod: Mapping[str, Any]) -> str | None:
    lb, ann = labels(pod), annotations_of(pod)
    for key in APP_LABELS:
        v = text(lb.get(key)) or text(ann.get(key))
        if v is not None:
            return v
    return None


def task_groups(raw: str) -> list[tuple[str, int, int | None]]:
    """(name, minMember, GPUs per member or None) per task group."""
    try:
        doc = read_json(raw, ANNOTATION_LIMITS)
    except UntrustedError as err:
        raise UserError(f"{TASK_GROUPS}{'.' + err.path if err.path else ''}", err.message) from None
    if not isinstance(doc, list) or not doc:
        raise UserError(TASK_GROUPS, "expected a non-empty JSON list of {name, minMember, minResource}")
    out: list[tuple[str, int, int | None]] = []
    for i, g in enumerate(doc):
        if not isinstance(g, dict) or text(g.get("name")) is None:
            raise UserError(f"{TASK_GROUPS}[{i}].name", "is missing")
        n = count(g.get("minMember"), f"{TASK_GROUPS}[{i}].minMember", minimum=0)
        res = g.get("minResource")
        gpus = gpu_resource(res)
        if res is not None and not isinstance(res, dict):
            raise UserError(f"{TASK_GROUPS}[{i}].minResource", "expected a mapping of resources")
        out.append((str(g["name"]).strip(), n or 0, gpus))
    names = [g[0] for g in out]
    if len(set(names)) != len(names):
        raise UserError(TASK_GROUPS, "a task group name is listed twice")
    return out


def policy(raw: object) -> tuple[float | None, bool | None]:
    """(placeholderTimeoutInSeconds, soft) from `key=value` pairs separated by spaces."""
    if not isinstance(raw, str):
        return None, None
    timeout: float | None = None
    soft: bool | None = None
    for part in raw.split():
        key, _, value = part.partition("=")
        if key == "placeholderTimeoutInSeconds":
            timeout = seconds(value, f"{POLICY}.placeholderTimeoutInSeconds")
        elif key == "gangSchedulingStyle":
            soft = style(value, f"{POLICY}.gangSchedulingStyle")
    return timeout, soft


def claim(pod: Mapping[str, Any], namespace: str, gpus: int) -> Claim | None:
    ann = annotations_of(pod)
    group = text(ann.get(TASK_GROUP_NAME))
    if group is None:
        return None
    raw = text(ann.get(TASK_GROUPS))
    if raw is None:
        raise UserError(
            TASK_GROUPS,
            f"is missing: the pod names task group {group}, and topogang reads the groups' sizes from "
            "every member pod",
        )
    app = app_id(pod)
    if app is None:
        raise UserError(f"label {APP_LABELS[0]}", f"is missing: task group {group} belongs to no application")
    groups = task_groups(raw)
    mine = next((g for g in groups if g[0] == group), None)
    if mine is None:
        raise UserError(TASK_GROUP_NAME, f"{group} is not one of the task groups {[g[0] for g in groups]}")
    # GPUs per member: the group's minResource, else (for this pod's group) the pod's own request
    shape: list[Member] = []
    for name, n, g in groups:
        leaves = g if g is not None else (gpus if name == group else None)
        if n > 0 and leaves:
            shape.append(Member(n, leaves))
    leaf = mine[2] if mine[2] else None
    timeout, soft = policy(ann.get(POLICY))
    return Claim(
        "yunikorn",
        f"annotation {TASK_GROUP_NAME}",
        app,
        f"{namespace}/{app}",
        None,
        members=tuple(shape) if shape else None,
        leaf_number=leaf,
        ttl_seconds=timeout if timeout is not None else DEFAULT_TIMEOUT,
        soft=soft if soft is not None else DEFAULT_SOFT,
    )
