"""Reservation TTLs: releasing gangs not whole in time, and keeping them out for a TTL after.

The TTL caps how long a gang holds cells while not whole (`topology.gangs` sets and keeps the
deadline). A gang released before it was whole leaves its window behind in
`Reservations.windows`: placed again inside it, the gang carries on with the same deadline; once
it has run out, the gang waits one TTL (`cooling`), so re-filtering its members does not hand it
the same cells back at once.
"""

from __future__ import annotations

from topology.cluster import Cluster
from topology.decisions import GangRequest, Released, Wait, WaitCode, WaitReason
from topology.gangs import cancel, keep_until_gone, release
from topology.reservations import GangPhase


def cooling(cluster: Cluster, req: GangRequest, now: float) -> Wait | None:
    """The answer for a gang whose not-whole window ended less than a TTL ago (its reservation
    expired, or it was released with every member gone and its window ran out meanwhile): it
    waits, so a gang whose members never all arrive cannot hold cells longer than its TTL by
    being filtered again, nor by having its members deleted and re-created."""
    w = cluster.reservations.windows.get(req.name)
    if w is None or w[0] > now:  # none, or one a new placement carries on (`record_gang`)
        return None
    until = w[0] + w[1]
    if until <= now:
        del cluster.reservations.windows[req.name]
        return None
    msg = (
        f"gang {req.name} was not whole for its whole reservation TTL; it is placed again in "
        f"{until - now:.0f} s (one TTL after its reservation ran out)"
    )
    return Wait(WaitReason(WaitCode.EXPIRED, req.vc, msg))


def expire(cluster: Cluster, now: float) -> list[Released]:
    """Release every reservation (or preemption) whose deadline passed before all its slots were
    claimed; pods already bound to it are named for eviction, so no gang stays half-bound, and
    keep their GPUs until they are gone (`keep_until_gone`). A reservation (not a preemption) that
    expired is not placed again for one TTL (`cooling`); windows older than that are forgotten."""
    out = []
    windows = cluster.reservations.windows
    for name in [n for n, (end, ttl) in windows.items() if end + ttl <= now]:
        del windows[name]
    for gang in cluster.reservations.unsettled():  # a whole gang has no deadline to pass
        if gang.deadline is not None and gang.deadline <= now and gang.phase is not GangPhase.BOUND:
            keep_until_gone(cluster, gang, now)
            if gang.pending:
                out.append(cancel(cluster, gang, "expired"))
            else:
                out.append(release(cluster, gang, "expired"))
                windows[gang.name] = (now, gang.request.ttl_seconds)
    return out
