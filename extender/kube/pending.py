"""The gangs pending when this extender takes the lead, kept in their VC's order until asked about.

A restart, or a standby that becomes the leader, starts with no waits (`Scheduler.waiting`): the
VC order (`extender.gangs.vc_order`, `topogang.vcQueueing: StrictFIFO`) knows a gang is waiting only
once kube-scheduler filters it again, and kube-scheduler retries a pod it holds as unschedulable only
on some cluster event, or after five minutes. Meanwhile a younger gang of the VC that fits would
start first, taking the quota the older one waits for. So when the lead begins, every gang with a
pod of topogang's profile pending (not bound, not finished, not being deleted) that the core does
not hold is noted as waiting `[Unasked]`: it holds its VC's younger gangs back as a wait for room
does, from its pods' creation, and its pods are due for a requeue (`extender.kube.requeue`), so
kube-scheduler filters them again within its backoff. That filter replaces the wait with the core's
answer; like any wait, one not filtered for a reservation TTL holds nobody back.

Who is noted, and with what: the pods are the API server's (the watch's list, nothing a request
names), of topogang's scheduler profile and without scheduling gates (the pods kube-scheduler sends
to these verbs); each is read
as the filter reads it, with its namespace's entitlement, so a pod that may not ask for its VC, or
whose spec is bad, is noted nowhere. Only a gang that could ever run holds: not one larger than its
VC's quota, and not one some of whose pods do not exist yet (it may wait for them rather than for
room: kube-scheduler asks about no pod of a native gang before its group is whole). Under
`BestEffortFIFO` nothing is noted: no gang is held back there.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from extender.gangs.optin import SCHEDULER_NAMES, scheduler_name
from extender.gangs.podspec import PodRequest, is_enabled
from extender.gangs.vc_order import STRICT_FIFO
from extender.gangs.waiting import Waiting
from extender.http import wire
from extender.http.turned_away import TurnedAway, can_ever_run
from extender.http.verbs import Scheduler
from extender.kube import pods as kpods
from extender.kube.client import ApiError
from topology.decisions import UserError, WaitCode, WaitReason

log = logging.getLogger("topogang.kube")


def pending(pod: Mapping[str, Any]) -> bool:
    """A pod kube-scheduler's topogang profile has yet to place: opted in, not bound, not done, and
    not held back by scheduling gates (kube-scheduler asks about no gated pod, so its note would
    hold its VC for a reservation TTL)."""
    spec = pod.get("spec")
    gated = isinstance(spec, dict) and bool(spec.get("schedulingGates"))
    return (
        scheduler_name(pod) in SCHEDULER_NAMES
        and is_enabled(pod)
        and not gated
        and kpods.node_name(pod) is None
        and not kpods.finished(pod)
        and not kpods.deleting(pod)
    )


async def recall(s: Scheduler, pods: Iterable[Mapping[str, Any]]) -> int:
    """Note the gangs of the pending `pods` as waiting `[Unasked]` (module docstring); how many."""
    if s.vc_queueing != STRICT_FIFO:
        return 0
    by_gang: dict[str, list[PodRequest]] = {}
    for pod in [p for p in pods if pending(p)]:
        try:
            pr = await s.request_of(wire.parse_pod(pod))
        except (UserError, wire.WireError):
            continue  # the filter says why, to the pod, when kube-scheduler asks
        except (ApiError, TimeoutError, OSError) as err:  # its read needs the API server (DRA claims)
            log.warning(
                "pod %s/%s not read at the start of the lead: %s", kpods.namespace(pod), kpods.name(pod), err
            )
            continue  # its first filter notes its gang
        by_gang.setdefault(pr.gang, []).append(pr)
    noted = 0
    async with s.lock:
        now = s.clock()
        for members in by_gang.values():
            # a gang not all of whose pods exist yet may wait for them, not for room (a native
            # gang's pods are not asked about before then): it is left to its first filter
            whole = len(members) >= members[0].request.pod_count
            if whole and _note(s, members, now):
                noted += 1
            else:
                for pr in members:
                    s.unkept.drop(pr.uid)
    if noted:
        log.info("%d gangs pending at the start of the lead wait in their VCs' order until filtered", noted)
    return noted


def _note(s: Scheduler, members: list[PodRequest], now: float) -> bool:
    """Note the gang of `members` (its pods read) as waiting `[Unasked]`, unless the core holds it, it
    waits for what the core said (asked since the lead began), or it can never run."""
    first = members[0]
    gang, req = first.gang, first.request
    old = s.waiting.get(gang)
    if s.core.gang(gang) is not None or (old is not None and old.reason.code is not WaitCode.UNASKED):
        return False
    if not s.core.has_vc(req.vc) or not can_ever_run(req, s.core.vc_quota(req.vc)):
        return False  # it holds nobody back: the filter answers it, when asked, that it can never run
    reason = WaitReason(WaitCode.UNASKED, req.vc, unasked(gang))
    w = old
    for pr in members:  # its place: the newest creation among its pods (`Holders.joined`)
        queued = s.holders.joined(pr, now, w)  # also when it began to wait, as far as anyone knows
        w = Waiting.of(pr, reason, min(now, queued), now, True, queued)
    assert w is not None
    s.waiting[gang] = w
    s.holders.note(w, old)
    for pr in members:
        s.unkept.keep(s.pods, pr.uid)
        s.requeue.due(TurnedAway.of(pr))
    return True


def unasked(gang: str) -> str:
    return (
        f"gang {gang} was pending when this extender took the lead and has not been filtered since; "
        "its VC's younger gangs wait behind it until it is (topogang.vcQueueing: StrictFIFO)"
    )
