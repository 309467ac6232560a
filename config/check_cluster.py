"""Checks of the physical side: the cell-type tree and the physical cells expanded from it.

Each function returns its findings and never raises, so `validate` can report everything at once.
HiveD checks only the first two things here (unknown top type, a chain with no node level) and
panics on the first; the rest are the gaps its design comments ask for but its code never checks.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from config.names import dns1123_subdomain_error, label_value_error
from config.problems import ConfigWarning
from config.quota import chain_types
from topology.layout import ExpandedCell, Layout, Problem, TypeInfo, expand, type_infos
from topology.spec import CellTypeSpec, ClusterSpec, PhysicalCellSpec

TYPES = "physicalCluster.cellTypes"
CELLS = "physicalCluster.physicalCells"
# the most cells a config may expand to: 5x the 100,000-GPU cluster of `make bench-scale` (188,750
# cells). A typo's extra digit in a childCellNumber would otherwise expand until memory runs out,
# as a MemoryError (or the pod's OOM kill) rather than an error naming the field
MAX_CELLS = 1_000_000


@dataclass
class TypeCheck:
    """Findings about `cellTypes`, and the type table of the usable (acyclic) part."""

    problems: list[Problem] = field(default_factory=list)
    types: dict[str, TypeInfo] = field(default_factory=dict)
    cyclic: set[str] = field(default_factory=set)  # on a cycle or leading into one
    defined: set[str] = field(default_factory=set)


def check_cell_types(spec: ClusterSpec) -> TypeCheck:
    out = TypeCheck()
    child: dict[str, str] = {}
    for t in spec.cell_types:
        path = f"{TYPES}.{t.name}"
        if t.name in child:
            out.problems.append(Problem(path, f"cell type {t.name!r} is defined twice"))
            continue
        child[t.name] = t.child_type
        if not t.child_type:
            out.problems.append(
                Problem(f"{path}.childCellType", f"cell type {t.name!r} has an empty childCellType")
            )
        if t.child_number < 1:
            out.problems.append(
                Problem(
                    f"{path}.childCellNumber", f"childCellNumber must be at least 1, got {t.child_number}"
                )
            )
    out.defined = set(child)
    order = list(child)
    for cycle in _cycles(child, order):
        first = cycle[0]
        out.problems.append(
            Problem(
                f"{TYPES}.{first}.childCellType",
                "cell types form a cycle: "
                + " -> ".join([*cycle, first])
                + " (a cell cannot contain itself)",
            )
        )
    out.cyclic = {name for name in child if _reaches_cycle(name, child)}
    usable: dict[str, CellTypeSpec] = {}
    for t in spec.cell_types:
        if t.name not in out.cyclic:
            usable.setdefault(t.name, t)
    out.types = type_infos(replace(spec, cell_types=tuple(usable.values())))
    for t in spec.cell_types:
        out.problems += check_links(t, out.types.get(t.name))
    return out


def check_links(t: CellTypeSpec, info: TypeInfo | None) -> list[Problem]:
    """`nvlinks` of a cell type: on a node-level type only, each a pair of two different GPU
    indexes of that node, each pair once."""
    if not t.links:
        return []
    path = f"{TYPES}.{t.name}.nvlinks"
    if not t.is_node_level:
        return [Problem(path, f"nvlinks join GPUs of one node: {t.name!r} is not node-level")]
    out: list[Problem] = []
    gpus = info.leaf_count if info is not None else 0
    seen: set[frozenset[int]] = set()
    for i, (a, b) in enumerate(t.links):
        if a == b:
            out.append(Problem(f"{path}[{i}]", f"links GPU {a} to itself"))
        elif not (0 <= a < gpus and 0 <= b < gpus):
            out.append(
                Problem(f"{path}[{i}]", f"GPU indexes must be 0..{gpus - 1} (a {t.name} has {gpus} GPUs)")
            )
        elif frozenset((a, b)) in seen:
            out.append(Problem(f"{path}[{i}]", f"the link {a}-{b} is listed twice"))
        seen.add(frozenset((a, b)))
    return out


def _cycles(child: dict[str, str], order: list[str]) -> Iterator[list[str]]:
    """Each cycle of the child relation once, starting at its member defined first."""
    reported: set[str] = set()
    for start in order:
        walk: list[str] = []
        cur = start
        while cur in child and cur not in walk and cur not in reported:
            walk.append(cur)
            cur = child[cur]
        if cur in walk:
            cycle = walk[walk.index(cur) :]
            reported.update(cycle)
            rank = {n: i for i, n in enumerate(order)}
            k = min(range(len(cycle)), key=lambda i: rank[cycle[i]])
            yield cycle[k:] + cycle[:k]
        reported.update(walk)


def _reaches_cycle(name: str, child: dict[str, str]) -> bool:
    seen: set[str] = set()
    cur = name
    while cur in child:
        if cur in seen:
            return True
        seen.add(cur)
        cur = child[cur]
    return False


def check_chains(spec: ClusterSpec, tc: TypeCheck) -> tuple[list[Problem], list[str], set[str]]:
    """Top-level types: known, and with exactly one node-level type on the chain's path.

    Returns the problems, the chains in order of first appearance, and the chains whose structure is
    sound enough to count quotas on."""
    problems: list[Problem] = []
    chains: list[str] = []
    for i, top in enumerate(spec.physical_cells):
        t = top.cell_type
        if t is None or t in chains or t in tc.cyclic:
            continue
        if t not in tc.defined:
            near = difflib.get_close_matches(t, sorted(tc.defined), n=1, cutoff=0.6)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            problems.append(
                Problem(f"{CELLS}[{i}].cellType", f"physicalCells contains unknown cellType: {t}{hint}")
            )
            continue
        chains.append(t)
    sound: set[str] = set()
    demoted: set[str] = set()
    for chain in chains:
        path = chain_types(chain, tc.types)
        nodes = [ti.name for ti in path if ti.is_node_level]
        if not nodes:
            i = next(i for i, c in enumerate(spec.physical_cells) if c.cell_type == chain)
            problems.append(
                Problem(f"{CELLS}[{i}].cellType", f"top cell must be node-level or above: {chain}")
            )
        for extra in nodes[1:]:
            demoted.add(extra)
            problems.append(
                Problem(
                    f"{TYPES}.{extra}.isNodeLevel",
                    f"cell types {nodes[0]!r} and {extra!r} are both node-level on chain {chain}: "
                    "a chain needs exactly one node-level type (one cell = one Kubernetes node)",
                )
            )
        if len(nodes) == 1 and all(ti.child_type is None or ti.child_number >= 1 for ti in path):
            sound.add(chain)
    # Expand as if only the upper node level were one: a second one is reported once, above, not again
    # for every cell of it that lacks a node name.
    for name in demoted:
        tc.types[name] = replace(tc.types[name], is_node_level=False)
    used = {ti.name for chain in chains for ti in chain_types(chain, tc.types)}
    # "Unused" is only meaningful once every top cell resolved to a chain; otherwise it is noise
    # caused by the unknown top type reported above.
    all_resolved = bool(chains) and all(c.cell_type in chains for c in spec.physical_cells)
    problems += check_unused(spec, tc, used, resolved=all_resolved)
    return problems, chains, sound


def check_unused(spec: ClusterSpec, tc: TypeCheck, used: set[str], *, resolved: bool) -> list[Problem]:
    """Cell types no physical cell uses: an error when hardware may be lost, a warning when not.

    The rule, per group of unused types connected by childCellType links:
    - it is connected to a used type (it groups used cells, like a `T-POD` of used `T-RACK`s): a
      warning, since every GPU is still in the cluster;
    - it has a node-level type of its own (a whole chain nobody instantiated, like the DGX1-V100
      chain of HiveD's design config): a warning, since such a chain never held hardware;
    - its GPUs (leaf types) are in the cluster under other types (HiveD's reconfiguration test
      leaves the finer DGX2 groupings unused after shortening that chain): a warning;
    - otherwise it is an orphan: no node level, so it could only sit under a node, yet no used type
      names it and its GPU type is nowhere in the cluster. A misspelt childCellType does exactly
      that, and half of every node vanishes: an error.
    A childCellType that is not a defined type is a leaf (GPU) type; when it is one typo away from
    an unused defined type, that is the misspelling itself, reported there (and not again as the
    orphan), as an error. `resolved` False (some top cell's type is unknown) keeps all of it a
    warning: "used" is not known then."""
    defined = [ct.name for ct in spec.cell_types if ct.name not in tc.cyclic]
    child = {ct.name: ct.child_type for ct in spec.cell_types if ct.name not in tc.cyclic}
    unused = [n for n in dict.fromkeys(defined) if n not in used]
    problems: list[Problem] = []
    explained: set[str] = set()
    for name, kid in child.items():
        if not kid or kid in child:
            continue
        near = difflib.get_close_matches(kid, list(child), n=1, cutoff=0.8)
        if not near or _leaf_of(near[0], child) == kid:
            continue  # a type made of these very GPUs (`H100-NODE` of `H100`) is no misspelling of them
        where = f"{TYPES}.{name}.childCellType"
        if resolved and near[0] not in used:
            explained |= _component(near[0], child)
            problems.append(
                Problem(
                    where,
                    f"{kid!r} is not a defined cell type, so it would be taken as a leaf (GPU) type, "
                    f"cutting off the defined type {near[0]!r} (no physical cell uses it) and every GPU "
                    f"under it; did you mean {near[0]!r}?",
                )
            )
        else:
            problems.append(
                ConfigWarning(
                    where,
                    f"{kid!r} is not a defined cell type, so it is taken as a leaf (GPU) type; "
                    f"did you mean {near[0]!r}?",
                )
            )
    if not resolved:
        return problems
    used_leaves = _leaves(used, child)
    seen: set[str] = set()
    for name in unused:
        if name in seen:
            continue
        group = _component(name, child)
        seen |= group
        members = [n for n in unused if n in group]
        if group & used:
            users = sorted(n for n in group if n in used)
            for n in members:
                problems.append(
                    ConfigWarning(
                        f"{TYPES}.{n}",
                        f"cell type {n!r} is not used by any physical cell; it groups types the cells "
                        f"do use ({', '.join(users)}), so no GPU is lost",
                    )
                )
        elif any(tc.types[n].is_node_level for n in members if n in tc.types):
            for n in members:
                problems.append(
                    ConfigWarning(
                        f"{TYPES}.{n}",
                        f"cell type {n!r} is not used by any physical cell; its whole chain "
                        f"({', '.join(members)}), node level included, has no physical cell, so it never "
                        "held hardware and no GPU is lost",
                    )
                )
        elif _leaves(members, child) <= used_leaves:
            gpus = ", ".join(sorted(_leaves(members, child)))
            for n in members:
                problems.append(
                    ConfigWarning(
                        f"{TYPES}.{n}",
                        f"cell type {n!r} is not used by any physical cell; its GPU type ({gpus}) is in "
                        "the cluster under other cell types, so no GPU is lost",
                    )
                )
        elif not group & explained:
            for n in members:
                problems.append(
                    Problem(
                        f"{TYPES}.{n}",
                        f"cell type {n!r} is not used by any physical cell and cannot be: no type at or "
                        "below it is node-level, so it can only sit under a node, no used type names it as "
                        "childCellType, and its GPU type is in no physical cell: its GPUs are cut off from "
                        "the cluster. Is a childCellType misspelt? (A whole unused chain with its own node "
                        "level is only a warning.)",
                    )
                )
    return problems


def _leaves(names: set[str] | list[str], child: dict[str, str]) -> set[str]:
    """The leaf (GPU) types directly under `names`: child types that are not defined types."""
    return {child[n] for n in names if n in child and child[n] and child[n] not in child}


def _leaf_of(name: str, child: dict[str, str]) -> str | None:
    """The leaf type at the bottom of `name`'s chain (None on a cycle or a missing child)."""
    seen: set[str] = set()
    while name in child and name not in seen:
        seen.add(name)
        name = child[name]
    return None if name in seen or not name else name


def _component(name: str, child: dict[str, str]) -> set[str]:
    """The defined types linked to `name` by childCellType, in either direction."""
    links: dict[str, set[str]] = {n: set() for n in child}
    for n, kid in child.items():
        if kid in links:
            links[n].add(kid)
            links[kid].add(n)
    out, todo = {name}, [name]
    while todo:
        for m in links.get(todo.pop(), ()):
            if m not in out:
                out.add(m)
                todo.append(m)
    return out


def expand_cells(spec: ClusterSpec, tc: TypeCheck, chains: list[str]) -> Layout:
    """`layout.expand` over the top cells whose type is a chain; the others are already reported.

    Skipped cells are replaced by an empty placeholder (not removed) so that indexes, config paths and
    HiveD's index-based default addresses of the remaining cells stay the same."""
    keep = set(chains)
    tops = tuple(
        c if c.cell_type is None or c.cell_type in keep else PhysicalCellSpec() for c in spec.physical_cells
    )
    layout = expand(replace(spec, physical_cells=tops), tc.types)
    skipped = {f"{CELLS}[{i}].cellType" for i, c in enumerate(spec.physical_cells) if c.cell_type not in keep}
    skipped -= {f"{CELLS}[{i}].cellType" for i, c in enumerate(spec.physical_cells) if c.cell_type is None}
    return Layout(layout.cells, tuple(p for p in layout.problems if p.path not in skipped))


def check_size(spec: ClusterSpec, tc: TypeCheck, chains: list[str]) -> Problem | None:
    """The cells the physical cells of `chains` would expand to, counted from the types before any
    is made: at most `MAX_CELLS`, else the problem names the type whose childCellNumber is largest."""
    types, keep = tc.types, set(chains)
    tops = [c for c in spec.physical_cells if c.cell_type in keep]
    below: dict[str, int] = {}

    def cells(name: str) -> int:  # a cell of type `name` and every cell under it
        if name not in below:
            ti = types.get(name)
            below[name] = (
                1 if ti is None or ti.child_type is None else 1 + ti.child_number * cells(ti.child_type)
            )
        return below[name]

    total = sum(cells(c.cell_type) for c in tops if c.cell_type is not None)
    if total <= MAX_CELLS:
        return None
    used = {n for c in tops if c.cell_type is not None for n in _chain_names(c.cell_type, types)}
    worst = max(sorted(used), key=lambda n: types[n].child_number if n in types else 0)
    ti = types[worst]
    return Problem(
        f"{TYPES}.{worst}.childCellNumber",
        f"the physical cells would expand to {total:,} cells ({ti.child_number:,} {ti.child_type} in each "
        f"{worst}); at most {MAX_CELLS:,}: is {ti.child_number} a typo?",
    )


def _chain_names(top: str, types: dict[str, TypeInfo]) -> Iterator[str]:
    name: str | None = top
    while name is not None and name in types:
        yield name
        name = types[name].child_type


def spec_by_path(spec: ClusterSpec) -> dict[str, PhysicalCellSpec]:
    """Every physical cell written in the config, by its config path (to tell explicit addresses)."""
    out: dict[str, PhysicalCellSpec] = {}

    def walk(cell: PhysicalCellSpec, path: str) -> None:
        out[path] = cell
        for i, kid in enumerate(cell.children):
            walk(kid, f"{path}.cellChildren[{i}]")

    for i, top in enumerate(spec.physical_cells):
        walk(top, f"{CELLS}[{i}]")
    return out


def check_cells(spec: ClusterSpec, tc: TypeCheck, layout: Layout) -> list[Problem]:
    """Node names, GPU indices, addresses and pinned ids of the expanded cells."""
    written = spec_by_path(spec)
    problems: list[Problem] = []
    node_of: dict[int, int] = {}  # cell index -> index of its node-level cell
    nodes: dict[tuple[str, str], str] = {}  # (node name, chain) -> config path
    gpus: dict[tuple[str, int], str] = {}  # (node name, GPU index): one machine, all its chains
    repeated: set[int] = set()  # node cells already reported as duplicates (their GPUs are not)
    addresses: dict[tuple[int | None, str], str] = {}
    pins: dict[str, ExpandedCell] = {}
    for c in layout.cells:
        ti = tc.types[c.cell_type]
        own = written.get(c.config_path)
        explicit = own is not None and own.address is not None
        where = f"{c.config_path}.cellAddress" if explicit else c.config_path
        if ti.is_node_level:
            node_of[c.index] = c.index
        elif c.parent is not None and c.parent in node_of:
            node_of[c.index] = node_of[c.parent]
        if ti.is_node_level and explicit and c.node is not None:
            err = dns1123_subdomain_error(c.node)
            if err:
                problems.append(Problem(where, f"invalid node name: {err}"))
            # One machine may carry cells of several chains (HiveD's design config: a node with a CT1
            # pair on GPUs 8-9 and a DGX1-P100 board on 0-7); within one chain it is one cell.
            if (c.node, c.chain) in nodes:
                problems.append(
                    Problem(
                        where,
                        f"duplicate node name {c.node!r} in chain {c.chain} "
                        f"(also at {nodes[(c.node, c.chain)]}); a node may appear once per chain",
                    )
                )
                repeated.add(c.index)
            else:
                nodes[(c.node, c.chain)] = c.config_path
        elif c.level == 1 and c.gpu_index is not None and node_of.get(c.index, -1) not in (-1, *repeated):
            node_name = layout.cells[node_of[c.index]].node
            if c.gpu_index < 0:
                problems.append(Problem(where, f"GPU index must be 0 or more, got {c.gpu_index}"))
            key = (node_name or "", c.gpu_index)
            if key in gpus:
                problems.append(
                    Problem(
                        where,
                        f"duplicate GPU index {c.gpu_index} on node {node_name!r} (also at {gpus[key]})",
                    )
                )
            else:
                gpus[key] = c.config_path
        elif not ti.is_node_level and c.level > 1:
            # Inside a node, key by the node cell too: two nodes given one name are reported once, as
            # a duplicate node name, not again for every socket and switch under them.
            key2 = (node_of.get(c.index), c.address)
            if key2 in addresses:
                problems.append(
                    Problem(where, f"duplicate cell address {c.address!r} (also at {addresses[key2]})")
                )
            else:
                addresses[key2] = c.config_path
        if c.pinned_cell_id is not None:
            problems.extend(_check_pin(c, c.pinned_cell_id, pins, layout))
    return problems


def _check_pin(c: ExpandedCell, pid: str, pins: dict[str, ExpandedCell], layout: Layout) -> list[Problem]:
    where = f"{c.config_path}.pinnedCellId"
    problems: list[Problem] = []
    err = label_value_error(pid)
    if err:
        problems.append(Problem(where, f"invalid pinnedCellId: {err}"))
    if pid in pins:
        problems.append(
            Problem(where, f"pinnedCellId {pid!r} is defined twice (also at {pins[pid].config_path})")
        )
        return problems
    pins[pid] = c
    parent = c.parent
    while parent is not None:
        outer = layout.cells[parent]
        if outer.pinned_cell_id is not None:
            problems.append(
                Problem(
                    where,
                    f"pinned cell {pid!r} lies inside pinned cell {outer.pinned_cell_id!r} "
                    f"({outer.config_path}); pinned cells must not nest",
                )
            )
            break
        parent = outer.parent
    return problems


def pinned_cells(layout: Layout) -> dict[str, ExpandedCell]:
    """pinnedCellId -> its physical cell (the first definition when an id is duplicated)."""
    out: dict[str, ExpandedCell] = {}
    for c in layout.cells:
        if c.pinned_cell_id is not None and c.pinned_cell_id not in out:
            out[c.pinned_cell_id] = c
    return out
