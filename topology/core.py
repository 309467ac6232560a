"""The scheduling core's façade: plain requests in, decisions out, time passed in as `now`.

The extender, the simulator and the tests all drive the core through this class only. It validates
requests (a `UserError` names the field), reserves whole gangs, hands out their slots, releases and
expires them. It does no I/O and reads no clock.
"""

from __future__ import annotations

from topology.decisions import (
    MAX_PRIORITY,
    OPPORTUNISTIC_PRIORITY,
    AdoptedPod,
    Bind,
    Decision,
    GangPlacement,
    GangRequest,
    PodPlacement,
    Preemption,
    Released,
    UserError,
    Wait,
    WaitCode,
    WaitReason,
)
from topology.ledger import Gang, GangPhase, Ledger, Slot
from topology.model import Topology
from topology.placement import Placer, Shortfall
from topology.spec import ClusterSpec
from topology.state import NO_OWNER, CellState, Owner


class Core:
    """One cluster's scheduling state. Single-threaded: the edge serialises calls."""

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
        self.ledger = Ledger()
        self.vc_quota_leaves: dict[str, int] = dict.fromkeys(self.vc_owner, 0)
        for o in owners:
            self.vc_quota_leaves[o.vc] += self._quota_leaves(o.index)

    def _quota_leaves(self, owner: int) -> int:
        total = 0
        for ch, levels in self.state.unbound[owner].items():
            chain = self.topo.chains[ch]
            total += sum(k * chain.leaf_count[lvl] for lvl, k in enumerate(levels))
        total += sum(self.topo.leaf_count[c] for c in self.state.owned_cells[owner])
        return total

    # ------------------------------------------------------------------ validation
    def validate(self, req: GangRequest, leaf_number: int | None = None) -> None:
        """Raise `UserError` naming the field when `req` can never be scheduled as written."""
        if not req.name:
            raise UserError("affinityGroup.name", "is empty")
        if not req.vc:
            raise UserError("virtualCluster", "is empty")
        if req.vc not in self.vc_owner:
            raise UserError("virtualCluster", f"VC {req.vc} does not exist")
        if req.priority < OPPORTUNISTIC_PRIORITY:
            raise UserError("priority", f"{req.priority} is less than -1")
        if req.priority > MAX_PRIORITY:
            raise UserError("priority", f"{req.priority} is greater than {MAX_PRIORITY}")
        if not req.members:
            raise UserError("affinityGroup.members", "is empty")
        for i, m in enumerate(req.members):
            if m.pod_number <= 0:
                raise UserError(f"affinityGroup.members[{i}].podNumber", f"{m.pod_number} is not positive")
            if m.leaf_number <= 0:
                raise UserError(
                    f"affinityGroup.members[{i}].leafCellNumber", f"{m.leaf_number} is not positive"
                )
        if leaf_number is not None:
            if leaf_number <= 0:
                raise UserError("leafCellNumber", f"{leaf_number} is not positive")
            if all(m.leaf_number != leaf_number for m in req.members):
                raise UserError(
                    "affinityGroup.members",
                    f"no member has leafCellNumber {leaf_number}, so this pod is not part of gang {req.name}",
                )
        if req.slot_keys is not None and len(req.slot_keys) != req.pod_count:
            raise UserError("slotKeys", f"{len(req.slot_keys)} keys for {req.pod_count} pods")
        if req.pinned_cell_id is not None:
            if req.opportunistic:
                raise UserError(
                    "pinnedCellId", f"opportunistic pod not supported to use pinned cell {req.pinned_cell_id}"
                )
            if (req.vc, req.pinned_cell_id) not in self.pinned_owner:
                raise UserError("pinnedCellId", f"VC {req.vc} does not have pinned cell {req.pinned_cell_id}")
        chains = self._chains(req)
        if not chains:
            if req.leaf_type is not None and req.leaf_type not in self.topo.chains_by_leaf_type:
                raise UserError("leafCellType", f"the cluster has no leaf cell type {req.leaf_type}")
            raise UserError(
                "leafCellType" if req.leaf_type else "virtualCluster",
                f"VC {req.vc} has no quota"
                + (f" of leaf cell type {req.leaf_type}" if req.leaf_type else ""),
            )
        biggest = max(m.leaf_number for m in req.members)
        node_max = max(self.topo.chain_node_max[ch] for ch in chains)
        if biggest > node_max:
            raise UserError(
                "leafCellNumber",
                f"{biggest} leaf cells in one pod exceed the largest node ({node_max}); split the pod",
            )

    def _chains(self, req: GangRequest) -> list[int]:
        """Chains the gang may use, in a fixed order."""
        topo = self.topo
        if req.pinned_cell_id is not None:
            owner = self.pinned_owner.get((req.vc, req.pinned_cell_id))
            if owner is None:
                return []
            return [topo.cell_chain[topo.pinned_cells[req.pinned_cell_id]]]
        if req.leaf_type is not None:
            pool = list(topo.chains_by_leaf_type.get(req.leaf_type, ()))
        else:
            pool = list(range(len(topo.chains)))
        if req.opportunistic:
            return pool
        owner = self.vc_owner[req.vc]
        mine = self.state.unbound[owner]  # every chain the VC has quota on, bound or not
        return [ch for ch in pool if ch in mine]

    def _owner(self, req: GangRequest) -> int:
        if req.opportunistic:
            return NO_OWNER
        if req.pinned_cell_id is not None:
            return self.pinned_owner[(req.vc, req.pinned_cell_id)]
        return self.vc_owner[req.vc]

    # ------------------------------------------------------------------ reserve
    def reserve(self, req: GangRequest, now: float) -> GangPlacement | Wait:
        """Place the whole gang (or find it already placed). Raises `UserError` on a bad request."""
        existing = self.ledger.by_name.get(req.name)
        if existing is not None:
            if not _same_shape(existing.request, req):
                raise UserError(
                    "affinityGroup",
                    f"gang {req.name} already exists with a different shape (VC, priority or members)",
                )
            return self.placement_of(existing)
        self.validate(req)
        owner = self._owner(req)
        sizes = [m.leaf_number for m in req.members for _ in range(m.pod_number)]
        suggested = self._suggested(req)
        gang_id = self.ledger.new_id()
        shortfalls: list[tuple[int, Shortfall]] = []
        for ch in self._chains(req):
            got = self.placer.place(owner, ch, sizes, gang_id, req.priority, suggested)
            if isinstance(got, Shortfall):
                shortfalls.append((ch, got))
                continue
            slots = self._slots(req, got)
            gang = Gang(
                id=gang_id,
                name=req.name,
                request=req,
                owner=owner,
                chain=ch,
                priority=req.priority,
                slots=slots,
                created=now,
                deadline=now + req.ttl_seconds,
                lca_level=self.topo.lca_level([leaf for s in slots for leaf in s.leaves]),
            )
            self.ledger.add(gang)
            return self.placement_of(gang)
        return Wait(self._wait_reason(req, shortfalls, suggested))

    def _suggested(self, req: GangRequest) -> frozenset[int] | None:
        if req.suggested_nodes is None:
            return None
        idx = self.topo.node_index
        return frozenset(idx[n] for n in req.suggested_nodes if n in idx)

    def _slots(self, req: GangRequest, leaves: list[tuple[int, ...]]) -> list[Slot]:
        """Slots in member order; pods of equal size are given placements in topology order, so
        consecutive ranks sit on neighbouring GPUs and nodes."""
        topo = self.topo
        slots: list[Slot] = []
        i = 0
        for m in req.members:
            group = sorted(leaves[i : i + m.pod_number], key=lambda ls: topo.leaf_pos[ls[0]])
            for ls in group:
                key = req.slot_keys[len(slots)] if req.slot_keys is not None else None
                slots.append(Slot(len(slots), m.leaf_number, key, topo.cell_node[ls[0]], ls))
            i += m.pod_number
        return slots

    def _wait_reason(
        self, req: GangRequest, shortfalls: list[tuple[int, Shortfall]], suggested: frozenset[int] | None
    ) -> WaitReason:
        topo = self.topo
        if not shortfalls:
            return WaitReason(WaitCode.INSUFFICIENT_CAPACITY, req.vc, f"no chain can hold gang {req.name}")
        ch, sf = shortfalls[0]
        chain = topo.chains[ch]
        lvl_type = chain.level_types[sf.level] if sf.level <= chain.top_level else chain.name
        where = f"chain {chain.name} level {sf.level} ({lvl_type})"
        if sf.quota_bound:
            code = WaitCode.INSUFFICIENT_QUOTA
            msg = (
                f"VC {req.vc} has {sf.available} of its quota's leaf cells free on {where}; "
                f"gang {req.name} needs {sf.needed}"
            )
        elif suggested is not None and len(suggested) < len(topo.nodes_in_chain(ch)):
            code = WaitCode.NO_SUGGESTED_NODE
            msg = (
                f"gang {req.name} ({sf.needed} leaf cells) does not fit on the "
                f"{len(suggested)} suggested nodes"
            )
        else:
            code = WaitCode.INSUFFICIENT_CAPACITY
            scope = "the physical cluster" if req.opportunistic else f"VC {req.vc}"
            msg = (
                f"insufficient capacity when scheduling in {scope}: gang {req.name} needs {sf.needed} "
                f"leaf cells within one {lvl_type} on {where}; {sf.available} are free but not in one place"
            )
        return WaitReason(code, req.vc, msg, chain.name, sf.level, lvl_type, sf.needed, sf.available)

    # ------------------------------------------------------------------ slots
    def placement_of(self, gang: Gang) -> GangPlacement:
        topo = self.topo
        pods = tuple(
            PodPlacement(s.index, topo.node_names[s.node], tuple(topo.gpu_index[x] for x in s.leaves), s.key)
            for s in gang.slots
        )
        nodes = tuple(dict.fromkeys(p.node for p in pods))
        return GangPlacement(
            gang.name,
            gang.request.vc,
            topo.chains[gang.chain].name,
            gang.priority,
            pods,
            gang.lca_level,
            nodes,
        )

    def open_slots(self, gang_name: str, leaf_number: int, slot_key: str | None = None) -> list[PodPlacement]:
        """Unclaimed slots of this shape (the nodes a filter call may return), in rank order."""
        gang = self.ledger.by_name.get(gang_name)
        if gang is None:
            return []
        topo = self.topo
        out = []
        for s in gang.slots:
            if s.leaf_number != leaf_number or s.finished:
                continue
            if slot_key is not None and s.key is not None:
                if s.key == slot_key:
                    return [PodPlacement(s.index, topo.node_names[s.node], self._gpus(s), s.key)]
                continue
            if s.pod_uid is None:
                out.append(PodPlacement(s.index, topo.node_names[s.node], self._gpus(s), s.key))
        return out

    def _gpus(self, s: Slot) -> tuple[int, ...]:
        return tuple(self.topo.gpu_index[x] for x in s.leaves)

    def claim(
        self,
        gang_name: str,
        pod_uid: str,
        leaf_number: int,
        now: float,
        *,
        node: str | None = None,
        slot_key: str | None = None,
        pod_name: str | None = None,
    ) -> Bind:
        """Give `pod_uid` a slot of the gang (on `node` when given). Idempotent for the same pod; a
        pod with the slot key of an earlier pod (a retry) takes that slot back."""
        gang = self.ledger.by_name.get(gang_name)
        if gang is None:
            raise UserError("affinityGroup.name", f"gang {gang_name} has no reservation")
        mine = gang.slot_of(pod_uid)
        if mine is not None:
            if node is not None and self.topo.node_names[mine.node] != node:
                raise UserError(
                    "node",
                    f"pod already holds slot {mine.index} on {self.topo.node_names[mine.node]}, not {node}",
                )
            return self._bind(gang, mine, pod_uid)
        slot = self._pick_slot(gang, leaf_number, node, slot_key)
        if slot is None:
            where = f" on node {node}" if node is not None else ""
            raise UserError(
                "node" if node is not None else "leafCellNumber",
                f"gang {gang_name} has no unclaimed slot of {leaf_number} leaf cells{where}",
            )
        if slot.pod_uid is not None:  # a retried pod takes back its own slot
            self.ledger.pod_gang.pop(slot.pod_uid, None)
        slot.pod_uid = pod_uid
        slot.pod_name = pod_name
        self.ledger.pod_gang[pod_uid] = gang.id
        if gang.phase is GangPhase.BOUND:
            gang.deadline = None
        return self._bind(gang, slot, pod_uid)

    def _pick_slot(self, gang: Gang, leaf_number: int, node: str | None, slot_key: str | None) -> Slot | None:
        ni = self.topo.node_index.get(node, -2) if node is not None else None
        for s in gang.slots:
            if s.leaf_number != leaf_number or s.finished:
                continue
            if ni is not None and s.node != ni:
                continue
            if slot_key is not None and s.key is not None:
                if s.key == slot_key:
                    return s
                continue
            if s.pod_uid is None:
                return s
        return None

    def _bind(self, gang: Gang, slot: Slot, pod_uid: str) -> Bind:
        return Bind(
            pod_uid, slot.index, self.topo.node_names[slot.node], self._gpus(slot), self.placement_of(gang)
        )

    def schedule(
        self,
        req: GangRequest,
        pod_uid: str,
        leaf_number: int,
        now: float,
        *,
        slot_key: str | None = None,
        pod_name: str | None = None,
    ) -> Decision:
        """HiveD's one-step path: reserve the gang if needed and claim a slot for this pod."""
        self.validate(req, leaf_number)
        got = self.reserve(req, now)
        if isinstance(got, Wait):
            return got
        gang = self.ledger.by_name[req.name]
        if gang.slot_of(pod_uid) is None and self._pick_slot(gang, leaf_number, None, slot_key) is None:
            return Wait(
                WaitReason(
                    WaitCode.RESERVED,
                    req.vc,
                    f"every slot of {leaf_number} leaf cells in gang {req.name} is already claimed",
                    needed=1,
                    available=0,
                )
            )
        return self.claim(req.name, pod_uid, leaf_number, now, slot_key=slot_key, pod_name=pod_name)

    # ------------------------------------------------------------------ release
    def release_pod(self, pod_uid: str, now: float, *, finished: bool = False) -> Released | None:
        """A pod was deleted (or completed, `finished`). Its slot opens for a retry; the gang is
        released once none of its pods is alive; with gangReleaseEnable a finished pod's GPUs are
        freed at once."""
        gid = self.ledger.pod_gang.pop(pod_uid, None)
        if gid is None:
            return None
        gang = self.ledger.by_id[gid]
        slot = gang.slot_of(pod_uid)
        assert slot is not None
        slot.pod_uid = None
        if finished:
            slot.finished = True
            if gang.request.gang_release and not slot.released_early:
                slot.released_early = True
                self._free_leaves(list(slot.leaves))
        if not gang.live_slots():
            return self._release(gang, "all members gone")
        if not finished:
            gang.deadline = now + gang.request.ttl_seconds
        return None

    def delete_gang(self, name: str) -> Released | None:
        gang = self.ledger.by_name.get(name)
        if gang is None:
            return None
        return self._release(gang, "deleted")

    def expire(self, now: float) -> list[Released]:
        """Release every reservation whose deadline has passed without all its slots claimed."""
        out = []
        for gang in self.ledger.gangs():
            if gang.deadline is not None and gang.deadline <= now and gang.phase is GangPhase.RESERVED:
                out.append(self._release(gang, "expired"))
        return out

    def _release(self, gang: Gang, reason: str) -> Released:
        evict = tuple(s.pod_uid for s in gang.slots if s.pod_uid is not None)
        self._free_leaves(gang.held_leaves())
        self.ledger.remove(gang)
        return Released(gang.name, reason, evict)

    def _free_leaves(self, leaves: list[int]) -> None:
        st, topo = self.state, self.topo
        roots: set[int] = set()
        for leaf in leaves:
            st.release_leaf(leaf)
            root = st.binding_root(leaf)
            if root >= 0:
                roots.add(root)
        for root in sorted(roots):
            if st.used_guaranteed[root] == 0 and topo.pinned_id[root] is None:
                st.unbind(root)

    # ------------------------------------------------------------------ preemption
    def preempt(self, req: GangRequest, now: float) -> GangPlacement | Preemption | Wait:
        """kube-scheduler's preempt phase: place the gang if it fits now, otherwise reserve cells over
        lower-priority victims and name them. (Victim search lands with the preemption work; until
        then this answers exactly as `reserve`.)"""
        return self.reserve(req, now)

    # ------------------------------------------------------------------ health
    def set_node_health(
        self,
        node: str,
        healthy: bool,
        *,
        bad_gpus: frozenset[int] = frozenset(),
        healthy_gpus: int | None = None,
    ) -> None:
        """Mark a node's GPUs bad or healthy. A NotReady/unschedulable node (`healthy=False`) has every
        GPU bad; otherwise `bad_gpus` names bad GPU indices, and `healthy_gpus` (device-plugin
        allocatable) marks the highest-numbered surplus GPUs bad. Allocated gangs are never moved."""
        topo = self.topo
        ni = topo.node_index.get(node)
        if ni is None:
            return
        leaves = topo.node_leaves[ni]
        bad: set[int] = set()
        if not healthy:
            bad = set(leaves)
        else:
            bad = {leaf for leaf in leaves if topo.gpu_index[leaf] in bad_gpus}
            if healthy_gpus is not None and healthy_gpus < len(leaves):
                ranked = sorted(leaves, key=lambda leaf: -topo.gpu_index[leaf])
                missing = len(leaves) - healthy_gpus - len(bad)
                for leaf in ranked:
                    if missing <= 0:
                        break
                    if leaf not in bad:
                        bad.add(leaf)
                        missing -= 1
        for leaf in leaves:
            self.state.set_leaf_bad(leaf, leaf in bad)

    def node_health(self, node: str) -> tuple[int, ...]:
        """Bad GPU indices of a node (empty when healthy)."""
        ni = self.topo.node_index[node]
        return tuple(self.topo.gpu_index[x] for x in self.topo.node_leaves[ni] if self.state.leaf_bad[x])

    # ------------------------------------------------------------------ recovery
    def adopt(self, req: GangRequest, pods: list[AdoptedPod], now: float) -> GangPlacement:
        """Re-create a gang from where its pods already run (bind annotations after a restart, or a
        running allocation across a reconfiguration). Never fails: leaves it cannot account for are
        reported in the gang's history, and a guaranteed gang whose cells no longer fit its VC keeps
        running downgraded to opportunistic."""
        topo = self.topo
        gang = self.ledger.by_name.get(req.name)
        if gang is None:
            gang = self._adopt_new(req, pods, now)
        for p in pods:
            if gang.slot_of(p.pod_uid) is not None:
                continue
            slot = next(
                (
                    s
                    for s in gang.slots
                    if s.pod_uid is None
                    and topo.node_names[s.node] == p.node
                    and tuple(topo.gpu_index[x] for x in s.leaves) == tuple(sorted(p.gpu_indices))
                ),
                None,
            )
            if slot is None:
                gang.history.append(f"pod {p.pod_uid} on {p.node} {p.gpu_indices} matches no slot")
                continue
            slot.pod_uid, slot.pod_name = p.pod_uid, p.pod_name
            self.ledger.pod_gang[p.pod_uid] = gang.id
        if gang.phase is GangPhase.BOUND:
            gang.deadline = None
        return self.placement_of(gang)

    def _adopt_new(self, req: GangRequest, pods: list[AdoptedPod], now: float) -> Gang:
        topo, st = self.topo, self.state
        owner = self._owner(req) if req.vc in self.vc_owner else NO_OWNER
        priority = req.priority if owner != NO_OWNER else OPPORTUNISTIC_PRIORITY
        gid = self.ledger.new_id()
        slots: list[Slot] = []
        history: list[str] = []
        claimed: list[int] = []
        for p in pods:
            leaves: list[int] = []
            for g in sorted(p.gpu_indices):
                leaf = topo.leaf_of(p.node, g)
                if leaf is None:
                    history.append(f"pod {p.pod_uid}: GPU {g} of node {p.node} is not in the cluster")
                elif st.leaf_gang[leaf] != -1 or leaf in claimed:
                    history.append(f"pod {p.pod_uid}: GPU {g} of node {p.node} is already held")
                else:
                    leaves.append(leaf)
                    claimed.append(leaf)
            if not leaves:
                continue
            slots.append(
                Slot(len(slots), len(p.gpu_indices), p.slot_key, topo.cell_node[leaves[0]], tuple(leaves))
            )
        if owner != NO_OWNER and not self._bind_for(owner, claimed):
            history.append(f"cells no longer fit VC {req.vc}: kept running as opportunistic")
            owner, priority = NO_OWNER, OPPORTUNISTIC_PRIORITY
        for leaf in claimed:
            was_bad = st.leaf_bad[leaf]
            if was_bad:
                st.set_leaf_bad(leaf, False)
            st.allocate_leaf(leaf, gid, priority)
            if was_bad:
                st.set_leaf_bad(leaf, True)
        chain = topo.cell_chain[claimed[0]] if claimed else 0
        gang = Gang(
            id=gid,
            name=req.name,
            request=req,
            owner=owner,
            chain=chain,
            priority=priority,
            slots=slots,
            created=now,
            deadline=now + req.ttl_seconds,
            lca_level=topo.lca_level(claimed) if claimed else 0,
            history=history,
        )
        self.ledger.add(gang)
        return gang

    def _bind_for(self, owner: int, leaves: list[int]) -> bool:
        """Bind the owner's quota cells so that it owns every leaf, smallest cells first; all or none."""
        st, topo = self.state, self.topo
        st.begin()
        for leaf in leaves:
            if st.leaf_owner[leaf] == owner:
                continue
            if st.leaf_owner[leaf] != NO_OWNER:
                st.rollback()
                return False
            c = leaf
            while c >= 0 and not (st.pool_root(c) >= 0 and st.can_bind(owner, c)):
                c = topo.parent[c]
            if c < 0:
                st.rollback()
                return False
            st.bind(owner, c)
        st.commit()
        return True

    # ------------------------------------------------------------------ views
    def gang(self, name: str) -> Gang | None:
        return self.ledger.by_name.get(name)

    def gangs(self) -> list[Gang]:
        return self.ledger.gangs()


def _same_shape(a: GangRequest, b: GangRequest) -> bool:
    return (
        a.vc == b.vc
        and a.priority == b.priority
        and sorted((m.leaf_number, m.pod_number) for m in a.members)
        == sorted((m.leaf_number, m.pod_number) for m in b.members)
        and a.pinned_cell_id == b.pinned_cell_id
    )
