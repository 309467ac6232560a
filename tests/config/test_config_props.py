"""`validate` never raises and is deterministic, whatever spec it is given."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from config import analyze, validate
from topology.layout import Problem
from topology.spec import CellTypeSpec, ClusterSpec, PhysicalCellSpec, VirtualCellSpec, VirtualClusterSpec

NAMES = st.sampled_from(["A", "B", "C", "G", "", "x_y", "n1"])
ADDR = st.one_of(st.none(), st.sampled_from(["0", "1", "7", "-1", "n1", "n2", "Bad_N", "a/b"]))


def cells(depth: int) -> st.SearchStrategy[PhysicalCellSpec]:
    kids = st.just(()) if depth == 0 else st.lists(cells(depth - 1), max_size=3).map(tuple)
    return st.builds(
        PhysicalCellSpec,
        cell_type=st.one_of(st.none(), NAMES),
        address=ADDR,
        pinned_cell_id=st.one_of(st.none(), st.sampled_from(["p1", "p2", "bad id"])),
        children=kids,
    )


SPECS = st.builds(
    ClusterSpec,
    cell_types=st.lists(
        st.builds(CellTypeSpec, NAMES, NAMES, st.integers(-1, 3), st.booleans()), max_size=5
    ).map(tuple),
    physical_cells=st.lists(cells(3), max_size=3).map(tuple),
    virtual_clusters=st.lists(
        st.builds(
            VirtualClusterSpec,
            st.sampled_from(["a", "b", "B_", ""]),
            st.lists(
                st.builds(
                    VirtualCellSpec, st.lists(NAMES, min_size=1, max_size=4).map(tuple), st.integers(-1, 5)
                ),
                max_size=3,
            ).map(tuple),
            st.lists(st.sampled_from(["p1", "p2", "p3"]), max_size=2).map(tuple),
        ),
        max_size=3,
    ).map(tuple),
    namespace_vcs=st.lists(
        st.tuples(st.sampled_from(["ns", "N S"]), st.sampled_from(["a", "z"])), max_size=2
    ).map(tuple),
)


@settings(max_examples=400, deadline=None)
@given(SPECS)
def test_validate_never_raises_and_is_deterministic(spec: ClusterSpec) -> None:
    problems = validate(spec)
    assert all(isinstance(p, Problem) and p.message for p in problems)
    assert problems == validate(spec)
    analyze(spec)
