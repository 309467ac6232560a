"""The placement search: where a whole gang goes, or why it cannot go anywhere yet.

Rules, in order of importance:
1. The gang lands inside the lowest cell (lowest common ancestor) that can hold it: one switch, one
   NVLink/PCIe half, one node, one rack, … — the reason topology-aware scheduling exists.
2. A guaranteed gang uses its VC's bound cells first and binds new quota cells only for what those
   cannot hold, through buddy allocation that keeps every other VC's outstanding quota satisfiable.
3. Among equal choices, pack (best fit) so large free blocks stay whole; break remaining ties by cell
   id, never by dict or set order.

The search applies its choices to the real `CellState` inside a transaction and rolls back what it
does not keep; this keeps one implementation of every counter instead of a shadow model.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass

from topology.buddy import apply_binds, bind_plan, binding_order
from topology.domains import first_whole_node, ranked_cells
from topology.linkpick import prefer_linked
from topology.model import Topology
from topology.nodeorder import whole_node_order
from topology.state import NO_OWNER, CellState

# how many multi-node domains to try before settling for the best seen (bounds worst-case latency)
MAX_DOMAIN_TRIALS = 16
# domains of more nodes than this are searched in bound order rather than walked (`topology.nodeorder`)
ORDERED_FROM = 64


@dataclass(frozen=True, slots=True)
class Shortfall:
    """Why a chain could not take the gang: the level it fell short at, and the counts."""

    level: int
    needed: int
    available: int
    quota_bound: bool  # the VC's own quota (not the physical cluster) is what ran out


@dataclass(slots=True)
class _Choice:
    key: tuple[int, ...]
    cell: int
    binds: list[int]  # quota levels to bind inside (or above) the cell


class Placer:
    """Finds and applies placements on one `CellState`. Stateless between calls."""

    def __init__(self, state: CellState) -> None:
        self.state = state
        self.topo: Topology = state.topo

    # ------------------------------------------------------------------ public
    def place(
        self,
        owner: int,
        chain: int,
        sizes: list[int],
        gang: int,
        priority: int,
        suggested: frozenset[int] | None,
        max_level: int | None = None,
    ) -> list[tuple[int, ...]] | Shortfall:
        """Place pods of `sizes` leaves (slot order) as one gang; commit and return each slot's
        leaves, or return the shortfall and change nothing. `owner` NO_OWNER = opportunistic.
        `max_level`: the whole gang under one cell of that level (at least node level), or nowhere."""
        topo = self.topo
        ch = topo.chains[chain]
        top = ch.top_level + 1 if max_level is None else min(max_level, ch.top_level)
        total = sum(sizes)
        k0 = ch.fit_level[total] if total < len(ch.fit_level) else ch.top_level + 1
        if len(sizes) == 1:  # most gangs are one pod: nothing to order
            order, desc = [0], sizes
        else:
            order = sorted(range(len(sizes)), key=lambda i: (-sizes[i], i))
            desc = [sizes[i] for i in order]
        st = self.state

        if k0 <= ch.node_level:
            picked = self._best_single_node(owner, chain, total, k0, suggested)
            if picked is not None:
                st.begin()
                leaves = self._fill_cell(owner, chain, picked.cell, picked.binds, desc, gang, priority)
                if leaves is not None:
                    self._commit()
                    return self._to_slots(order, leaves)
                st.rollback()
        if len(sizes) == 1 and k0 <= ch.node_level:
            return self._shortfall(owner, chain, total, k0)  # one pod never spans nodes
        # several nodes: try ever larger domains above node level, then the whole chain
        lower_bound = max(1, -(-total // topo.node_leaf_max)) if topo.node_leaf_max else 1
        for lvl in range(max(k0, ch.node_level + 1), top + 1):
            best: tuple[tuple[int, ...], int] | None = None
            # domains come best fit first (least capacity that still suffices), so the first one
            # on the fewest possible nodes is taken: it keeps big free blocks whole
            for trials, dom in enumerate(self._domains(owner, chain, lvl, total)):
                if trials >= MAX_DOMAIN_TRIALS:
                    break
                unbound_before = self._unbound_leaves(owner, chain)
                st.begin()
                tried = self._fill_nodes(owner, chain, dom, desc, gang, priority, suggested)
                new_leaves = unbound_before - self._unbound_leaves(owner, chain)
                if tried is None:
                    st.rollback()
                    continue
                nodes_used = len({topo.cell_node[ls[0]] for ls in tried})
                if nodes_used <= lower_bound:
                    # the fewest nodes possible: no later domain can beat it, and every earlier one
                    # used more nodes, so this is the one to keep; refilling it after a rollback
                    # would repeat the same deterministic search (half the cost of a gang)
                    self._commit()
                    return self._to_slots(order, tried)
                st.rollback()
                key = (nodes_used, new_leaves, trials)
                if best is None or key < best[0]:
                    best = (key, dom)
            if best is not None:
                st.begin()
                leaves = self._fill_nodes(owner, chain, best[1], desc, gang, priority, suggested)
                if leaves is not None:
                    self._commit()
                    return self._to_slots(order, leaves)
                st.rollback()
        return self._shortfall(owner, chain, total, k0)

    def _commit(self) -> None:
        """Keep the transaction, but give back any quota cell it bound and then did not use."""
        st = self.state
        for c in st.binds_since_begin():
            if st.bound_owner[c] != NO_OWNER and st.used_guaranteed[c] == 0:
                st.unbind(c)
        st.commit()

    # ------------------------------------------------------------------ usable capacity
    def usable(self, owner: int, c: int) -> int:
        """Leaves in `c` this owner can use without binding anything new."""
        if owner == NO_OWNER:
            return self.state.free[c]
        return self.state.owned_free_in(owner, c)

    def _quota(self, owner: int, chain: int) -> list[int] | None:
        if owner == NO_OWNER:
            return None
        q = self.state.unbound.get(owner, {}).get(chain)
        if q is None or not any(q):
            return None
        return q

    def _choose_in(self, owner: int, chain: int, within: int, size: int) -> _Choice | None:
        """The lowest cell inside `within` (at most node level) that can hold `size` leaves."""
        topo, st = self.topo, self.state
        ch = topo.chains[chain]
        start = ch.fit_level[size] if size < len(ch.fit_level) else ch.top_level + 1
        if owner == NO_OWNER or st.bound_owner_of(within) == owner:
            return self._choose_free(within, size, start)
        q = self._quota(owner, chain)
        for lvl in range(start, topo.level[within] + 1):
            best: _Choice | None = None
            for c in topo.cells_within(within, lvl):
                own = self.usable(owner, c)
                binds: list[int] = []
                new = 0
                if own < size:
                    if q is None:
                        continue
                    plan = bind_plan(self.state, q, chain, c, size - own)
                    if plan is None:
                        continue
                    binds = plan
                    new = sum(ch.leaf_count[x] for x in plan)
                key = (new, own, *self._ancestor_usage(owner, c, within), c)
                if best is None or key < best.key:
                    best = _Choice(key, c, binds)
            if best is not None:
                return best
        del st
        return None

    def _choose_free(self, within: int, size: int, start: int) -> _Choice | None:
        """`_choose_in` where usable means free (opportunistic, or a cell wholly the owner's): plain
        array reads, the path nearly every decision takes."""
        topo = self.topo
        free, parent = self.state.free, topo.parent
        if free[within] < size:
            return None
        for lvl in range(start, topo.level[within] + 1):
            best: tuple[int, ...] | None = None
            for c in topo.cells_within(within, lvl):
                f = free[c]
                if f < size:
                    continue
                key = [0, f]
                a = c
                while a != within:
                    a = parent[a]
                    key.append(free[a])
                key.append(c)
                k = tuple(key)
                if best is None or k < best:
                    best = k
            if best is not None:
                return _Choice(best, best[-1], [])
        return None

    def _ancestor_usage(self, owner: int, c: int, within: int) -> list[int]:
        out = []
        parent = self.topo.parent
        while c != within and c >= 0:
            c = parent[c]
            out.append(self.usable(owner, c))
        return out

    # ------------------------------------------------------------------ single node
    def _candidate_nodes(
        self, owner: int, chain: int, size: int, suggested: frozenset[int] | None
    ) -> Iterable[int]:
        topo, st = self.topo, self.state
        ch = topo.chains[chain]
        out: list[int] = []
        seen: set[int] = set()
        if owner == NO_OWNER:
            # the nodes with `size` free leaves, those without guaranteed work first, then by free
            # leaves and id: the opportunistic best-fit index's order, read lazily (the caller
            # mostly stops at the first nodes; listing and sorting all 12,500 cost milliseconds)
            pen = st.opp_penalty
            keys = itertools.chain(range(size, pen), range(pen + size, 2 * pen))
            nodes = st.nodes_by_free.first(st.opp_group(chain), keys)
            return nodes if suggested is None else (n for n in nodes if n in suggested)
        owned = st.owned_free[owner]
        q = self._quota(owner, chain)
        for n in sorted(owned, key=lambda n: (owned[n], n)):
            if topo.cell_chain[topo.node_cell[n]] != chain or (suggested is not None and n not in suggested):
                continue
            if owned[n] >= size or (q is not None and owned[n] + st.pool_leaves[topo.node_cell[n]] >= size):
                out.append(n)
                seen.add(n)
        if q is None:
            return out
        extra: list[int] = []
        for lvl in range(1, ch.node_level):
            for p in sorted(st.pool[chain][lvl]):
                n = topo.cell_node[p]
                if n not in seen and (suggested is None or n in suggested):
                    seen.add(n)
                    extra.append(n)
        for lvl in range(ch.node_level, ch.top_level + 1):
            pool = st.pool[chain][lvl]
            if not pool:
                continue
            for p in binding_order(st, chain, lvl, size):
                fits = [
                    n
                    for n in topo.nodes_within(p)
                    if (suggested is None or n in suggested) and st.free[topo.node_cell[n]] >= size
                ]
                rep = min(fits, key=lambda n: (-st.free[topo.node_cell[n]], n), default=None)
                if rep is not None:
                    if rep not in seen:
                        seen.add(rep)
                        extra.append(rep)
                    break
        return out + extra

    def _best_single_node(
        self, owner: int, chain: int, total: int, k0: int, suggested: frozenset[int] | None
    ) -> _Choice | None:
        topo, st = self.topo, self.state
        # fast path: the best-fit node that already has room, if it reaches the optimal level
        keys: Iterable[int]
        if owner == NO_OWNER:
            pen = st.opp_penalty
            keys = itertools.chain(range(total, pen), range(pen + total, 2 * pen))
            group = st.opp_group(chain)
        else:
            keys = range(total, topo.chain_node_max[chain] + 1)
            group = owner
        for n in st.nodes_by_free.first(group, keys):
            nc = topo.node_cell[n]
            if topo.cell_chain[nc] != chain or (suggested is not None and n not in suggested):
                continue
            choice = self._choose_in(owner, chain, nc, total)
            if choice is not None and topo.level[choice.cell] == k0 and choice.key[0] == 0:
                choice.key = (k0, *choice.key)
                return choice
            break
        best: _Choice | None = None
        for n in self._candidate_nodes(owner, chain, total, suggested):
            choice = self._choose_in(owner, chain, topo.node_cell[n], total)
            if choice is None:
                continue
            key = (topo.level[choice.cell], *choice.key)
            choice.key = key
            if best is None or key < best.key:
                best = choice
                if key[0] == k0 and key[1] == 0:
                    break
        return best

    def _fill_cell(
        self, owner: int, chain: int, cell: int, binds: list[int], sizes: list[int], gang: int, priority: int
    ) -> list[tuple[int, ...]] | None:
        """Bind what the choice needs, then place each pod inside `cell` at its lowest level."""
        if not apply_binds(self.state, owner, cell, binds):
            return None
        if len(sizes) == 1 and not binds:
            # `cell` is already the lowest cell that holds the pod and nothing was bound since it
            # was chosen, so choosing again inside it would find it again
            got = self._take(owner, cell, sizes[0], gang, priority)
            return None if got is None else [got]
        out = []
        for size in sizes:
            choice = self._choose_in(owner, chain, cell, size)
            if choice is None or not apply_binds(self.state, owner, choice.cell, choice.binds):
                return None
            got = self._take(owner, choice.cell, size, gang, priority)
            if got is None:
                return None
            out.append(got)
        return out

    # ------------------------------------------------------------------ leaves
    def _take(self, owner: int, cell: int, size: int, gang: int, priority: int) -> tuple[int, ...] | None:
        """Allocate `size` leaves of `cell`, or None when the estimate that chose it was optimistic
        (e.g. a newly bound cell turned out to hold opportunistic pods)."""
        leaves = self._pick(owner, cell, size)
        if len(leaves) < size:
            return None
        if self.topo.has_links and size > 1:  # the graph decides what the tree rates the same
            leaves = prefer_linked(self.state, owner, leaves)
        got = tuple(sorted(leaves))
        self.state.allocate_leaves(got, gang, priority)
        return got

    def _pick(self, owner: int, cell: int, size: int) -> list[int]:
        """`size` usable leaves of `cell`: descend into the best-fitting child that can hold them
        all; when none can, take from the most used children first so whole blocks stay free."""
        topo, st = self.topo, self.state
        kids = topo.children[cell]
        if not kids:
            return [cell] if st.is_usable_leaf(owner, cell) else []
        if size == topo.leaf_count[cell] and self.usable(owner, cell) == size:  # the whole cell
            return list(topo.leaves[topo.leaf_lo[cell] : topo.leaf_hi[cell]])
        avail = [(self.usable(owner, k), k) for k in kids]
        fitting = [a for a in avail if a[0] >= size]
        if fitting:
            return self._pick(owner, min(fitting)[1], size)
        out: list[int] = []
        for a, k in sorted(avail):
            if a <= 0:
                continue
            out.extend(self._pick(owner, k, min(a, size - len(out))))
            if len(out) >= size:
                break
        return out

    # ------------------------------------------------------------------ several nodes
    def _domains(self, owner: int, chain: int, lvl: int, total: int) -> Iterable[int]:
        """Cells of `lvl` (or -1 = the whole chain) that could hold `total` leaves, best fit first."""
        if lvl > self.topo.chains[chain].top_level:
            return [-1]
        return ranked_cells(self.state, owner, chain, lvl, total, self._quota(owner, chain) is not None)

    def _unbound_leaves(self, owner: int, chain: int) -> int:
        q = self._quota(owner, chain)
        if q is None:
            return 0
        ch = self.topo.chains[chain]
        return sum(k * ch.leaf_count[lvl] for lvl, k in enumerate(q))

    def _fill_nodes(
        self,
        owner: int,
        chain: int,
        domain: int,
        sizes: list[int],
        gang: int,
        priority: int,
        suggested: frozenset[int] | None,
    ) -> list[tuple[int, ...]] | None:
        topo = self.topo
        nodes = topo.nodes_in_chain(chain) if domain < 0 else topo.nodes_within(domain)
        q = self._quota(owner, chain)
        if domain >= 0 and q is not None:
            # bind for the domain as a whole first: a gang that fills a rack should take one RACK
            # quota cell, not scatter node cells
            own = self.usable(owner, domain)
            total = sum(sizes)
            if own < total:
                plan = bind_plan(self.state, q, chain, domain, total - own)
                if plan is not None and not apply_binds(self.state, owner, domain, plan):
                    return None
        used: set[int] = set()
        out: list[tuple[int, ...]] = []
        ch = topo.chains[chain]
        for size in sizes:
            best: _Choice | None = None
            best_node = -1
            start = ch.fit_level[size] if size < len(ch.fit_level) else ch.top_level + 1
            no_quota = self._quota(owner, chain) is None  # nothing is bound while the nodes are compared
            # a node's usable leaves (`usable`), from the counters kept per node: the owner's free
            # leaves (`owned_free`, what `owned_free_in` counts for a node cell), or all free ones
            owned = self.state.owned_free[owner] if owner != NO_OWNER else None
            st, free = self.state, self.state.free
            whole = start == ch.node_level  # the pod fills a node: the node is the only cell to choose
            # a pod that fills a node visits the nodes in order of the bound below, from the
            # best-fit index, and stops at the first it cannot beat (`topology.nodeorder`)
            ordered = whole and (domain < 0 or len(nodes) > ORDERED_FROM)
            candidates: Iterable[int] = nodes
            if ordered:
                candidates = whole_node_order(st, owner, chain, domain, size, used, not no_quota)
            elif whole and size == topo.chain_node_max[chain]:
                # a pod as large as the chain's largest node: the first node (in id order) it fits
                # whole without binding is the least key (every such node ties on all but its id,
                # any other choice must bind), so the search stops there (a multi-node gang's pods)
                first = first_whole_node(self.state, nodes, size, used, owned, suggested)
                if first >= 0:
                    nc = topo.node_cell[first]
                    best, best_node, candidates = _Choice((True, start, 0, size, nc), nc, []), first, ()
            for n in candidates:
                if suggested is not None and n not in suggested:
                    continue
                nc = topo.node_cell[n]
                own = free[nc] if owned is None else owned.get(n, 0)
                if own < size and no_quota:
                    continue
                if best is not None:
                    # no choice on this node can beat this key (keys are `(unused, level, new, own,
                    # ..., cell)`): the level is at least the pod's fit level and what must be newly
                    # bound at least what the node lacks; a pod that fills a node can only take the
                    # node itself, so its room and id complete the key. Beaten already: skip the
                    # node. Exact (a tie is still compared in full), and it keeps a search over a
                    # 12,500-node chain from planning quota binds on every node
                    unused, new = n not in used, size - own if own < size else 0
                    bound = (unused, start, new, own, nc) if whole else (unused, start, new)
                    if best.key < bound:
                        if ordered and unused:
                            break  # every node still to come has a bound at least this one's
                        continue
                if whole and own >= size:
                    # what `_choose_in` answers for a node that holds the pod without binding
                    # anything: the node itself, keyed by its usable leaves (the bound above, met)
                    key: tuple[int, ...] = (n not in used, start, 0, own, nc)
                    if best is None or key < best.key:
                        best = _Choice(key, nc, [])
                        best_node = n
                    continue
                choice = self._choose_in(owner, chain, nc, size)
                if choice is None:
                    continue
                key = (n not in used, topo.level[choice.cell], *choice.key)
                if best is None or key < best.key:
                    best = _Choice(key, choice.cell, choice.binds)
                    best_node = n
            if best is None or not apply_binds(self.state, owner, best.cell, best.binds):
                return None
            got = self._take(owner, best.cell, size, gang, priority)
            if got is None:
                return None
            out.append(got)
            used.add(best_node)
        return out

    # ------------------------------------------------------------------ results
    @staticmethod
    def _to_slots(order: list[int], leaves: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
        out: list[tuple[int, ...]] = [()] * len(order)
        for pos, slot in enumerate(order):
            out[slot] = leaves[pos]
        return out

    def _shortfall(self, owner: int, chain: int, total: int, k0: int) -> Shortfall:
        topo, st = self.topo, self.state
        ch = topo.chains[chain]
        lvl = min(k0, ch.top_level)
        if owner == NO_OWNER:
            avail = sum(st.free[c] for c in ch.tops)
            return Shortfall(lvl, total, avail, quota_bound=False)
        owned = sum(k for n, k in st.owned_free[owner].items() if topo.cell_chain[topo.node_cell[n]] == chain)
        quota_free = owned + self._unbound_leaves(owner, chain)
        return Shortfall(lvl, total, quota_free, quota_bound=quota_free < total)
