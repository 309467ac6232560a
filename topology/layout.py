"""Cell-type arithmetic and HiveD's address inference: spec in, a flat list of physical cells out.

Both the config validator (which must report duplicate node names and GPU indices with the path of
the offending entry) and the model (which builds the graph and indexes) need the same expansion, so it
lives here once. Problems found while expanding are returned, never raised, so a validator can report
all of them at once.
"""

from __future__ import annotations

from dataclasses import dataclass

from topology.spec import CellTypeSpec, ClusterSpec, PhysicalCellSpec


@dataclass(frozen=True, slots=True)
class TypeInfo:
    """What a cell type implies: its level (leaf = 1), leaf type and count, and where nodes are."""

    name: str
    level: int
    leaf_type: str
    leaf_count: int
    is_node_level: bool
    has_node_level: bool  # this type or one below it is node-level
    child_type: str | None
    child_number: int


@dataclass(frozen=True, slots=True)
class Problem:
    """A finding about the spec: `path` locates it inside the config (dotted, with [i] indexes)."""

    path: str
    message: str


def type_cycle(spec: ClusterSpec) -> list[str] | None:
    """The first cycle in the childCellType relation, as a list of type names, or None."""
    children = {t.name: t.child_type for t in spec.cell_types}
    for start in sorted(children):
        seen: list[str] = []
        cur: str | None = start
        while cur is not None and cur in children:
            if cur in seen:
                return [*seen[seen.index(cur) :], cur]
            seen.append(cur)
            cur = children[cur]
    return None


def type_infos(spec: ClusterSpec) -> dict[str, TypeInfo]:
    """Level, leaf type and leaf count of every type reachable from the declared ones.

    Assumes the type relation is acyclic (see `type_cycle`); a cycle raises ValueError rather than
    recursing forever."""
    by_name: dict[str, CellTypeSpec] = {t.name: t for t in spec.cell_types}
    out: dict[str, TypeInfo] = {}

    def info(name: str, depth: int) -> TypeInfo:
        if name in out:
            return out[name]
        if depth > len(by_name) + 1:
            raise ValueError(f"cell type cycle through {name}")
        t = by_name.get(name)
        if t is None:
            leaf = TypeInfo(name, 1, name, 1, False, False, None, 0)
            out[name] = leaf
            return leaf
        child = info(t.child_type, depth + 1)
        ti = TypeInfo(
            name=name,
            level=child.level + 1,
            leaf_type=child.leaf_type,
            leaf_count=child.leaf_count * t.child_number,
            is_node_level=t.is_node_level,
            has_node_level=t.is_node_level or child.has_node_level,
            child_type=t.child_type,
            child_number=t.child_number,
        )
        out[name] = ti
        return ti

    for t in spec.cell_types:
        info(t.name, 0)
    return out


@dataclass(frozen=True, slots=True)
class ExpandedCell:
    """One physical cell after address inference.

    `address` is the full HiveD address (`0/node-a/1/3/7`); `node` is the Kubernetes node name for
    cells at or below node level (None above); `gpu_index` is set on leaves only."""

    index: int
    parent: int | None
    chain: str
    cell_type: str
    level: int
    address: str
    node: str | None
    gpu_index: int | None
    pinned_cell_id: str | None
    config_path: str


@dataclass(frozen=True, slots=True)
class Layout:
    cells: tuple[ExpandedCell, ...]
    problems: tuple[Problem, ...]


def expand(spec: ClusterSpec, types: dict[str, TypeInfo]) -> Layout:
    """Expand `physicalCells` into every physical cell, inferring addresses the way HiveD does.

    Top-level cells default to their index; above node level a child defaults to its index among its
    siblings; at node level the explicit address is the node name; below it numbering restarts at the
    node (`child = parent × childCellNumber + i`), and a leaf's number is its GPU index."""
    cells: list[ExpandedCell] = []
    problems: list[Problem] = []

    def walk(
        cs: PhysicalCellSpec,
        type_name: str,
        chain: str,
        parent: int | None,
        parent_address: str | None,
        default_address: str,
        sub_node_number: int | None,
        node: str | None,
        path: str,
    ) -> None:
        ti = types.get(type_name)
        if ti is None:
            problems.append(Problem(f"{path}.cellType", f"unknown cellType {type_name!r}"))
            return
        own = cs.address if cs.address is not None else default_address
        full = own if parent_address is None else f"{parent_address}/{own}"
        number: int | None = None
        if ti.is_node_level:
            if cs.address is None:
                problems.append(
                    Problem(
                        f"{path}.cellAddress",
                        f"node-level cell of type {type_name} needs cellAddress = the Kubernetes node name",
                    )
                )
            node = own
            number = 0
        elif node is not None:
            number = sub_node_number
            if cs.address is not None:
                try:
                    number = int(cs.address)
                except ValueError:
                    problems.append(
                        Problem(
                            f"{path}.cellAddress",
                            f"{cs.address!r} below node level must be an integer "
                            f"({'the GPU index' if ti.level == 1 else 'the index inside the node'})",
                        )
                    )
                    number = sub_node_number
        gpu_index = number if ti.level == 1 and node is not None else None
        idx = len(cells)
        cells.append(
            ExpandedCell(
                index=idx,
                parent=parent,
                chain=chain,
                cell_type=type_name,
                level=ti.level,
                address=full,
                node=node,
                gpu_index=gpu_index,
                pinned_cell_id=cs.pinned_cell_id,
                config_path=path,
            )
        )
        if ti.child_type is None:
            if cs.children:
                problems.append(
                    Problem(f"{path}.cellChildren", f"leaf cell type {type_name} cannot have cellChildren")
                )
            return
        kids = cs.children
        if kids and len(kids) != ti.child_number:
            problems.append(
                Problem(
                    f"{path}.cellChildren",
                    f"has {len(kids)} entries but cell type {type_name} "
                    f"has childCellNumber {ti.child_number}",
                )
            )
        if not kids:
            kids = tuple(PhysicalCellSpec() for _ in range(ti.child_number))
        for i, kid in enumerate(kids):
            kid_number = None if number is None else number * ti.child_number + i
            if kid.cell_type is not None and kid.cell_type != ti.child_type:
                problems.append(
                    Problem(
                        f"{path}.cellChildren[{i}].cellType",
                        f"{kid.cell_type!r} does not match {type_name}'s childCellType {ti.child_type!r}",
                    )
                )
            walk(
                kid,
                ti.child_type,
                chain,
                idx,
                full,
                str(i) if kid_number is None else str(kid_number),
                kid_number,
                node,
                f"{path}.cellChildren[{i}]",
            )

    for i, top in enumerate(spec.physical_cells):
        path = f"physicalCluster.physicalCells[{i}]"
        if top.cell_type is None:
            problems.append(Problem(f"{path}.cellType", "a top-level physical cell needs cellType"))
            continue
        walk(top, top.cell_type, top.cell_type, None, None, str(i), None, None, path)
    return Layout(tuple(cells), tuple(problems))
