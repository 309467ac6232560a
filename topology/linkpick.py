"""Among GPU choices the cell tree rates the same, the one with the most direct links.

The cell tree decides how many GPUs a pod takes from each cell; below the lowest cell level every
GPU of a cell is the same to it, and it takes the lowest indexes. When the config declares direct
GPU-to-GPU links (`nvlinks` on a node-level type, kept as edges of the model's graph), that choice
matters: on a DGX-1, a 4-GPU pod split 2 + 2 over the quads is a ring when GPUs i and i+4 are both
taken, and two disconnected pairs otherwise. This re-chooses, per lowest-level cell, which of its
usable GPUs the pod takes, keeping the count: the most links within the pod first, then the lowest
indexes. Without links nothing here runs, so such a config's decisions do not change.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from topology.state import CellState

# a cell with more choices than this keeps the tree's pick (a flat 72-GPU domain, say)
MAX_CHOICES = 5000


def prefer_linked(st: CellState, owner: int, leaves: Sequence[int]) -> list[int]:
    """`leaves` (a pod's pick) with each lowest-level cell's share re-chosen for direct links."""
    topo = st.topo
    links, parent = topo.links, topo.parent
    groups: dict[int, list[int]] = {}
    for leaf in leaves:
        groups.setdefault(parent[leaf], []).append(leaf)
    chosen = list(leaves)
    for cell, taken in sorted(groups.items()):
        if cell < 0:
            continue
        usable = [x for x in topo.children[cell] if x in taken or st.is_usable_leaf(owner, x)]
        m = len(taken)
        if m == len(usable) or math.comb(len(usable), m) > MAX_CHOICES:
            continue
        rest = [x for x in chosen if x not in taken]

        def score(pick: tuple[int, ...], rest: list[int] = rest) -> tuple[int, tuple[int, ...]]:
            inner = sum(1 for a, b in itertools.combinations(pick, 2) if b in links[a])
            outer = sum(1 for a in pick for b in rest if b in links[a])
            return (-(inner + outer), pick)

        best = min(itertools.combinations(usable, m), key=score)
        chosen = rest + list(best)
    return chosen
