"""A pod spec's fields as the pod contract reads them: numbers, booleans and strings as HiveD's
YAML writes them, and an affinity group's members with their slot shape.

Each reader raises `UserError` naming the field's path in the spec, with what it expected and got.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from topology.decisions import Member, UserError

_TRUE = {"true", "yes", "on", "y"}
_FALSE = {"false", "no", "off", "n"}


def spec_int(spec: Mapping[str, Any], key: str, path: str, default: int | None = None) -> int | None:
    value = spec.get(key)
    if value is None:
        return default
    if type(value) is str and len(value) <= 10 and value.isascii() and value.isdigit():
        return int(value)  # a number as a spec writes it (the reader keeps numbers as their text)
    text = str(value).strip() if not isinstance(value, dict | list) else None
    if text is None or not re.fullmatch(r"[+-]?\d{1,10}", text):
        shown = (
            "a mapping" if isinstance(value, dict) else "a list" if isinstance(value, list) else repr(value)
        )
        raise UserError(path, f"expected an integer, got {shown}")
    return int(text)


def spec_bool(spec: Mapping[str, Any], key: str, path: str, default: bool) -> bool:
    value = spec.get(key)
    if value is None:
        return default
    text = str(value).strip().lower() if isinstance(value, str) else None
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise UserError(path, f"expected true or false, got {value!r}")


def spec_str(spec: Mapping[str, Any], key: str, path: str) -> str | None:
    value = spec.get(key)
    if value is None:
        return None
    if isinstance(value, dict | list):
        raise UserError(path, f"expected a string, got a {'mapping' if isinstance(value, dict) else 'list'}")
    text = str(value).strip()
    return text or None


def read_members(group: Mapping[str, Any]) -> tuple[list[Member], list[str | None]]:
    """The members as written (their ranges are `check_ranges`'s; a missing number is as good as
    zero, and none at all is no members)."""
    raw = group.get("members")
    if raw is None:
        return [], []
    if not isinstance(raw, list) or not raw:
        raise UserError("affinityGroup.members", "expected a non-empty list of {podNumber, leafCellNumber}")
    members: list[Member] = []
    roles: list[str | None] = []
    for i, m in enumerate(raw):
        path = f"affinityGroup.members[{i}]"
        if not isinstance(m, dict):
            raise UserError(path, "expected a mapping with podNumber and leafCellNumber")
        pods = spec_int(m, "podNumber", f"{path}.podNumber")
        leaves = spec_int(m, "leafCellNumber", f"{path}.leafCellNumber")
        if leaves is None and "gpuNumber" in m:
            leaves = spec_int(m, "gpuNumber", f"{path}.leafCellNumber")
        members.append(Member(pods or 0, leaves or 0))
        roles.append(spec_str(m, "taskRole", f"{path}.taskRole"))
    return members, roles


def at_most(members: list[Member], max_pods: int, field: str) -> None:
    pods = sum(m.pod_number for m in members)
    if pods > max_pods:
        raise UserError(field, f"{pods} pods, more than the cluster's {max_pods} GPUs: it can never run")


def role_leaves(slot_keys: tuple[str, ...], members: list[Member]) -> dict[str, int]:
    out: dict[str, int] = {}
    i = 0
    for m in members:
        for _ in range(m.pod_number):
            out.setdefault(slot_keys[i].rsplit("/", 1)[0], m.leaf_number)
            i += 1
    return out


def slot_ranges(keys: tuple[str, ...]) -> str:
    roles: dict[str, int] = {}
    for k in keys:
        role = k.rsplit("/", 1)[0]
        roles[role] = roles.get(role, 0) + 1
    return ", ".join(f"{r}/0..{n - 1}" for r, n in roles.items())
