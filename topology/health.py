"""Bad hardware as the VCs see it: which promised cells can now only be honoured with bad GPUs.

HiveD binds "doomed bad cells" into VC views so a VC does not wait forever on hardware it cannot have.
Here the same knowledge is computed on demand from the free pool: for each chain and level, how many
unbound quota cells could only be mapped onto cells that contain a bad GPU. Wait reasons and the
explain API report it, so a tenant sees "bad hardware" rather than an endless "insufficient capacity".

The node's side comes first: `set_node_health` marks GPUs bad from what Kubernetes reports (a node
NotReady, GPU indices named bad, fewer GPUs allocatable than the node has). Gangs already placed are
never moved; bad GPUs are only kept out of new placements.
"""

from __future__ import annotations

from dataclasses import dataclass

from topology.cluster import Cluster
from topology.state import CellState


@dataclass(frozen=True, slots=True)
class Doomed:
    chain: str
    level: int
    cell_type: str
    demand: int  # unbound quota cells needing a cell of this level (or part of one) from the pool
    healthy: int  # wholly healthy cells of this level obtainable from the pool
    bad_nodes: tuple[str, ...]

    @property
    def count(self) -> int:
        return max(0, self.demand - self.healthy)


def doomed(state: CellState) -> list[Doomed]:
    """Levels where outstanding VC quota exceeds what healthy free hardware can give."""
    topo = state.topo
    out = []
    for ch in topo.chains:
        pool_cells = [c for lvl in range(1, ch.top_level + 1) for c in sorted(state.pool[ch.index][lvl])]
        bad_nodes = sorted(
            {
                topo.node_names[n]
                for c in pool_cells
                if state.bad_count[c]
                for n in topo.nodes_within(c)
                if state.bad_count[topo.node_cell[n]]
            }
        )
        for lvl in range(1, ch.top_level + 1):
            need = sum(
                state.demand[ch.index][hi] * (ch.leaf_count[hi] // ch.leaf_count[lvl])
                for hi in range(lvl, ch.top_level + 1)
            )
            if not need:
                continue
            healthy = sum(
                1
                for p in pool_cells
                if topo.level[p] >= lvl
                for c in topo.cells_within(p, lvl)
                if state.bad_count[c] == 0
            )
            if healthy < need:
                out.append(Doomed(ch.name, lvl, ch.level_types[lvl], need, healthy, tuple(bad_nodes)))
    return out


def healthy_pool_cells(state: CellState, chain: int, level: int) -> int:
    """Wholly healthy cells of `level` that the chain's free pool can still give."""
    topo = state.topo
    ch = topo.chains[chain]
    return sum(
        1
        for hi in range(level, ch.top_level + 1)
        for p in state.pool[chain][hi]
        for c in topo.cells_within(p, level)
        if state.bad_count[c] == 0
    )


def doomed_of(state: CellState, owner: int) -> dict[tuple[int, int], int]:
    """(chain, level) -> how many of one owner's unbound quota cells there could now only be bound to
    bad hardware: HiveD's per-VC test (`vcFreeCellNum > healthy free cells`), so each VC's view marks
    that many of its free cells bad, while another VC with fewer free cells there still sees healthy
    ones."""
    out: dict[tuple[int, int], int] = {}
    for ch, levels in state.unbound.get(owner, {}).items():
        for lvl, k in enumerate(levels):
            if k:
                short = k - healthy_pool_cells(state, ch, lvl)
                if short > 0:
                    out[(ch, lvl)] = min(k, short)
    return out


def set_node_health(
    cluster: Cluster,
    node: str,
    healthy: bool,
    *,
    bad_gpus: frozenset[int] = frozenset(),
    healthy_gpus: int | None = None,
) -> None:
    """Mark a node's GPUs bad or healthy. A NotReady/unschedulable node (`healthy=False`) has every
    GPU bad; otherwise `bad_gpus` names bad GPU indices, and `healthy_gpus` (device-plugin
    allocatable) marks the highest-numbered surplus GPUs bad. Allocated gangs are never moved."""
    topo = cluster.topo
    leaves = topo.machine_leaves(node)  # every chain's GPUs of the node: health is the machine's
    bad: set[int] = set()
    if not healthy:
        bad = set(leaves)
    else:
        bad = {leaf for leaf in leaves if topo.gpu_index[leaf] in bad_gpus}
        if healthy_gpus is not None and healthy_gpus < len(leaves):
            ranked = sorted(leaves, key=lambda leaf: -topo.gpu_index[leaf])
            missing = len(leaves) - healthy_gpus - len(bad)
            for leaf in ranked:
                if missing <= 0:
                    break
                if leaf not in bad:
                    bad.add(leaf)
                    missing -= 1
    for leaf in leaves:
        cluster.state.set_leaf_bad(leaf, leaf in bad)


def node_health(cluster: Cluster, node: str) -> tuple[int, ...]:
    """Bad GPU indices of a node (empty when healthy)."""
    leaves = cluster.topo.machine_leaves(node)
    return tuple(cluster.topo.gpu_index[x] for x in leaves if cluster.state.leaf_bad[x])
