"""`POST /v1/explain`: "would this pod's gang fit now, where, and if not why?" over HTTP.

The body is a Pod object (as `kubectl get pod -o json` prints it, or as kube-scheduler sends it)
carrying the usual topogang/HiveD scheduling spec. The answer is the core's what-if (`topology.explain`):
the placement it would get, or the wait reason, whom it could preempt, and the per-level view of the
VC's quota and the free pool. Nothing changes: the search runs on a private copy of the readers'
snapshot (`extender.http.snapshot`), in a worker thread, inside a transaction that is rolled back; it
never holds the verbs' lock. How many run at once, server-wide and per caller, is bounded by
`extender.http.limits` (429 beyond). The pod is held to its namespace's entitlement first, as the
filter holds it (`extender.gangs.entitlement`): what the filter would refuse is a 422 here too, and a
pod with a PriorityClass is explained at the priority it would get. A gang not yet placed that
would wait behind an older gang of its VC (`topogang.vcQueueing: StrictFIFO`) is told so in
`queuedBehind`, named as its filter would name it: the core's what-if says where it would go once
that gang no longer waits. One its namespace's bound on reservations not yet filled would hold back
(`maxReservedGpus`) is told so in `tenantLimit`, counted over its own namespace's gangs only.
"""

from __future__ import annotations

import asyncio

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from extender.http import podrequests, wire
from extender.http.httpproto import BodyTooLargeError, read_body
from extender.http.snapshot import Snapshots, private_core
from extender.http.verbs import Scheduler
from topology.asks import held_back
from topology.decisions import UserError
from topology.explain import explain

MAX_BODY = 1 << 20


def explain_route(scheduler: Scheduler, snapshots: Snapshots | None = None) -> Route:
    snaps = snapshots or Snapshots(scheduler)

    async def endpoint(request: Request) -> Response:
        try:
            doc = wire.loads(await read_body(request, MAX_BODY))
            pod = wire.parse_pod(doc.get("Pod", doc) if isinstance(doc, dict) else doc)
            pr = podrequests.explained(scheduler, pod)
            core, now = await private_core(snaps)
            answer = await asyncio.to_thread(explain, core, pr.request, now)
            if core.gang(pr.gang) is None:
                if (behind := scheduler.behind(pr, now)) is not None:
                    answer = {**answer, "queuedBehind": behind}
                limit = scheduler.entitlement.rules.reserve_limit(pr.namespace)
                if (held := held_back(core, pr.request, None, limit)) is not None:
                    answer = {**answer, "tenantLimit": held.reason.message}
        except BodyTooLargeError as err:
            return JSONResponse({"error": str(err)}, status_code=413)
        except wire.WireError as err:
            return JSONResponse({"error": str(err)}, status_code=400)
        except UserError as err:
            return JSONResponse({"error": str(err), "field": err.field}, status_code=422)
        return JSONResponse(answer)

    return Route("/v1/explain", endpoint, methods=["POST"])
