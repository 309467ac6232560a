"""Small clusters built directly as specs, so core tests do not depend on the YAML loader."""

from __future__ import annotations

from topology.core import Core
from topology.decisions import Bind, GangRequest, Member
from topology.invariants import violations
from topology.spec import CellTypeSpec, ClusterSpec, PhysicalCellSpec, VirtualCellSpec, VirtualClusterSpec

CELL_TYPES = (
    CellTypeSpec("SWITCH", "GPU", 2),
    CellTypeSpec("HALF", "SWITCH", 2),
    CellTypeSpec("NODE", "HALF", 2, is_node_level=True),
    CellTypeSpec("RACK", "NODE", 4),
)


def rack_cluster(
    racks: int = 2,
    vcs: dict[str, list[tuple[str, int]]] | None = None,
    pinned: dict[str, list[str]] | None = None,
    pin_nodes: dict[str, str] | None = None,
) -> ClusterSpec:
    """`racks` racks × 4 nodes × 8 GPUs (2 halves × 2 switches × 2 GPUs).

    `vcs` maps a VC name to [(dotted type path below RACK, number)]; `pin_nodes` maps node name → pin id."""
    pin_nodes = pin_nodes or {}
    cells = tuple(
        PhysicalCellSpec(
            cell_type="RACK",
            children=tuple(
                PhysicalCellSpec(address=f"r{r}-n{n}", pinned_cell_id=pin_nodes.get(f"r{r}-n{n}"))
                for n in range(4)
            ),
        )
        for r in range(racks)
    )
    vcs = vcs if vcs is not None else {"a": [("NODE", 4)], "b": [("NODE", 2), ("NODE.HALF", 2)]}
    pinned = pinned or {}
    names = sorted(set(vcs) | set(pinned))
    return ClusterSpec(
        cell_types=CELL_TYPES,
        physical_cells=cells,
        virtual_clusters=tuple(
            VirtualClusterSpec(
                name,
                tuple(
                    VirtualCellSpec(("RACK", *p.split(".")) if p else ("RACK",), k)
                    for p, k in vcs.get(name, [])
                ),
                tuple(pinned.get(name, [])),
            )
            for name in names
        ),
    )


def gang(name: str, vc: str, *members: tuple[int, int], **kw: object) -> GangRequest:
    """A gang request from (pods, GPUs per pod) pairs."""
    return GangRequest(name, vc, tuple(Member(p, g) for p, g in members), **kw)  # type: ignore[arg-type]


def run(core: Core, req: GangRequest, prefix: str) -> list[Bind]:
    """Schedule every pod of the gang (uids `prefix-GPUS-k`); all must bind, guarantees must hold."""
    out = []
    for m in req.members:
        for k in range(m.pod_number):
            d = core.schedule(req, f"{prefix}-{m.leaf_number}-{k}", m.leaf_number, 0.0)
            assert isinstance(d, Bind), d
            out.append(d)
    assert violations(core) == []
    return out
