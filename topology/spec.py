"""Plain-data description of a cluster: what the core is built from.

`config/` turns the admin's YAML (HiveD's format) into these frozen dataclasses after validating it;
tests and the simulator build them directly. Keeping them free of pydantic and YAML means the core
never depends on how a cluster was described, only on what it is.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class CellTypeSpec:
    """One non-leaf cell type: `childCellNumber` children of `childCellType`.

    A type that never appears as a key of `cellTypes` is a leaf type (a GPU model)."""

    name: str
    child_type: str
    child_number: int
    is_node_level: bool = False
    # direct GPU-to-GPU links inside one cell of this type (node level only), as pairs of GPU
    # indexes: what the cell tree cannot say, such as the DGX-1's hybrid cube-mesh NVLink
    links: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True, slots=True)
class PhysicalCellSpec:
    """A physical cell as written in `physicalCells`, before address inference.

    `cell_type` is None for children, which inherit their parent's `childCellType`. `address` is the
    explicit `cellAddress` (None = infer). `children` empty means "the default children"."""

    cell_type: str | None = None
    address: str | None = None
    pinned_cell_id: str | None = None
    children: tuple[PhysicalCellSpec, ...] = ()


@dataclass(frozen=True, slots=True)
class VirtualCellSpec:
    """`{cellType: "CHAIN.….TYPE", cellNumber}` of a VC; `path` keeps every dotted segment."""

    path: tuple[str, ...]
    number: int

    @property
    def chain(self) -> str:
        return self.path[0]

    @property
    def cell_type(self) -> str:
        return self.path[-1]


@dataclass(frozen=True, slots=True)
class VirtualClusterSpec:
    name: str
    virtual_cells: tuple[VirtualCellSpec, ...] = ()
    pinned_cell_ids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    """The whole input of the core: cell types, physical cells and the VC quotas."""

    cell_types: tuple[CellTypeSpec, ...]
    physical_cells: tuple[PhysicalCellSpec, ...]
    virtual_clusters: tuple[VirtualClusterSpec, ...] = ()
    namespace_vcs: tuple[tuple[str, str], ...] = field(default=())

    def cell_type(self, name: str) -> CellTypeSpec | None:
        for t in self.cell_types:
            if t.name == name:
                return t
        return None
