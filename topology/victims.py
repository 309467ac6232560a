"""Which lower-priority gangs a preemptor should try to displace first: those whose loss costs least.

A preempted gang restarts from scratch, so what it loses is the work it has done: its GPUs times the
time it has run. The preemption search first places the preemptor with every candidate gone (the
closest placement preemption can give it), then frees candidates in this order, in doubling batches,
and stops at the first batch over which the preemptor lands as close (`spread`: the level of its
lowest common cell, then its node count); the victims are the freed gangs its placement overlaps.
A long-running gang is then displaced only when the cheaper ones cannot make room, and never at the
price of a more spread preemptor.

The global order alone does not find the cheapest set: the placement picks its cell by fit, not by
what the freed gangs cost, so a prefix that frees a cheap gang in one node (or rack) and a dear one
in another may land on the dear one. The search therefore also compares the cells of the level the
placement needs (its node for a gang of one node, its rack for a multi-node gang): in each cell the
cheapest prefix of that cell's candidates, at the same spread, and keeps the plan that loses the
least work in all. Cells are tried in order of their cheapest candidate (a cell's victims cost at
least that much), and the search stops at the first cell that cannot beat the best plan found.

The core has no clock of its own: the newest gang's creation time (every placement records the time
of its decision) stands in for "now". Gangs created at the same time lose the same (zero) work and
fall back to the smaller gang first, then the younger, then the id, so the order is deterministic.
"""

from __future__ import annotations

from collections.abc import Iterable

from topology.model import Topology
from topology.reservations import Gang


def work_lost(g: Gang, now: float) -> float:
    """The GPU-time `g` would lose if displaced now: its leaf cells times the time it has run."""
    return len(g.held_leaves()) * max(0.0, now - g.created)


def cheapest_first(pool: Iterable[Gang], now: float) -> list[Gang]:
    """`pool` ordered by the GPU-time each gang would lose, least first."""

    def cost(g: Gang) -> tuple[float, int, float, int]:
        held = len(g.held_leaves())
        return (held * max(0.0, now - g.created), held, -g.created, g.id)

    return sorted(pool, key=cost)


def latest_decision(gangs: Iterable[Gang]) -> float:
    """The newest creation time among `gangs` (the core's best knowledge of the current time)."""
    return max((g.created for g in gangs), default=0.0)


def batches(n: int) -> Iterable[int]:
    """Prefix lengths 1, 2, 4, … and finally `n`: how many cheapest candidates to free per try."""
    k = 1
    while k < n:
        yield k
        k *= 2
    if n:
        yield n


def spread(topo: Topology, leaves: list[tuple[int, ...]]) -> tuple[int, int]:
    """How spread a placement is: (level of the lowest common cell, nodes used); lower is closer."""
    flat = [leaf for ls in leaves for leaf in ls]
    return topo.lca_level(flat), len({topo.cell_node[leaf] for leaf in flat})
