"""The scheduling core's façade: plain requests in, decisions out, time passed in as `now`.

The extender, the simulator and the tests all drive the core through this class only. The extender's
verbs each ask one question (`filter`, `prioritize`, `preempt_member`, `bind`: see `topology.asks`)
and get one answer to reply with. It validates requests (a `UserError` names the field), reserves
whole gangs, hands out their slots, releases and expires them; no I/O, no clock. Each call is carried
out by the module named for its concept (`requests`, `gangs`, `preemption`, `recovery`, `health`).
The edge reads the core through the read-only queries at the end of the class, and every cell through
`topology.inspect`; nothing outside `topology/` reads its data (`Cluster`'s fields) directly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeVar

from topology import asks, compact, expiry, gangs, health, promotion, recovery, requests
from topology.asks import Claimed, FilterAnswer, FilterAsk, MemberAsk, PreemptAnswer, ReserveLimit, Slots
from topology.cluster import Cluster
from topology.decisions import (
    AdoptedPod,
    Bind,
    Decision,
    GangPlacement,
    GangRequest,
    PodPlacement,
    Preemption,
    Released,
    Wait,
    WaitCode,
    WaitReason,
)
from topology.reservations import Gang, Slot

_R = TypeVar("_R")


class Core(Cluster):
    """One cluster's scheduling state and its public calls. Single-threaded: the edge serialises calls."""

    # ------------------------------------------------------------------ requests
    def validate(self, req: GangRequest, leaf_number: int | None = None) -> None:
        """Raise `UserError` naming the field when `req` can never be scheduled as written."""
        requests.validate(self, req, leaf_number)

    # ------------------------------------------------------------------ the verbs' questions
    def filter(self, ask: FilterAsk, now: float) -> FilterAnswer:
        """A member's filter: its slots, or why its gang waits (`asks.filter_member`)."""
        return asks.filter_member(self, ask, now)

    def prioritize(self, ask: MemberAsk) -> Slots | None:
        """A member's slots with each slot node's fill (`asks.prioritize_member`)."""
        return asks.prioritize_member(self, ask)

    def preempt_member(
        self, ask: MemberAsk, now: float, behind: str | None = None, limit: ReserveLimit | None = None
    ) -> PreemptAnswer:
        """A member's preempt: `preempt` for its gang, answered with the gang (`asks`)."""
        return asks.preempt_member(self, ask, now, behind, limit)

    def bind(self, ask: MemberAsk, node: str, now: float, *, pod_name: str | None = None) -> Claimed | None:
        """A member's bind: its slot on `node` claimed (`asks.bind_member`). Raises `UserError`."""
        return asks.bind_member(self, ask, node, now, pod_name=pod_name)

    # ------------------------------------------------------------------ placing gangs
    def reserve(self, req: GangRequest, now: float) -> GangPlacement | Wait:
        """Filtering phase: place the whole gang (or find it placed), lazily downgrading opted-in
        victims when that alone makes room. When it fits only by preemption, answer
        Wait(PREEMPTIBLE) with the victims and reserve nothing. Raises `UserError`."""
        return asks.reserve(self, req, now)

    def preempt(self, req: GangRequest, now: float) -> GangPlacement | Preemption | Wait:
        """Preempting phase: place the gang if it fits now; otherwise reserve its cells over the
        cheapest victims (lazily downgrading opted-in same-VC victims first) and name the pods that
        must go. Repeated calls return the same reservation and its remaining victims."""
        return compact.preempt(self, req, now)

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
        requests.validate(self, req, leaf_number)
        got = self.reserve(req, now)
        if isinstance(got, Wait):
            return got
        gang = self.reservations.by_name[req.name]
        if gang.slot_of(pod_uid) is None and gangs.pick_slot(self, gang, leaf_number, None, slot_key) is None:
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

    # ------------------------------------------------------------------ slots
    def open_slots(self, gang_name: str, leaf_number: int, slot_key: str | None = None) -> list[PodPlacement]:
        """Unclaimed slots of this shape (the nodes a filter call may return), in rank order. None
        while the gang waits for victims to go: `claim` refuses them until then."""
        return gangs.open_slots(self, gang_name, leaf_number, slot_key)

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
        """Give `pod_uid` a slot of the gang (on `node` if given), or `UserError` (`gangs.claim`)."""
        return gangs.claim(
            self, gang_name, pod_uid, leaf_number, now, node=node, slot_key=slot_key, pod_name=pod_name
        )

    def unclaim(self, gang_name: str, pod_uid: str, now: float, *, deadline: float | None = None) -> None:
        """Give a claimed slot back, the reservation untouched (a Binding that failed). `deadline`:
        the reservation's before the claim (one that completed the gang cleared it)."""
        gangs.unclaim(self, gang_name, pod_uid, now, deadline=deadline)

    # ------------------------------------------------------------------ release
    def release_pod(self, pod_uid: str, now: float, *, finished: bool = False) -> Released | None:
        """A pod was deleted (or completed, `finished`). Its slot opens for a retry; the gang is released
        once none of its pods is alive; with gangReleaseEnable a finished pod's GPUs free at once."""
        return self._promoting(gangs.release_pod(self, pod_uid, now, finished=finished))

    def delete_gang(self, name: str) -> Released | None:
        """Release a gang at once (its pods are named for eviction)."""
        return self._promoting(gangs.delete_gang(self, name))

    def evict_gang(self, name: str, now: float) -> Released | None:
        """`delete_gang` of a gang whose pods the caller evicts: each keeps its GPUs until it is gone."""
        return self._promoting(gangs.evict_gang(self, name, now))

    def expire(self, now: float) -> list[Released]:
        """Release every reservation (or preemption) whose deadline passed before all its slots were
        claimed; pods already bound to it are named for eviction and keep their GPUs until gone."""
        return self._promoting(expiry.expire(self, now))

    def _promoting(self, released: _R) -> _R:
        """After a release: opted-in opportunistic gangs whose VC now has room become guaranteed."""
        if released:
            promotion.promote_waiting(self)
        return released

    def withdraw_promotion(self, name: str) -> bool:
        """An opted-in opportunistic gang is not to be promoted any more (`promotion.withdraw`)."""
        return promotion.withdraw(self, name)

    def take_promoted(self) -> list[str]:
        """The gangs promoted since the last call, oldest first (the edge rewrites their pods' bind
        info so a restart brings them back guaranteed); a gang released meanwhile is left out."""
        res = self.reservations
        names = [res.by_id[i].name for i in sorted(res.promoted) if i in res.by_id]
        res.promoted.clear()
        return names

    # ------------------------------------------------------------------ health
    def set_node_health(
        self,
        node: str,
        healthy: bool,
        *,
        bad_gpus: frozenset[int] = frozenset(),
        healthy_gpus: int | None = None,
    ) -> None:
        """Mark a node's GPUs bad or healthy (see `health.set_node_health`). Gangs are never moved."""
        health.set_node_health(self, node, healthy, bad_gpus=bad_gpus, healthy_gpus=healthy_gpus)

    def node_health(self, node: str) -> tuple[int, ...]:
        """Bad GPU indices of a node (empty when healthy)."""
        return health.node_health(self, node)

    # ------------------------------------------------------------------ recovery
    def adopt(
        self, req: GangRequest, pods: list[AdoptedPod], now: float, *, evicting: bool = False
    ) -> GangPlacement:
        """Re-create a gang from where its pods already run; never fails (`recovery.adopt`). `evicting`:
        its pods are being evicted; it holds their GPUs until each is gone, and never expires."""
        return recovery.adopt(self, req, pods, now, evicting=evicting)

    def restore(
        self, req: GangRequest, slots: list[AdoptedPod], now: float, deadline: float | None
    ) -> GangPlacement | str:
        """Re-create a persisted reservation whole on its recorded cells, or return why not."""
        return recovery.restore(self, req, slots, now, deadline)

    def rejoin(self, name: str, pod_uid: str) -> bool:
        """A pod held apart as being evicted from gang `name` is its member again (`recovery.rejoin`)."""
        return recovery.rejoin(self, name, pod_uid)

    def keep_downgraded(self, name: str, preemptor: str) -> bool:
        """A rebuilt gang stays downgraded by `preemptor` (`recovery.keep_downgraded`)."""
        return recovery.keep_downgraded(self, name, preemptor)

    # ------------------------------------------------------------------ gangs, read-only
    def placement_of(self, gang: Gang) -> GangPlacement:
        """The gang's placement: nodes, GPUs and quota cell types per slot."""
        return gangs.placement_of(self, gang)

    def quota_cell_types(self, gang: Gang, leaves: tuple[int, ...]) -> tuple[str, ...]:
        """Per GPU, the type of the gang's own VC cell it is held through ("" for none)."""
        return gangs.quota_cell_types(self, gang, leaves)

    def gang_of_pod(self, pod_uid: str) -> Gang | None:
        """The gang in which `pod_uid` holds a slot (it is bound, or being bound), if any."""
        return self.reservations.by_id.get(self.reservations.pod_gang.get(pod_uid, -1))

    def slot_holder(self, gang_name: str, slot_key: str) -> str | None:
        """The pod holding the named slot of a gang, while it lives."""
        gang = self.reservations.by_name.get(gang_name)
        slots = gang.slots if gang is not None else ()
        return next((s.pod_uid for s in slots if s.key == slot_key and not s.finished), None)

    def gang(self, name: str) -> Gang | None:
        """The named gang's reservation, if it has one."""
        return self.reservations.by_name.get(name)

    def gangs(self, *, since: int = 0, unsettled: bool = False) -> list[Gang]:
        """Every gang, oldest first; newer than id `since`; or, `unsettled`, those not whole yet or
        running downgraded (`Reservations.unsettled`), without a walk of every running gang."""
        return self.reservations.unsettled() if unsettled else self.reservations.gangs(since)

    def holds_slot(self, pod_uid: str) -> bool:
        """Does `pod_uid` hold a slot of some gang?"""
        return pod_uid in self.reservations.pod_gang

    def pods_holding_slots(self) -> list[str]:
        """Every pod that holds a slot, in the order the slots were claimed."""
        return list(self.reservations.pod_gang)

    def last_gang_id(self) -> int:
        """The newest gang id handed out: a cheap "anything new since?" check for the edges."""
        return self.reservations.last_id

    def slot_place(self, slot: Slot) -> tuple[str, tuple[int, ...]]:
        """A slot's node and GPU indices, as Kubernetes names them."""
        topo = self.topo
        return topo.node_names[slot.node], tuple(topo.gpu_index[x] for x in slot.leaves)

    def gang_domain(self, gang: Gang) -> frozenset[str]:
        """The nodes of the gang's topology domain (`requests.domain_cell`)."""
        c = requests.domain_cell(self, gang)
        if c is None:
            return frozenset(self.topo.node_names[s.node] for s in gang.slots)
        return frozenset(self.topo.node_names[i] for i in self.topo.nodes_within(c))

    # ------------------------------------------------------------------ the cluster, read-only
    def node_names(self) -> Sequence[str]:
        """Every Kubernetes node of the config, once each, in the config's order."""
        return self.topo.machines

    def node_index(self) -> Mapping[str, int]:
        """Each node's position in `node_names`; shared, so never to be changed."""
        return self.topo.machine_index

    def has_node(self, node: str) -> bool:
        """Is `node` in the config?"""
        return node in self.topo.node_index

    def node_fill(self, node: str) -> tuple[int, int]:
        """(free healthy GPUs, GPUs) of a node; (0, 0) for a node the config does not have."""
        cells = [self.topo.node_cell[ni] for ni in self.topo.node_parts.get(node, ())]
        return sum(self.state.free[c] for c in cells), sum(self.topo.leaf_count[c] for c in cells)

    def node_gpu_counts(self) -> list[int]:
        """GPUs per node, in `node_names` order."""
        return [len(self.topo.machine_leaves(name)) for name in self.topo.machines]

    def largest_node(self) -> int:
        """GPUs of the largest node."""
        return self.topo.node_leaf_max

    def vc_names(self) -> list[str]:
        """Every VC of the config, by name."""
        return sorted(self.vc_owner)

    def has_vc(self, vc: str) -> bool:
        """Is `vc` in the config?"""
        return vc in self.vc_owner

    def vc_quota(self, vc: str) -> int:
        """GPUs of the VC's quota (its pinned cells included); 0 for a VC the config does not have."""
        return self.vc_quota_leaves.get(vc, 0)

    def level_types(self, chain: str) -> tuple[str, ...]:
        """The cell type at each level of a chain, indexed by level (1 is the leaf cell)."""
        return self.topo.chains[self.topo.chain_index[chain]].level_types
