"""The simulated clusters: the shared 640-GPU cluster of the trace goals, and each VC's private one.

Shared cluster (the one the goals G3–G5 are stated for, `report.GOALS_NOTE`): 80 nodes × 8 GPUs in
racks of 8 nodes; a node splits into 2 halves (NVLink/PCIe groups, GPUs 0–3 and 4–7) of 2 switches
of 2 GPUs. VC quotas are whole nodes, proportional to the Philly VC sizes the Helios authors used
(352 nodes in all), scaled to the 80 nodes and rounded by the largest-remainder method, so they sum
to exactly the cluster: each VC gets ⌊share⌋ nodes, then the VCs with the largest fractional parts
get one more (ties: the larger table size, then the name). Quotas are node cells (`RACK.NODE`),
not racks: HiveD's guarantee is then "this many whole nodes", which buddy allocation keeps
satisfiable for every VC at all times.

Private cluster of a VC: exactly its quota's nodes, same node shape, one top cell holding all of
them (no rack level), so a private gang may use any of its nodes: the most favourable baseline for
the sharing-anomaly comparison.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from topology.spec import CellTypeSpec, ClusterSpec, PhysicalCellSpec, VirtualCellSpec, VirtualClusterSpec

GPUS_PER_NODE = 8
HALF_GPUS = 4
DEFAULT_NODES = 80
DEFAULT_RACK_SIZE = 8

# VC sizes in 8-GPU nodes (HeliosArtifact `philly_vc.csv`, see loadtest/simulate/data/README.md).
PHILLY_VC_NODES: dict[str, int] = {
    "6214e9": 64,
    "b436b2": 64,
    "ee9e8c": 64,
    "7f04ca": 32,
    "6c71a0": 32,
    "0e4a51": 32,
    "11cb48": 16,
    "e13805": 16,
    "2869ce": 16,
    "ed69ec": 8,
    "103959": 8,
}

LEAF = "GPU"
SWITCH = "GPU-SWITCH"
HALF = "GPU-HALF"
NODE = "GPU-NODE"
RACK = "GPU-RACK"
NODE_TYPES = (
    CellTypeSpec(SWITCH, LEAF, 2),
    CellTypeSpec(HALF, SWITCH, 2),
    CellTypeSpec(NODE, HALF, 2, is_node_level=True),
)


@dataclass(frozen=True, slots=True)
class SimCluster:
    """A cluster to simulate: its core spec, and the geometry every policy and metric shares.

    Nodes are numbered 0..nodes-1 in topology order (the order of `node_names`); node `n` sits in rack
    `n // rack_size`; GPU `g` of a node sits in half `g // 4`."""

    name: str
    nodes: int
    rack_size: int
    quotas: Mapping[str, int]  # VC -> nodes
    spec: ClusterSpec
    node_names: tuple[str, ...]
    gpus_per_node: int = GPUS_PER_NODE
    racks: tuple[int, ...] = ()  # rack index per node when racks are not `rack_size` consecutive nodes

    @property
    def total_gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def quota_gpus(self, vc: str) -> int:
        return self.quotas.get(vc, 0) * self.gpus_per_node

    def rack_of(self, node: int) -> int:
        return self.racks[node] if self.racks else node // self.rack_size

    @staticmethod
    def half_of(gpu: int) -> int:
        return gpu // HALF_GPUS


def proportional_quotas(sizes: Mapping[str, int], total: int) -> dict[str, int]:
    """Split `total` nodes in proportion to `sizes`, largest remainder first (sums to `total`)."""
    whole = sum(sizes.values())
    if whole <= 0:
        raise ValueError("VC sizes must sum to a positive number")
    exact = {vc: size * total / whole for vc, size in sizes.items()}
    out = {vc: int(share) for vc, share in exact.items()}
    left = total - sum(out.values())
    order = sorted(sizes, key=lambda vc: (-(exact[vc] - out[vc]), -sizes[vc], vc))
    for vc in order[:left]:
        out[vc] += 1
    return out


def _vcs(chain: str, quotas: Mapping[str, int]) -> tuple[VirtualClusterSpec, ...]:
    return tuple(
        VirtualClusterSpec(vc, (VirtualCellSpec((chain, NODE), n),))
        for vc, n in sorted(quotas.items())
        if n > 0
    )


def shared_cluster(
    quotas: Mapping[str, int] | None = None, nodes: int = DEFAULT_NODES, rack_size: int = DEFAULT_RACK_SIZE
) -> SimCluster:
    """`nodes` nodes in racks of `rack_size`; quotas default to the Philly sizes scaled to `nodes`."""
    if nodes % rack_size:
        raise ValueError(f"{nodes} nodes do not fill racks of {rack_size}")
    q = dict(quotas) if quotas is not None else proportional_quotas(PHILLY_VC_NODES, nodes)
    if sum(q.values()) > nodes:
        raise ValueError(f"quotas of {sum(q.values())} nodes exceed the cluster's {nodes}")
    racks = nodes // rack_size
    names = tuple(f"r{r + 1:02d}-n{n + 1}" for r in range(racks) for n in range(rack_size))
    physical = tuple(
        PhysicalCellSpec(
            cell_type=RACK,
            children=tuple(PhysicalCellSpec(address=names[r * rack_size + n]) for n in range(rack_size)),
        )
        for r in range(racks)
    )
    spec = ClusterSpec(
        cell_types=(*NODE_TYPES, CellTypeSpec(RACK, NODE, rack_size)),
        physical_cells=physical,
        virtual_clusters=_vcs(RACK, q),
    )
    return SimCluster("shared", nodes, rack_size, q, spec, names)


def private_cluster(vc: str, nodes: int, rack_size: int = DEFAULT_RACK_SIZE) -> SimCluster:
    """VC `vc` alone on exactly `nodes` nodes, all of them its quota."""
    top = f"GPU-PRIVATE-{nodes}"
    names = tuple(f"{vc}-n{n + 1}" for n in range(nodes))
    spec = ClusterSpec(
        cell_types=(*NODE_TYPES, CellTypeSpec(top, NODE, nodes)),
        physical_cells=(
            PhysicalCellSpec(cell_type=top, children=tuple(PhysicalCellSpec(address=a) for a in names)),
        ),
        virtual_clusters=_vcs(top, {vc: nodes}),
    )
    return SimCluster(f"private-{vc}", nodes, rack_size, {vc: nodes}, spec, names)
