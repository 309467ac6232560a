"""The gang ledger over HTTP (read-only), and the Framework proxy for the stock FrameworkBarrier.

    GET /v1/gangs[?namespace=&vc=&phase=]             every gang's GangStatus, a page at a time
        [&limit=N&continue=TOKEN]                     (`extender.http.paging`; default 500 a page)
    GET /v1/gangs/{namespace}/{name}                  one gang of that namespace: a FrameworkController
        [?waitFor=<Phase>&timeoutSeconds=N            framework's current attempt, or a gang named
         &attempt=<attempt instance UID>              `name` (or `namespace/name`) there; never
         &resourceVersion=N]                          another namespace's (`extender.gangs.identity`)
    GET /apis/frameworkcontroller.microsoft.com/v1/namespaces/{namespace}/frameworks/{name}

Long-poll: with `waitFor` the answer comes as soon as the gang's phase reaches it (Pending < Reserved
< Binding < Bound < Ready), or is Broken or Expired, or can never fit; with `resourceVersion` as soon
as the gang changes after that version; else after `timeoutSeconds` (at most 60) with the current
status. 400: a query value that is no phase, number or attempt instance UID; 404: unknown (yet); 409:
`attempt` is superseded by a newer attempt of the framework (or of a Framework re-created under its
name); 503: not synced yet (Kubernetes mode: until recovery is done). A Ready FrameworkController
gang's answer carries `framework`: the Framework with the ledger's pod IPs, which `topogang barrier`
writes out.

The Framework proxy (point the stock barrier's `KUBE_APISERVER_ADDRESS` here): in Kubernetes mode the
real Framework from the API server, cut down to what the barrier reads (`framework.barrier_view`: never
the pod template or its env), with every `podIP` blanked until the ledger calls the gang Ready
(and then the ledger's IPs filled in, so the barrier need not wait for FrameworkController's status
to catch up); in standalone mode, where there are no Framework objects, one synthesized from the
ledger. Absent: 404 in the API server's `Status` shape.

Who may read what is the doors' to say (`extender.http.doors`): in Kubernetes mode a pod reads only
its own gang and Framework (`gang_of_pod`; a pod of a superseded attempt, until it is gone, its own
framework's, which answers its barrier 409; a pod of an expired gang, while the gang's tombstone
lasts, that tombstone, phase Expired), and the list of every gang is an admin's.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import re
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from extender.gangs.barrier import framework_from_gang
from extender.gangs.framework import Framework, FrameworkError, barrier_view, with_ips_hidden, with_pod_ips
from extender.gangs.ledger import GangLedger
from extender.gangs.ledger_records import API_VERSION, TERMINAL, Phase, Record, parse_phase, reached
from extender.http import paging
from extender.http.app import JSON
from extender.http.doors import GangRef, PodRef, status_doc
from extender.http.limits import wait_or_disconnect
from extender.http.verbs import Scheduler

log = logging.getLogger("topogang.extender")

MAX_WAIT_SECONDS = 60.0
# long-polls that wait at once for the gangs of one namespace; more are answered at once, as without
# `waitFor` (a barrier then waits out its interval and asks again): one namespace's pods, each from its
# own address, cannot take every request slot of the server (`ServerLimits.max_requests`) from the rest
POLLS_PER_NAMESPACE = 64
SCAN_CHUNK = 256  # records looked at per hold of the lock by a list
FC_GROUP = "frameworkcontroller.microsoft.com"
FRAMEWORK_PATH = f"/apis/{FC_GROUP}/v1/namespaces/{{namespace}}/frameworks/{{name}}"
# an attempt instance UID as FrameworkController writes it (`{attemptID}_{configMapUID}`), with room
ATTEMPT = re.compile(r"[A-Za-z0-9._-]{1,128}")

FrameworkFetch = Callable[[str, str], Awaitable[Mapping[str, Any] | None]]


class _BadQueryError(ValueError):
    pass


def _error(status: int, message: str, reason: str) -> Response:
    return JSON({"Error": message, "message": message, "reason": reason, "code": status}, status_code=status)


def kube_status(status: int, reason: str, message: str, name: str) -> Response:
    """An error in the API server's `Status` shape (what a Kubernetes client parses)."""
    details = {"name": name, "group": FC_GROUP, "kind": "frameworks"}
    return JSON(status_doc(status, reason, message, details=details), status_code=status)


def _phase_param(q: Mapping[str, str], key: str) -> Phase | None:
    raw = q.get(key)
    if raw is None or raw == "":
        return None
    p = parse_phase(raw)
    if p is None:
        raise _BadQueryError(f"{key}: {raw!r} is not a phase ({', '.join(x.value for x in Phase)})")
    return p


def _attempt_param(q: Mapping[str, str]) -> str | None:
    """The `attempt` asked about. Anything FrameworkController never writes is a 400 here, rather
    than text of any length and alphabet compared with every attempt the ledger keeps."""
    raw = q.get("attempt") or ""
    if raw and ATTEMPT.fullmatch(raw) is None:
        raise _BadQueryError(
            f"attempt: {raw[:40]!r}{'...' if len(raw) > 40 else ''} is not an attempt instance UID "
            "(at most 128 ASCII letters, digits, '_', '-' and '.')"
        )
    return raw or None


def _number(q: Mapping[str, str], key: str) -> float | None:
    raw = q.get(key)
    if raw is None or raw == "":
        return None
    try:
        value = float(raw)
    except ValueError:
        raise _BadQueryError(f"{key}: {raw!r} is not a number") from None
    if not value >= 0:
        raise _BadQueryError(f"{key}: {raw!r} is negative")
    return value


def pod_ips(doc: Mapping[str, Any]) -> dict[tuple[str, int], str]:
    """(task role, task index) -> pod IP of a GangStatus's members."""
    out = {}
    for m in doc.get("members") or []:
        if m.get("taskRole") is not None and m.get("taskIndex") is not None and m.get("podIP"):
            out[(str(m["taskRole"]), int(m["taskIndex"]))] = str(m["podIP"])
    return out


def synthesized(doc: Mapping[str, Any]) -> Framework:
    """The Framework a gang implies (standalone mode, or when the real one cannot be read)."""
    f = framework_from_gang({"namespace": doc["namespace"], "name": doc["name"], "members": doc["members"]})
    gang = doc.get("gang") or {}
    if gang.get("frameworkUID"):
        f["metadata"]["uid"] = gang["frameworkUID"]
    if gang.get("attemptInstanceUID"):
        f["status"]["attemptStatus"]["instanceUID"] = gang["attemptInstanceUID"]
    return f


def _attempt_of(f: Mapping[str, Any]) -> str | None:
    attempt = (f.get("status") or {}).get("attemptStatus") or {}
    uid = attempt.get("instanceUID") if isinstance(attempt, dict) else None
    return uid if isinstance(uid, str) and uid else None


def _key(rec: Record) -> paging.Key:
    return (rec.ident.namespace, rec.ident.name, rec.gang)


def ledger_routes(scheduler: Scheduler, *, fetch_framework: FrameworkFetch | None = None) -> list[BaseRoute]:
    """The ledger's routes; `fetch_framework` reads a Framework from the API server (Kubernetes
    mode; None: Framework objects are synthesized from the ledger)."""
    s = scheduler
    ledger = s.gang_ledger
    polling: Counter[str] = Counter()  # long-polls waiting now, by the namespace their path names

    def not_ready() -> Response:
        return _error(503, f"topogang: the ledger is not synced yet: {s.not_ready_reason}", "NotReady")

    async def framework_for(doc: Mapping[str, Any]) -> Framework:
        """The Framework to hand a Ready gang's barrier: the real one with the ledger's pod IPs."""
        if fetch_framework is not None:
            try:
                f = await fetch_framework(str(doc["namespace"]), str(doc["name"]))
                if f is not None:
                    return with_pod_ips(barrier_view(dict(f)), pod_ips(doc))
            except Exception as exc:  # the synthesized one serves the barrier as well
                log.warning("cannot read Framework %s/%s: %s", doc["namespace"], doc["name"], exc)
        return synthesized(doc)

    async def list_gangs(request: Request) -> Response:
        """One page of GangStatuses (`extender.http.paging`), looked at `SCAN_CHUNK` records per
        hold of the lock so a long list never holds the verbs for long."""
        if not s.ready:
            return not_ready()
        q = request.query_params
        try:
            phase = _phase_param(q, "phase")
            page = paging.parse(q)
        except (_BadQueryError, paging.PageError) as err:
            return _error(400, f"topogang: {err}", "BadRequest")
        ns, vc = q.get("namespace") or None, q.get("vc") or None
        items: list[dict[str, Any]] = []
        after, more, version = page.after, True, None
        while more and len(items) < page.limit:
            async with s.lock:
                records = ledger.all(s.core)
                keys = [_key(r) for r in records]
                start = bisect.bisect_right(keys, after) if after is not None else 0
                chunk = records[start : start + SCAN_CHUNK]
                more = start + len(chunk) < len(records)
                for rec in chunk:
                    after = _key(rec)
                    if ns is not None and rec.ident.namespace != ns:
                        continue
                    ledger.refresh(s.core, rec, s.waiting_of)
                    if phase is not None and rec.phase is not phase:
                        continue
                    doc = ledger.status(s.core, rec, s.waiting_of)
                    if vc is not None and ((doc["placement"] or {}).get("virtualCluster") or rec.vc) != vc:
                        continue
                    items.append(doc)
                    if len(items) >= page.limit:
                        more = more or rec is not chunk[-1]
                        break
                version = ledger.version if version is None else version
            await asyncio.sleep(0)  # the verbs waiting for the lock go first
        token = paging.encode(after) if more and after is not None else None
        return JSON(
            {
                "apiVersion": API_VERSION,
                "kind": "GangStatusList",
                "resourceVersion": str(version),
                "metadata": {"resourceVersion": str(version), "continue": token},
                "continue": token,
                "items": items,
            }
        )

    async def get_gang(request: Request) -> Response:
        if not s.ready:
            return not_ready()
        ns, name = request.path_params["namespace"], request.path_params["name"]
        q = request.query_params
        try:
            target = _phase_param(q, "waitFor")
            timeout = min(_number(q, "timeoutSeconds") or 0.0, MAX_WAIT_SECONDS)
            since = _number(q, "resourceVersion")
            attempt = _attempt_param(q)
        except _BadQueryError as err:
            return _error(400, f"topogang: {err}", "BadRequest")
        waits = timeout > 0 and (target is not None or since is not None)
        if waits and polling[ns] >= POLLS_PER_NAMESPACE:
            timeout, waits = 0.0, False  # the namespace's long-polls are all taken: the status now
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        ledger.waiters += 1
        polling[ns] += waits
        try:
            while True:
                async with s.lock:
                    got = ledger.resolve(s.core, ns, name, attempt)
                    if got is None:
                        return _error(404, f"topogang: gang {ns}/{name} is not known (yet)", "NotFound")
                    if isinstance(got, str):
                        return _error(409, f"topogang: {got}", "StaleAttempt")
                    rec: Record = got
                    ledger.refresh(s.core, rec, s.waiting_of)
                    left = deadline - loop.time()
                    done = (
                        left <= 0
                        or (target is None and since is None)
                        or rec.phase in TERMINAL
                        or rec.never_fits
                        or (target is not None and reached(rec.phase, target))
                        or (since is not None and rec.version > since)
                    )
                    if done:
                        doc = ledger.status(s.core, rec, s.waiting_of)
                        break
                    event = rec.changed if since is not None else rec.phase_changed
                if not await wait_or_disconnect(request, [event], left):
                    return Response(status_code=499)  # the caller left: so does its poll (nobody reads this)
        finally:
            ledger.waiters -= 1
            polling[ns] -= waits
            if not polling[ns]:
                del polling[ns]
        if doc["phase"] == Phase.READY.value and doc["gang"].get("attemptInstanceUID"):
            doc["framework"] = await framework_for(doc)
        return JSON(doc)

    async def framework_proxy(request: Request) -> Response:
        ns, name = request.path_params["namespace"], request.path_params["name"]
        if not s.ready:
            return kube_status(
                503, "ServiceUnavailable", f"topogang: not synced yet: {s.not_ready_reason}", name
            )
        real: Mapping[str, Any] | None = None
        if fetch_framework is not None:
            try:
                real = await fetch_framework(ns, name)
            except Exception as exc:
                return kube_status(
                    503, "ServiceUnavailable", f"topogang: cannot read the Framework: {exc}", name
                )
            if real is None:
                return kube_status(404, "NotFound", f'frameworks.{FC_GROUP} "{name}" not found', name)
        async with s.lock:
            got = ledger.resolve(s.core, ns, name, None)
            doc = None
            if got is not None and not isinstance(got, str):
                ledger.refresh(s.core, got, s.waiting_of)
                doc = ledger.status(s.core, got, s.waiting_of)
        ready = doc is not None and doc["phase"] == Phase.READY.value
        if real is None:  # standalone: the Framework the ledger implies
            if doc is None:
                return kube_status(404, "NotFound", f'frameworks.{FC_GROUP} "{name}" not found', name)
            f = synthesized(doc)
            return JSON(f if ready else with_ips_hidden(f, set()))
        assert doc is None or isinstance(doc, dict)
        view = barrier_view(dict(real))  # never the pod template (its env), only what barriers read
        try:
            current = doc is not None and _attempt_of(view) in (None, doc["gang"].get("attemptInstanceUID"))
            if ready and doc is not None and current:
                return JSON(with_pod_ips(view, pod_ips(doc)))
            return JSON(with_ips_hidden(view, set()))
        except FrameworkError:  # corrupt statuses: none shown, FrameworkBarrier keeps polling on this
            return JSON({k: v for k, v in view.items() if k != "status"})

    return [
        Route("/v1/gangs", list_gangs, methods=["GET"]),
        Route("/v1/gangs/", list_gangs, methods=["GET"]),
        Route("/v1/gangs/{namespace}/{name:path}", get_gang, methods=["GET"]),
        Route(FRAMEWORK_PATH, framework_proxy, methods=["GET"]),
    ]


def gang_of_pod(ledger: GangLedger, pod: PodRef) -> GangRef | None:
    """The gang the ledger has the pod as a member of, named as the ledger's paths name it (what
    the tenant door compares the path with). None for a pod in no gang the ledger knows.

    Two kinds of pods are in no gang any more, yet their barriers may still be polling, and a 403
    (which the barrier takes as the ledger unreachable, falling back to the Framework) would tell
    them nothing. A pod of a framework attempt a newer attempt superseded: its own framework (in
    its own namespace) is named, so the door lets it through to the route, which tells it the
    attempt is stale (409, which the barrier takes as final). A pod of a gang whose reservation
    expired before the gang was whole (a framework attempt's or any other): its gang is named
    while the tombstone that counted it lasts, and the route answers with that tombstone, phase
    Expired (which the barrier takes as final too), the same document its gang's other members
    read. The ledger keeps such pods only until they are gone (`GangLedger.superseded_pod`,
    `Parked.expired`)."""
    framework = ledger.superseded_pod(pod.uid, pod.namespace, pod.name)
    if framework is not None:
        return GangRef(pod.namespace, framework, True)
    rec = ledger.parked.expired(pod.uid, pod.namespace, pod.name, ledger.records) or _member_of(ledger, pod)
    if rec is None:
        return None
    # the path that names it must lead back to it: a plain gang named like a framework of its
    # namespace, or named `<ns>/<ns>/x` (its path then reads gang `x`), reaches another gang
    if ledger.key_at(rec.ident.namespace, rec.ident.name) != rec.gang:
        return None
    return GangRef(rec.ident.namespace, rec.ident.name, rec.ident.attempt is not None)


def _member_of(ledger: GangLedger, pod: PodRef) -> Record | None:
    """The record of the gang the pod (that UID, namespace and name) is a member of."""
    facts = ledger.pods.get(pod.uid)
    if facts is None or facts.namespace != pod.namespace or facts.name != pod.name:
        return None
    return ledger.records.get(facts.gang)
