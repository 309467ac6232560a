"""Random call sequences against the core, checking every guarantee after every step.

Rules cover the whole life of gangs: submit (every priority), member schedule, member delete
(finished or not), gang delete, reservation expiry, preemption (with and without the victims going),
node and GPU health flips, and reconfiguration between two quota layouts on the same hardware.
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
)
from topology.invariants import snapshot, violations
from topology.reconfigure import reconfigure
from topology.reservations import Gang, GangPhase

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
        return GangRequest(
            f"g{self.counter}",
            vc,
            tuple(Member(p, g) for p, g in ms),
            priority=prio,
            pinned_cell_id="pin" if pinned and vc == "a" and prio >= 0 else None,
            gang_release=release,
            ttl_seconds=ttl,
            lazy_preemption=lazy,
            promote_when_quota=promote,
        )

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

    @rule(
        vc=st.sampled_from(["a", "b", "c"]),
        prio=st.sampled_from([0, 10, 100, 1000]),
        ms=members,
        kill=st.booleans(),
    )
    def preempt(self, vc: str, prio: int, ms: list[tuple[int, int]], kill: bool) -> None:
        req = self._request(vc, prio, ms, False, False, 50.0, False)
        before = snapshot(self.core)
        got = self.core.preempt(req, self.now)
        if isinstance(got, Wait):
            assert snapshot(self.core) == before, "a failed preemption must change nothing"
        elif isinstance(got, Preemption):
            for v in got.victims:
                g = self.core.gang(v.gang)
                assert g is not None
                assert g.priority < 0 or (g.request.vc == vc and g.priority < prio), (
                    "only lower-priority gangs of the same VC, or opportunistic ones, may be victims"
                )
            if kill:
                for v in got.victims:
                    self.core.release_pod(v.pod_uid, self.now)

    @precondition(lambda self: any(g.victims for g in self.core.gangs()))
    @rule(data=st.data())
    def kill_victims(self, data: st.DataObject) -> None:
        g = data.draw(st.sampled_from([g for g in self.core.gangs() if g.victims]))
        for vid in sorted(g.victims):
            victim = self.core.reservations.by_id.get(vid)
            for s in list(victim.slots) if victim is not None else []:
                if s.pod_uid is not None:
                    self.core.release_pod(s.pod_uid, self.now)

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
            if not g.pending and any(s.pod_uid is None and not s.finished for s in g.slots)
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
        self.core.release_pod(uid, self.now, finished=finished)
        assert uid not in self.core.reservations.pod_gang

    @precondition(lambda self: bool(self.core.gangs()))
    @rule(data=st.data())
    def delete_gang(self, data: st.DataObject) -> None:
        g = data.draw(st.sampled_from([g.name for g in self.core.gangs()]))
        self.core.delete_gang(g)
        assert self.core.gang(g) is None

    @rule(dt=st.sampled_from([1.0, 10.0, 60.0]))
    def advance_and_expire(self, dt: float) -> None:
        self.now += dt
        for r in self.core.expire(self.now):
            assert self.core.gang(r.gang) is None
        for g in self.core.gangs():
            assert g.deadline is None or g.deadline > self.now or g.phase.value == "Bound"

    @rule(node=st.sampled_from(NODES), healthy=st.booleans(), bad=st.sets(st.integers(0, 7), max_size=2))
    def flip_health(self, node: str, healthy: bool, bad: set[int]) -> None:
        self.core.set_node_health(node, healthy, bad_gpus=frozenset(bad))

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
        (`restore`). Each gang must come back on exactly the GPUs it had, in the same phase."""
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
            if not g.live_slots() or g.phase is GangPhase.PREEMPTING:
                got = new.restore(g.request, _records(old, g), self.now, g.deadline)
                assert isinstance(got, GangPlacement), f"{g.name} not restored: {got}"
        assert violations(new) == []
        for g in gangs:
            h = new.gang(g.name)
            assert h is not None, g.name
            assert _where(new, h) == _where(old, g), g.name
            # a gang downgraded by a lazy preemption comes back downgraded (not on its VC's quota)
            assert h.priority == g.priority and (h.owner == -1) == (g.owner == -1), g.name
            if not g.live_slots():
                assert h.phase is g.phase and h.deadline == g.deadline
        self.core = new

    @invariant()
    def guarantees_hold(self) -> None:
        assert violations(self.core) == []

    def teardown(self) -> None:
        for node in NODES:
            self.core.set_node_health(node, True)
        for g in self.core.gangs():
            self.core.delete_gang(g.name)
        assert violations(self.core) == []
        assert snapshot(self.core) == snapshot(Core(self.spec)), "deleting everything must restore the start"


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
