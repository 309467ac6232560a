"""The cluster view's one JSON document: topology, GPU states, quotas and gangs, as compact arrays.

Designed for 1,000 nodes × 8 GPUs: the topology (`layout`) is sent once and again only when a config
reload changes it; GPU states are one character per GPU in layout order; VC bindings are runs of
GPUs; gangs list their slots with GPU positions. Everything a GPU's hover shows (pod, gang, GPU
index, VC, priority) is joined in the browser from these tables. `token` fingerprints everything
but the clock, so a poll that changed nothing gets `{"unchanged": true}` and the page re-renders
nothing; when something changed, the page diffs the state string and touches only changed GPUs.

GPU positions: chains in name order, each chain's top cells in config order, and each top cell's
leaves depth-first — the order in which the page nests racks → nodes → groups → GPUs.

Read-only: callers hold the scheduler lock; nothing here mutates the core.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from extender import views, wire
from topology.core import Core
from topology.model import Topology
from topology.reservations import Gang, GangPhase
from topology.state import NO_GANG, NO_OWNER

VERSION = 1

# one character per GPU
FREE, USED, OPPORTUNISTIC, RESERVED, PREEMPTING, BAD = "f", "u", "o", "r", "p", "b"
STATES = {
    FREE: "free",
    USED: "used (guaranteed)",
    OPPORTUNISTIC: "used (opportunistic)",
    RESERVED: "reserved for a gang, member not bound yet",
    PREEMPTING: "reserved for a preempting gang, victim still on it",
    BAD: "bad (unhealthy)",
}

# what each array holds, so the document explains itself
FIELDS = {
    "chain": [
        "name",
        "leafType",
        "levelTypes (level 1 = leaf ...)",
        "nodeLevel",
        "tops",
        "gpuIndex",
        "gpuIndexOf",
        "childNumber (per level)",
    ],
    "tops": "a cell above node level is [address, [children]]; a node is its name",
    "gpus": "one state character per GPU in layout order: "
    + ", ".join(f"{k}={v}" for k, v in STATES.items()),
    "vcRuns": ["firstGpu", "count", "vc (index in vcNames)"],
    "vc": ["name", "quotaGpus", "usedGpus", "opportunisticGpus", "cells"],
    "vcCell": ["cellType", "cells", "gpusPerCell", "boundCells", "usedGpus"],
    "gang": [
        "name",
        "vc",
        "priority",
        "phase",
        "pods",
        "podsBound",
        "created",
        "chain",
        "lcaCellType",
        "slots",
    ],
    "slot": ["slot", "pod (name or uid, null when unclaimed)", "gpus", "pendingGpus"],
    "gpuRanges": "GPU positions as [first, count, first, count, ...]",
    "waiting": ["name", "vc", "priority", "pods", "since", "code", "reason"],
}


@dataclass(frozen=True, slots=True)
class Layout:
    """The static half of the document for one topology, and each leaf's GPU position."""

    topo: Topology
    doc: dict[str, Any]
    token: str
    order: tuple[int, ...]  # GPU position -> leaf cell id
    pos: dict[int, int]  # leaf cell id -> GPU position


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=8).hexdigest()


def build_layout(topo: Topology) -> Layout:
    order: list[int] = []
    chains: list[list[Any]] = []
    for ch in topo.chains:

        def tree(c: int, node_level: int = ch.node_level) -> Any:
            if topo.level[c] <= node_level:
                ni = topo.cell_node[c]
                return topo.node_names[ni]
            return [topo.address[c], [tree(k) for k in topo.children[c]]]

        tops = []
        pattern: list[int] | None = None
        exceptions: dict[str, list[int]] = {}
        for top in ch.tops:
            tops.append(tree(top))
            leaves = topo.leaves[topo.leaf_lo[top] : topo.leaf_hi[top]]
            order.extend(leaves)
        for ni in topo.chain_nodes[ch.index]:
            gpus = [topo.gpu_index[x] for x in topo.node_leaves[ni]]
            if pattern is None:
                pattern = gpus
            elif gpus != pattern:
                exceptions[topo.node_names[ni]] = gpus
        chains.append(
            [
                ch.name,
                ch.leaf_type,
                list(ch.level_types),
                ch.node_level,
                tops,
                pattern or [],
                exceptions,
                list(ch.child_number),
            ]
        )
    doc = {"chains": chains, "states": STATES, "fields": FIELDS}
    return Layout(
        topo, doc, _digest(wire.dumps(doc)), tuple(order), {leaf: i for i, leaf in enumerate(order)}
    )


class StateView:
    """Builds the document; caches the layout per topology (a reload brings a new one)."""

    def __init__(self) -> None:
        self._layout: Layout | None = None

    def layout(self, core: Core) -> Layout:
        if self._layout is None or self._layout.topo is not core.topo:
            self._layout = build_layout(core.topo)
        return self._layout

    def document(
        self,
        core: Core,
        waiting: Iterable[views.Waiting],
        now: float,
        *,
        token: str | None = None,
        layout_token: str | None = None,
        phases: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        lay = self.layout(core)
        body = dynamic(core, lay, waiting, phases or {})
        tok = _digest(lay.token.encode() + wire.dumps(body))
        if token == tok:
            return {"v": VERSION, "token": tok, "unchanged": True, "now": now}
        out: dict[str, Any] = {"v": VERSION, "token": tok, "now": now, "layoutToken": lay.token}
        if layout_token != lay.token:
            out["layout"] = lay.doc
        out.update(body)
        return out


def dynamic(
    core: Core, lay: Layout, waiting: Iterable[views.Waiting], phases: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Everything that changes with scheduling: GPU states, VC bindings, quotas, gangs, waits.
    `phases`: the gang ledger's phase per gang (Binding, Ready, Broken, ...) where it knows one; the
    core's own (Reserved, Bound, Preempting) otherwise."""
    st = core.state
    pos = lay.pos
    lg, lp, lb, lr = st.leaf_gang, st.leaf_priority, st.leaf_bad, st.leaf_reserver
    chars: list[str] = []
    for leaf in lay.order:
        g = lg[leaf]
        if lb[leaf]:
            chars.append(BAD)
        elif g == NO_GANG:
            chars.append(FREE)
        elif lr[leaf] != NO_GANG and lr[leaf] != g:
            chars.append(PREEMPTING)
        else:
            chars.append(OPPORTUNISTIC if lp[leaf] < 0 else USED)

    gangs: list[list[Any]] = []
    for gang in core.gangs():
        row = _gang(core, gang, pos, chars)
        if phases and gang.name in phases and row[3] != GangPhase.PREEMPTING.value:
            row[3] = phases[gang.name]
        gangs.append(row)

    vc_names = sorted(core.vc_owner)
    vc_idx = {name: i for i, name in enumerate(vc_names)}
    owner_vc = [vc_idx.get(o.vc, -1) for o in core.owners]
    runs: list[list[int]] = []
    lo = st.leaf_owner
    for i, leaf in enumerate(lay.order):
        o = lo[leaf]
        v = owner_vc[o] if o != NO_OWNER else -1
        if v < 0:
            continue
        if runs and runs[-1][2] == v and runs[-1][0] + runs[-1][1] == i:
            runs[-1][1] += 1
        else:
            runs.append([i, 1, v])

    placed = {g.name for g in core.gangs()}
    waits = [
        [w.gang, w.vc, w.priority, w.pods, round(w.since, 3), w.reason.code.value, w.reason.message]
        for w in sorted(waiting, key=lambda w: w.gang)
        if w.gang not in placed
    ]
    return {
        "gpus": "".join(chars),
        "vcNames": vc_names,
        "vcRuns": runs,
        "vcs": _quotas(core, vc_names),
        "gangs": gangs,
        "waiting": waits,
    }


def _gang(core: Core, gang: Gang, pos: dict[int, int], chars: list[str]) -> list[Any]:
    topo = core.topo
    slots = []
    bound = 0
    for s in gang.slots:
        claimed = s.pod_uid is not None or s.finished
        bound += claimed
        gpus, pend = [], []
        if not s.released_early:
            for leaf in s.leaves:
                p = pos[leaf]
                if leaf in gang.pending:
                    pend.append(p)
                else:
                    gpus.append(p)
                    if not claimed and chars[p] in (USED, OPPORTUNISTIC):
                        chars[p] = RESERVED
        slots.append([s.index, s.pod_name or s.pod_uid, ranges(gpus), ranges(pend)])
    chain = topo.chains[gang.chain]
    return [
        gang.name,
        gang.request.vc,
        gang.priority,
        gang.phase.value,
        len(gang.slots),
        bound,
        round(gang.created, 3),
        chain.name,
        views.lca_type(core, chain.name, gang.lca_level),
        slots,
    ]


def ranges(positions: list[int]) -> list[int]:
    """Positions as flat [first, count, ...] runs: a slot's GPUs are almost always one run."""
    out: list[int] = []
    for p in sorted(positions):
        if out and out[-2] + out[-1] == p:
            out[-1] += 1
        else:
            out += [p, 1]
    return out


def _quotas(core: Core, vc_names: list[str]) -> list[list[Any]]:
    """Per VC: guaranteed quota vs used, opportunistic use, and the same by quota cell type."""
    topo, st = core.topo, core.state
    usage = views.vc_usage(core)
    # guaranteed GPUs in use, by (owner, cell type of the VC cell they are bound through)
    used_by: dict[tuple[int, str], int] = {}
    for gang in core.gangs():
        if gang.priority < 0:
            continue
        for leaf in gang.held_leaves():
            root = st.binding_root(leaf)
            if root < 0:
                continue
            key = (st.bound_owner[root], topo.cell_type[root])
            used_by[key] = used_by.get(key, 0) + 1
    by_vc = {vc.name: vc for vc in core.spec.virtual_clusters}
    out = []
    for name in vc_names:
        owner = core.vc_owner[name]
        cells: list[list[Any]] = []
        spec = by_vc.get(name)
        seen: dict[tuple[int, int], list[Any]] = {}
        for vcell in spec.virtual_cells if spec is not None else ():
            ch = topo.chain_index[vcell.chain]
            lvl = topo.types[vcell.cell_type].level
            row = seen.get((ch, lvl))
            if row is None:
                unbound = st.unbound.get(owner, {}).get(ch, [])
                row = [
                    vcell.cell_type,
                    0,
                    topo.chains[ch].leaf_count[lvl],
                    0,
                    used_by.get((owner, vcell.cell_type), 0),
                ]
                row[3] = -(unbound[lvl] if lvl < len(unbound) else 0)
                seen[(ch, lvl)] = row
                cells.append(row)
            row[1] += vcell.number
        for row in cells:
            row[3] += row[1]  # bound = promised - still unbound
        for o in core.owners:
            if o.vc == name and o.pinned_cell_id is not None:
                c = topo.pinned_cells[o.pinned_cell_id]
                cells.append(
                    [
                        f"pinned {o.pinned_cell_id}",
                        1,
                        topo.leaf_count[c],
                        1,
                        used_by.get((o.index, topo.cell_type[c]), 0),
                    ]
                )
        u = usage.get(name, {"quota": 0, "used": 0, "opportunistic": 0})
        out.append([name, u["quota"], u["used"], u["opportunistic"], cells])
    return out
