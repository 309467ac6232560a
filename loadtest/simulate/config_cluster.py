"""`topogang simulate --config FILE`: the simulated cluster read from the admin's own topogang YAML.

The simulator's policies and metrics assume what the shared default cluster has, so a config is
accepted when: every node has 8 GPUs (the simulator's node shape: halves of GPUs 0-3 and 4-7, and
the private-cluster replay builds its nodes that way), every VC's quota is a whole number of
nodes (the private-cluster replay gives each VC exactly that many nodes), and a rack is the cell right above a
node (nodes whose chain starts at node level are each a rack of one). Anything else is refused with
the file and the reason, before anything runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from config.load import ConfigError, load_config
from loadtest.simulate.cluster import GPUS_PER_NODE, SimCluster
from topology.core import Core
from topology.spec import ClusterSpec, PhysicalCellSpec

__all__ = ["ConfigError", "config_cluster"]


def _node_racks(spec: ClusterSpec) -> Iterator[tuple[str, int]]:
    """(node name, rack number) in config order; a rack is a node's parent cell."""
    node_types = {t.name for t in spec.cell_types if t.is_node_level}
    rack = 0

    def walk(cell: PhysicalCellSpec, cell_type: str | None) -> Iterator[tuple[str, int]]:
        nonlocal rack
        kind = cell.cell_type or cell_type
        child_type = next((t.child_type for t in spec.cell_types if t.name == kind), None)
        if kind in node_types:
            yield cell.address or "", rack
            return
        holds_nodes = child_type in node_types
        for child in cell.children:
            yield from walk(child, child_type)
        if holds_nodes:
            rack += 1

    for top in spec.physical_cells:
        before = rack
        yield from walk(top, top.cell_type)
        if rack == before:  # a top cell that is a node: a rack of its own
            rack += 1


def config_cluster(path: Path) -> SimCluster:
    loaded = load_config(path)
    spec = loaded.spec
    core = Core(spec)
    names = tuple(core.node_names())
    per_node = {core.node_fill(n)[1] for n in names}
    file = str(path)
    if per_node != {GPUS_PER_NODE}:
        found = ", ".join(str(g) for g in sorted(per_node))
        raise ConfigError(
            file, [("physicalCluster", f"the simulator needs 8-GPU nodes; found nodes of {found} GPUs")]
        )
    gpus = GPUS_PER_NODE
    racks_by_name = dict(_node_racks(spec))
    if set(racks_by_name) != set(names):
        raise ConfigError(file, [("physicalCluster", "could not find the rack of every node")])
    quotas: dict[str, int] = {}
    for vc in core.vc_names():
        q = core.vc_quota(vc)
        if q % gpus:
            raise ConfigError(
                file,
                [
                    (
                        f"virtualClusters.{vc}",
                        f"quota of {q} GPUs is not whole {gpus}-GPU nodes (the private replay needs that)",
                    )
                ],
            )
        quotas[vc] = q // gpus
    racks = tuple(racks_by_name[n] for n in names)
    rack_size = max(racks.count(r) for r in set(racks)) if racks else 1
    return SimCluster(Path(file).name, len(names), rack_size, quotas, spec, names, gpus, racks)
