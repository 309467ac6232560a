"""`topogang barrier`: a drop-in replacement for FrameworkController's FrameworkBarrier init container.

Same contract as FrameworkBarrier (env, outputs in /mnt/frameworkbarrier, exit codes 0 / 201 / 210 / 1)
so existing job scripts keep working, but it asks the gang ledger instead of polling pod IPs in the
Framework status: it passes as soon as the gang is placed and networked, fails fast with 201 when the
ledger says the gang can never be placed or its reservation expired (the wait is over either way: the
expired gang's pods are being evicted), and exits 210 when this pod belongs to a stale attempt. If
the ledger cannot be reached it falls back to FrameworkBarrier's own rule on the Framework object, so
a ledger outage degrades to stock behaviour instead of failing jobs.

It authenticates with its pod's ServiceAccount token (`TOPOGANG_TOKEN_FILE`, default the pod's
mounted token; the chart's docs project one with the audience `topogang`): the extender lets a pod
read only its own gang. The file is read again for every request (kubelet rotates projected tokens).
The chart serves the ledger over HTTPS: `TOPOGANG_CA_FILE` names the CA its certificate is checked
with (the chart's ConfigMap `<release>-ca`), else the system's trust store is used.

Extra outputs: `gang.json` (the ledger's view) and `topogang.sh` exporting TG_RANK, TG_WORLD_SIZE,
TG_GPUS, TG_NODE and TG_{ROLE}_NODES; `injector.sh` stays byte-identical to FrameworkBarrier's.
"""

from __future__ import annotations

import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from config.untrusted import whole_number
from extender.gangs.framework import Framework, FrameworkError, barrier_passed, decompressed, injector

EXIT_PASS = 0
EXIT_TIMEOUT = 201  # FrameworkController: ContainerTransientConflictFailed (retried with back-off)
EXIT_PERMANENT = 210  # FrameworkController: ContainerPermanentFailed
EXIT_UNKNOWN = 1
LEDGER_FAILURES_BEFORE_FALLBACK = 3
DEFAULT_TOKEN_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/token"


class ConfigError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Settings:
    namespace: str
    name: str
    interval: float
    timeout: float
    ledger_url: str | None
    attempt: str | None
    pod_uid: str | None
    task_role: str | None
    task_index: int | None
    out_dir: Path
    apiserver: str | None
    token_file: Path | None = None
    ca_file: Path | None = None  # the CA the ledger's HTTPS certificate is checked with (else the system's)


def settings_from_env(env: Mapping[str, str]) -> Settings:
    """Validate the environment exactly as FrameworkBarrier does (bad values are permanent errors).

    TOPOGANG_BARRIER_TIME_SCALE (default 1) multiplies interval and timeout after validation; it
    exists so tests do not wait minutes, and is never needed in a cluster."""
    ns = env.get("FC_FRAMEWORK_NAMESPACE", "")
    name = env.get("FC_FRAMEWORK_NAME", "")
    if not name:
        raise ConfigError("FC_FRAMEWORK_NAME: must not be empty")
    if not ns:
        raise ConfigError("FC_FRAMEWORK_NAMESPACE: must not be empty")
    interval = _int(env, "BARRIER_CHECK_INTERVAL_SEC", 10)
    if interval < 5:
        raise ConfigError(f"BARRIER_CHECK_INTERVAL_SEC: {interval} is less than 5")
    timeout = _int(env, "BARRIER_CHECK_TIMEOUT_SEC", 600)
    if not 60 <= timeout <= 1200:
        raise ConfigError(f"BARRIER_CHECK_TIMEOUT_SEC: {timeout} is not within [60, 1200]")
    try:
        scale = float(env.get("TOPOGANG_BARRIER_TIME_SCALE", "1"))
    except ValueError as err:
        raise ConfigError(f"TOPOGANG_BARRIER_TIME_SCALE: {err}") from err
    if not 0 < scale <= 1:
        raise ConfigError("TOPOGANG_BARRIER_TIME_SCALE: must be in (0, 1]")
    index = env.get("FC_TASK_INDEX")
    return Settings(
        namespace=ns,
        name=name,
        interval=interval * scale,
        timeout=timeout * scale,
        ledger_url=(env.get("TOPOGANG_LEDGER_URL") or "").rstrip("/") or None,
        attempt=env.get("FC_FRAMEWORK_ATTEMPT_INSTANCE_UID") or None,
        pod_uid=env.get("FC_POD_UID") or None,
        task_role=env.get("FC_TASKROLE_NAME") or None,
        task_index=whole_number(index, 9) if index else None,
        out_dir=Path(env.get("TOPOGANG_BARRIER_DIR", "/mnt/frameworkbarrier")),
        apiserver=env.get("KUBE_APISERVER_ADDRESS") or None,
        token_file=Path(env.get("TOPOGANG_TOKEN_FILE") or DEFAULT_TOKEN_FILE),
        ca_file=Path(env["TOPOGANG_CA_FILE"]) if env.get("TOPOGANG_CA_FILE") else None,
    )


def _int(env: Mapping[str, str], key: str, default: int) -> int:
    raw = env.get(key)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError as err:
        raise ConfigError(f"{key}: {raw!r} is not an integer") from err


def pod_token(s: Settings) -> str | None:
    """The pod's ServiceAccount token, read now; None when there is none (standalone, a laptop)."""
    if s.token_file is None:
        return None
    try:
        token = s.token_file.read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return token or None


# ---------------------------------------------------------------------------------------------- ledger
class StaleAttemptError(Exception):
    """The ledger says this pod's framework attempt has been superseded."""


class NeverFitsError(Exception):
    """The ledger says the gang can never be placed as specified."""


class GangExpiredError(Exception):
    """The ledger says the gang's reservation expired before the gang was whole: nothing more will
    come of this attempt's gang (its pods are evicted), so waiting on would only reach the timeout."""


def ask_ledger(s: Settings, wait: float) -> dict[str, Any] | None:
    """One long-poll of the ledger: the gang status when Ready, None when not yet (404/503 or not
    ready). Raises StaleAttemptError on 409, NeverFitsError when the gang is unplaceable,
    GangExpiredError when its reservation expired, and OSError when the ledger is unreachable."""
    assert s.ledger_url is not None
    query = {"waitFor": "Ready", "timeoutSeconds": str(max(0, int(wait)))}
    if s.attempt:
        query["attempt"] = s.attempt
    path = f"/v1/gangs/{urllib.parse.quote(s.namespace)}/{urllib.parse.quote(s.name)}"
    url = f"{s.ledger_url}{path}?{urllib.parse.urlencode(query)}"
    token = pod_token(s)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    tls = (
        ssl.create_default_context(cafile=str(s.ca_file)) if s.ca_file and url.startswith("https:") else None
    )
    try:
        request = urllib.request.Request(url, headers=headers)
        with urllib.request.urlopen(request, timeout=wait + 10, context=tls) as resp:
            body: dict[str, Any] = json.loads(resp.read())
    except urllib.error.HTTPError as err:
        if err.code == 409:
            raise StaleAttemptError(err.read().decode(errors="replace")) from err
        if err.code in (404, 503):
            return None
        said = err.read(300).decode(errors="replace")  # a 401/403 says which token and why
        raise OSError(f"ledger answered HTTP {err.code}: {said}") from err
    if body.get("neverFits"):
        raise NeverFitsError(str(body.get("reason") or "the gang can never be placed"))
    if body.get("phase") == "Expired":
        raise GangExpiredError(f"gang Expired: {body.get('reason') or 'its reservation expired'}")
    return body if body.get("phase") == "Ready" else None


# ---------------------------------------------------------------------------------------------- framework
def get_framework(s: Settings) -> Framework | None:
    """The Framework from the API server (FrameworkBarrier's own source), or None if unreachable."""
    try:
        from kubernetes import client, config  # imported lazily: only the fallback needs it

        if s.apiserver:
            conf = client.Configuration()
            conf.host = s.apiserver
            token = pod_token(s)
            if token:
                conf.api_key = {"authorization": f"Bearer {token}"}
            api = client.ApiClient(conf)
        else:
            try:
                config.load_incluster_config()  # type: ignore[no-untyped-call]
            except config.ConfigException:
                config.load_kube_config()  # type: ignore[no-untyped-call]
            api = client.ApiClient()
        obj = client.CustomObjectsApi(api).get_namespaced_custom_object(
            "frameworkcontroller.microsoft.com", "v1", s.namespace, "frameworks", s.name
        )
    except Exception as err:  # any failure here means "not available": keep polling
        status = getattr(err, "status", None)
        if status == 404:
            raise FileNotFoundError(f"Framework {s.namespace}/{s.name} not found") from err
        return None
    return obj if isinstance(obj, dict) else None


def framework_from_gang(gang: Mapping[str, Any]) -> Framework:
    """A Framework-shaped view of a gang, for clusters where the barrier cannot read the Framework:
    task roles in rank order of their first member, tasks in index order, pod IPs from the ledger."""
    members = sorted(gang.get("members") or [], key=lambda m: (m.get("rank") or 0, _index(m, 0)))
    roles: dict[str, list[Mapping[str, Any]]] = {}
    for m in members:
        roles.setdefault(str(m.get("taskRole") or "default"), []).append(m)
    return {
        "apiVersion": "frameworkcontroller.microsoft.com/v1",
        "kind": "Framework",
        "metadata": {"namespace": gang.get("namespace"), "name": gang.get("framework") or gang.get("name")},
        "spec": {"taskRoles": [{"name": r, "taskNumber": len(ms)} for r, ms in roles.items()]},
        "status": {
            "attemptStatus": {
                "taskRoleStatuses": [
                    {
                        "name": r,
                        "taskStatuses": [
                            {"index": _index(m, i), "attemptStatus": {"podIP": m.get("podIP")}}
                            for i, m in enumerate(sorted(ms, key=lambda m: _index(m, 0)))
                        ],
                    }
                    for r, ms in roles.items()
                ]
            }
        },
    }


def _index(member: Mapping[str, Any], default: int) -> int:
    """A member's task index; a gang that is no FrameworkController framework (a plain affinity group
    asked for through the Framework proxy) has members with `taskIndex: null`."""
    index = member.get("taskIndex")
    return int(index) if index is not None else default


# ---------------------------------------------------------------------------------------------- outputs
def write_outputs(s: Settings, framework: Framework, gang: Mapping[str, Any] | None) -> None:
    s.out_dir.mkdir(parents=True, exist_ok=True)
    full = decompressed(framework)
    (s.out_dir / "framework.json").write_text(json.dumps(full), encoding="utf-8")
    path = s.out_dir / "injector.sh"
    path.write_text(injector(full), encoding="utf-8")
    path.chmod(0o755)
    if gang is not None:
        (s.out_dir / "gang.json").write_text(json.dumps(gang, indent=2), encoding="utf-8")
        (s.out_dir / "topogang.sh").write_text(topology_env(s, gang), encoding="utf-8")


def topology_env(s: Settings, gang: Mapping[str, Any]) -> str:
    """TG_* variables: rank and world size, this pod's node and GPUs, each role's nodes in rank order."""
    members = sorted(gang.get("members") or [], key=lambda m: m.get("rank", 0))
    me = next(
        (
            m
            for m in members
            if (s.pod_uid and m.get("podUID") == s.pod_uid)
            or (m.get("taskRole") == s.task_role and m.get("taskIndex") == s.task_index)
        ),
        None,
    )
    lines = ["#!/bin/bash", f"export TG_WORLD_SIZE={len(members)}"]
    if me is not None:
        lines += [
            f"export TG_RANK={me.get('rank', 0)}",
            f"export TG_NODE={me.get('node', '')}",
            f"export TG_GPUS={','.join(str(g) for g in me.get('gpus') or [])}",
        ]
    roles: dict[str, list[str]] = {}
    for m in members:
        roles.setdefault(str(m.get("taskRole") or "default"), []).append(str(m.get("node", "")))
    for role, nodes in roles.items():
        lines.append(f"export TG_{role.upper()}_NODES={','.join(nodes)}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------- loop
def run(
    s: Settings,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    log: Callable[[str], None] = lambda m: print(m, file=sys.stderr, flush=True),
) -> int:
    """Poll until the gang is Ready (exit 0), the time is up (201), or a permanent error (210)."""
    deadline = clock() + s.timeout
    failures = 0
    use_ledger = s.ledger_url is not None
    while True:
        started = clock()
        left = deadline - started
        gang: dict[str, Any] | None = None
        try:
            if use_ledger:
                try:
                    gang = ask_ledger(s, min(s.interval, max(left, 0)))
                    failures = 0
                except OSError as err:
                    failures += 1
                    log(f"ledger unreachable ({failures}): {err}")
                    if failures >= LEDGER_FAILURES_BEFORE_FALLBACK:
                        log("falling back to FrameworkBarrier's rule on the Framework object")
                        use_ledger = False
                    gang = None
                if gang is not None:
                    f = gang.get("framework") or get_framework(s) or framework_from_gang(gang)
                    # the gang may be only the task roles that opt in (a CPU parameter server's do
                    # not): FrameworkBarrier's rule still counts every task, each with its pod IP
                    if barrier_passed(f):
                        write_outputs(s, f, gang)
                        log(f"BarrierSucceeded: gang {s.namespace}/{s.name} is Ready")
                        return EXIT_PASS
                    log("the gang is Ready; waiting for the Framework's other tasks to have a pod IP")
            else:
                f = get_framework(s)
                if f is not None and barrier_passed(f):
                    write_outputs(s, f, None)
                    log("BarrierSucceeded: all tasks are ready with a pod IP")
                    return EXIT_PASS
        except StaleAttemptError as err:
            log(f"BarrierPermanentFailed: stale framework attempt: {err}")
            return EXIT_PERMANENT
        except FileNotFoundError as err:
            log(f"BarrierPermanentFailed: {err}")
            return EXIT_PERMANENT
        except (NeverFitsError, GangExpiredError) as err:
            log(f"BarrierTransientConflictFailed: {err}")
            return EXIT_TIMEOUT
        except FrameworkError as err:
            log(f"cannot read the Framework yet: {err}")
        now = clock()
        left = deadline - now
        if left <= 0:
            log("BarrierTransientConflictFailed: timed out waiting for the gang")
            return EXIT_TIMEOUT
        # a long-poll already waited; a quick "not yet" (404, 503, an error) waits out the interval
        pause = min(s.interval - (now - started), left)
        if pause > 0:
            sleep(pause)


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    if argv:
        print(__doc__)
        return 0 if argv[0] in ("-h", "--help") else EXIT_PERMANENT
    try:
        s = settings_from_env(os.environ if env is None else env)
    except ConfigError as err:
        print(f"BarrierPermanentFailed: {err}", file=sys.stderr)
        return EXIT_PERMANENT
    try:
        return run(s)
    except Exception as err:  # the contract: anything unexpected is exit 1, never a hang
        print(f"BarrierUnknownFailed: {err!r}", file=sys.stderr)
        return EXIT_UNKNOWN
