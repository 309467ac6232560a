"""The quota count: HiveD's numbers when no pin splits a cell, exact when pins do.

The property test checks the closed form in `config.quota` against a plain simulation of buddy free
lists over the actual cells: pin first, then serve VC demand top-down, splitting what is left.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from config import analyze
from config.quota import Demand
from topology.layout import ExpandedCell
from topology.spec import CellTypeSpec, ClusterSpec, PhysicalCellSpec, VirtualCellSpec, VirtualClusterSpec

# chain R (level 4) -> N (node, level 3) -> H (level 2) -> G (level 1)
TYPES = (
    CellTypeSpec("H", "G", 2),
    CellTypeSpec("N", "H", 2, is_node_level=True),
    CellTypeSpec("R", "N", 2),
)
PATHS = {4: ("R",), 3: ("R", "N"), 2: ("R", "N", "H"), 1: ("R", "N", "H", "G")}


def cluster(racks: int, pins: set[int], demand: dict[int, int]) -> ClusterSpec:
    """`racks` racks of 2 nodes; node k (global index) pinned to VC `pins` if k in pins."""
    cells = tuple(
        PhysicalCellSpec(
            "R",
            children=tuple(
                PhysicalCellSpec(
                    address=f"n{2 * r + i}", pinned_cell_id=f"p{2 * r + i}" if 2 * r + i in pins else None
                )
                for i in range(2)
            ),
        )
        for r in range(racks)
    )
    vcs = [
        VirtualClusterSpec("q", tuple(VirtualCellSpec(PATHS[lv], n) for lv, n in sorted(demand.items()) if n))
    ]
    if pins:
        vcs.append(VirtualClusterSpec("pinned", (), tuple(f"p{k}" for k in sorted(pins))))
    return ClusterSpec(TYPES, cells, tuple(vcs))


def hived_fits(racks: int, pins: set[int], demand: dict[int, int]) -> bool:
    """HiveD's formula verbatim: pins are demand at their level, anywhere."""
    need = Counter(demand)
    need[3] += len(pins)
    available = racks
    for level, child in ((4, 2), (3, 2), (2, 2), (1, 0)):
        left = available - need[level]
        if left < 0:
            return False
        available = left * child
    return True


def simulated_fits(cells: tuple[ExpandedCell, ...], demands: list[Demand]) -> bool:
    """Buddy free lists over real cells: take pins out, then serve each level, splitting leftovers."""
    pinned = {d.cell_index for d in demands if d.pinned_id}
    blocked: set[int] = set()  # pinned cells and every ancestor of one
    for i in pinned:
        j: int | None = i
        while j is not None:
            blocked.add(j)
            j = cells[j].parent
    children: dict[int, list[int]] = {}
    for c in cells:
        if c.parent is not None:
            children.setdefault(c.parent, []).append(c.index)
    free = [c.index for c in cells if c.parent is None and c.index not in blocked]
    split = [c.index for c in cells if c.parent is None and c.index in blocked and c.index not in pinned]
    need = Counter[int]()
    for d in demands:
        if not d.pinned_id:
            need[d.level] += d.number
    for level in (4, 3, 2, 1):
        if len(free) < need[level]:
            return False
        rest = free[need[level] :]
        free = [k for p in rest for k in children.get(p, [])]
        nxt_split: list[int] = []
        for p in split:
            for k in children.get(p, []):
                if k in pinned:
                    continue
                (nxt_split if k in blocked else free).append(k)
        split = nxt_split
    return True


@settings(max_examples=300, deadline=None)
@given(
    racks=st.integers(1, 3),
    pins=st.sets(st.integers(0, 5), max_size=3),
    demand=st.fixed_dictionaries({lv: st.integers(0, 6) for lv in (4, 3, 2, 1)}),
)
def test_quota_count_matches_buddy_simulation(racks: int, pins: set[int], demand: dict[int, int]) -> None:
    pins = {p for p in pins if p < 2 * racks}
    a = analyze(cluster(racks, pins, demand))
    short = [p for p in a.problems if "Insufficient physical cells" in p.message]
    assert bool(short) == (not simulated_fits(a.layout.cells, list(a.demands)))
    if not hived_fits(racks, pins, demand):
        assert short  # stricter than HiveD, never looser


def test_no_pins_gives_hived_numbers() -> None:
    a = analyze(cluster(2, set(), {4: 1, 3: 1, 2: 1}))
    fit = a.fits["R"]
    assert [(lv.level, lv.available, lv.needed, lv.left) for lv in fit.levels] == [
        (4, 2, 1, 1),
        (3, 2, 1, 1),
        (2, 2, 1, 1),
        (1, 2, 0, 2),
    ]


def test_pins_that_split_racks_reduce_supply() -> None:
    # both racks hold a pinned node: HiveD would accept a whole-rack VC cell, which can never bind
    assert hived_fits(2, {0, 2}, {4: 1})
    (problem,) = [p for p in analyze(cluster(2, {0, 2}, {4: 1})).problems if p.path == "virtualClusters"]
    assert problem.message == (
        "Illegal initial VC assignment: Insufficient physical cells at chain R level 4: "
        "1 needed, 0 available (R cells wanted: q 1; 2 R cells are split by pinned cells inside them)"
    )


def test_pins_in_one_rack_leave_the_other_whole() -> None:
    a = analyze(cluster(2, {0, 1}, {4: 1}))
    assert not [p for p in a.problems if "Insufficient" in p.message]
    levels = a.fits["R"].levels
    assert [(lv.level, lv.split, lv.pinned, lv.left) for lv in levels] == [
        (4, 1, 0, 0),
        (3, 0, 2, 0),
        (2, 0, 0, 0),
        (1, 0, 0, 0),
    ]
