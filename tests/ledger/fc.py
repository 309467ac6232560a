"""FrameworkController task pods, as FC stamps them, for the ledger's tests."""

from __future__ import annotations

import json
from typing import Any

ENABLE = "topogang.io/pod-scheduling-enable"
SPEC = "topogang.io/pod-scheduling-spec"
ROLES = {"ps": 1, "worker": 2}


def fc_spec(
    fw: str, vc: str = "vision", gpus: int = 4, roles: dict[str, int] | None = None
) -> dict[str, Any]:
    return {
        "virtualCluster": vc,
        "leafCellNumber": gpus,
        "affinityGroup": {
            "name": fw,
            "members": [
                {"taskRole": r, "podNumber": n, "leafCellNumber": gpus} for r, n in (roles or ROLES).items()
            ],
        },
    }


def fc_pod(
    ns: str,
    fw: str,
    role: str,
    index: int,
    *,
    attempt: str = "0_cm-a",
    uid: str | None = None,
    spec: dict[str, Any] | str | None = None,
    vc: str = "vision",
    gpus: int = 4,
    roles: dict[str, int] | None = None,
) -> dict[str, Any]:
    """A task pod named `{fw}-{role}-{index}` with FC's annotations (UID: `uid` or derived)."""
    name = f"{fw}-{role}-{index}"
    doc = spec if spec is not None else fc_spec(fw, vc, gpus, roles)
    ann = {
        "FC_FRAMEWORK_NAMESPACE": ns,
        "FC_FRAMEWORK_NAME": fw,
        "FC_FRAMEWORK_ATTEMPT_INSTANCE_UID": attempt,
        "FC_FRAMEWORK_ATTEMPT_ID": attempt.split("_")[0],
        "FC_FRAMEWORK_UID": f"uid-{fw}",
        "FC_TASKROLE_NAME": role,
        "FC_TASK_INDEX": str(index),
        "FC_POD_NAME": name,
        SPEC: doc if isinstance(doc, str) else json.dumps(doc),
    }
    return {
        "metadata": {
            "uid": uid or f"{name}-{attempt}",
            "name": name,
            "namespace": ns,
            "annotations": ann,
        },
        "spec": {"containers": [{"name": "main", "resources": {"limits": {ENABLE: "1"}}}]},
        "status": {"phase": "Pending"},
    }


def members(ns: str, fw: str, **kw: Any) -> list[dict[str, Any]]:
    """Every task pod of the framework (ROLES unless `roles` says otherwise)."""
    roles = kw.get("roles") or ROLES
    return [fc_pod(ns, fw, r, i, **kw) for r, n in roles.items() for i in range(n)]
