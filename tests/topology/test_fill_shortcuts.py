"""The per-request placement path's shortcuts answer what the long way answers.

Filling a domain's nodes keys a pod that fills a node it can hold without binding anything straight
from the node's usable leaves, instead of asking `Placer._choose_in`; binding a quota cell moves each
owner's free count per node from the free counters, not by counting GPUs; an owner's free leaves in
a node or a rack are summed from those per-node counts; the multi-node search ranks a level's cells
by packed ints. Each must agree with the long way on every state: random gangs of every VC (and
opportunistic ones) are placed and released, and after every step each (owner, cell) is checked.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.topology.fixtures import rack_cluster
from topology.core import Core
from topology.decisions import GangRequest, Member, Wait
from topology.invariants import violations
from topology.state import NO_GANG, NO_OWNER

SPEC = rack_cluster(
    racks=2,
    vcs={"a": [("", 1)], "b": [("NODE", 1), ("NODE.HALF", 3)], "c": [("NODE.HALF.SWITCH", 3)]},
)
gangs = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c"]),
        st.sampled_from([-1, 1]),
        st.integers(1, 4),
        st.sampled_from([1, 2, 4, 6, 8]),
        st.booleans(),
    ),
    min_size=1,
    max_size=14,
)


def check_node_keys(core: Core) -> None:
    """For each owner and node: when the node's usable leaves hold a pod that fills a node, the
    long way chooses the node itself, binds nothing, and keys it by those leaves."""
    st_, topo, placer = core.state, core.topo, core.placer
    for owner in [NO_OWNER, *range(len(st_.owners))]:
        for n, nc in enumerate(topo.node_cell):
            chain = topo.cell_chain[nc]
            ch = topo.chains[chain]
            own = st_.free[nc] if owner == NO_OWNER else st_.owned_free[owner].get(n, 0)
            for size in range(1, topo.leaf_count[nc] + 1):
                start = ch.fit_level[size]
                if start != ch.node_level or own < size:
                    continue
                choice = placer._choose_in(owner, chain, nc, size)
                assert choice is not None and choice.cell == nc and not choice.binds
                assert (topo.level[choice.cell], *choice.key) == (start, 0, own, nc)


def check_owned_counts(core: Core) -> None:
    """Each owner's free count per node is what counting its free, healthy GPUs gives."""
    st_, topo = core.state, core.topo
    for owner in range(len(st_.owners)):
        counted: dict[int, int] = {}
        for leaf in topo.leaves:
            if st_.leaf_owner[leaf] == owner and st_.leaf_gang[leaf] == NO_GANG and not st_.leaf_bad[leaf]:
                counted[topo.cell_node[leaf]] = counted.get(topo.cell_node[leaf], 0) + 1
        assert st_.owned_free[owner] == counted


def leaf_count_of(core: Core, owner: int, c: int) -> int:
    """An owner's free, healthy leaves in `c`, counted leaf by leaf."""
    st_, topo = core.state, core.topo
    leaves = topo.leaves[topo.leaf_lo[c] : topo.leaf_hi[c]]
    return sum(
        1
        for leaf in leaves
        if st_.leaf_owner[leaf] == owner and st_.leaf_gang[leaf] == NO_GANG and not st_.leaf_bad[leaf]
    )


def check_owned_in(core: Core) -> None:
    """`owned_free_in` of every cell is the leaf-by-leaf count (nodes and above read per node)."""
    for owner in range(len(core.state.owners)):
        for c in range(core.topo.n_cells):
            assert core.state.owned_free_in(owner, c) == leaf_count_of(core, owner, c)


def check_domains(core: Core) -> None:
    """The multi-node search's cells of each level above a node, for every owner and size: those
    whose room (the owner's free leaves, plus the free-pool ones when it has quota to bind) holds
    the size, least room first, then id."""
    st_, topo, placer = core.state, core.topo, core.placer
    for owner in [NO_OWNER, *range(len(st_.owners))]:
        for chain, ch in enumerate(topo.chains):
            binds = owner != NO_OWNER and placer._quota(owner, chain) is not None
            for lvl in range(ch.node_level + 1, ch.top_level + 1):
                for total in (1, 8, 16, 24, 64):
                    room = {
                        c: st_.free[c]
                        if owner == NO_OWNER
                        else leaf_count_of(core, owner, c) + (st_.pool_leaves[c] if binds else 0)
                        for c in ch.cells_by_level[lvl]
                    }
                    expected = [c for v, c in sorted((v, c) for c, v in room.items() if v >= total)]
                    assert list(placer._domains(owner, chain, lvl, total)) == expected


@settings(max_examples=60, deadline=None)
@given(gangs)
def test_the_shortcuts_agree_with_the_long_way(asks: list[tuple[str, int, int, int, bool]]) -> None:
    core = Core(SPEC)
    check_node_keys(core)
    placed: list[str] = []
    for i, (vc, priority, pods, gpus, release_one) in enumerate(asks):
        req = GangRequest(f"g{i}", vc, (Member(pods, gpus),), priority=priority)
        got = core.reserve(req, float(i))
        if not isinstance(got, Wait):
            placed.append(req.name)
        if release_one and placed:
            core.delete_gang(placed.pop(0))
        assert violations(core) == []
        check_owned_counts(core)
        check_node_keys(core)
        check_owned_in(core)
        check_domains(core)
