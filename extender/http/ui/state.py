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
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from extender.gangs.waiting import Waiting
from extender.http import replies, views
from topology import inspect
from topology.core import Core
from topology.inspect import GpuState
from topology.reservations import Gang, GangPhase
from topology.snapshot import same_topology

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
CHAR = {
    GpuState.BAD: BAD,
    GpuState.FREE: FREE,
    GpuState.PREEMPTING: PREEMPTING,
    GpuState.OPPORTUNISTIC: OPPORTUNISTIC,
    GpuState.USED: USED,
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
    """The static half of the document for one core's topology, and each GPU's position."""

    core: weakref.ref[Core]  # rebuilt when a reload brings a new core (the old one is not kept)
    doc: dict[str, Any]
    token: str
    order: tuple[int, ...]  # GPU position -> the core's GPU (leaf cell) id
    pos: dict[int, int]  # the core's GPU id -> GPU position


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=8).hexdigest()


def build_layout(core: Core) -> Layout:
    chains, order = inspect.gpu_layout(core)
    doc = {"chains": chains, "states": STATES, "fields": FIELDS}
    return Layout(
        weakref.ref(core), doc, _digest(replies.dumps(doc)), order, {leaf: i for i, leaf in enumerate(order)}
    )


class StateView:
    """Builds the document; caches the layout per topology (a reload brings a new one)."""

    def __init__(self) -> None:
        self._layout: Layout | None = None

    def layout(self, core: Core) -> Layout:
        """The layout depends on the topology alone, which a reader's copy of the core shares
        (`topology.snapshot`): one layout serves every copy until a reload brings a new topology."""
        held = self._layout.core() if self._layout is not None else None
        if self._layout is None or (held is not core and (held is None or not same_topology(held, core))):
            self._layout = build_layout(core)
        return self._layout

    def document(
        self,
        core: Core,
        waiting: Iterable[Waiting],
        now: float,
        *,
        token: str | None = None,
        layout_token: str | None = None,
        phases: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        lay = self.layout(core)
        body = dynamic(core, lay, waiting, phases or {})
        tok = _digest(lay.token.encode() + replies.dumps(body))
        if token == tok:
            return {"v": VERSION, "token": tok, "unchanged": True, "now": now}
        out: dict[str, Any] = {"v": VERSION, "token": tok, "now": now, "layoutToken": lay.token}
        if layout_token != lay.token:
            out["layout"] = lay.doc
        out.update(body)
        return out


def dynamic(
    core: Core, lay: Layout, waiting: Iterable[Waiting], phases: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Everything that changes with scheduling: GPU states, VC bindings, quotas, gangs, waits.
    `phases`: the gang ledger's phase per gang (Binding, Ready, Broken, ...) where it knows one; the
    core's own (Reserved, Bound, Preempting) otherwise."""
    pos = lay.pos
    chars = [CHAR[x] for x in inspect.gpu_states(core, lay.order)]

    gangs: list[list[Any]] = []
    for gang in core.gangs():
        row = _gang(core, gang, pos, chars)
        if phases and gang.name in phases and row[3] != GangPhase.PREEMPTING.value:
            row[3] = phases[gang.name]
        gangs.append(row)

    vc_names = core.vc_names()
    vc_idx = {name: i for i, name in enumerate(vc_names)}
    runs: list[list[int]] = []
    for i, vc in enumerate(inspect.gpu_vcs(core, lay.order)):
        v = vc_idx.get(vc, -1) if vc is not None else -1
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
    chain = inspect.gang_chain(core, gang)
    return [
        gang.name,
        gang.request.vc,
        gang.priority,
        gang.phase.value,
        len(gang.slots),
        bound,
        round(gang.created, 3),
        chain,
        views.lca_type(core, chain, gang.lca_level),
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
    usage = views.vc_usage(core)
    by_cell = inspect.quota_cells(core)
    out = []
    for name in vc_names:
        u = usage.get(name, {"quota": 0, "used": 0, "opportunistic": 0})
        out.append([name, u["quota"], u["used"], u["opportunistic"], by_cell.get(name, [])])
    return out
