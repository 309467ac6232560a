"""Random call sequences against the core, checking every guarantee after every step."""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from tests.topology.fixtures import rack_cluster
from topology.core import Core
from topology.decisions import Bind, GangRequest, Member, Wait
from topology.invariants import snapshot, violations

SPEC = rack_cluster(
    racks=2,
    vcs={"a": [("NODE", 3)], "b": [("NODE", 1), ("NODE.HALF", 3)], "c": [("NODE.HALF.SWITCH", 3)]},
    pinned={"a": ["pin"]},
    pin_nodes={"r1-n3": "pin"},
)

sizes = st.sampled_from([1, 1, 1, 2, 4, 8])
members = st.lists(st.tuples(st.integers(1, 3), sizes), min_size=1, max_size=2, unique_by=lambda m: m[1])


class CoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.core = Core(SPEC)
        self.initial = snapshot(self.core)
        self.now = 0.0
        self.counter = 0
        self.requests: dict[str, GangRequest] = {}

    def _uid(self) -> str:
        self.counter += 1
        return f"pod-{self.counter}"

    @rule(
        vc=st.sampled_from(["a", "b", "c"]),
        prio=st.sampled_from([-1, 0, 10]),
        ms=members,
        pinned=st.booleans(),
        release=st.booleans(),
        ttl=st.sampled_from([5.0, 50.0]),
    )
    def submit(
        self, vc: str, prio: int, ms: list[tuple[int, int]], pinned: bool, release: bool, ttl: float
    ) -> None:
        self.counter += 1
        name = f"g{self.counter}"
        req = GangRequest(
            name,
            vc,
            tuple(Member(p, g) for p, g in ms),
            priority=prio,
            pinned_cell_id="pin" if pinned and vc == "a" and prio >= 0 else None,
            gang_release=release,
            ttl_seconds=ttl,
        )
        before = snapshot(self.core)
        got = self.core.reserve(req, self.now)
        if isinstance(got, Wait):
            assert snapshot(self.core) == before, "a gang that waits must hold nothing"
            assert self.core.gang(name) is None
        else:
            assert len(got.pods) == req.pod_count
            self.requests[name] = req

    @precondition(lambda self: bool(self.core.gangs()))
    @rule(data=st.data())
    def schedule_member(self, data: st.DataObject) -> None:
        gangs = [g for g in self.core.gangs() if any(s.pod_uid is None and not s.finished for s in g.slots)]
        if not gangs:
            return
        g = data.draw(st.sampled_from(gangs))
        open_slots = [s for s in g.slots if s.pod_uid is None and not s.finished]
        s = data.draw(st.sampled_from(open_slots))
        d = self.core.schedule(g.request, self._uid(), s.leaf_number, self.now)
        assert isinstance(d, Bind)

    @precondition(lambda self: bool(self.core.ledger.pod_gang))
    @rule(data=st.data(), finished=st.booleans())
    def delete_member(self, data: st.DataObject, finished: bool) -> None:
        uid = data.draw(st.sampled_from(sorted(self.core.ledger.pod_gang)))
        self.core.release_pod(uid, self.now, finished=finished)
        assert uid not in self.core.ledger.pod_gang

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

    @invariant()
    def guarantees_hold(self) -> None:
        assert violations(self.core) == []

    def teardown(self) -> None:
        for g in self.core.gangs():
            self.core.delete_gang(g.name)
        assert violations(self.core) == []
        assert snapshot(self.core) == self.initial, "deleting everything must restore the initial state"


CoreMachine.TestCase.settings = settings(
    max_examples=100, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestCore = CoreMachine.TestCase
