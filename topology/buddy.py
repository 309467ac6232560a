"""Buddy allocation of VC quota cells: which cells to bind, and the safety invariant that allows it.

A VC's quota is a number of cells per chain and level, not particular cells. A quota cell is bound to
a physical cell only when a gang needs it (`CellState.bind` splits a free-pool cell down to it, and
`CellState.unbind` merges free buddies back up, as in HiveD's buddy allocator). A bind is allowed
only when every VC's outstanding quota can still be mapped onto the free pool afterwards
(`can_bind`, HiveD's per-level check), so one VC's binding can never strand another VC's quota.
Cells no guaranteed gang uses or has reserved are given back at once (`unbind_unused`).
"""

from __future__ import annotations

from collections.abc import Iterator

from topology.state import NO_GANG, NO_OWNER, CellState


# ------------------------------------------------------------------ the safety invariant
def feasible(
    st: CellState, chain: int, pool_counts: list[int], demand: list[int]
) -> tuple[int, int, int] | None:
    """HiveD's per-level check: None when every unbound quota cell can still get a physical cell,
    else (level, needed, available) for the first level that comes up short (top-down)."""
    ch = st.topo.chains[chain]
    carry = 0
    for lvl in range(ch.top_level, 0, -1):
        avail = carry + pool_counts[lvl]
        left = avail - demand[lvl]
        if left < 0:
            return (lvl, demand[lvl], avail)
        carry = left * ch.child_number[lvl]
    return None


def _split_delta(st: CellState, root: int, target: int) -> list[int]:
    """Pool count changes per level if `target` (inside pool cell `root`) were carved out."""
    topo = st.topo
    ch = topo.chains[topo.cell_chain[root]]
    delta = [0] * (ch.top_level + 1)
    delta[topo.level[root]] -= 1
    for lvl in range(topo.level[target], topo.level[root]):
        delta[lvl] += ch.child_number[lvl + 1] - 1
    return delta


def can_bind(st: CellState, owner: int, target: int) -> bool:
    """Would binding `target` for `owner` keep every VC's outstanding quota satisfiable?"""
    topo = st.topo
    chain = topo.cell_chain[target]
    lvl = topo.level[target]
    per_chain = st.unbound.get(owner, {}).get(chain)
    if per_chain is None or per_chain[lvl] <= 0:
        return False
    root = st.pool_root(target)
    if root < 0:
        return False
    counts = st.pool_counts(chain)
    for i, d in enumerate(_split_delta(st, root, target)):
        counts[i] += d
    demand = list(st.demand[chain])
    demand[lvl] -= 1
    return feasible(st, chain, counts, demand) is None


# ------------------------------------------------------------------ binding for a placement
def binding_order(st: CellState, chain: int, lvl: int, room: int = 0) -> Iterator[int]:
    """The free-pool cells of level `lvl` (node level or above) with at least `room` free leaves,
    in the order a new quota cell should be bound from them.

    Binding a cell hands the opportunistic gangs running in it to the VC, which displaces them as
    soon as it needs their GPUs (HiveD prefers the cell with the fewest opportunistic leaves for the
    same reason). So at node level the least used pool node comes first. Above node level a pool
    cell must be split to bind a node inside it: the most used one comes first, so that wholly free
    racks stay whole for the gangs that need one (buddy allocation's rule), and the caller takes its
    freest node. Ties: the cell id.

    Read lazily from the pool's own order (`CellState.pool_order`, kept as cells and leaves change):
    the caller mostly takes the first cell, and a scan of a whole level of the pool (thousands of
    nodes at 12,500) for it was most of a decision's time at scale."""
    ch = st.topo.chains[chain]
    most = ch.leaf_count[lvl] - room  # the most used leaves a cell with `room` free can have
    if most < 0:
        return iter(())
    used = range(most + 1) if lvl == ch.node_level else range(most, -1, -1)
    return st.pool_order.by_used(chain, lvl, used)


def bind_plan(st: CellState, q: list[int], chain: int, cell: int, need: int) -> list[int] | None:
    """Quota levels to bind so that `cell` gains at least `need` leaves, fewest leaves first.

    Two shapes compete: one quota cell at or above `cell`'s level covering all of it (possible
    when `cell` is wholly unbound), or pieces inside it, smallest covering piece first. Works on
    counts only; the real binding re-checks safety and may still refuse, in which case the
    caller tries its next choice."""
    topo = st.topo
    ch = topo.chains[chain]
    lvl_cell = topo.level[cell]
    root = st.pool_root(cell)
    whole: list[int] | None = None
    if root >= 0:
        if st.free[cell] < need:
            return None
        lvl = next((x for x in range(lvl_cell, topo.level[root] + 1) if q[x] > 0), None)
        if lvl is not None:
            whole = [lvl]
        regions = [lvl_cell]
    else:
        if st.pool_leaves[cell] == 0:
            return None
        pieces = [c for c in range(cell, topo.cell_end[cell]) if st.in_pool[c]]
        if sum(st.free[c] for c in pieces) < need:
            return None
        regions = [topo.level[c] for c in pieces]
    parts = _pieces(list(q), ch.leaf_count, ch.child_number, regions, lvl_cell, need)
    if parts is None or (
        whole is not None and ch.leaf_count[whole[0]] <= sum(ch.leaf_count[x] for x in parts)
    ):
        return whole
    return parts


def _pieces(
    q: list[int],
    leaf_count: tuple[int, ...],
    child_number: tuple[int, ...],
    regions: list[int],
    top: int,
    need: int,
) -> list[int] | None:
    """Greedy cover of `need` leaves by quota cells below `top` fitted into free `regions`."""
    plan: list[int] = []
    regions.sort()
    while need > 0:
        usable = [lvl for lvl in range(1, top + 1) if q[lvl] > 0 and any(r >= lvl for r in regions)]
        if not usable:
            return None
        covering = [lvl for lvl in usable if leaf_count[lvl] >= need]
        lvl = covering[0] if covering else usable[-1]
        region = next(r for r in regions if r >= lvl)
        regions.remove(region)
        for j in range(lvl, region):
            regions.extend([j] * (child_number[j + 1] - 1))
        regions.sort()
        q[lvl] -= 1
        plan.append(lvl)
        need -= leaf_count[lvl]
    return plan


def apply_binds(st: CellState, owner: int, cell: int, levels: list[int]) -> bool:
    """Bind quota cells of `levels` at/above or inside `cell`, smallest free region first."""
    topo = st.topo
    for lvl in levels:
        if lvl >= topo.level[cell]:
            target = topo.ancestor_at(cell, lvl)
            if target < 0 or not can_bind(st, owner, target):
                return False
            st.bind(owner, target)
            continue
        candidates = [c for c in topo.cells_within(cell, lvl) if st.pool_root(c) >= 0]
        candidates.sort(key=lambda c: (topo.level[st.pool_root(c)], c))
        for c in candidates:
            if can_bind(st, owner, c):
                st.bind(owner, c)
                break
        else:
            return False
    return True


# ------------------------------------------------------------------ binding for recovery
def bind_for(st: CellState, owner: int, leaves: list[int], hints: dict[int, str] | None = None) -> bool:
    """Bind the owner's quota cells so that it owns every leaf; all or none.

    Per leaf: the quota cell type recorded at bind time when given (`hints`), else the largest
    cell the gang covers wholly (a rack-sized gang takes its RACK cell back, not scattered node
    cells), else the smallest cell containing the leaf that the quota allows."""
    topo = st.topo
    mine = set(leaves)
    st.begin()
    for leaf in sorted(leaves):
        if st.leaf_owner[leaf] == owner:
            continue
        if st.leaf_owner[leaf] != NO_OWNER:
            st.rollback()
            return False
        target = _hinted_cell(st, owner, leaf, (hints or {}).get(leaf, ""))
        if target < 0:
            a = leaf
            while a >= 0 and all(x in mine for x in topo.leaves[topo.leaf_lo[a] : topo.leaf_hi[a]]):
                if st.pool_root(a) >= 0 and can_bind(st, owner, a):
                    target = a
                a = topo.parent[a]
        if target < 0:
            a = leaf
            while a >= 0 and not (st.pool_root(a) >= 0 and can_bind(st, owner, a)):
                a = topo.parent[a]
            target = a
        if target < 0:
            st.rollback()
            return False
        st.bind(owner, target)
    st.commit()
    return True


def _hinted_cell(st: CellState, owner: int, leaf: int, cell_type: str) -> int:
    topo = st.topo
    ti = topo.types.get(cell_type) if cell_type else None
    if ti is None:
        return -1
    a = topo.ancestor_at(leaf, ti.level)
    if a < 0 or topo.cell_type[a] != cell_type or st.pool_root(a) < 0 or not can_bind(st, owner, a):
        return -1
    return a


# ------------------------------------------------------------------ giving cells back
def unbind_unused(st: CellState, leaves: list[int]) -> None:
    """Give back VC cells (around `leaves`) that no guaranteed gang uses or has reserved."""
    topo = st.topo
    roots = sorted({r for r in (st.binding_root(leaf) for leaf in leaves) if r >= 0})
    for root in roots:
        if topo.pinned_id[root] is None and not holds_guaranteed(st, root):
            st.unbind(root)


def holds_guaranteed(st: CellState, cell: int) -> bool:
    """Does a guaranteed gang use a leaf of `cell`, or has a preemptor reserved one?"""
    if st.used_guaranteed[cell]:
        return True
    topo, reserver = st.topo, st.leaf_reserver
    return any(reserver[x] != NO_GANG for x in topo.leaves[topo.leaf_lo[cell] : topo.leaf_hi[cell]])
