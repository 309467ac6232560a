"""A guaranteed multi-node gang in one rack over a few plain guests, rather than across racks for free.

The placement takes free room first: a gang that fits without preempting anything is placed, however
spread, and preemption keeps a gang close only when nothing fits without it (`victims.py`: never at
the price of a more spread preemptor). So a multi-node gang arriving while the free nodes are
scattered spans racks, where a moment later, or over a guest or two, it would have had one. On the
live bench (`make bench-peers` with the admission gate, which hands kube-scheduler a gang seconds
sooner) VC e13805's first 12-GPU gang landed on free nodes of two racks where, without the gate, it
found none free, preempted guests in one rack and kept its later gangs in one rack too.

Here such a gang, before it is placed, is placed in a what-if (`whatif.py`); if its lowest common cell
there is above the lowest level whose cells could hold all its GPUs, the preemption search is asked
for a placement over plain guests only (opportunistic gangs that are not guaranteed gangs running as
guests), and that plan is taken instead when it is strictly closer and ends no more running work than
the loss threshold for starting as a guest (`room.worth_a_guest`, scaled by the wholly free nodes):
the same price topogang already pays a guest to spare a reclaim. Only a gang that opted in to guests
(`promoteWhenQuota`, `room.may_start_as_guest`) is treated so: HiveD places first and never
preempts what it could avoid, and its conformance cases never set the field.
"""

from __future__ import annotations

from topology import preemption
from topology.cluster import Cluster
from topology.decisions import GangPlacement, GangRequest, Preemption, Released, Wait, WaitCode, WaitReason
from topology.gangs import live_victims, place_gang
from topology.preemption import Plan
from topology.reservations import Gang
from topology.room import loss_of, may_start_as_guest, over_quota, worth_a_guest
from topology.victims import spread
from topology.whatif import what_if


def closer_plan(
    cluster: Cluster, req: GangRequest, now: float, suggested: frozenset[int] | None
) -> Plan | None:
    """The preemption of plain guests that lands a new gang closer than the free room would, when it
    is worth it (module docstring); None: place it as usual."""
    if not _may_apply(req):
        return None
    with what_if(cluster) as made:
        got = place_gang(cluster, req, now, suggested)
        if not isinstance(got, Gang):
            return None  # it fits only by preempting: the preemption already keeps it close
        made.append((got, None))
        free_spread = spread(cluster.topo, [s.leaves for s in got.slots])
    fit = cluster.topo.chains[got.chain].fit_level  # the closest any placement could be
    if free_spread[1] < 2 or free_spread[0] <= fit[min(req.leaf_total, len(fit) - 1)]:
        return None
    owner = cluster.owner_of(req)
    guests = [g for g in preemption.may_help(cluster, req, owner) if g.priority < 0 and not g.guest]
    if not guests:
        return None
    plan = preemption.plan_over(cluster, req, owner, guests, suggested)
    if plan is None or spread(cluster.topo, plan.leaves)[0] >= free_spread[0]:
        return None
    if over_quota(cluster, req, plan.victims):
        return None
    if worth_a_guest(cluster, req, loss_of(cluster, plan.victims, now)):
        return None
    return plan


def _may_apply(req: GangRequest) -> bool:
    """Whether the rule can concern `req` at all (cheap: asked before anything is placed)."""
    return may_start_as_guest(req) and sum(m.pod_number for m in req.members) >= 2


def closer_wait(cluster: Cluster, req: GangRequest, plan: Plan) -> Wait:
    """The filtering phase's answer for a gang that `closer_plan` keeps close: PREEMPTIBLE, naming
    the guests (nothing is reserved yet)."""
    victims = live_victims(cluster, plan.victims)
    msg = (
        f"gang {req.name} fits in one cell by preempting {len(victims)} pods of {len(plan.victims)} "
        "guests, where the free room would spread it"
    )
    return Wait(WaitReason(WaitCode.PREEMPTIBLE, req.vc, msg), victims)


def preempt(
    cluster: Cluster,
    req: GangRequest,
    now: float,
    known: Plan | None = None,
    outbid: list[Released] | None = None,
) -> GangPlacement | Preemption | Wait:
    """`preemption.preempt`, with a new gang kept close over plain guests when `closer_plan` says so;
    `known`: the plan `closer_plan` gave a moment ago on this same state (not asked again);
    `outbid`: the reservations let go for it."""
    first = closer_plan if known is None else (lambda *_: known)
    return preemption.preempt(cluster, req, now, first=first, outbid=outbid)
