"""Random call sequences against the core, checking every guarantee after every step.

Rules cover the whole life of gangs: submit (every priority), member schedule, member delete
(finished or not), gang delete, reservation expiry, preemption (with and without the victims going),
node and GPU health flips, and reconfiguration between two quota layouts on the same hardware.

The TTL is a cap (`ttl_caps_not_whole`): whatever the sequence (members churned, gangs filtered
again, restarts, reloads), no gang holds its cells while not whole for a TTL or longer, and a gang
whose reservation expired is not placed again within a TTL of its expiry.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from tests.topology.fixtures import rack_cluster
from topology.core import Core
from topology.decisions import (
    AdoptedPod,
    Bind,
    GangPlacement,
    GangRequest,
    Member,
    Preemption,
    UserError,
    Wait,
    WaitCode,
)
from topology.invariants import snapshot, violations
from topology.promotion import promotable
from topology.reconfigure import reconfigure
from topology.recovery import keep_downgraded
from topology.reservations import Gang, GangPhase
from topology.state import NO_OWNER

SPEC = rack_cluster(
    racks=2,
    vcs={"a": [("NODE", 3)], "b": [("NODE", 1), ("NODE.HALF", 3)], "c": [("NODE.HALF.SWITCH", 3)]},
    pinned={"a": ["pin"]},
    pin_nodes={"r1-n3": "pin"},
)
# the same hardware with a's quota shrunk and c's grown: reconfiguration flips between the two
SPEC2 = rack_cluster(
    racks=2,
    vcs={
        "a": [("NODE", 1)],
        "b": [("NODE", 1), ("NODE.HALF", 3)],
        "c": [("NODE", 2), ("NODE.HALF.SWITCH", 3)],
    },
    pinned={"a": ["pin"]},
    pin_nodes={"r1-n3": "pin"},
)
NODES = [f"r{r}-n{n}" for r in range(2) for n in range(4)]

sizes = st.sampled_from([1, 1, 1, 2, 4, 8])
members = st.lists(st.tuples(st.integers(1, 3), sizes), min_size=1, max_size=2, unique_by=lambda m: m[1])


class CoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.core = Core(SPEC)
        self.spec = SPEC
        self.now = 0.0
        self.counter = 0
        self.requests: dict[str, GangRequest] = {}  # every gang ever asked for, to filter again
        self.windows: dict[str, tuple[float, float]] = {}  # not whole since, TTL: placed gangs
        self.cooled: dict[str, float] = {}  # expired gangs: not placed again before this time
        self.carried: set[str] = set()  # released before whole (expired, members gone): window goes on

    def _release(self, uid: str, *, finished: bool = False) -> None:
        """Delete (or finish) a member; a gang released not whole with its members deleted keeps
        its window: placing it again must not start a new one."""
        g = self.core.gang_of_pod(uid)
        was = g.name if g is not None and g.phase is GangPhase.RESERVED and not g.evicting else None
        released = self.core.release_pod(uid, self.now, finished=finished)
        if released is not None and was is not None and not finished:
            self.carried.add(was)

    def _uid(self) -> str:
        self.counter += 1
        return f"pod-{self.counter}"

    def _request(
        self,
        vc: str,
        prio: int,
        ms: list[tuple[int, int]],
        pinned: bool,
        release: bool,
        ttl: float,
        lazy: bool,
        promote: bool = False,
    ) -> GangRequest:
        self.counter += 1
        name = f"g{self.counter}"
        self.requests[name] = req = GangRequest(
            name,
            vc,
            tuple(Member(p, g) for p, g in ms),
            priority=prio,
            pinned_cell_id="pin" if pinned and vc == "a" and prio >= 0 else None,
            gang_release=release,
            ttl_seconds=ttl,
            lazy_preemption=lazy,
            promote_when_quota=promote,
        )
        return req

    @rule(
        vc=st.sampled_from(["a", "b", "c"]),
        prio=st.sampled_from([-1, 0, 10, 100]),
        ms=members,
        pinned=st.booleans(),
        release=st.booleans(),
        ttl=st.sampled_from([5.0, 50.0]),
        lazy=st.booleans(),
        promote=st.booleans(),
    )
    def submit(
        self,
        vc: str,
        prio: int,
        ms: list[tuple[int, int]],
        pinned: bool,
        release: bool,
        ttl: float,
        lazy: bool,
        promote: bool,
    ) -> None:
        req = self._request(vc, prio, ms, pinned, release, ttl, lazy, promote)
        before = snapshot(self.core)
        got = self.core.reserve(req, self.now)
        if isinstance(got, Wait):
            assert snapshot(self.core) == before, "a gang that waits (even a preemptible one) holds nothing"
            assert self.core.gang(req.name) is None
        else:
            assert len(got.pods) == req.pod_count
            self._guest_only_if_asked(req, got)

    def _guest_only_if_asked(self, req: GangRequest, got: GangPlacement) -> None:
        """A guaranteed gang runs opportunistic only when it opted in (`topology.room`), and then as
        a guest that binds no quota: VC safety (`guarantees_hold`) is checked after every step."""
        if got.priority < 0 and not req.opportunistic:
            g = self.core.gang(req.name)
            assert req.promote_when_quota and g is not None and g.guest and g.owner == NO_OWNER

    @rule(
        vc=st.sampled_from(["a", "b", "c"]),
        prio=st.sampled_from([0, 10, 100, 1000]),
        ms=members,
        kill=st.booleans(),
        promote=st.booleans(),
    )
    def preempt(self, vc: str, prio: int, ms: list[tuple[int, int]], kill: bool, promote: bool) -> None:
        req = self._request(vc, prio, ms, False, False, 50.0, False, promote)
        before = snapshot(self.core)
        got = self.core.preempt(req, self.now)
        if isinstance(got, Wait):
            assert snapshot(self.core) == before, "a failed preemption must change nothing"
        elif isinstance(got, GangPlacement):
            self._guest_only_if_asked(req, got)
        elif isinstance(got, Preemption):
            g = self.core.gang(req.name)
            assert g is not None and (g.priority >= 0 or (promote and g.guest and g.owner == NO_OWNER)), (
                "a preemptor is its VC's, or a gang that opted in starting as a guest over other guests"
            )
            for v in got.victims:
                g = self.core.gang(v.gang)
                assert g is not None
                assert g.priority < 0 or (g.request.vc == vc and g.priority < prio), (
                    "only lower-priority gangs of the same VC, or opportunistic ones, may be victims"
                )
            if kill:
                for v in got.victims:
                    self._release(v.pod_uid)

    @precondition(lambda self: any(g.victims for g in self.core.gangs()))
    @rule(data=st.data())
    def kill_victims(self, data: st.DataObject) -> None:
        g = data.draw(st.sampled_from([g for g in self.core.gangs() if g.victims]))
        for vid in sorted(g.victims):
            victim = self.core.reservations.by_id.get(vid)
            for s in list(victim.slots) if victim is not None else []:
                if s.pod_uid is not None:
                    self._release(s.pod_uid)

    @precondition(lambda self: any(g.victims for g in self.core.gangs()))
    @rule(data=st.data())
    def kill_one_victim(self, data: st.DataObject) -> None:
        """kube-scheduler deletes the victims on one node per cycle: one victim pod goes."""
        g = data.draw(st.sampled_from([g for g in self.core.gangs() if g.victims]))
        pods = [
            s.pod_uid
            for vid in sorted(g.victims)
            if (v := self.core.reservations.by_id.get(vid)) is not None
            for s in v.slots
            if s.pod_uid is not None
        ]
        if pods:
            self._release(data.draw(st.sampled_from(pods)))

    @rule(data=st.data())
    def victim_member_comes(self, data: st.DataObject) -> None:
        """A pod of a gang being preempted comes (re-created, or never come before): it binds
        nowhere while the preemption runs (HiveD binds no pod of a BeingPreempted group)."""
        gangs = [
            g
            for g in self.core.gangs()
            if self.core.being_preempted(g.id) and any(s.pod_uid is None and not s.finished for s in g.slots)
        ]
        if not gangs:
            return
        g = data.draw(st.sampled_from(gangs))
        s = data.draw(st.sampled_from([s for s in g.slots if s.pod_uid is None and not s.finished]))
        try:
            d = self.core.schedule(g.request, self._uid(), s.leaf_number, self.now)
        except UserError:
            return
        assert not isinstance(d, Bind), d

    @precondition(lambda self: bool(self.core.gangs()))
    @rule(vc=st.sampled_from(["a", "b", "c"]), ms=members)
    def run_promotable(self, vc: str, ms: list[tuple[int, int]]) -> None:
        """An opportunistic gang that asks for promotion, every member bound at once: once its VC
        has room after a release, the core may make it guaranteed where it runs."""
        req = self._request(vc, -1, ms, False, False, 50.0, False, True)
        if not isinstance(self.core.reserve(req, self.now), GangPlacement):
            return
        for m in req.members:
            for _ in range(m.pod_number):
                d = self.core.schedule(req, self._uid(), m.leaf_number, self.now)
                assert isinstance(d, Bind), d

    @rule(data=st.data())
    def schedule_member(self, data: st.DataObject) -> None:
        gangs = [
            g
            for g in self.core.gangs()
            if not g.pending
            and not self.core.being_preempted(g.id)
            and any(s.pod_uid is None and not s.finished for s in g.slots)
        ]
        if not gangs:
            return
        g = data.draw(st.sampled_from(gangs))
        open_slots = [s for s in g.slots if s.pod_uid is None and not s.finished]
        s = data.draw(st.sampled_from(open_slots))
        d = self.core.schedule(g.request, self._uid(), s.leaf_number, self.now)
        assert isinstance(d, Bind), d

    @precondition(lambda self: any(g.pending for g in self.core.gangs()))
    @rule(data=st.data())
    def bind_while_preempting(self, data: st.DataObject) -> None:
        """A bind with no filter behind it (kube-scheduler binding from a stale answer): a gang
        still waiting for its victims gives no slot out, their pods still run on its GPUs."""
        g = data.draw(st.sampled_from([g for g in self.core.gangs() if g.pending]))
        s = data.draw(st.sampled_from(g.slots))
        node = self.core.topo.node_names[s.node]
        try:
            self.core.claim(g.name, self._uid(), s.leaf_number, self.now, node=node)
        except UserError:
            return
        raise AssertionError(f"a member of {g.name} claimed a slot while the gang waits for victims")

    @precondition(lambda self: bool(self.core.reservations.pod_gang))
    @rule(data=st.data(), finished=st.booleans())
    def delete_member(self, data: st.DataObject, finished: bool) -> None:
        uid = data.draw(st.sampled_from(sorted(self.core.reservations.pod_gang)))
        self._release(uid, finished=finished)
        assert uid not in self.core.reservations.pod_gang

    @rule(data=st.data())
    def failed_binding(self, data: st.DataObject) -> None:
        """A member claims its slot, and its Binding then fails: the slot is given back with the
        deadline the gang had (`Core.unclaim`, as the bind verb does). Meanwhile (the Binding is
        written outside the lock) the unsettled gangs are read, as the durable reservations' sync
        may: a gang the claim made whole is then not whole again, and must be read so."""
        gangs = [
            g
            for g in self.core.gangs()
            if not g.pending
            and not g.evicting
            and not self.core.being_preempted(g.id)  # no new pod of a victim binds (`gangs.claim`)
            and g.phase is GangPhase.RESERVED
        ]
        if not gangs:
            return
        g = data.draw(st.sampled_from(gangs))
        s = data.draw(st.sampled_from([s for s in g.slots if s.pod_uid is None and not s.finished]))
        uid, deadline = self._uid(), g.deadline
        self.core.claim(g.name, uid, s.leaf_number, self.now, node=self.core.topo.node_names[s.node])
        self.core.gangs(unsettled=True)
        self.core.unclaim(g.name, uid, self.now, deadline=deadline)
        assert uid not in self.core.reservations.pod_gang and g.phase is GangPhase.RESERVED

    @precondition(lambda self: bool(self.core.gangs()))
    @rule(data=st.data())
    def delete_gang(self, data: st.DataObject) -> None:
        g = data.draw(st.sampled_from([g.name for g in self.core.gangs()]))
        self.core.delete_gang(g)
        assert self.core.gang(g) is None

    @precondition(lambda self: bool(self.requests))
    @rule(data=st.data(), expired=st.booleans())
    def refilter(self, data: st.DataObject, expired: bool) -> None:
        """A member of a gang asked for before is filtered again (placed, released or expired):
        that never moves a placed gang's deadline, and an expired one waits a TTL."""
        recent = set(self.cooled) | self.carried  # released before whole: the interesting ones
        names = sorted(recent) if expired and recent else sorted(self.requests)
        name = data.draw(st.sampled_from(names))
        req = self.requests[name]
        was = self.core.gang(name)
        deadline = was.deadline if was is not None else None
        # HiveD's rule: a preemption whose placement now needs a bad GPU is cancelled and the gang
        # placed afresh (`gangs.existing`); any other gang keeps its reservation and its deadline
        broken = (
            was is not None
            and bool(was.pending)
            and any(self.core.state.leaf_bad[leaf] for s in was.slots for leaf in s.leaves)
        )
        try:
            got = self.core.reserve(req, self.now)
        except UserError:  # a reload shrank its VC
            return
        now_gang = self.core.gang(name)
        if was is not None and broken:
            assert now_gang is not was, "a preemption that needs a bad GPU was kept"
        elif was is not None:
            assert now_gang is was and was.deadline == deadline, "a filter moved the deadline"
        elif self.now < self.cooled.get(name, float("-inf")):
            assert isinstance(got, Wait) and got.reason.code is WaitCode.EXPIRED, got
            assert now_gang is None

    @precondition(
        lambda self: any(g.phase is GangPhase.RESERVED and g.live_slots() for g in self.core.gangs())
    )
    @rule(data=st.data())
    def churn_member(self, data: st.DataObject) -> None:
        """A bound member of a gang that is not whole is deleted and re-created at once."""
        open_gangs = [
            g
            for g in self.core.gangs()
            if g.phase is GangPhase.RESERVED and g.live_slots() and not self.core.being_preempted(g.id)
        ]
        if not open_gangs:
            return
        g = data.draw(st.sampled_from(open_gangs))
        s = data.draw(st.sampled_from(g.live_slots()))
        assert s.pod_uid is not None
        deadline = g.deadline
        self._release(s.pod_uid)
        if self.core.gang(g.name) is g:
            assert g.deadline == deadline, "deleting a member of a gang not whole moved its deadline"
            d = self.core.schedule(g.request, self._uid(), s.leaf_number, self.now)
            assert isinstance(d, Bind), d

    @rule(dt=st.sampled_from([1.0, 10.0, 60.0, 36000.0]))  # hours: runs worth keeping (`topology.room`)
    def advance_and_expire(self, dt: float) -> None:
        self.now += dt
        ttls = {g.name: g.request.ttl_seconds for g in self.core.gangs()}
        for r in self.core.expire(self.now):
            assert self.core.gang(r.gang) is None
            if r.reason == "expired":
                self.cooled[r.gang] = self.now + ttls[r.gang]
                self.carried.add(r.gang)
        for g in self.core.gangs():
            assert g.deadline is None or g.deadline > self.now or g.phase.value == "Bound"

    @rule(node=st.sampled_from(NODES), healthy=st.booleans(), bad=st.sets(st.integers(0, 7), max_size=2))
    def flip_health(self, node: str, healthy: bool, bad: set[int]) -> None:
        self.core.set_node_health(node, healthy, bad_gpus=frozenset(bad))

    @precondition(lambda self: any(_splittable(self.core, g) for g in self.core.gangs()))
    @rule(data=st.data())
    def split_and_rejoin(self, data: st.DataObject) -> None:
        """A view behind its owner's binds (a standby whose watch lags): it saw some members of a
        gang the owner made whole, let the gang go (its members held apart, being evicted), then
        saw the other members bound and adopted the gang again from their records. Each member
        held apart rejoins it (`Core.rejoin`): the gang comes back whole on exactly its GPUs."""
        g = data.draw(st.sampled_from([g for g in self.core.gangs() if _splittable(self.core, g)]))
        before = sorted(_where(self.core, g))
        records = _records(self.core, g)
        uids = [r.pod_uid for r in records]
        seen = data.draw(st.lists(st.sampled_from(uids), min_size=1, max_size=len(uids) - 1, unique=True))
        for uid in uids:
            if uid not in seen:
                self.core.release_pod(uid, self.now)  # not bound yet, in the lagging view
        self.core.evict_gang(g.name, self.now)
        self.core.adopt(g.request, records, self.now)
        for uid in seen:
            assert self.core.rejoin(g.name, uid), uid
        h = self.core.gang(g.name)
        assert h is not None and h.phase is GangPhase.BOUND and h.lost == 0
        assert sorted(_where(self.core, h)) == before, "the gang is back on exactly its GPUs"
        assert [x.name for x in self.core.gangs() if x.name.startswith(f"{g.name}/evicted/")] == []
        assert violations(self.core) == []

    @rule()
    def reconfigure(self) -> None:
        self.spec = SPEC2 if self.spec is SPEC else SPEC
        running = {s.pod_uid for g in self.core.gangs() for s in g.slots if s.pod_uid is not None}
        self.core, _report = reconfigure(self.core, self.spec, self.now)
        kept = {s.pod_uid for g in self.core.gangs() for s in g.slots if s.pod_uid is not None}
        assert kept == running, "reconfiguration must keep every running pod"

    @rule()
    def restart(self) -> None:
        """A process restart: bound members come back from their pods' annotations (`adopt`, every
        slot of the placement) and reservations nobody has claimed yet from their persisted records
        (`restore`), then the downgrades the records keep (`keep_downgraded`). Each gang must come
        back on exactly the GPUs it had, in the same phase, downgraded as it was (or promotable not)."""
        old = self.core
        new = Core(self.spec)
        for node in NODES:
            bad = old.node_health(node)
            if bad:
                new.set_node_health(node, True, bad_gpus=frozenset(bad))
        gangs = sorted(old.gangs(), key=lambda g: (-g.request.priority, g.created, g.id))
        for g in gangs:
            if g.live_slots() and g.phase is not GangPhase.PREEMPTING:
                new.adopt(g.request, _records(old, g), self.now)
        for g in gangs:
            # every gang not whole has a persisted record (`needs_object`); one adopted from its
            # bound members takes the recorded deadline back from it
            if not g.live_slots() or g.phase is not GangPhase.BOUND:
                got = new.restore(g.request, _records(old, g), self.now, g.deadline)
                assert isinstance(got, GangPlacement), f"{g.name} not restored: {got}"
        for g in gangs:
            if g.downgraded_by is not None and not g.evicting:  # its record, while it lasts
                assert keep_downgraded(new, g.name, g.downgraded_by), g.name
        self.cooled.clear()  # what expired before a restart is not remembered
        self.carried.clear()
        assert violations(new) == []
        for g in gangs:
            h = new.gang(g.name)
            assert h is not None, g.name
            assert _where(new, h) == _where(old, g), g.name
            # a gang downgraded by a lazy preemption comes back downgraded (not on its VC's quota),
            # not to be promoted, and no guest of its VC; one being evicted is promoted never,
            # downgraded or not
            assert h.priority == g.priority and (h.owner == -1) == (g.owner == -1), g.name
            if not g.evicting:
                assert h.downgraded_by == g.downgraded_by, g.name
            if g.downgraded_by is not None and not g.evicting:
                assert not g.guest and not h.guest and not promotable(h), g.name
            if not g.live_slots():
                assert h.phase is g.phase and h.deadline == g.deadline
            elif g.phase is GangPhase.RESERVED and h.phase is GangPhase.RESERVED:
                assert h.deadline == g.deadline, f"a restart moved {g.name}'s deadline"
        self.core = new

    @invariant()
    def guarantees_hold(self) -> None:
        assert violations(self.core) == []

    @invariant()
    def unsettled_gangs_are_those_not_whole_or_downgraded(self) -> None:
        """Read after every step, so the index is pruned as often as it can be: a change that makes
        a gang not whole again and is not noted would leave it out from then on."""
        want = [g for g in self.core.gangs() if g.phase is not GangPhase.BOUND or g.downgraded_by is not None]
        assert self.core.gangs(unsettled=True) == want

    @invariant()
    def ttl_caps_not_whole(self) -> None:
        """A gang holding its cells while not whole (its victims gone) has been so for less than
        its TTL, and its deadline is no later than a TTL after that started, whatever came between."""
        seen = set()
        for g in self.core.gangs():
            if g.phase is not GangPhase.RESERVED or g.evicting:
                continue
            seen.add(g.name)
            self.carried.discard(g.name)  # placed (again): it is no longer waiting to be
            since, ttl = self.windows.setdefault(g.name, (self.now, g.request.ttl_seconds))
            assert self.now - since < ttl, f"{g.name} not whole since {since}, now {self.now}, TTL {ttl}"
            assert g.deadline is not None and g.deadline <= since + ttl, (g.name, g.deadline, since, ttl)
        for name in [n for n in self.windows if n not in seen]:
            since, ttl = self.windows[name]
            # the window of a gang released not whole goes on: placed again inside it, the gang
            # keeps its deadline; past it, the gang waits a TTL before a new one can start
            if name not in self.carried or self.now >= since + 2 * ttl:
                del self.windows[name]
                self.carried.discard(name)

    def teardown(self) -> None:
        for node in NODES:
            self.core.set_node_health(node, True)
        for g in self.core.gangs():
            self.core.delete_gang(g.name)
        assert violations(self.core) == []
        assert snapshot(self.core) == snapshot(Core(self.spec)), "deleting everything must restore the start"


def _splittable(core: Core, g: Gang) -> bool:
    """A whole gang of two pods or more that a lagging view could split: running at its own
    priority on its VC's quota, no victim to wait for, no preemptor waiting for its GPUs."""
    st = core.state
    return (
        g.phase is GangPhase.BOUND
        and len(g.live_slots()) >= 2
        and len(g.live_slots()) == len(g.slots)
        and not g.evicting
        and not g.guest
        and g.downgraded_by is None
        and g.priority == g.request.priority
        and all(st.leaf_reserver[x] == -1 for s in g.slots for x in s.leaves)
    )


def _records(core: Core, g: Gang) -> list[AdoptedPod]:
    """What a restart reads back for a gang: every slot's node and GPUs, and who holds it."""
    topo = core.topo
    return [
        AdoptedPod(
            s.pod_uid or "",
            topo.node_names[s.node],
            tuple(topo.gpu_index[x] for x in s.leaves),
            s.pod_name,
            s.key,
            core.quota_cell_types(g, s.leaves),
        )
        for s in g.slots
        if not s.released_early
    ]


def _where(core: Core, g: Gang) -> list[tuple[str, tuple[str, ...], str | None]]:
    topo = core.topo
    return [
        (topo.node_names[s.node], tuple(topo.address[x] for x in s.leaves), s.pod_uid)
        for s in g.slots
        if not s.released_early
    ]


# TOPOGANG_SM_EXAMPLES raises the example count for a thorough local run
EXAMPLES = int(os.environ.get("TOPOGANG_SM_EXAMPLES", "100"))
CoreMachine.TestCase.settings = settings(
    max_examples=EXAMPLES, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestCore = CoreMachine.TestCase
