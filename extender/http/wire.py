"""kube-scheduler's extender requests, parsed into typed arguments (the replies: `extender.http.replies`).

kube-scheduler marshals its untagged Go structs, so request keys are PascalCase and nil values are
explicit `null`; Go decodes our replies case-insensitively. We read keys case-insensitively too (some
third-party senders copied the old lower-case tags) and always answer with the canonical PascalCase
names and explicit nulls. Every malformed input raises `WireError` naming the offending path, so the
caller can answer with a message a human can act on. See k8s.io/kube-scheduler/extender/v1 (types.go).
A server that is given a `NodeLists` shares kube-scheduler's node lists from request to request.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from config.untrusted import BODY_DEPTH, UntrustedError, check_depth
from extender.http.nodelists import MIN_SHARED, NodeLists

MAX_NAME = 253  # a Kubernetes object name is at most 253 characters


class WireError(ValueError):
    """A request that does not have the extender protocol's shape; `path` names the offending key."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path
        self.message = message


@dataclass(frozen=True, slots=True)
class WirePod:
    """The identity of the `Pod` a request carries, plus the raw object for the pod contract."""

    uid: str
    namespace: str
    name: str
    raw: Mapping[str, Any]

    @property
    def key(self) -> str:
        return f"{self.uid}({self.namespace}/{self.name})"


@dataclass(frozen=True, slots=True)
class ExtenderArgs:
    """Filter and prioritize request. With `nodeCacheCapable: true` only `node_names` is set; otherwise
    `nodes` holds the full node objects (answered in the same form)."""

    pod: WirePod
    node_names: tuple[str, ...] | None
    nodes: tuple[Mapping[str, Any], ...] | None

    @property
    def names(self) -> tuple[str, ...]:
        if self.node_names is not None:
            return self.node_names
        if self.nodes is not None:
            return tuple(node_name(n) for n in self.nodes)
        return ()


@dataclass(frozen=True, slots=True)
class BindingArgs:
    pod_name: str
    pod_namespace: str
    pod_uid: str
    node: str

    @property
    def key(self) -> str:
        return f"{self.pod_uid}({self.pod_namespace}/{self.pod_name})"


@dataclass(frozen=True, slots=True)
class PreemptionArgs:
    """Preempt request: kube-scheduler's candidate nodes and the victims its dry run chose on each
    (pod UIDs), from whichever of the two maps was filled."""

    pod: WirePod
    victims: dict[str, tuple[str, ...]]


# ---------------------------------------------------------------------------------------- parsing
def loads(body: bytes, lists: NodeLists | None = None) -> object:
    """The request body as JSON, or `WireError` saying why not.

    A body that ends with the very bytes of a node list `lists` holds is decoded without them: its
    `NodeNames` is that list's shared tuple (`NodeLists.known_body`)."""
    if not body.strip():
        raise WireError("", "request body is empty; expected a JSON object")
    if lists is not None:
        doc = lists.known_body(body)
        if doc is not None:
            return doc
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise WireError("", f"request body is not JSON: {exc}") from None
    if lists is not None:
        lists.note_body(body, doc)
    return doc


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _object(value: object, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise WireError(path, f"expected an object, got {_kind(value)}")
    return value


def _folded(doc: object, what: str) -> dict[str, Any]:
    """Top-level keys lower-cased (Go matches struct fields case-insensitively)."""
    obj = _object(doc, "")
    if not obj and what:
        raise WireError("", f"empty object; expected {what}")
    return {str(k).lower(): v for k, v in obj.items()}


def _required(doc: dict[str, Any], key: str) -> object:
    if key.lower() not in doc:
        raise WireError(key, "required key is missing")
    return doc[key.lower()]


def _name(value: object, path: str, *, required: bool = True) -> str:
    if not isinstance(value, str):
        raise WireError(path, f"expected a string, got {_kind(value)}")
    if required and not value:
        raise WireError(path, "is empty")
    if len(value) > MAX_NAME:
        raise WireError(path, f"is {len(value)} characters long; names have at most {MAX_NAME}")
    return value


def _uid(value: object, path: str) -> str:
    """A pod UID, which must also name its pod in a URL path (standalone's `DELETE
    /v1/standalone/pods/{uid}`, the ledger's pod links): Kubernetes' are UUIDs, and a made-up "a/b",
    "." or ".." would hold GPUs that no request could ever let go."""
    uid = _name(value, path)
    if "/" in uid or uid in (".", ".."):
        raise WireError(path, f"{uid!r} cannot name a pod in a URL path: no '/', and not '.' or '..'")
    return uid


def _names(value: object, path: str, lists: NodeLists | None) -> tuple[str, ...]:
    """A node-name array, checked, as the shared tuple for it when `lists` is given."""
    if lists is not None:
        known = lists.known(value)
        if known is not None:  # put in place by `loads`, checked when it was first seen
            return known
    if not isinstance(value, list):
        raise WireError(path, f"expected an array of node names or null, got {_kind(value)}")
    if lists is None or len(value) < MIN_SHARED:  # prioritize's few survivors: not worth sharing
        return _checked(value, path)
    return lists.share(value, lambda: _checked(value, path))


def _checked(value: list[Any], path: str) -> tuple[str, ...]:
    # fast path (C loops, no per-name path text): 1,000 names in ~130 us instead of ~400 us
    if all(map(isinstance, value, itertools.repeat(str))) and (
        not value or (min(map(len, value)) > 0 and max(map(len, value)) <= MAX_NAME)
    ):
        return tuple(value)
    return tuple(_name(v, f"{path}[{i}]") for i, v in enumerate(value))


def node_name(node: Mapping[str, Any]) -> str:
    """A node object's name ("" when it has none: checked at parse, not at reply)."""
    meta = node.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    return name if isinstance(name, str) else ""


def _shallow(value: dict[str, Any], path: str) -> dict[str, Any]:
    """An object that nests at most `BODY_DEPTH` deep: kube-scheduler's objects are ~20 deep, and
    parts of a request are written back in replies and records (orjson writes at most 255 levels)."""
    try:
        check_depth(value, BODY_DEPTH, path)
    except UntrustedError as err:
        raise WireError(err.path, err.message) from None
    return value


def parse_pod(value: object, path: str = "Pod") -> WirePod:
    pod = _shallow(_object(value, path), path)
    meta = _object(pod.get("metadata"), f"{path}.metadata")
    uid = _uid(meta.get("uid"), f"{path}.metadata.uid")
    name = _name(meta.get("name"), f"{path}.metadata.name")
    ns_value = meta.get("namespace")
    namespace = "default" if ns_value in (None, "") else _name(ns_value, f"{path}.metadata.namespace")
    for key in ("spec", "annotations"):
        holder = pod if key == "spec" else meta
        if holder.get(key) is not None and not isinstance(holder.get(key), dict):
            where = f"{path}.{key}" if key == "spec" else f"{path}.metadata.{key}"
            raise WireError(where, f"expected an object, got {_kind(holder.get(key))}")
    return WirePod(uid, namespace, name, pod)


def request_identity(doc: object) -> str:
    """Who a request is about, for a log line, from whatever the body holds (it may be malformed):
    `uid(namespace/name)` of its pod, or "an unidentified request"."""
    if not isinstance(doc, dict):
        return "an unidentified request"
    d = {str(k).lower(): v for k, v in doc.items()}
    if "poduid" in d:
        parts = (d.get("poduid"), d.get("podnamespace"), d.get("podname"))
    else:
        pod = d.get("pod")
        meta = pod.get("metadata") if isinstance(pod, dict) else None
        meta = meta if isinstance(meta, dict) else {}
        parts = (meta.get("uid"), meta.get("namespace"), meta.get("name"))
    uid, ns, name = (p[:MAX_NAME] if isinstance(p, str) else "?" for p in parts)
    return f"pod {uid}({ns}/{name})"


def parse_extender_args(doc: object, lists: NodeLists | None = None) -> ExtenderArgs:
    """`ExtenderArgs` (filter and prioritize); with `lists`, the node list is the shared one."""
    d = _folded(doc, "ExtenderArgs with Pod and NodeNames")
    pod = parse_pod(_required(d, "Pod"))
    raw_names = d.get("nodenames")
    raw_nodes = d.get("nodes")
    if raw_names is not None:
        return ExtenderArgs(pod, _names(raw_names, "NodeNames", lists), None)
    if raw_nodes is None:
        if "nodenames" not in d and "nodes" not in d:
            raise WireError("NodeNames", "required key is missing (nodeCacheCapable: true sends NodeNames)")
        return ExtenderArgs(pod, (), None)
    node_list = _object(raw_nodes, "Nodes")
    items = node_list.get("items")
    if items is None:
        items = []
    if not isinstance(items, list):
        raise WireError("Nodes.items", f"expected an array of node objects, got {_kind(items)}")
    nodes: list[Mapping[str, Any]] = []
    for i, item in enumerate(items):
        node = _shallow(_object(item, f"Nodes.items[{i}]"), f"Nodes.items[{i}]")
        meta = _object(node.get("metadata"), f"Nodes.items[{i}].metadata")
        _name(meta.get("name"), f"Nodes.items[{i}].metadata.name")
        nodes.append(node)
    return ExtenderArgs(pod, None, tuple(nodes))


def parse_binding_args(doc: object) -> BindingArgs:
    """`ExtenderBindingArgs`: names only, no pod body."""
    d = _folded(doc, "ExtenderBindingArgs with PodName, PodNamespace, PodUID and Node")
    return BindingArgs(
        pod_name=_name(_required(d, "PodName"), "PodName"),
        pod_namespace=_name(_required(d, "PodNamespace"), "PodNamespace"),
        pod_uid=_uid(_required(d, "PodUID"), "PodUID"),
        node=_name(_required(d, "Node"), "Node"),
    )


def parse_preemption_args(doc: object) -> PreemptionArgs:
    """`ExtenderPreemptionArgs`: the Meta map (UIDs) when nodeCacheCapable, else full victim pods."""
    d = _folded(doc, "ExtenderPreemptionArgs with Pod and NodeNameToMetaVictims")
    pod = parse_pod(_required(d, "Pod"))
    meta = d.get("nodenametometavictims")
    full = d.get("nodenametovictims", d.get("nodetovictims"))
    victims: dict[str, tuple[str, ...]] = {}
    if meta is not None:
        for node, v in _object(meta, "NodeNameToMetaVictims").items():
            path = f"NodeNameToMetaVictims.{node}"
            victims[_name(node, path)] = _victim_uids(v, path, meta_form=True)
    elif full is not None:
        for node, v in _object(full, "NodeNameToVictims").items():
            path = f"NodeNameToVictims.{node}"
            victims[_name(node, path)] = _victim_uids(v, path, meta_form=False)
    elif "nodenametometavictims" not in d and "nodenametovictims" not in d:
        raise WireError("NodeNameToMetaVictims", "required key is missing")
    return PreemptionArgs(pod, victims)


def _victim_uids(value: object, path: str, *, meta_form: bool) -> tuple[str, ...]:
    if value is None:
        return ()
    v = {k.lower(): x for k, x in _object(value, path).items()}
    pods = v.get("pods")
    if pods is None:
        return ()
    if not isinstance(pods, list):
        raise WireError(f"{path}.Pods", f"expected an array, got {_kind(pods)}")
    out = []
    for i, p in enumerate(pods):
        if meta_form:
            mp = {k.lower(): x for k, x in _object(p, f"{path}.Pods[{i}]").items()}
            out.append(_uid(mp.get("uid"), f"{path}.Pods[{i}].UID"))
        else:
            out.append(parse_pod(p, f"{path}.Pods[{i}]").uid)
    return tuple(out)
