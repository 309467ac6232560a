"""Why a gang waits, and would it fit now: answers that change nothing.

`explain` runs the same search the scheduler runs, inside a transaction that is always rolled back,
and lays out per chain and level what the gang's VC has (unbound quota cells, free owned GPUs), what
the free pool has (free, bad) and what other VCs are still owed, so an admin can see which number is
short without reading code. `fits_in_order` asks the same of several gangs placed one after another
(the admission gate's question: which gangs to let go now).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from topology.asks import ReserveLimit, held_back
from topology.core import Core
from topology.decisions import GangPlacement, GangRequest, UserError
from topology.gangs import live_victims, place_gang, place_new
from topology.health import doomed
from topology.preemption import find_plan
from topology.requests import chains, suggested_ids
from topology.reservations import Gang
from topology.whatif import what_if


def explain(core: Core, req: GangRequest, now: float) -> dict[str, Any]:
    """What-if for `req`: where it would go now, or why not, and whom it could preempt."""
    core.validate(req)
    st = core.state
    existing = core.gang(req.name)
    out: dict[str, Any] = {"gang": req.name, "vc": req.vc, "priority": req.priority}
    if existing is not None:
        out["existing"] = {
            "phase": existing.phase.value,
            "placement": _placement(core, core.placement_of(existing)),
        }
    with what_if(core) as made:
        got = place_new(core, req, now, suggested_ids(core, req))
        if isinstance(got, GangPlacement):
            out["fitsNow"] = True
            out["placement"] = _placement(core, got)
            gang = core.gang(req.name)
            if gang is not None and gang is not existing:  # the what-if's gang, in `existing`'s name
                made.append((gang, existing))
        else:
            out["fitsNow"] = False
            out["reason"] = got.reason.to_dict()
    if not out["fitsNow"] and not req.opportunistic:
        plan = find_plan(core, req, core.owner_of(req), suggested_ids(core, req))
        out["wouldPreempt"] = (
            None
            if plan is None
            else [
                {"pod": v.pod_uid, "gang": v.gang, "node": v.node} for v in live_victims(core, plan.victims)
            ]
        )
    out["chains"] = [_chain_view(core, req, ch) for ch in chains(core, req)]
    out["doomed"] = [
        {
            "chain": d.chain,
            "level": d.level,
            "cellType": d.cell_type,
            "promised": d.demand,
            "healthyFree": d.healthy,
            "badNodes": list(d.bad_nodes),
        }
        for d in doomed(st)
    ]
    return out


def fits_in_order(
    core: Core,
    reqs: Sequence[GangRequest],
    now: float,
    limits: Mapping[str, ReserveLimit | None] | None = None,
) -> list[bool]:
    """Whether each of `reqs` would be placed now if they came one after another, each seeing the
    GPUs the ones before it took (none preempting, none started as a guest in lieu of a reclaim),
    inside one `whatif.what_if`. A request the config refuses counts as placed (the real placement names
    the error), and so does one its namespace's bound holds back (`limits`, by gang name:
    `asks.held_back`): its filter answers so at once, and it takes none of the GPUs the ones after
    it are judged on."""
    out: list[bool] = []
    with what_if(core) as made:
        for req in reqs:
            try:
                core.validate(req)
                limit = limits.get(req.name) if limits else None
                if limit is not None and held_back(core, req, None, limit) is not None:
                    out.append(True)
                    continue
            except UserError:
                out.append(True)
                continue
            displaced = core.gang(req.name)
            got = place_gang(core, req, now, suggested_ids(core, req))
            if isinstance(got, Gang):
                made.append((got, displaced))
            out.append(isinstance(got, Gang))
    return out


def _placement(core: Core, p: GangPlacement) -> dict[str, Any]:
    """The placement, with its spread as the model's graph tells it: the lowest common cell of
    all its GPUs (and the hops across it), and per pod whether its GPUs are directly linked."""
    topo = core.topo
    pods = []
    every: list[int] = []
    for x in p.pods:
        gpus = [leaf for i in x.gpu_indices if (leaf := topo.leaf_of(x.node, i)) is not None]
        every += gpus
        pod: dict[str, Any] = {"slot": x.slot, "node": x.node, "gpus": list(x.gpu_indices)}
        linked = topo.span(gpus).linked if len(gpus) > 1 else None
        if linked is not None:
            pod["nvlinked"] = linked
        pods.append(pod)
    whole = topo.span(every) if every else None
    return {
        "chain": p.chain,
        "lcaLevel": p.lca_level,
        "lcaCellType": None if whole is None else whole.cell_type,
        "gpuHops": None if whole is None else whole.hops,
        "nodes": list(p.nodes),
        "pods": pods,
    }


def _chain_view(core: Core, req: GangRequest, chain: int) -> dict[str, Any]:
    topo, st = core.topo, core.state
    ch = topo.chains[chain]
    owner = core.vc_owner.get(req.vc)
    unbound = st.unbound.get(owner, {}).get(chain) if owner is not None else None
    levels = []
    for lvl in range(1, ch.top_level + 1):
        pool = sorted(st.pool[chain][lvl])
        levels.append(
            {
                "level": lvl,
                "cellType": ch.level_types[lvl],
                "gpusPerCell": ch.leaf_count[lvl],
                "vcUnboundCells": unbound[lvl] if unbound is not None else 0,
                "allVcUnboundCells": st.demand[chain][lvl],
                "freePoolCells": len(pool),
                "badPoolCells": sum(1 for c in pool if st.bad_count[c]),
            }
        )
    owned_free = 0
    if owner is not None:
        owned_free = sum(
            k for n, k in st.owned_free[owner].items() if topo.cell_chain[topo.node_cell[n]] == chain
        )
    return {"chain": ch.name, "vcOwnedFreeGpus": owned_free, "levels": levels}
