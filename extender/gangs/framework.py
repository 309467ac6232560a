"""FrameworkController's `Framework` object, read the way FrameworkBarrier reads it.

Pure functions over the Framework as a JSON dict: decompress `taskRoleStatusesCompressed`, apply the
barrier's readiness rule, render `injector.sh` byte for byte as FrameworkBarrier renders it (jobs
source that file, so its text is a contract), and blank pod IPs of gangs the ledger does not yet call
Ready (the zero-image-change proxy). Both `topogang barrier` and the extender use them.
"""

from __future__ import annotations

import base64
import copy
import gzip
import zlib
from collections.abc import Callable
from typing import Any

import orjson

Framework = dict[str, Any]
INJECTOR_PATH = "./injector.sh"
# FrameworkController compresses statuses past ~1 MB; a 10,000-task attempt's are a few MB plain
MAX_STATUSES_BYTES = 64 * 1024 * 1024  # the path FrameworkBarrier prints in the script's echo lines


class FrameworkError(ValueError):
    """The object is not a Framework this code can read (e.g. corrupt compressed statuses)."""


def _number(value: object, where: str, default: int = 0) -> int:
    """A count or index as FrameworkController writes it; `FrameworkError` for anything else (a
    Framework is its owner's object: a role's taskNumber written as a list must not raise TypeError
    out of a barrier request)."""
    if value is None or value == "":
        return default
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise FrameworkError(f"{where}: expected an integer, got {type(value).__name__}")
    if isinstance(value, str) and not (value.isascii() and value.isdigit() and len(value) <= 9):
        raise FrameworkError(f"{where}: expected an integer, got {value[:40]!r}")
    return int(value)


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def task_role_specs(f: Framework) -> list[dict[str, Any]]:
    roles = _list(_dict(f.get("spec")).get("taskRoles"))
    return [r for r in roles if isinstance(r, dict)]


def total_tasks(f: Framework) -> int:
    """Gang size as FrameworkController defines it: Σ spec.taskRoles[].taskNumber."""
    return sum(_number(r.get("taskNumber"), "spec.taskRoles[].taskNumber") for r in task_role_specs(f))


def task_role_statuses(f: Framework) -> list[dict[str, Any]] | None:
    """Status per task role, in status order, decompressing `taskRoleStatusesCompressed` (gzip of
    the JSON list, base64 in JSON) when the plain list is absent. None when there is no status."""
    attempt = _dict(f.get("status")).get("attemptStatus")
    if not isinstance(attempt, dict) or not attempt:
        return None
    plain = attempt.get("taskRoleStatuses")
    if plain is not None:
        return [r for r in _list(plain) if isinstance(r, dict)]
    packed = attempt.get("taskRoleStatusesCompressed")
    if not packed:
        return None
    try:
        raw = _gunzip(base64.b64decode(packed))
        out = orjson.loads(raw)
    except (ValueError, TypeError, OSError, zlib.error) as err:
        raise FrameworkError(
            f"status.attemptStatus.taskRoleStatusesCompressed: cannot decompress: {err}"
        ) from err
    if not isinstance(out, list):
        raise FrameworkError(
            "status.attemptStatus.taskRoleStatusesCompressed: not a list of task role statuses"
        )
    return [r for r in out if isinstance(r, dict)]


def _gunzip(data: bytes) -> bytes:
    """gzip, stopping at MAX_STATUSES_BYTES: a few kilobytes of a hand-made stream can expand to
    gigabytes, and the object is its owner's to write."""
    inflate = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    out = inflate.decompress(data, MAX_STATUSES_BYTES)
    if inflate.unconsumed_tail:
        raise ValueError(f"expands to more than {MAX_STATUSES_BYTES} bytes")
    return out


def decompressed(f: Framework) -> Framework:
    """A copy with plain `taskRoleStatuses` (what FrameworkBarrier dumps to framework.json)."""
    out = copy.deepcopy(f)
    statuses = task_role_statuses(f)
    attempt = _dict(out.get("status")).get("attemptStatus")
    if isinstance(attempt, dict) and statuses is not None:
        attempt["taskRoleStatuses"] = statuses
        attempt.pop("taskRoleStatusesCompressed", None)
    return out


def _pod_ip(task: dict[str, Any]) -> str:
    return str(((task.get("attemptStatus") or {}).get("podIP")) or "")


def _ready(task: dict[str, Any]) -> bool:
    return not task.get("deletionPending", False) and _pod_ip(task) != ""


def _counted(f: Framework) -> list[tuple[str, list[dict[str, Any]]]]:
    """(role, the tasks FrameworkBarrier counts: the first min(status, spec) of them), status order."""
    specs = {
        r.get("name"): _number(r.get("taskNumber"), "spec.taskRoles[].taskNumber") for r in task_role_specs(f)
    }
    out = []
    for role in task_role_statuses(f) or []:
        name = role.get("name")
        if name not in specs:
            continue
        tasks = [t for t in _list(role.get("taskStatuses")) if isinstance(t, dict)]
        out.append((str(name), tasks[: specs[name]]))
    return out


def ready_counts(f: Framework) -> tuple[int, int]:
    """(ready tasks, total tasks) by FrameworkBarrier's rule: a task is ready when its pod has an IP
    and it is not deletion-pending; the barrier passes when ready ≥ Σ taskNumber."""
    return sum(1 for _, tasks in _counted(f) for t in tasks if _ready(t)), total_tasks(f)


def barrier_passed(f: Framework) -> bool:
    ready, total = ready_counts(f)
    return ready >= total


def env_name(role: str, suffix: str) -> str:
    return f"FB_{role.upper()}_{suffix}"


def injector(f: Framework) -> str:
    """`injector.sh` exactly as FrameworkBarrier writes it: per task role, in status order, IPS then
    ADDRESSES exports in task-index order, each followed by an echo line."""
    lines = ["#!/bin/bash"]
    if f.get("status") is None:
        return "\n".join(lines) + "\n"
    counted = _counted(f)
    lines += ["", f"echo {INJECTOR_PATH}: Start to inject environment variables", ""]
    for role, tasks in counted:
        name = env_name(role, "IPS")
        lines += [f"export {name}={','.join(_pod_ip(t) for t in tasks)}", f"echo {name}=${{{name}}}"]
    lines.append("")
    for role, tasks in counted:
        name, port = env_name(role, "ADDRESSES"), env_name(role, "PORT")
        addrs = ",".join(f"{_pod_ip(t)}:${{{port}}}" for t in tasks)
        lines += [f"export {name}={addrs}", f"echo {name}=${{{name}}}"]
    lines += ["", f"echo {INJECTOR_PATH}: Succeeded to inject environment variables"]
    return "\n".join(lines) + "\n"


def with_pod_ips(f: Framework, ips: dict[tuple[str, int], str]) -> Framework:
    """A copy whose tasks show the given pod IPs ((role, index) -> IP; others unchanged), in the
    shape the statuses came in: the ledger knows a pod's IP before FrameworkController records it."""
    return _edit_tasks(f, lambda task, attempt: ips.get(task) or attempt.get("podIP"))


def _store(f: Framework, statuses: list[dict[str, Any]]) -> None:
    attempt = f["status"]["attemptStatus"]
    if attempt.get("taskRoleStatuses") is not None:
        attempt["taskRoleStatuses"] = statuses
    else:
        attempt["taskRoleStatusesCompressed"] = base64.b64encode(
            gzip.compress(orjson.dumps(statuses))
        ).decode()


def with_ips_hidden(f: Framework, keep: set[tuple[str, int]] | None) -> Framework:
    """A copy whose tasks show no pod IP unless (role, index) is in `keep` (None = keep all). The
    statuses are returned in the shape they came in (compressed stays compressed)."""
    if keep is None:
        return f
    return _edit_tasks(f, lambda task, at: at.get("podIP") if task in keep or not at.get("podIP") else None)


def _edit_tasks(f: Framework, pod_ip: Callable[[tuple[str, int], dict[str, Any]], object]) -> Framework:
    """A copy in which each task's pod IP is `pod_ip((role, index), attemptStatus)`, with the statuses
    stored back in the shape they came in (compressed stays compressed). A task's status is only
    written where the IP changes, so an untouched task keeps exactly what it had."""
    out = copy.deepcopy(f)
    statuses = task_role_statuses(out)
    if statuses is None:
        return out
    for role in statuses:
        for i, t in enumerate(_list(role.get("taskStatuses"))):
            if not isinstance(t, dict):
                continue
            task = (str(role.get("name")), _number(t.get("index"), "taskStatuses[].index", i))
            att = t.get("attemptStatus")
            old = att.get("podIP") if isinstance(att, dict) else None
            ip = pod_ip(task, att if isinstance(att, dict) else {})
            if ip != old:
                if not isinstance(att, dict):
                    att = t["attemptStatus"] = {}
                att["podIP"] = ip
    _store(out, statuses)
    return out


# What FrameworkBarrier (and `topogang barrier`) read of a Framework, and what job scripts read of
# the framework.json it writes: names, counts, and each task's pod identity and addresses. Nothing of
# the pod template (its env may hold secrets), the retry policy or the completion statuses.
_META_KEYS = ("name", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp")
_ROLE_SPEC_KEYS = ("name", "taskNumber")
_ATTEMPT_KEYS = ("id", "instanceUID", "configMapName", "configMapUID", "startTime", "runTime")
_ROLE_STATUS_KEYS = ("name",)
_TASK_KEYS = ("index", "instanceUID", "deletionPending")
_TASK_ATTEMPT_KEYS = ("id", "instanceUID", "podName", "podUID", "podNodeName", "podIP", "podHostIP")


def _pick(d: object, keys: tuple[str, ...]) -> dict[str, Any]:
    src = _dict(d)
    return {k: src[k] for k in keys if k in src}


def barrier_view(f: Framework) -> Framework:
    """The Framework as the barrier needs it (an allowlist: a field not named here is dropped), its
    statuses in the shape they came in (compressed stays compressed)."""
    out: Framework = {
        "apiVersion": f.get("apiVersion", "frameworkcontroller.microsoft.com/v1"),
        "kind": f.get("kind", "Framework"),
        "metadata": _pick(f.get("metadata"), _META_KEYS),
        "spec": {"taskRoles": [_pick(r, _ROLE_SPEC_KEYS) for r in task_role_specs(f)]},
    }
    status = _dict(f.get("status"))
    if not status:
        return out
    attempt = _dict(status.get("attemptStatus"))
    view = _pick(attempt, _ATTEMPT_KEYS)
    out["status"] = {"attemptStatus": view}
    try:
        statuses = task_role_statuses(f)
    except FrameworkError:  # corrupt: shown as no statuses at all (the barrier keeps waiting)
        statuses = None
    if statuses is None:
        return out
    roles = []
    for role in statuses:
        tasks = []
        for t in _list(role.get("taskStatuses")):
            task = _pick(t, _TASK_KEYS)
            task["attemptStatus"] = _pick(_dict(t).get("attemptStatus"), _TASK_ATTEMPT_KEYS)
            tasks.append(task)
        roles.append({**_pick(role, _ROLE_STATUS_KEYS), "taskStatuses": tasks})
    if attempt.get("taskRoleStatuses") is not None:
        view["taskRoleStatuses"] = roles
    else:
        view["taskRoleStatusesCompressed"] = base64.b64encode(gzip.compress(orjson.dumps(roles))).decode()
    return out
