"""Mutable cell state: who uses each leaf, which cells are bound to which VC, the buddy free pool.

All counters that placement reads are kept incrementally here (free leaves per cell, guaranteed and
opportunistic usage per cell, unbound leaves per cell, owned free leaves per VC and node), so a
placement never rescans the cluster. Every mutation is recorded in an undo log when one is open,
which lets the search try a placement on the real state and roll it back exactly. Which quota cells
to bind, and whether a bind is safe, is `buddy`'s; here are only the moves (split on bind, merge on
unbind).

Owners: each VC has an owner id for its quota cells, and each pinned cell gets an owner id of its
own, because HiveD lets only pods that name a pinned cell use it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from topology.bestfit import BestFitIndex
from topology.ids import FREE_PRIORITY as FREE_PRIORITY
from topology.ids import NO_GANG as NO_GANG
from topology.ids import NO_OWNER as NO_OWNER
from topology.leafcounts import LeafCounts
from topology.model import Topology
from topology.poolorder import PoolOrder


@dataclass(frozen=True, slots=True)
class Owner:
    """A holder of bound cells: a VC's quota, or one pinned cell of a VC."""

    index: int
    vc: str
    pinned_cell_id: str | None


class CellState(LeafCounts):
    """The mutable half of the core. Not thread-safe: the edge serialises calls."""

    def __init__(self, topo: Topology, owners: list[Owner], quota: dict[int, dict[int, list[int]]]) -> None:
        """`quota[owner][chain][level]` = unbound quota cells the owner starts with."""
        self.topo = topo
        n = topo.n_cells
        self.owners = owners
        self.leaf_gang: list[int] = [NO_GANG] * n
        self.leaf_priority: list[int] = [FREE_PRIORITY] * n
        self.leaf_bad: list[bool] = [False] * n
        # a preempting gang's claim on a leaf its victim still holds (HiveD's "Reserving" state)
        self.leaf_reserver: list[int] = [NO_GANG] * n
        self.free: list[int] = list(topo.leaf_count)  # unused and healthy leaves in subtree
        self.used_guaranteed: list[int] = [0] * n
        self.used_opportunistic: list[int] = [0] * n
        self.bad_count: list[int] = [0] * n
        self.bound_owner: list[int] = [NO_OWNER] * n  # set on the root cell of a binding
        self.leaf_owner: list[int] = [NO_OWNER] * n  # set on leaves under a binding
        self.in_pool: list[bool] = [False] * n
        self.pool_leaves: list[int] = list(topo.leaf_count)  # leaves in subtree bound to no one
        n_chains = len(topo.chains)
        self.pool: list[list[set[int]]] = [[set() for _ in range(ch.top_level + 1)] for ch in topo.chains]
        self.unbound: dict[int, dict[int, list[int]]] = {
            o: {ch: list(levels) for ch, levels in per_chain.items()} for o, per_chain in quota.items()
        }
        self.demand: list[list[int]] = [[0] * (ch.top_level + 1) for ch in topo.chains]
        for per_chain in quota.values():
            for ch, levels in per_chain.items():
                for lvl, k in enumerate(levels):
                    self.demand[ch][lvl] += k
        # owned free leaves per owner and node: the intra-VC view placement starts from
        self.owned_free: list[dict[int, int]] = [{} for _ in owners]
        self.owned_cells: list[set[int]] = [set() for _ in owners]
        # best-fit node lookup: group = owner id (key: owned free leaves), or opp_group(chain) (key:
        # free leaves, plus a penalty when the node has guaranteed work, so idle nodes come first)
        # per leaf, its cells (itself up) below its node: `_count_leaves` walks those per leaf, and
        # the node and above once per node
        self._below_node: list[tuple[int, ...]] = [()] * n
        for leaf in topo.leaves:
            path = topo.up[leaf]
            self._below_node[leaf] = path[: path.index(topo.node_cell[topo.cell_node[leaf]])]
        self.nodes_by_free = BestFitIndex()
        self.opp_penalty = topo.node_leaf_max + 1
        for n, nc in enumerate(topo.node_cell):
            self.nodes_by_free.update(self.opp_group(topo.cell_chain[nc]), n, topo.leaf_count[nc])
        self._log: list[Callable[[], None]] = []
        self._marks: list[tuple[int, int]] = []
        self.recent_binds: list[int] = []  # cells bound inside open transactions
        self.pool_order = PoolOrder(topo)  # the pool's cells by used leaves (`buddy.binding_order`)
        for ch in range(n_chains):
            for top in topo.chains[ch].tops:
                self._pool_add(top)

    # ------------------------------------------------------------------ undo log
    def begin(self) -> None:
        """Open a (possibly nested) transaction: a savepoint in the undo log."""
        self._marks.append((len(self._log), len(self.recent_binds)))

    def commit(self) -> None:
        """Keep what the innermost transaction did (an outer one can still roll it back)."""
        self._marks.pop()
        if not self._marks:
            self._log.clear()
            self.recent_binds.clear()

    def rollback(self) -> None:
        """Undo everything since the innermost `begin`."""
        mark, binds = self._marks.pop()
        log = self._log
        while len(log) > mark:
            log.pop()()
        del self.recent_binds[binds:]

    def binds_since_begin(self) -> list[int]:
        return self.recent_binds[self._marks[-1][1] :] if self._marks else []

    def _record(self, fn: Callable[[], None]) -> None:
        if self._marks:
            self._log.append(fn)

    # ------------------------------------------------------------------ pool primitives
    def _pool_add(self, c: int) -> None:
        self.in_pool[c] = True
        self.pool[self.topo.cell_chain[c]][self.topo.level[c]].add(c)
        self.pool_order.track(c, self.free[c])

    def _pool_remove(self, c: int) -> None:
        self.in_pool[c] = False
        self.pool[self.topo.cell_chain[c]][self.topo.level[c]].discard(c)
        self.pool_order.track(c, None)

    def _add_pool_leaves(self, c: int, delta: int) -> None:
        parent = self.topo.parent
        while c >= 0:
            self.pool_leaves[c] += delta
            c = parent[c]

    def pool_root(self, c: int) -> int:
        """The pool cell holding `c` entirely (itself or an ancestor), or -1 when `c` is not wholly
        unbound."""
        parent = self.topo.parent
        in_pool = self.in_pool
        while c >= 0:
            if in_pool[c]:
                return c
            c = parent[c]
        return -1

    def pool_counts(self, chain: int) -> list[int]:
        return [len(s) for s in self.pool[chain]]

    # ------------------------------------------------------------------ bind / unbind
    def bind(self, owner: int, target: int, *, quota: bool = True) -> None:
        """Bind `target` (wholly in the pool) to `owner`, splitting pool cells down to it.

        `quota=False` binds without consuming an unbound quota cell (pinned cells at start-up)."""
        topo = self.topo
        root = self.pool_root(target)
        assert root >= 0, "bind target is not free"
        path = []
        c = target
        while c != root:
            path.append(c)
            c = topo.parent[c]
        self._pool_remove(root)
        added: list[int] = []
        cur = root
        for nxt in reversed(path):
            for kid in topo.children[cur]:
                if kid != nxt:
                    self._pool_add(kid)
                    added.append(kid)
            cur = nxt
        chain = topo.cell_chain[target]
        lvl = topo.level[target]
        if quota:
            self.unbound[owner][chain][lvl] -= 1
            self.demand[chain][lvl] -= 1
        self._set_binding(target, owner)
        if self._marks:
            self.recent_binds.append(target)

        def undo() -> None:
            self._set_binding(target, NO_OWNER)
            if quota:
                self.unbound[owner][chain][lvl] += 1
                self.demand[chain][lvl] += 1
            for kid in added:
                self._pool_remove(kid)
            self._pool_add(root)

        self._record(undo)

    def unbind(self, target: int) -> None:
        """Return a bound cell to the pool and merge buddies back up (HiveD's release)."""
        topo = self.topo
        owner = self.bound_owner[target]
        assert owner != NO_OWNER
        chain = topo.cell_chain[target]
        lvl = topo.level[target]
        self._set_binding(target, NO_OWNER)
        self.unbound[owner][chain][lvl] += 1
        self.demand[chain][lvl] += 1
        self._pool_add(target)
        merged: list[tuple[int, tuple[int, ...]]] = []
        c = target
        while topo.parent[c] >= 0:
            p = topo.parent[c]
            kids = topo.children[p]
            if not all(self.in_pool[k] for k in kids):
                break
            for k in kids:
                self._pool_remove(k)
            self._pool_add(p)
            merged.append((p, kids))
            c = p

        def undo() -> None:
            for p, kids in reversed(merged):
                self._pool_remove(p)
                for k in kids:
                    self._pool_add(k)
            self._pool_remove(target)
            self.unbound[owner][chain][lvl] -= 1
            self.demand[chain][lvl] -= 1
            self._set_binding(target, owner)

        self._record(undo)

    def _set_binding(self, target: int, owner: int) -> None:
        topo = self.topo
        old = self.bound_owner[target]
        self.bound_owner[target] = owner
        lo, hi, end = topo.leaf_lo[target], topo.leaf_hi[target], topo.cell_end[target]
        count = hi - lo
        # the subtree's cells are ids target..end-1: their pool counts are set as one slice
        if owner == NO_OWNER:
            self.owned_cells[old].discard(target)
            self._add_pool_leaves(topo.parent[target], count)
            self.pool_leaves[target:end] = topo.leaf_count[target:end]
        else:
            self.owned_cells[owner].add(target)
            self._add_pool_leaves(topo.parent[target], -count)
            self.pool_leaves[target:end] = [0] * (end - target)
        leaf_owner, leaves = self.leaf_owner, topo.leaves
        # every leaf of a cell that is bound or unbound as a whole has one owner before (the pool's
        # NO_OWNER, or the binding's): the usable leaves that change hands are each node's free
        # count inside the cell, and each owner's free count and best-fit key move once per node
        # (a rack cell is 64 leaves on 8 nodes)
        prev = leaf_owner[leaves[lo]] if count else owner
        for leaf in leaves[lo:hi]:
            leaf_owner[leaf] = owner
        if prev == owner:
            return
        free, node_cell = self.free, topo.node_cell
        node = topo.cell_node[target]
        moved = (
            ((node, free[target]),)
            if node >= 0
            else ((n, free[node_cell[n]]) for n in topo.nodes_within(target))
        )
        for n, k in moved:
            if not k:
                continue
            if prev != NO_OWNER:
                self._owned_free_add(prev, n, -k)
            if owner != NO_OWNER:
                self._owned_free_add(owner, n, k)

    @staticmethod
    def opp_group(chain: int) -> int:
        return -1 - chain

    def opp_key(self, node: int) -> int:
        nc = self.topo.node_cell[node]
        return self.free[nc] + (self.opp_penalty if self.used_guaranteed[nc] else 0) if self.free[nc] else 0

    def _owned_free_add(self, owner: int, node: int, delta: int) -> None:
        self.nodes_by_free.update(owner, node, self._owned_free_count(owner, node, delta))

    # ------------------------------------------------------------------ leaves
    def allocate_leaf(self, leaf: int, gang: int, priority: int) -> None:
        self.allocate_leaves((leaf,), gang, priority)

    def release_leaf(self, leaf: int) -> None:
        self.release_leaves((leaf,))

    def allocate_leaves(self, leaves: Sequence[int], gang: int, priority: int) -> None:
        # a bad leaf may still be handed to a preemptor that reserved it; placement never picks one
        lg, lp = self.leaf_gang, self.leaf_priority
        for leaf in leaves:
            assert lg[leaf] == NO_GANG, "leaf not free"
            lg[leaf] = gang
            lp[leaf] = priority
        self._count_leaves(leaves, -1, self.used_guaranteed if priority >= 0 else self.used_opportunistic)
        self._reindex(leaves)
        if self._marks:
            taken = tuple(leaves)
            self._log.append(lambda: self._free_leaves(taken))

    def release_leaves(self, leaves: Sequence[int]) -> None:
        held = [(leaf, self.leaf_gang[leaf], self.leaf_priority[leaf]) for leaf in leaves]
        self._free_leaves(leaves)
        if self._marks:
            self._log.append(lambda: self._restore_held(held))

    def hand_over(self, leaves: Sequence[int], to_gang: int) -> None:
        """Leaves held by one gang, held by `to_gang` from now on, at the same priority: no counter
        moves (a pod held apart from its gang rejoins it, `recovery.rejoin`). Never inside a
        transaction: nothing undoes it."""
        assert not self._marks, "a hand-over is not undone"
        lg = self.leaf_gang
        for leaf in leaves:
            assert lg[leaf] != NO_GANG, "leaf not held"
            lg[leaf] = to_gang

    def _free_leaves(self, leaves: Sequence[int]) -> None:
        """Leaves back to free (no undo record: also the undo of an allocation)."""
        lg, lp = self.leaf_gang, self.leaf_priority
        guaranteed = lp[leaves[0]] >= 0 if leaves else True
        if all((lp[leaf] >= 0) is guaranteed for leaf in leaves):  # one usage counter: in bulk
            for leaf in leaves:
                assert lg[leaf] != NO_GANG
                lg[leaf] = NO_GANG
                lp[leaf] = FREE_PRIORITY
            self._count_leaves(leaves, 1, self.used_guaranteed if guaranteed else self.used_opportunistic)
        else:
            for leaf in leaves:
                assert lg[leaf] != NO_GANG
                self._set_leaf(leaf, NO_GANG, FREE_PRIORITY)
        self._reindex(leaves)

    def _restore_held(self, held: list[tuple[int, int, int]]) -> None:
        """Undo of a release: each leaf back to its (gang, priority)."""
        for leaf, gang, prio in held:
            self._set_leaf(leaf, gang, prio)
        self._reindex([leaf for leaf, _, _ in held])

    def _set_leaf(self, leaf: int, gang: int, priority: int) -> None:
        """Counters only: the best-fit index is brought up to date once per batch (`_reindex`), as
        an 8-GPU pod would otherwise push eight keys of its node through each index heap."""
        topo = self.topo
        old_gang, old_prio = self.leaf_gang[leaf], self.leaf_priority[leaf]
        bad = self.leaf_bad[leaf]
        self.leaf_gang[leaf] = gang
        self.leaf_priority[leaf] = priority
        d_free = int(gang == NO_GANG and not bad) - int(old_gang == NO_GANG and not bad)
        d_g = int(gang != NO_GANG and priority >= 0) - int(old_gang != NO_GANG and old_prio >= 0)
        d_o = int(gang != NO_GANG and priority < 0) - int(old_gang != NO_GANG and old_prio < 0)
        up = topo.up[leaf]
        # one walk per counter that changes: most calls change free and one usage counter only
        if d_free:
            free = self.free
            for c in up:
                free[c] += d_free
            owner = self.leaf_owner[leaf]
            if owner != NO_OWNER:
                self._owned_free_count(owner, topo.cell_node[leaf], d_free)
        if d_g:
            ug = self.used_guaranteed
            for c in up:
                ug[c] += d_g
        if d_o:
            uo = self.used_opportunistic
            for c in up:
                uo[c] += d_o

    def _reindex(self, leaves: Sequence[int]) -> None:
        """Best-fit keys of the nodes of `leaves`, for their owners and for opportunistic use."""
        topo = self.topo
        cell_node, leaf_owner = topo.cell_node, self.leaf_owner
        last = -1
        last_owned = (-1, NO_OWNER)
        for leaf in leaves:
            node = cell_node[leaf]
            owner = leaf_owner[leaf]
            if owner != NO_OWNER and (node, owner) != last_owned:  # a pod's leaves: one key per node
                self.nodes_by_free.update(owner, node, self.owned_free[owner].get(node, 0))
                last_owned = (node, owner)
            if node != last:
                self.nodes_by_free.update(self.opp_group(topo.cell_chain[leaf]), node, self.opp_key(node))
                if (root := self.pool_root(topo.node_cell[node])) >= 0:
                    self.pool_order.track(root, self.free[root])
                last = node

    def set_reserver(self, leaf: int, gang: int) -> None:
        old = self.leaf_reserver[leaf]
        self.leaf_reserver[leaf] = gang
        self._record(lambda: self._restore_reserver(leaf, old))

    def _restore_reserver(self, leaf: int, gang: int) -> None:
        self.leaf_reserver[leaf] = gang

    def set_leaf_bad(self, leaf: int, bad: bool) -> None:
        if self.leaf_bad[leaf] == bad:
            return
        topo = self.topo
        in_use = self.leaf_gang[leaf] != NO_GANG
        self.leaf_bad[leaf] = bad
        d = 1 if bad else -1
        c = leaf
        while c >= 0:
            self.bad_count[c] += d
            if not in_use:
                self.free[c] -= d
            c = topo.parent[c]
        owner = self.leaf_owner[leaf]
        if not in_use and owner != NO_OWNER:
            self._owned_free_add(owner, topo.cell_node[leaf], -d)
        node = topo.cell_node[leaf]
        self.nodes_by_free.update(self.opp_group(topo.cell_chain[leaf]), node, self.opp_key(node))
        if (root := self.pool_root(topo.node_cell[node])) >= 0:
            self.pool_order.track(root, self.free[root])
        self._record(lambda: self.set_leaf_bad(leaf, not bad))

    # ------------------------------------------------------------------ views
    def binding_root(self, c: int) -> int:
        """The bound cell containing `c` (itself or an ancestor), or -1."""
        bound = self.bound_owner
        for a in self.topo.up[c]:
            if bound[a] != NO_OWNER:
                return a
        return -1

    def binding_roots(self, leaves: Sequence[int]) -> list[int]:
        """`binding_root` of each leaf. Nothing is bound inside a bound cell (only pool cells are
        bound, and a bound cell's cells are never in the pool), so the leaves after the first
        under a bound cell share its root without a walk: a pod's leaves mostly do."""
        end = self.topo.cell_end
        out: list[int] = []
        root = -1
        for leaf in leaves:
            if not (0 <= root <= leaf < end[root]):
                root = self.binding_root(leaf)
            out.append(root)
        return out

    def bound_owner_of(self, c: int) -> int:
        """Owner of the binding that contains `c` wholly, or NO_OWNER."""
        root = self.binding_root(c)
        return self.bound_owner[root] if root >= 0 else NO_OWNER

    def owned_free_in(self, owner: int, c: int) -> int:
        """Free, healthy leaves of `owner` inside cell `c`."""
        topo = self.topo
        root = self.binding_root(c)
        if root >= 0:
            return self.free[c] if self.bound_owner[root] == owner else 0
        node = topo.cell_node[c]
        if node < 0 or topo.node_cell[node] == c:
            # a node or a cell above: the owner's per-node counts say it (a rack is 8 nodes, not
            # 64 leaves to look at)
            owned = self.owned_free[owner]
            return sum(owned.get(n, 0) for n in topo.nodes_within(c))
        n = 0
        lg, lb, lo = self.leaf_gang, self.leaf_bad, self.leaf_owner
        for leaf in topo.leaves[topo.leaf_lo[c] : topo.leaf_hi[c]]:
            if lo[leaf] == owner and lg[leaf] == NO_GANG and not lb[leaf]:
                n += 1
        return n

    def is_usable_leaf(self, owner: int, leaf: int) -> bool:
        """Can `owner` (-1 = opportunistic, any idle leaf) put a pod on this leaf now?"""
        if self.leaf_gang[leaf] != NO_GANG or self.leaf_bad[leaf]:
            return False
        return owner == NO_OWNER or self.leaf_owner[leaf] == owner
