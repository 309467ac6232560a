"""Do the VC quotas fit the physical cluster? HiveD's top-down count, made exact for pinned cells.

HiveD's rule, per chain (`initCellNums` in hived_algorithm.go): `available(top)` = number of top
cells; at each level l from the top down, `left = available − needed(l)` must be ≥ 0, and
`available(l−1) = left × childCellNumber(l)`. `needed(l)` = the VC cells of that level plus the pinned
cells of that level (HiveD counts a pinned cell as the VC's demand until it binds it at start-up, which
also takes it out of the free supply: one subtraction, not two).

HiveD treats a pinned cell as if it could be *any* cell of its level. It cannot: pinning node n splits
n's rack, so that rack is no longer available whole. HiveD accepts "2 racks, each with one pinned node,
and a VC that wants one whole rack", then can never honour it. Here the pinned cells sit where they
are. In buddy terms, after pinning, the free cells of level l are the unpinned, pin-free children of
cells split by a pin; serving the VCs top-down from those free lists gives exactly

    available(l) = HiveD's available(l) − split(l)
    available(l−1) = (left(l) + split(l)) × childCellNumber(l) − split(l−1)

where `split(l)` counts the level-l cells that strictly contain a pinned cell. With no such cells the
numbers are HiveD's, so its error text and numbers are kept. `left(l)` counts level-l cells not
promised to any VC at level l or above; lower levels' demand still comes out of it, so it is not what
a new VC can have. That is `headroom`: the most level-l cells one more promise can take with this
same count still fitting (the check that would refuse one more).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from topology.layout import ExpandedCell, TypeInfo


@dataclass(frozen=True, slots=True)
class Demand:
    """`number` cells of `cell_type` (level `level`) on `chain`, promised to VC `vc`.

    A pinned cell is a demand of one cell with `pinned_id` set and `cell_index` its physical cell."""

    vc: str
    chain: str
    cell_type: str
    level: int
    number: int
    pinned_id: str | None = None
    cell_index: int | None = None


@dataclass(frozen=True, slots=True)
class LevelFit:
    level: int
    cell_type: str
    child_number: int
    total: int  # physical cells of this level in the chain
    vc_demand: int  # VC cells (not pinned) of this level
    pinned: int  # pinned cells of this level
    split: int  # cells of this level split by a pinned cell below them
    available: int
    left: int

    @property
    def needed(self) -> int:
        return self.vc_demand + self.pinned


@dataclass(frozen=True, slots=True)
class ChainFit:
    """The per-level count of one chain, top level first; it stops at the first level that fails."""

    chain: str
    top_cells: int
    levels: tuple[LevelFit, ...]

    def shortage(self) -> LevelFit | None:
        return next((lv for lv in self.levels if lv.left < 0), None)


def chain_types(chain: str, types: dict[str, TypeInfo]) -> list[TypeInfo]:
    """The types of a chain from its top type down to the leaf (types assumed acyclic)."""
    out: list[TypeInfo] = []
    cur: str | None = chain
    while cur is not None and cur in types and len(out) <= len(types):
        out.append(types[cur])
        cur = types[cur].child_type
    return out


def fit_chain(
    chain: str,
    types: dict[str, TypeInfo],
    cells: Sequence[ExpandedCell],
    demands: Iterable[Demand],
) -> ChainFit:
    """Run the top-down count for one chain over its expanded cells and the demands on it."""
    mine = [d for d in demands if d.chain == chain]
    vc_demand = Counter[int]()
    pinned = Counter[int]()
    split_cells: set[int] = set()
    for d in mine:
        if d.pinned_id is None:
            vc_demand[d.level] += d.number
            continue
        pinned[d.level] += 1
        parent = cells[d.cell_index].parent if d.cell_index is not None else None
        while parent is not None:
            split_cells.add(parent)
            parent = cells[parent].parent
    split = Counter(cells[i].level for i in split_cells)
    total = Counter(c.level for c in cells if c.chain == chain)
    levels: list[LevelFit] = []
    path = chain_types(chain, types)
    top = path[0].level if path else 0
    available = total[top] - split[top]
    for ti in path:
        left = available - vc_demand[ti.level] - pinned[ti.level]
        levels.append(
            LevelFit(
                level=ti.level,
                cell_type=ti.name,
                child_number=ti.child_number,
                total=total[ti.level],
                vc_demand=vc_demand[ti.level],
                pinned=pinned[ti.level],
                split=split[ti.level],
                available=available,
                left=left,
            )
        )
        if left < 0:
            break
        available = (left + split[ti.level]) * ti.child_number - split[ti.level - 1]
    return ChainFit(chain, total[top], tuple(levels))


def shortage_message(fit: ChainFit, lv: LevelFit, demands: Iterable[Demand]) -> str:
    """HiveD's text, then who wants the cells of that level (and what pins split), to act on."""
    wanted: Counter[str] = Counter()
    for d in demands:
        if d.chain == fit.chain and d.level == lv.level:
            wanted[f"{d.vc} (pinned)" if d.pinned_id else d.vc] += d.number
    who = ", ".join(f"{vc} {n}" for vc, n in sorted(wanted.items()))
    text = (
        f"Illegal initial VC assignment: Insufficient physical cells at chain {fit.chain} "
        f"level {lv.level}: {lv.needed} needed, {lv.available} available ({lv.cell_type} cells wanted: {who}"
    )
    if lv.split:
        text += f"; {lv.split} {lv.cell_type} cells are split by pinned cells inside them"
    return text + ")"


def headroom(
    chain: str,
    types: dict[str, TypeInfo],
    cells: Sequence[ExpandedCell],
    demands: Iterable[Demand],
    level: TypeInfo,
) -> int:
    """The most cells of `level` a new VC could be promised on `chain`, every existing promise kept:
    the largest k for which `fit_chain` with the extra demand still fits (0 when even the config as
    it is does not). The count only grows with k, so k is found by bisection."""
    base = [d for d in demands if d.chain == chain]

    def fits(k: int) -> bool:
        extra = Demand("", chain, level.name, level.level, k)
        return fit_chain(chain, types, cells, [*base, extra]).shortage() is None

    if not fits(0):
        return 0
    lo, hi = 0, sum(1 for c in cells if c.chain == chain and c.level == level.level)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo
