"""The scheduling core's façade: plain requests in, decisions out, time passed in as `now`.

The extender, the simulator and the tests all drive the core through this class only. It validates
requests (a `UserError` names the field), reserves whole gangs, hands out their slots, releases and
expires them. It does no I/O and reads no clock.
"""

from __future__ import annotations

from dataclasses import replace
from typing import cast

from topology import preemption
from topology.decisions import (
    MAX_PRIORITY,
    OPPORTUNISTIC_PRIORITY,
    AdoptedPod,
    Bind,
    Decision,
    GangPlacement,
    GangRequest,
    Member,
    PodPlacement,
    Preemption,
    Released,
    UserError,
    Wait,
    WaitCode,
    WaitReason,
    held_no_quota,
)
from topology.health import Doomed, doomed
from topology.ledger import Gang, GangPhase, Ledger, Slot
from topology.model import Topology
from topology.placement import Placer, Shortfall
from topology.spec import ClusterSpec
from topology.state import NO_GANG, NO_OWNER, CellState, Owner


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
        self.ledger = Ledger()
        self.preemptors: set[int] = set()  # ids of gangs that are waiting for victims
        # the last suggested-node set and its node ids: kube-scheduler sends the same node list with
        # every call and the edge shares one frozenset for it, so this hits by identity
        self._last_suggested: tuple[frozenset[str], frozenset[int]] | None = None
        # request shapes already validated, with their chains: validity depends on the config alone
        # (a reconfiguration builds a new Core), and most requests repeat a handful of shapes
        self._valid_shapes: dict[tuple[object, ...], tuple[int, ...]] = {}
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
    @property
    def gpu_count(self) -> int:
        """Leaf cells in the whole cluster: no gang of more pods (or leaf cells) can ever run."""
        return self.topo.total_leaves()

    def validate(self, req: GangRequest, leaf_number: int | None = None) -> None:
        """Raise `UserError` naming the field when `req` can never be scheduled as written."""
        key = _shape_key(req)
        if leaf_number is None and req.name and key in self._valid_shapes:
            return
        self._validate(req, leaf_number)
        if len(self._valid_shapes) < _MAX_SHAPES and len(req.members) <= _MAX_SHAPE_MEMBERS:
            self._valid_shapes[key] = tuple(self._chains(req))

    def _validate(self, req: GangRequest, leaf_number: int | None) -> None:
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
        if req.leaf_total > self.gpu_count:  # before anything is built per pod or per leaf
            raise UserError(
                "affinityGroup.members",
                f"the gang needs {req.leaf_total} leaf cells, more than the whole cluster's "
                f"{self.gpu_count}: it can never run",
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
        known = self._valid_shapes.get(_shape_key(req))
        if known is not None:
            return list(known)
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
        """Filtering phase: place the whole gang (or find it placed). When it fits only by preemption,
        answer Wait(PREEMPTIBLE) with the victims and reserve nothing. Raises `UserError`."""
        existing = self._existing(req)
        if existing is not None:  # a member of a placed gang: no node-list work at all
            if existing.phase is GangPhase.PREEMPTING:
                return self._wait_preempting(existing)
            return self.placement_of(existing)
        suggested = self._suggested(req)
        self.validate(req)
        got = self._place_new(req, now, suggested)
        if not isinstance(got, Wait) or req.opportunistic:
            return got
        plan = preemption.find_plan(self, req, self._owner(req), suggested)
        if plan is None:
            return got
        victims = preemption.live_victims(self, plan.victims)
        r = got.reason
        msg = (
            f"gang {req.name} fits by preempting {len(victims)} pods of "
            f"{len(plan.victims)} lower-priority gangs"
        )
        return Wait(
            WaitReason(WaitCode.PREEMPTIBLE, req.vc, msg, r.chain, r.level, r.cell_type, r.needed), victims
        )

    def _existing(self, req: GangRequest) -> Gang | None:
        """The gang's live reservation; a preemption that now needs a bad or non-suggested node is
        cancelled here (HiveD's rule), so the caller places the gang afresh."""
        g = self.ledger.by_name.get(req.name)
        if g is None:
            return None
        if not _same_shape(g.request, req):
            raise UserError(
                "affinityGroup",
                f"gang {req.name} already exists with a different shape (VC, priority or members)",
            )
        if g.phase is GangPhase.PREEMPTING and self._preemptor_broken(g, self._suggested(req)):
            self._cancel(g, "its placement needs a bad or non-suggested node")
            return None
        return g

    def _preemptor_broken(self, g: Gang, suggested: frozenset[int] | None) -> bool:
        """A bad leaf breaks the reservation; so does a node kube-scheduler no longer suggests, unless
        the slot there still waits for a victim: a node whose GPUs the victims still hold is one its
        resource accounting filters out until they are gone, which must not cancel the preemption
        that is making them go."""
        st = self.state
        for s in g.slots:
            if any(st.leaf_bad[leaf] for leaf in s.leaves):
                return True
            if suggested is not None and s.node not in suggested and not g.pending.intersection(s.leaves):
                return True
        return False

    def _wait_preempting(self, g: Gang) -> Wait:
        victims = preemption.live_victims(self, g.victims)
        msg = f"gang {g.name} holds a reservation and waits for {len(victims)} preempted pods to go"
        return Wait(WaitReason(WaitCode.PREEMPTING, g.request.vc, msg, needed=len(g.pending)), victims)

    def _place_new(
        self, req: GangRequest, now: float, suggested: frozenset[int] | None
    ) -> GangPlacement | Wait:
        owner = self._owner(req)
        sizes = [m.leaf_number for m in req.members for _ in range(m.pod_number)]
        gang_id = self.ledger.new_id()
        shortfalls: list[tuple[int, Shortfall]] = []
        for ch in self._chains(req):
            got = self.placer.place(owner, ch, sizes, gang_id, req.priority, suggested)
            if isinstance(got, Shortfall):
                shortfalls.append((ch, got))
                continue
            return self.placement_of(self._record_gang(gang_id, req, owner, ch, got, now))
        return Wait(self._wait_reason(req, shortfalls, suggested))

    def _record_gang(
        self,
        gang_id: int,
        req: GangRequest,
        owner: int,
        chain: int,
        leaves: list[tuple[int, ...]],
        now: float,
    ) -> Gang:
        slots = self._slots(req, leaves)
        gang = Gang(
            id=gang_id,
            name=req.name,
            request=req,
            owner=owner,
            chain=chain,
            priority=req.priority,
            slots=slots,
            created=now,
            deadline=now + req.ttl_seconds,
            lca_level=self.topo.lca_level([leaf for s in slots for leaf in s.leaves]),
        )
        self.ledger.add(gang)
        return gang

    def chains_for(self, req: GangRequest) -> list[int]:
        return self._chains(req)

    def _suggested(self, req: GangRequest) -> frozenset[int] | None:
        names = req.suggested_nodes
        if names is None:
            return None
        last = self._last_suggested
        if last is not None and last[0] is names:
            return last[1]
        ids: set[int | None] = set(map(self.topo.node_index.get, names))  # C loops, no generator
        ids.discard(None)  # names not in the cluster
        got = cast(frozenset[int], frozenset(ids))
        self._last_suggested = (names, got)
        return got

    def _slots(self, req: GangRequest, leaves: list[tuple[int, ...]]) -> list[Slot]:
        """Slots in member order; pods of equal size are given placements in topology order, so
        consecutive ranks sit on neighbouring GPUs and nodes."""
        topo = self.topo
        slots: list[Slot] = []
        i = 0
        for m in req.members:
            group = leaves[i : i + m.pod_number]
            if len(group) > 1:
                group.sort(key=lambda ls: topo.leaf_pos[ls[0]])
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
        level = sf.level
        if sf.quota_bound:
            code = WaitCode.INSUFFICIENT_QUOTA
            level = self._quota_level(req.vc, ch, sf.level)  # the VC's own cells, not the gang's
            lvl_type = chain.level_types[level]
            msg = (
                f"VC {req.vc} has {sf.available} of its quota's leaf cells free on chain {chain.name} "
                f"(its quota there: {self._quota_text(req.vc, ch)}); gang {req.name} needs {sf.needed}"
                f"{'' if sf.level in (1, level) else f' within one {chain.level_types[sf.level]}'}"
            )
            whole = self.vc_quota_leaves.get(req.vc, 0)
            if req.leaf_total > whole:
                msg += (
                    f" (the gang needs {req.leaf_total} GPUs, more than VC {req.vc}'s whole quota of "
                    f"{whole}: it can never run)"
                )
        elif (bad := self._doomed_for(req, ch)) is not None:
            code = WaitCode.BAD_HARDWARE
            lvl_type = bad.cell_type
            msg = (
                f"VC {req.vc}'s remaining quota on chain {chain.name} can only map onto bad hardware: "
                f"{bad.demand} {bad.cell_type} cells are promised but {bad.healthy} healthy ones are free "
                f"(bad nodes: {', '.join(bad.bad_nodes) or 'none'})"
            )
            return WaitReason(code, req.vc, msg, chain.name, bad.level, lvl_type, bad.demand, bad.healthy)
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
        return WaitReason(code, req.vc, msg, chain.name, level, lvl_type, sf.needed, sf.available)

    def _quota_level(self, vc: str, chain: int, needed: int) -> int:
        """The level of the VC's quota that came up short for a gang needing a level-`needed` cell:
        its smallest quota cells that could hold such a cell, else (the gang is bigger than any of
        them) its largest; `needed` itself when the VC has no quota cells on the chain."""
        levels = self.vc_quota_cells.get(vc, {}).get(chain, ())
        held = [lvl for lvl, k in enumerate(levels) if k]
        if not held:
            return needed
        return min((lvl for lvl in held if lvl >= needed), default=max(held))

    def _quota_text(self, vc: str, chain: int) -> str:
        """The VC's quota cells on a chain as configured, largest first: "1 RACK + 2 NODE cells"."""
        types = self.topo.chains[chain].level_types
        levels = self.vc_quota_cells.get(vc, {}).get(chain, ())
        parts = [f"{k} {types[lvl]}" for lvl, k in reversed(list(enumerate(levels))) if k]
        return f"{' + '.join(parts)} {'cell' if sum(levels) == 1 else 'cells'}" if parts else "no cells"

    def _doomed_for(self, req: GangRequest, chain: int) -> Doomed | None:
        """The doomed level (bad hardware) that the gang's VC still has unbound quota at or above."""
        if req.opportunistic or req.vc not in self.vc_owner:
            return None
        unbound = self.state.unbound[self.vc_owner[req.vc]].get(chain)
        if unbound is None:
            return None
        name = self.topo.chains[chain].name
        for d in doomed(self.state):
            if d.chain == name and any(unbound[lvl] for lvl in range(d.level, len(unbound))):
                return d
        return None

    # ------------------------------------------------------------------ slots
    def placement_of(self, gang: Gang) -> GangPlacement:
        if gang.placement is not None and gang.placement.priority == gang.priority:
            return gang.placement
        gang.placement = placed = self._placement(gang)
        return placed

    def quota_cell_types(self, gang: Gang, leaves: tuple[int, ...]) -> tuple[str, ...]:
        """Per GPU, the type of the gang's own VC cell it is held through, "" for none (every GPU
        of an opportunistic or downgraded gang, even inside a cell its VC bound for another gang).
        Recovery rebinds exactly these cells, and all-empty records bring the gang back
        opportunistic."""
        topo, st = self.topo, self.state
        types = []
        for leaf in leaves:
            root = st.binding_root(leaf) if gang.owner != NO_OWNER else -1
            types.append(topo.cell_type[root] if root >= 0 and st.bound_owner[root] == gang.owner else "")
        return tuple(types)

    def _placement(self, gang: Gang) -> GangPlacement:
        topo = self.topo
        gpu = topo.gpu_index.__getitem__
        pods = tuple(
            [
                PodPlacement(
                    s.index,
                    topo.node_names[s.node],
                    tuple(map(gpu, s.leaves)),
                    s.key,
                    self.quota_cell_types(gang, s.leaves),
                )
                for s in gang.slots
            ]
        )
        nodes = tuple(dict.fromkeys([p.node for p in pods]))
        return GangPlacement(
            gang=gang.name,
            vc=gang.request.vc,
            chain=topo.chains[gang.chain].name,
            priority=gang.priority,
            requested_priority=gang.request.priority,
            pods=pods,
            lca_level=gang.lca_level,
            nodes=nodes,
        )

    def open_slots(self, gang_name: str, leaf_number: int, slot_key: str | None = None) -> list[PodPlacement]:
        """Unclaimed slots of this shape (the nodes a filter call may return), in rank order. None
        while the gang waits for victims to go: `claim` refuses them until then."""
        gang = self.ledger.by_name.get(gang_name)
        if gang is None or gang.pending:
            return []
        topo = self.topo
        out = []
        for s in gang.slots:
            if s.leaf_number != leaf_number or s.finished:
                continue
            if slot_key is not None and s.key is not None:
                if s.key == slot_key and s.pod_uid is None:
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
        pod with the slot key of an earlier pod (a retry) takes that slot back once the earlier pod
        is gone (`release_pod`): while it lives, the slot and its GPUs are that pod's, and a second
        pod with the same identity is refused rather than put on the same GPUs.

        Refused while the gang waits for preempted pods to go (`GangPhase.PREEMPTING`): their GPUs
        are still in use. Filter answers Wait then, but a bind can come without it (kube-scheduler
        binding from an answer about an earlier reservation of the same name, or retrying)."""
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
        if gang.pending:
            victims = preemption.live_victims(self, gang.victims)
            raise UserError(
                "affinityGroup.name",
                f"gang {gang_name} waits for {len(victims)} preempted pods to go before its pods bind",
            )
        other = self.ledger.by_id.get(self.ledger.pod_gang.get(pod_uid, -1))
        if other is not None:  # a pod has one slot: a second would outlive the pod
            raise UserError("affinityGroup.name", f"pod {pod_uid} already holds a slot of gang {other.name}")
        slot = self._pick_slot(gang, leaf_number, node, slot_key)
        if slot is None:
            where = f" on node {node}" if node is not None else ""
            raise UserError(
                "node" if node is not None else "leafCellNumber",
                f"gang {gang_name} has no unclaimed slot of {leaf_number} leaf cells{where}",
            )
        if slot.pod_uid is not None:
            raise UserError("slotKey", held_by(gang_name, slot))
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
        if finished or gang.evicting:
            slot.finished = True
            if (gang.request.gang_release or gang.evicting) and not slot.released_early:
                slot.released_early = True
                self._free_leaves(list(slot.leaves), now)
        if not gang.live_slots():
            return self._release(gang, "all members gone", now)
        if not finished and not gang.evicting:
            gang.deadline = now + gang.request.ttl_seconds
        return None

    def delete_gang(self, name: str) -> Released | None:
        gang = self.ledger.by_name.get(name)
        if gang is None:
            return None
        return self._release(gang, "deleted")

    def evict_gang(self, name: str, now: float) -> Released | None:
        """Let a gang go whose pods the caller evicts (a superseded framework attempt): as
        `delete_gang`, but its running pods keep their GPUs until they are gone (`_evicting`)."""
        gang = self.ledger.by_name.get(name)
        if gang is None:
            return None
        self._evicting(gang, now)
        return self._release(gang, "deleted", now)

    def expire(self, now: float) -> list[Released]:
        """Release every reservation (or preemption) whose deadline passed before all its slots were
        claimed; pods already bound to it are named for eviction, so no gang stays half-bound, and
        keep their GPUs until they are gone (`_evicting`)."""
        out = []
        for gang in self.ledger.gangs():
            if gang.deadline is not None and gang.deadline <= now and gang.phase is not GangPhase.BOUND:
                self._evicting(gang, now)
                if gang.pending:
                    out.append(self._cancel(gang, "expired"))
                else:
                    out.append(self._release(gang, "expired"))
        return out

    def _evicting(self, gang: Gang, now: float) -> None:
        """A gang let go while its pods run: they are evicted, but each runs until it is gone (its
        grace period), so its GPUs must not go to anyone else before. Their slots move to a gang of
        their own, `<gang>/evicted/<id>`, that frees each slot's GPUs as its pod goes (and only then
        hands them to a preemptor waiting for them); the name is free to be placed again at once."""
        live = [
            s
            for s in gang.slots
            if s.pod_uid is not None and not s.released_early and not gang.pending.intersection(s.leaves)
        ]
        if not live:
            return
        counts: dict[int, int] = {}
        for s in live:
            counts[s.leaf_number] = counts.get(s.leaf_number, 0) + 1
        name = f"{gang.name}/evicted/{gang.id}"
        members = tuple(Member(n, k) for k, n in counts.items())
        keep = Gang(
            id=self.ledger.new_id(),
            name=name,
            request=replace(gang.request, name=name, members=members, slot_keys=None, suggested_nodes=None),
            owner=gang.owner,
            chain=gang.chain,
            priority=gang.priority,
            slots=[
                Slot(i, s.leaf_number, s.key, s.node, s.leaves, s.pod_uid, s.pod_name)
                for i, s in enumerate(live)
            ],
            created=now,
            deadline=None,
            lca_level=self.topo.lca_level([leaf for s in live for leaf in s.leaves]),
            history=[f"evicted from gang {gang.name}: holds its pods' GPUs until they are gone"],
            downgraded_by=gang.downgraded_by,
            evicting=True,
        )
        st = self.state
        for s in live:
            for leaf in s.leaves:
                st.release_leaf(leaf)
                st.allocate_leaf(leaf, keep.id, gang.priority)
            s.released_early = True  # no longer the old gang's to free
            assert s.pod_uid is not None
            self.ledger.pod_gang[s.pod_uid] = keep.id
        self.ledger.add(keep)
        for pid in sorted(self.preemptors):
            victims = self.ledger.by_id[pid].victims
            if gang.id in victims:
                victims.add(keep.id)

    def _release(self, gang: Gang, reason: str, now: float | None = None, *, unbind: bool = True) -> Released:
        """Free everything the gang holds and drop its marks on leaves its victims still hold."""
        evict = tuple(s.pod_uid for s in gang.slots if s.pod_uid is not None)
        self.ledger.remove(gang)
        held = gang.held_leaves()
        for leaf in sorted(gang.pending):
            self.state.set_reserver(leaf, NO_GANG)
        gang.pending.clear()
        self._free_leaves(held, now, unbind=False)  # one unbinding pass below covers every leaf
        if unbind:
            self.unbind_unused([leaf for s in gang.slots for leaf in s.leaves])
        self.preemptors.discard(gang.id)
        for pid in sorted(self.preemptors):
            self.ledger.by_id[pid].victims.discard(gang.id)
        return Released(gang.name, reason, evict)

    def _free_leaves(self, leaves: list[int], now: float | None = None, *, unbind: bool = True) -> None:
        """Free leaves; a leaf reserved by a preemptor passes straight to it (Reserving → Reserved)."""
        st = self.state
        st.release_leaves(leaves)
        for leaf in leaves:
            heir = st.leaf_reserver[leaf]
            if heir != NO_GANG:
                st.set_reserver(leaf, NO_GANG)
                g = self.ledger.by_id.get(heir)
                if g is not None:
                    st.allocate_leaf(leaf, g.id, g.priority)
                    g.pending.discard(leaf)
                    if not g.pending:
                        g.history.append("victims gone: reservation complete")
                        if now is not None:
                            g.deadline = now + g.request.ttl_seconds
        if unbind:
            self.unbind_unused(leaves)

    def unbind_unused(self, leaves: list[int]) -> None:
        """Give back VC cells (around `leaves`) that no guaranteed gang uses or has reserved."""
        st, topo = self.state, self.topo
        roots = sorted({r for r in (st.binding_root(leaf) for leaf in leaves) if r >= 0})
        for root in roots:
            if topo.pinned_id[root] is None and not self.holds_guaranteed(root):
                st.unbind(root)

    def holds_guaranteed(self, cell: int) -> bool:
        st, topo = self.state, self.topo
        if st.used_guaranteed[cell]:
            return True
        reserver = st.leaf_reserver
        return any(reserver[x] != NO_GANG for x in topo.leaves[topo.leaf_lo[cell] : topo.leaf_hi[cell]])

    # ------------------------------------------------------------------ preemption
    def preempt(self, req: GangRequest, now: float) -> GangPlacement | Preemption | Wait:
        """Preempting phase: place the gang if it fits now; otherwise reserve its cells over the
        cheapest victims (lazily downgrading opted-in same-VC victims first) and name the pods that
        must go. Repeated calls return the same reservation and its remaining victims."""
        existing = self._existing(req)
        if existing is not None:
            if existing.phase is GangPhase.PREEMPTING:
                return Preemption(existing.name, preemption.live_victims(self, existing.victims))
            return self.placement_of(existing)
        self.validate(req)
        suggested = self._suggested(req)
        got = self._place_new(req, now, suggested)
        if not isinstance(got, Wait) or req.opportunistic:
            return got
        owner = self._owner(req)
        st = self.state
        st.begin()
        lazy = self._lazy_downgrade(req, owner, suggested)
        if lazy:
            placed = self._place_new(req, now, suggested)
            if not isinstance(placed, Wait):
                st.commit()
                return placed
        plan = preemption.find_plan(self, req, owner, suggested)
        if plan is None:
            st.rollback()
            for g, o, p in lazy:
                preemption.revert_downgrade(g, o, p)
            return got
        gang = self._apply_plan(req, owner, plan, now)
        st.commit()
        if gang.phase is GangPhase.PREEMPTING:
            return Preemption(gang.name, preemption.live_victims(self, gang.victims))
        return self.placement_of(gang)

    def _lazy_downgrade(
        self, req: GangRequest, owner: int, suggested: frozenset[int] | None
    ) -> list[tuple[Gang, int, int]]:
        """Downgrade the opted-in same-VC victims of a dry-run plan; return what to revert."""
        plan = preemption.find_plan(self, req, owner, suggested)
        if plan is None:
            return []
        out: list[tuple[Gang, int, int]] = []
        for gid in plan.victims:
            g = self.ledger.by_id[gid]
            if g.priority >= 0 and g.request.lazy_preemption and g.phase is not GangPhase.PREEMPTING:
                out.append((g, g.owner, g.priority))
                preemption.downgrade(self, g, req.name)
        return out

    def _apply_plan(self, req: GangRequest, owner: int, plan: preemption.Plan, now: float) -> Gang:
        """Make the preemption real: cancel victims that run nothing, bind the plan's cells, take the
        free leaves and mark the victims' leaves as reserved for this gang."""
        st = self.state
        live: set[int] = set()
        freed: list[int] = []
        for gid in plan.victims:
            g = self.ledger.by_id[gid]
            if g.live_slots():
                live.add(gid)
            else:
                # cancel without giving cells back yet: the plan may sit in them
                freed.extend(leaf for s in g.slots for leaf in s.leaves)
                g.history.append(f"cancelled: outbid by {req.name}")
                self._release(g, f"cancelled: outbid by {req.name}", now, unbind=False)
        for c in plan.binds:
            if st.bound_owner[c] != owner:
                st.bind(owner, c)
        gang = self._record_gang(self.ledger.new_id(), req, owner, plan.chain, plan.leaves, now)
        for ls in plan.leaves:
            for leaf in ls:
                if st.leaf_gang[leaf] == NO_GANG:
                    st.allocate_leaf(leaf, gang.id, req.priority)
                else:
                    st.set_reserver(leaf, gang.id)
                    gang.pending.add(leaf)
        gang.victims = live
        if live:
            self.preemptors.add(gang.id)
        gang.history.append(f"preempting {len(live)} gangs")
        self.unbind_unused(freed)
        return gang

    def _cancel(self, g: Gang, why: str) -> Released:
        """Drop a reservation: victims' leaves stop being reserved, the gang's own leaves are freed."""
        g.history.append(f"cancelled: {why}")
        return self._release(g, f"cancelled: {why}")

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
            if not p.pod_uid or gang.slot_of(p.pod_uid) is not None:
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
            if slot is None and gang.lost > 0:
                slot = self._adopt_slot(gang, p)
            if slot is None:
                gang.history.append(f"pod {p.pod_uid} on {p.node} {p.gpu_indices} matches no slot")
                continue
            slot.pod_uid, slot.pod_name = p.pod_uid, p.pod_name
            self.ledger.pod_gang[p.pod_uid] = gang.id
        if gang.phase is GangPhase.BOUND:
            gang.deadline = None
        return self.placement_of(gang)

    def restore(
        self, req: GangRequest, slots: list[AdoptedPod], now: float, deadline: float | None
    ) -> GangPlacement | str:
        """Re-create a reservation persisted before a restart, on exactly its recorded cells.

        Unlike `adopt`, nothing runs here yet, so nothing needs saving at any cost: the reservation
        comes back whole or not at all (the reason is returned, and the gang simply places afresh).
        A leaf still held by a lower-priority gang is reserved over it again (a preemption in flight:
        that gang is a victim once more); a leaf held by an equal or higher priority, missing from the
        config, or a VC that no longer exists refuses the restore. A gang already known (its bound
        members were adopted first) is left as it is."""
        existing = self.ledger.by_name.get(req.name)
        if existing is not None:
            return self.placement_of(existing)
        if req.vc not in self.vc_owner:
            return f"VC {req.vc} is not in the config"
        topo, st = self.topo, self.state
        owner = NO_OWNER if _held_no_quota(slots) else self._owner(req)
        priority = req.priority if owner != NO_OWNER else OPPORTUNISTIC_PRIORITY
        gid = self.ledger.new_id()
        rows: list[tuple[AdoptedPod, list[int]]] = []
        hints: dict[int, str] = {}
        seen: set[int] = set()
        victims: set[int] = set()
        for p in slots:
            leaves: list[int] = []
            types = dict(zip(p.gpu_indices, p.cell_types, strict=False))
            for g in sorted(p.gpu_indices):
                leaf = topo.leaf_of(p.node, g)
                if leaf is None:
                    return f"GPU {g} of node {p.node} is not in the cluster"
                if leaf in seen:
                    return f"GPU {g} of node {p.node} is recorded twice"
                holder = st.leaf_gang[leaf]
                if holder != NO_GANG:
                    other = self.ledger.by_id.get(holder)
                    if other is None or other.priority >= priority or st.leaf_reserver[leaf] != NO_GANG:
                        return f"GPU {g} of node {p.node} is held by gang {other.name if other else holder}"
                    victims.add(holder)
                seen.add(leaf)
                leaves.append(leaf)
                hints[leaf] = types.get(g, "")
            rows.append((p, leaves))
        if not rows or any(not ls for _, ls in rows):
            return "the reservation records no GPUs"
        st.begin()
        if owner != NO_OWNER and not self._bind_for(owner, sorted(seen), hints):
            st.rollback()
            return f"its cells no longer fit VC {req.vc}"
        gang = Gang(
            id=gid,
            name=req.name,
            request=req,
            owner=owner,
            chain=topo.cell_chain[min(seen)],
            priority=priority,
            slots=[
                Slot(i, len(ls), p.slot_key, topo.cell_node[ls[0]], tuple(ls))
                for i, (p, ls) in enumerate(rows)
            ],
            created=now,
            deadline=deadline,
            lca_level=topo.lca_level(sorted(seen)),
            history=["restored from a persisted reservation"],
        )
        for leaf in sorted(seen):
            if st.leaf_gang[leaf] == NO_GANG:
                st.allocate_leaf(leaf, gid, priority)
            else:
                st.set_reserver(leaf, gid)
                gang.pending.add(leaf)
        st.commit()
        self.ledger.add(gang)
        gang.victims = victims
        if victims:
            self.preemptors.add(gid)
        return self.placement_of(gang)

    def _adopt_new(self, req: GangRequest, pods: list[AdoptedPod], now: float) -> Gang:
        topo, st = self.topo, self.state
        owner = self._owner(req) if req.vc in self.vc_owner and not _held_no_quota(pods) else NO_OWNER
        priority = req.priority if owner != NO_OWNER else OPPORTUNISTIC_PRIORITY
        gid = self.ledger.new_id()
        slots: list[Slot] = []
        history: list[str] = []
        claimed: list[int] = []
        hints: dict[int, str] = {}
        lost = 0
        for p in pods:
            leaves: list[int] = []
            types = dict(zip(p.gpu_indices, p.cell_types, strict=False))
            for g in sorted(p.gpu_indices):
                leaf = topo.leaf_of(p.node, g)
                if leaf is None:
                    history.append(f"pod {p.pod_uid}: GPU {g} of node {p.node} is not in the cluster")
                elif st.leaf_gang[leaf] != -1 or leaf in claimed:
                    history.append(f"pod {p.pod_uid}: GPU {g} of node {p.node} is already held")
                else:
                    leaves.append(leaf)
                    claimed.append(leaf)
                    hints[leaf] = types.get(g, "")
            if not leaves:
                lost += 1
                continue
            slots.append(
                Slot(len(slots), len(p.gpu_indices), p.slot_key, topo.cell_node[leaves[0]], tuple(leaves))
            )
        if owner != NO_OWNER and not self._bind_for(owner, claimed, hints):
            history.append(f"cells no longer fit VC {req.vc}: kept running as opportunistic")
            owner, priority = NO_OWNER, OPPORTUNISTIC_PRIORITY
        for leaf in claimed:
            st.allocate_leaf(leaf, gid, priority)
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
            lost=lost + max(0, req.pod_count - len(pods)),
        )
        if not slots:
            gang.history.append("nothing left to adopt")
            return gang
        self.ledger.add(gang)
        return gang

    def _adopt_slot(self, gang: Gang, p: AdoptedPod) -> Slot | None:
        """A member recovered after the others (pods are listed one by one after a restart)."""
        topo, st = self.topo, self.state
        leaves = [topo.leaf_of(p.node, g) for g in sorted(p.gpu_indices)]
        if any(x is None or st.leaf_gang[x] != NO_GANG for x in leaves):
            return None
        found = [x for x in leaves if x is not None]
        hints = dict(zip(found, p.cell_types, strict=False))
        if not found or (gang.owner != NO_OWNER and not self._bind_for(gang.owner, found, hints)):
            return None
        for leaf in found:
            st.allocate_leaf(leaf, gang.id, gang.priority)
        slot = Slot(len(gang.slots), len(found), p.slot_key, topo.cell_node[found[0]], tuple(found))
        gang.slots.append(slot)
        gang.placement = None
        gang.lost -= 1
        return slot

    def _bind_for(self, owner: int, leaves: list[int], hints: dict[int, str] | None = None) -> bool:
        """Bind the owner's quota cells so that it owns every leaf; all or none.

        Per leaf: the quota cell type recorded at bind time when given (`hints`), else the largest
        cell the gang covers wholly (a rack-sized gang takes its RACK cell back, not scattered node
        cells), else the smallest cell containing the leaf that the quota allows."""
        st, topo = self.state, self.topo
        mine = set(leaves)
        st.begin()
        for leaf in sorted(leaves):
            if st.leaf_owner[leaf] == owner:
                continue
            if st.leaf_owner[leaf] != NO_OWNER:
                st.rollback()
                return False
            target = self._hinted_cell(owner, leaf, (hints or {}).get(leaf, ""))
            if target < 0:
                a = leaf
                while a >= 0 and all(x in mine for x in topo.leaves[topo.leaf_lo[a] : topo.leaf_hi[a]]):
                    if st.pool_root(a) >= 0 and st.can_bind(owner, a):
                        target = a
                    a = topo.parent[a]
            if target < 0:
                a = leaf
                while a >= 0 and not (st.pool_root(a) >= 0 and st.can_bind(owner, a)):
                    a = topo.parent[a]
                target = a
            if target < 0:
                st.rollback()
                return False
            st.bind(owner, target)
        st.commit()
        return True

    def _hinted_cell(self, owner: int, leaf: int, cell_type: str) -> int:
        topo, st = self.topo, self.state
        ti = topo.types.get(cell_type) if cell_type else None
        if ti is None:
            return -1
        a = topo.ancestor_at(leaf, ti.level)
        if a < 0 or topo.cell_type[a] != cell_type or st.pool_root(a) < 0 or not st.can_bind(owner, a):
            return -1
        return a

    def unclaim(self, gang_name: str, pod_uid: str, now: float, *, deadline: float | None = None) -> None:
        """Give a claimed slot back without touching the reservation (a Binding that failed).
        `deadline`: the reservation's before the claim (one that completed the gang cleared it)."""
        gang = self.ledger.by_name.get(gang_name)
        slot = gang.slot_of(pod_uid) if gang is not None else None
        if gang is None or slot is None:
            return
        slot.pod_uid = slot.pod_name = None
        self.ledger.pod_gang.pop(pod_uid, None)
        if gang.deadline is None:
            gang.deadline = deadline if deadline is not None else now + gang.request.ttl_seconds

    # ------------------------------------------------------------------ views
    def gang_of_pod(self, pod_uid: str) -> Gang | None:
        """The gang in which `pod_uid` holds a slot (it is bound, or being bound), if any."""
        return self.ledger.by_id.get(self.ledger.pod_gang.get(pod_uid, -1))

    def slot_holder(self, gang_name: str, slot_key: str) -> str | None:
        """The pod holding the named slot of a gang, while it lives."""
        gang = self.ledger.by_name.get(gang_name)
        if gang is None:
            return None
        return next((s.pod_uid for s in gang.slots if s.key == slot_key and not s.finished), None)

    def gang(self, name: str) -> Gang | None:
        return self.ledger.by_name.get(name)

    def gangs(self) -> list[Gang]:
        return self.ledger.gangs()


_MAX_SHAPES = 4096
_MAX_SHAPE_MEMBERS = 16  # bounds the shape cache in bytes: a key holds the members (merged, ≤ 1 per size)


def held_by(gang_name: str, slot: Slot) -> str:
    return (
        f"slot {slot.key} of gang {gang_name} is held by pod {slot.pod_uid}, which is still alive; a "
        "pod with the same task identity waits until it is gone"
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
    )


def _same_shape(a: GangRequest, b: GangRequest) -> bool:
    return (
        a.vc == b.vc
        and a.priority == b.priority
        and sorted((m.leaf_number, m.pod_number) for m in a.members)
        == sorted((m.leaf_number, m.pod_number) for m in b.members)
        and a.pinned_cell_id == b.pinned_cell_id
    )


def _held_no_quota(pods: list[AdoptedPod]) -> bool:
    """Rebinding the VC's cells of a gang that held none would take quota its preemptor now holds."""
    return held_no_quota((p.gpu_indices, p.cell_types) for p in pods)
