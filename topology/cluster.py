"""One cluster's scheduling state, as every concept module of the core sees it.

`Cluster` holds the pieces the verbs work on together: the immutable `Topology`, the owners (a VC's
quota, a VC's pinned cell) with their configured quota, the mutable `CellState`, the `Placer` that
searches it, and the `Reservations` of placed gangs. The modules below the façade (`requests`,
`gangs`, `preemption`, `recovery`, `health`) are functions over it, so none of them needs another's
class and the imports run one way: they import this, and `core` imports them.
"""

from __future__ import annotations

from topology.decisions import GangRequest
from topology.model import Topology
from topology.placement import Placer
from topology.reservations import Reservations
from topology.spec import ClusterSpec
from topology.state import NO_OWNER, CellState, Owner


class Cluster:
    """The core's data. Single-threaded: the edge serialises calls."""

    def __init__(self, spec: ClusterSpec) -> None:
        self.spec = spec
        self.topo = Topology(spec)
        owners: list[Owner] = []
        quota: dict[int, dict[int, list[int]]] = {}
        self.vc_owner: dict[str, int] = {}
        self.pinned_owner: dict[tuple[str, str], int] = {}
        topo = self.topo
        for vc in sorted(spec.virtual_clusters, key=lambda v: v.name):
            idx = len(owners)
            owners.append(Owner(idx, vc.name, None))
            self.vc_owner[vc.name] = idx
            per_chain: dict[int, list[int]] = {}
            for vcell in vc.virtual_cells:
                ch = topo.chain_index[vcell.chain]
                chain = topo.chains[ch]
                lvl = topo.types[vcell.cell_type].level
                per_chain.setdefault(ch, [0] * (chain.top_level + 1))[lvl] += vcell.number
            quota[idx] = per_chain
        # the VC's quota cells per chain and level as configured (what a wait reason names)
        self.vc_quota_cells: dict[str, dict[int, tuple[int, ...]]] = {
            vc: {ch: tuple(levels) for ch, levels in quota[idx].items()} for vc, idx in self.vc_owner.items()
        }
        for vc in sorted(spec.virtual_clusters, key=lambda v: v.name):
            for pid in sorted(vc.pinned_cell_ids):
                idx = len(owners)
                owners.append(Owner(idx, vc.name, pid))
                self.pinned_owner[(vc.name, pid)] = idx
                quota[idx] = {}
        self.owners = owners
        self.state = CellState(topo, owners, quota)
        for (_vc, pid), idx in sorted(self.pinned_owner.items()):
            self.state.bind(idx, topo.pinned_cells[pid], quota=False)
        self.placer = Placer(self.state)
        self.reservations = Reservations()
        self.preemptors: set[int] = set()  # ids of gangs that are waiting for victims
        # the last suggested-node set and its node ids: kube-scheduler sends the same node list with
        # every call and the edge shares one frozenset for it, so this hits by identity
        self.last_suggested: tuple[frozenset[str], frozenset[int]] | None = None
        # request shapes already validated, with their chains: validity depends on the config alone
        # (a reconfiguration builds a new Core), and most requests repeat a handful of shapes
        self.valid_shapes: dict[tuple[object, ...], tuple[int, ...]] = {}
        self.vc_quota_leaves: dict[str, int] = dict.fromkeys(self.vc_owner, 0)
        for o in owners:
            self.vc_quota_leaves[o.vc] += self._quota_leaves(o.index)

    def being_preempted(self, gang_id: int) -> bool:
        """Whether a preemptor waiting for victims names the gang (HiveD's BeingPreempted group): no
        new pod of it binds until the preemption ends (its slots stay its own, closed) or it is gone."""
        return any(gang_id in self.reservations.by_id[p].victims for p in self.preemptors)

    def _quota_leaves(self, owner: int) -> int:
        total = 0
        for ch, levels in self.state.unbound[owner].items():
            chain = self.topo.chains[ch]
            total += sum(k * chain.leaf_count[lvl] for lvl, k in enumerate(levels))
        total += sum(self.topo.leaf_count[c] for c in self.state.owned_cells[owner])
        return total

    @property
    def gpu_count(self) -> int:
        """Leaf cells in the whole cluster: no gang of more pods (or leaf cells) can ever run."""
        return self.topo.total_leaves()

    def owner_of(self, req: GangRequest) -> int:
        """The owner whose cells a (validated) request runs in; NO_OWNER for an opportunistic one."""
        if req.opportunistic:
            return NO_OWNER
        if req.pinned_cell_id is not None:
            return self.pinned_owner[(req.vc, req.pinned_cell_id)]
        return self.vc_owner[req.vc]
