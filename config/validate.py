"""`validate(spec)`: every check on a cluster spec, all findings at once, never an exception.

HiveD validates a handful of things by panicking on the first (`pkg/api/config.go` and
`pkg/algorithm` in github.com/microsoft/hivedscheduler), so an admin learns about one mistake per
crash-loop. Here each check runs on whatever the earlier ones left usable,
and every finding names the config path and the offending value. Where HiveD has an error text for a
condition, the same text is used, so its users recognise it.

`analyze` keeps the intermediate results (type table, expanded cells, quota count) because the
`topogang validate` summary shows them.
"""

from __future__ import annotations

from dataclasses import dataclass

from config.check_cluster import (
    check_cell_types,
    check_cells,
    check_chains,
    check_size,
    expand_cells,
    pinned_cells,
)
from config.check_vcs import VCS, check_vcs
from config.quota import ChainFit, Demand, fit_chain, shortage_message
from topology.layout import Layout, Problem, TypeInfo
from topology.spec import ClusterSpec


@dataclass(frozen=True)
class Analysis:
    """What validation learned about a spec, for the summary and for callers that want the numbers."""

    spec: ClusterSpec
    types: dict[str, TypeInfo]
    chains: tuple[str, ...]  # top-level types, in order of first appearance
    layout: Layout
    demands: tuple[Demand, ...]  # VC cells and pinned cells that passed their own checks
    fits: dict[str, ChainFit]  # per sound chain (exactly one node level, counts ≥ 1)
    problems: tuple[Problem, ...]


def analyze(spec: ClusterSpec) -> Analysis:
    tc = check_cell_types(spec)
    chain_problems, chains, sound = check_chains(spec, tc)
    too_big = check_size(spec, tc, chains)
    if too_big is not None:  # nothing is expanded, and nothing that needs the cells is checked
        found = [*tc.problems, *chain_problems, too_big]
        return Analysis(spec, tc.types, tuple(chains), Layout((), ()), (), {}, tuple(_unique(found)))
    layout = expand_cells(spec, tc, chains)
    pins = pinned_cells(layout)
    vcs = check_vcs(spec, tc, chains, pins)
    problems: list[Problem] = [*tc.problems, *chain_problems]
    if not spec.physical_cells:
        problems.append(
            Problem("physicalCluster.physicalCells", "no physical cells: the cluster has no GPUs")
        )
    problems += [*layout.problems, *check_cells(spec, tc, layout), *vcs.problems]
    # A pin nested in another pinned cell is reported by check_cells; counting it too would add a
    # shortage that is only an echo of that error.
    counted = [d for d in vcs.demands if d.cell_index is None or not _inside_pin(layout, d.cell_index)]
    fits = {c: fit_chain(c, tc.types, layout.cells, counted) for c in chains if c in sound}
    for fit in fits.values():
        short = fit.shortage()
        if short is not None:
            problems.append(Problem(VCS, shortage_message(fit, short, counted)))
    return Analysis(spec, tc.types, tuple(chains), layout, tuple(vcs.demands), fits, tuple(_unique(problems)))


def validate(spec: ClusterSpec) -> list[Problem]:
    """Every error and warning (`config.problems.ConfigWarning`) about `spec`; empty means clean."""
    return list(analyze(spec).problems)


def _inside_pin(layout: Layout, index: int) -> bool:
    parent = layout.cells[index].parent
    while parent is not None:
        if layout.cells[parent].pinned_cell_id is not None:
            return True
        parent = layout.cells[parent].parent
    return False


def _unique(problems: list[Problem]) -> list[Problem]:
    seen: set[tuple[str, str, bool]] = set()
    out: list[Problem] = []
    for p in problems:
        key = (p.path, p.message, type(p) is Problem)
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out
