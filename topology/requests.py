"""A gang request as the core accepts it: the only place its ranges are checked.

`check_ranges` holds every rule on a request's own values (an empty name or VC, a priority out of
range, no members or a member that is not positive, a pod that is none of its gang's members, slot
keys that do not match, a promoted gang of the wrong priority). The request's builders run
it once as they read a pod (`extender.gangs.podspec`, `extender.conventions.resolve`), and the verbs'
questions (`topology.asks`) then check only `fits`: the rules that depend on the config (an unknown
VC, more leaf cells than the cluster has, a pod bigger than any node, no chain with quota). Those
depend on the config alone, so each shape is checked once and remembered with the chains it may
use. `validate`, for callers that build requests themselves, runs both.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import cast

from topology.cluster import Cluster
from topology.decisions import MAX_PRIORITY, OPPORTUNISTIC_PRIORITY, GangRequest, Member, UserError
from topology.model import Chain
from topology.reservations import Gang

_MAX_SHAPES = 4096
_MAX_SHAPE_MEMBERS = 16  # bounds the shape cache in bytes: a key holds the members (merged, ≤ 1 per size)


def validate(cluster: Cluster, req: GangRequest, leaf_number: int | None = None) -> None:
    """Raise `UserError` naming the field when `req` can never be scheduled as written."""
    if leaf_number is None and req.name and _shape_key(req) in cluster.valid_shapes:
        return  # its shape passed both before (the ranges are the shape's, but for the name)
    check_ranges(req, leaf_number)
    fits(cluster, req)


def fits(cluster: Cluster, req: GangRequest) -> None:
    """Raise `UserError` naming the field when the config cannot hold `req` (its ranges checked)."""
    key = _shape_key(req)
    if key in cluster.valid_shapes:
        return
    _fits(cluster, req)
    if len(cluster.valid_shapes) < _MAX_SHAPES and len(req.members) <= _MAX_SHAPE_MEMBERS:
        cluster.valid_shapes[key] = tuple(chains(cluster, req))


# ---------------------------------------------------------------------------- the ranges
def check_ranges(
    req: GangRequest,
    leaf_number: int | None = None,
    *,
    members_of: str | None = None,
    members_field: str = "affinityGroup.members",
) -> None:
    """Every rule on the request's own values, in HiveD's order and words; `leaf_number`: the pod's
    own leaf cells, one of its gang's members. `members_of` names where a convention's members came
    from (its words for a pod that is none of them, naming `members_field`). `promote_when_quota`
    is allowed at any priority: an opportunistic gang is promoted into its VC's quota, a guaranteed
    one may start as a guest in free room rather than preempt running work (`topology.room`)."""
    check_name(req.name)
    if not req.vc:
        raise UserError("virtualCluster", "is empty")
    check_priority(req.priority)
    if leaf_number is not None:  # the pod's own first: a one-pod gang's member is made of it
        check_leaf_number(leaf_number)
    if not req.members:
        raise UserError("affinityGroup.members", "is empty")
    for i, m in enumerate(req.members):
        check_member(i, m.pod_number, m.leaf_number)
    if leaf_number is not None:
        check_contains(req.members, leaf_number, members_of=members_of, field=members_field)
    if req.slot_keys is not None and len(req.slot_keys) != req.pod_count:
        raise UserError("slotKeys", f"{len(req.slot_keys)} keys for {req.pod_count} pods")


def check_name(name: str) -> None:
    if not name:
        raise UserError("affinityGroup.name", "AffinityGroup.Name is empty")


def check_priority(priority: int) -> None:
    if priority < OPPORTUNISTIC_PRIORITY:
        raise UserError("priority", f"Priority is less than -1 ({priority})")
    if priority > MAX_PRIORITY:
        raise UserError("priority", f"Priority is greater than {MAX_PRIORITY} ({priority})")


def check_leaf_number(leaf_number: int) -> None:
    """A pod's own `leafCellNumber`."""
    if leaf_number <= 0:
        raise UserError("leafCellNumber", f"LeafCellNumber is non-positive ({leaf_number})")


def check_member(i: int, pod_number: int, leaf_number: int) -> None:
    path = f"affinityGroup.members[{i}]"
    if pod_number <= 0:
        raise UserError(f"{path}.podNumber", "AffinityGroup.Members has non-positive PodNumber")
    if leaf_number <= 0:
        raise UserError(f"{path}.leafCellNumber", "AffinityGroup.Members has non-positive LeafCellNumber")


def check_contains(
    members: Sequence[Member],
    leaf_number: int,
    *,
    members_of: str | None = None,
    field: str = "affinityGroup.members",
) -> None:
    """The pod is one of its gang's members (HiveD's words, typo included: users search for them;
    for a convention's gang, `members_of` names where its members came from)."""
    if all(m.leaf_number != leaf_number for m in members):
        if members_of is not None:
            shape = ", ".join(f"{m.pod_number}x{m.leaf_number}" for m in members)
            raise UserError(
                field,
                f"the pod requests {leaf_number} GPUs, but no member of {members_of} has that many "
                f"(members: {shape})",
            )
        raise UserError(
            field,
            "AffinityGroup.Members does not contains current Pod "
            f"(no member has leafCellNumber {leaf_number})",
        )


def _fits(cluster: Cluster, req: GangRequest) -> None:
    if req.vc not in cluster.vc_owner:
        raise UserError("virtualCluster", f"VC {req.vc} does not exist")
    if req.leaf_total > cluster.gpu_count:  # before anything is built per pod or per leaf
        raise UserError(
            "affinityGroup.members",
            f"the gang needs {req.leaf_total} leaf cells, more than the whole cluster's "
            f"{cluster.gpu_count}: it can never run",
        )
    if req.pinned_cell_id is not None and req.opportunistic:  # the priority its namespace was granted
        raise UserError(
            "pinnedCellId", f"opportunistic pod not supported to use pinned cell {req.pinned_cell_id}"
        )
    if req.pinned_cell_id is not None and (req.vc, req.pinned_cell_id) not in cluster.pinned_owner:
        raise UserError("pinnedCellId", f"VC {req.vc} does not have pinned cell {req.pinned_cell_id}")
    found = chains(cluster, req)
    topo = cluster.topo
    if not found and req.within_level is not None and _chains_ignoring_level(cluster, req):
        levels = sorted(
            {t for ch in _chains_ignoring_level(cluster, req) for t in _node_and_above(topo.chains[ch])}
        )
        raise UserError(
            "withinLevel",
            f"the gang must sit under one cell of level {req.within_level!r}, but no chain VC {req.vc} "
            f"may use has a cell type of that name (or last word) at or above node level; its levels "
            f"are {', '.join(levels)} ('node' or 'hostname' names the node level)",
        )
    if not found:
        if req.leaf_type is not None and req.leaf_type not in topo.chains_by_leaf_type:
            raise UserError("leafCellType", f"the cluster has no leaf cell type {req.leaf_type}")
        raise UserError(
            "leafCellType" if req.leaf_type else "virtualCluster",
            f"VC {req.vc} has no quota" + (f" of leaf cell type {req.leaf_type}" if req.leaf_type else ""),
        )
    biggest = max(m.leaf_number for m in req.members)
    node_max = max(topo.chain_node_max[ch] for ch in found)
    if biggest > node_max:
        raise UserError(
            "leafCellNumber",
            f"{biggest} leaf cells in one pod exceed the largest node ({node_max}); split the pod",
        )


def chains(cluster: Cluster, req: GangRequest) -> list[int]:
    """Chains the gang may use, in a fixed order (with a required level, only chains that have it)."""
    known = cluster.valid_shapes.get(_shape_key(req))
    if known is not None:
        return list(known)
    found = _chains_ignoring_level(cluster, req)
    if req.within_level is None:
        return found
    topo = cluster.topo
    return [ch for ch in found if level_named(topo.chains[ch], req.within_level) is not None]


def level_named(chain: Chain, name: str | None) -> int | None:
    """The chain's level that `name` names, at or above node level (None: no such level; a level
    inside a node cannot hold pods on several nodes, and a Kubernetes topology key is a node label).
    A cell type's name or its last word, case-insensitive; "node" and "hostname" name the node level."""
    if name is None:
        return None
    want = name.strip().lower()
    if want in ("node", "hostname"):
        return chain.node_level
    for lvl in range(chain.node_level, chain.top_level + 1):
        t = chain.level_types[lvl].lower()
        if want == t or want == re.split(r"[-_.]", t)[-1]:
            return lvl
    return None


def placement_top(chain: Chain, req: GangRequest, leaves: int) -> int | None:
    """The level of the cell the whole gang must fit in (None: anywhere).

    The request's `within_level` when it names one. Otherwise an opportunistic gang that needs
    several nodes runs only inside one cell of the level above the node (a rack) that can hold it:
    borrowed GPUs spread over racks make a slow run that any reclaim cuts short, and taking a node
    here and there breaks up the free racks guaranteed multi-node gangs need; it waits instead."""
    if req.within_level is not None:
        return level_named(chain, req.within_level)
    above = chain.node_level + 1
    if (
        req.opportunistic
        and chain.leaf_count[chain.node_level] < leaves <= chain.leaf_count[min(above, chain.top_level)]
    ):
        return above
    return None


def _node_and_above(chain: Chain) -> list[str]:
    return [chain.level_types[lvl] for lvl in range(chain.node_level, chain.top_level + 1)]


def _chains_ignoring_level(cluster: Cluster, req: GangRequest) -> list[int]:
    topo = cluster.topo
    if req.pinned_cell_id is not None:
        owner = cluster.pinned_owner.get((req.vc, req.pinned_cell_id))
        if owner is None:
            return []
        return [topo.cell_chain[topo.pinned_cells[req.pinned_cell_id]]]
    if req.leaf_type is not None:
        pool = list(topo.chains_by_leaf_type.get(req.leaf_type, ()))
    else:
        pool = list(range(len(topo.chains)))
    if req.opportunistic:
        return pool
    owner = cluster.vc_owner[req.vc]
    mine = cluster.state.unbound[owner]  # every chain the VC has quota on, bound or not
    return [ch for ch in pool if ch in mine]


def suggested_ids(cluster: Cluster, req: GangRequest) -> frozenset[int] | None:
    """The ids of the nodes kube-scheduler suggests (None: any node); names not in the cluster drop."""
    names = req.suggested_nodes
    if names is None:
        return None
    last = cluster.last_suggested
    if last is not None and last[0] is names:
        return last[1]
    topo = cluster.topo
    ids: set[int | None] = set(map(topo.node_index.get, names))  # C loops, no generator
    ids.discard(None)  # names not in the cluster
    if topo.shared_nodes:  # a node with cells in several chains: every one of its ids
        ids.update(ni for name in names for ni in topo.node_parts.get(name, ()))
    got = cast(frozenset[int], frozenset(ids))
    cluster.last_suggested = (names, got)
    return got


def check_same_shape(placed: GangRequest, req: GangRequest) -> None:
    """Raise `UserError` when `req` asks another shape than the gang placed under its name."""
    if not same_shape(placed, req):
        raise UserError(
            "affinityGroup",
            f"gang {req.name} already exists with a different shape (VC, priority or members)",
        )


def same_shape(a: GangRequest, b: GangRequest) -> bool:
    """Two requests for one gang name agree on what was reserved (VC, priority, members, pinned cell)."""
    return (
        a.vc == b.vc
        and a.priority == b.priority
        and a.pinned_cell_id == b.pinned_cell_id
        and (  # the members as written first: every pod of a gang carries the same spec
            a.members == b.members
            or sorted((m.leaf_number, m.pod_number) for m in a.members)
            == sorted((m.leaf_number, m.pod_number) for m in b.members)
        )
    )


def _shape_key(req: GangRequest) -> tuple[object, ...]:
    """What validity and chain choice depend on (not the name, TTL or suggested nodes)."""
    return (
        req.vc,
        req.priority,
        req.members,
        req.leaf_type,
        req.pinned_cell_id,
        None if req.slot_keys is None else len(req.slot_keys),
        req.within_level,
        req.promote_when_quota,
    )


def domain_cell(cluster: Cluster, gang: Gang) -> int | None:
    """The cell whose nodes an elastic gang's extras may use: the cell of the gang's `within_level`
    holding it (a topology key's domain: `kubernetes.io/hostname` is the gang's one node), else the
    lowest cell holding all its leaves, at least one level above a node (a one-node core's extras may
    use the rest of its rack). None: its leaves span chains."""
    topo = cluster.topo
    c = topo.lca([leaf for s in gang.slots for leaf in s.leaves])
    if c is None:
        return None
    chain = topo.chain_of(c)
    want = level_named(chain, gang.request.within_level)
    if want is None:
        want = max(topo.level[c], chain.node_level + 1)
    up = topo.ancestor_at(c, want)
    return up if up >= 0 else c
