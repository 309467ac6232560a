"""kube-scheduler's extender replies, always in the canonical PascalCase with explicit nulls.

Go decodes them case-insensitively; a filter reply takes the form its request used (node names, or
the full node objects for a scheduler without `nodeCacheCapable`). See the
wire types in k8s.io/kube-scheduler/extender/v1 (types.go) and the request side in `extender.http.wire`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from extender.http import wire
from extender.http.wire import node_name


def dumps(value: object) -> bytes:
    return orjson.dumps(value)


def filter_result(
    args: wire.ExtenderArgs | None,
    passed: Sequence[str] = (),
    failed: Mapping[str, str] | None = None,
    unresolvable: Mapping[str, str] | None = None,
    error: str = "",
) -> dict[str, Any]:
    """`ExtenderFilterResult`, answered in the form the request used (names, or full node objects)."""
    nodes: dict[str, Any] | None = None
    names: list[str] | None = list(passed)
    if args is not None and args.node_names is None and args.nodes is not None:
        keep = set(passed)
        nodes = {"metadata": {}, "items": [n for n in args.nodes if node_name(n) in keep]}
        names = None
    return {
        "Nodes": nodes,
        "NodeNames": names,
        "FailedNodes": _as_dict(failed),
        "FailedAndUnresolvableNodes": _as_dict(unresolvable),
        "Error": error,
    }


def _as_dict(m: Mapping[str, str] | None) -> dict[str, str]:
    """A reply's node map, without copying a plain dict (1,000 entries at every filter): replies
    are only ever encoded, never changed."""
    if type(m) is dict:
        return m
    return dict(m or {})


def filter_error(error: str) -> dict[str, Any]:
    return {
        "Nodes": None,
        "NodeNames": None,
        "FailedNodes": {},
        "FailedAndUnresolvableNodes": {},
        "Error": error,
    }


def host_priorities(scores: Sequence[tuple[str, int]]) -> list[dict[str, Any]]:
    """`HostPriorityList`: a top-level JSON array."""
    return [{"Host": host, "Score": score} for host, score in scores]


def binding_result(error: str = "") -> dict[str, Any]:
    return {"Error": error}


def preemption_result(victims: Mapping[str, Sequence[str]] | None) -> dict[str, Any]:
    """`ExtenderPreemptionResult` (always the Meta form); null when nothing should be preempted."""
    if not victims:
        return {"NodeNameToMetaVictims": None}
    return {
        "NodeNameToMetaVictims": {
            node: {"Pods": [{"UID": uid} for uid in uids], "NumPDBViolations": 0}
            for node, uids in victims.items()
        }
    }
