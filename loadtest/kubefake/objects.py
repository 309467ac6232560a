"""Paths, objects and selectors as the API server reads them: the fake's vocabulary."""

from __future__ import annotations

import builtins
import copy
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import orjson

from extender.kube.client import ApiError

Obj = dict[str, Any]


def _copied(items: builtins.list[Obj]) -> builtins.list[Obj]:
    """A list's items as the client gets them: fresh objects, decoded from JSON as a real client
    decodes the server's answer (a deep copy where an object holds something JSON does not)."""
    try:
        out: builtins.list[Obj] = orjson.loads(orjson.dumps(items))
    except TypeError:
        return copy.deepcopy(items)
    return out


# ---------------------------------------------------------------------------------------- paths
@dataclass(frozen=True, slots=True)
class Ref:
    """A parsed API path: `group_version` is `v1` for the core group, else `group/version`."""

    group_version: str
    resource: str
    namespace: str | None  # None: cluster-scoped, or a collection across every namespace
    name: str | None
    subresource: str | None

    @property
    def kind_key(self) -> tuple[str, str]:
        return self.group_version, self.resource

    @property
    def key(self) -> tuple[str, str, str, str]:
        assert self.name is not None
        return self.group_version, self.resource, self.namespace or "", self.name


def parse_path(path: str) -> Ref:
    parts = [unquote(p) for p in path.split("?", 1)[0].strip("/").split("/")]
    if parts[:1] == ["api"] and len(parts) >= 3:
        gv, rest = parts[1], parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 4:
        gv, rest = f"{parts[1]}/{parts[2]}", parts[3:]
    else:
        raise ApiError(404, f"the server could not find the requested resource ({path})", "NotFound")
    namespace = None
    if rest[0] == "namespaces" and len(rest) >= 3:  # /namespaces/{ns} alone is the Namespace object
        namespace, rest = rest[1], rest[2:]
    if len(rest) > 3 or not all(rest):
        raise ApiError(404, f"the server could not find the requested resource ({path})", "NotFound")
    return Ref(gv, rest[0], namespace, rest[1] if len(rest) > 1 else None, rest[2] if len(rest) > 2 else None)


def _meta(obj: Mapping[str, Any]) -> dict[str, Any]:
    return _part(obj, "metadata")


def _part(obj: Mapping[str, Any], key: str) -> dict[str, Any]:
    """`obj[key]` when it is a mapping, else an empty (throw-away) one."""
    v = obj.get(key)
    return v if isinstance(v, dict) else {}


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def _lookup(obj: Mapping[str, Any], dotted: str) -> str | None:
    cur: Any = obj
    for part in dotted.split("."):
        if not isinstance(cur, dict):
            return None
        cur = cur.get(part)
    return None if cur is None else str(cur)


_REQ = re.compile(r"^(!?)([^=!]+?)\s*(?:(==|=|!=)\s*(.*))?$")


def _selector(text: str, get: Callable[[str], str | None], what: str) -> Callable[[], bool]:
    """Equality-based selector terms (`k=v`, `k==v`, `k!=v`, `k`, `!k`), all of which must hold."""
    terms: list[tuple[str, str, str]] = []  # (key, op, value); op: "exists", "absent", "=", "!="
    for term in (t.strip() for t in text.split(",")):
        if not term:
            continue
        m = _REQ.match(term)
        if m is None or " in " in term or " notin " in term or (m.group(1) and m.group(3)):
            raise ApiError(400, f"unsupported {what} {term!r}", "BadRequest")
        key, op = m.group(2).strip(), m.group(3)
        if op is None:
            terms.append((key, "absent" if m.group(1) else "exists", ""))
        else:
            terms.append((key, "!=" if op == "!=" else "=", m.group(4).strip()))

    def holds() -> bool:
        for key, op, value in terms:
            got = get(key)
            ok = {"exists": got is not None, "absent": got is None, "=": got == value, "!=": got != value}[op]
            if not ok:
                return False
        return True

    return holds


def _label_of(obj: Mapping[str, Any]) -> Callable[[str], str | None]:
    labels = _part(_meta(obj), "labels")
    return lambda k: None if k not in labels else str(labels[k])


def matches(obj: Mapping[str, Any], query: Sequence[tuple[str, str]]) -> bool:
    for key, value in query:
        if key == "labelSelector":
            if not _selector(value, _label_of(obj), key)():
                return False
        elif key == "fieldSelector" and not _selector(value, lambda k: _lookup(obj, k), key)():
            return False
    return True
