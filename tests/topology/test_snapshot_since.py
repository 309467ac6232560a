"""A reader's copies taken one after another (`topology.snapshot.clone_since`), each sharing with
the copy before it the gangs not changed since: after every step of the core's state machine, and of
the calls only the edge makes on a live core (a pod found running on an open slot, a persisted
reservation read back for a gang already known, a promotion withdrawn, a gang evicted), the new copy
holds exactly what the core holds and the copy before still what it held then. A change to a gang
the core does not note (`Reservations.touch`) fails here: the new copy keeps the gang as it was."""

from __future__ import annotations

import copy
import dataclasses

from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule

from tests.topology.fixtures import gang, rack_cluster
from tests.topology.test_state_machine import CoreMachine
from topology.core import Core
from topology.decisions import AdoptedPod, GangPlacement
from topology.reservations import Gang, Slot
from topology.snapshot import StepwiseCopy, clone, clone_since

_COPIED = [f.name for f in dataclasses.fields(Gang) if f.name != "placement"]  # a cache (`placement_of`)


def registry(core: Core) -> object:
    """Every gang of the registry (its fields, its slots), the indexes in the registry's order, the cells;
    copied deep, so that no later change to the core's objects changes it."""
    res = core.reservations
    gangs = [(i, [getattr(g, f) for f in _COPIED]) for i, g in res.by_id.items()]
    names = [(name, g.id, g is res.by_id.get(g.id)) for name, g in res.by_name.items()]
    cells = _cells(core)
    return copy.deepcopy((gangs, names, res.pod_gang, res.tallied, res.held, res.unsettled_ids, cells))


def _cells(core: Core) -> dict[str, list[object]]:
    """The cell state's lists (a copy shares those still equal with the copy before it)."""
    return {n: v for n, v in vars(core.state).items() if isinstance(v, list) and n not in _UNDO}


# empty between calls (`snapshot._empty`), or fixed when the core is built and shared by every copy
_UNDO = ("_log", "_marks", "recent_binds", "_below_node", "owners")


class CopyingMachine(CoreMachine):
    def __init__(self) -> None:
        super().__init__()
        self.copied: tuple[Core, object] | None = None  # a reader's last copy, and what it held then

    @invariant()
    def a_copy_since_the_last_is_the_core(self) -> None:
        before = self.copied[0] if self.copied is not None else None
        if self.copied is not None:
            assert registry(self.copied[0]) == self.copied[1], "a live change showed in a reader's copy"
        taken = clone_since(self.core, before)
        assert registry(taken) == registry(self.core), "a reader's copy missed a change to a gang"
        live = {id(g) for g in self.core.reservations.by_id.values()}
        assert not any(id(g) in live for g in taken.reservations.by_id.values()), "a live gang shared"
        cells = _cells(self.core)
        assert not any(v is cells[n] for n, v in _cells(taken).items()), "a live cell list shared"
        self.copied = (taken, registry(taken))

    @rule(data=st.data())
    def adopt_running(self, data: st.DataObject) -> None:
        """A pod found running on an open slot of a gang the core knows (bound while the edge was
        away): `adopt` claims the slot for it."""
        gangs = [g for g in self.core.gangs() if not g.pending and not g.evicting and _open(g)]
        if not gangs:
            return
        g = data.draw(st.sampled_from(gangs))
        s = data.draw(st.sampled_from(_open(g)))
        topo = self.core.topo
        gpus = tuple(topo.gpu_index[x] for x in s.leaves)
        cells = self.core.quota_cell_types(g, s.leaves)
        pod = AdoptedPod(self._uid(), topo.node_names[s.node], gpus, None, s.key, cells)
        self.core.adopt(g.request, [pod], self.now)
        assert s.pod_uid == pod.pod_uid

    @rule(data=st.data())
    def restore_known(self, data: st.DataObject) -> None:
        """A persisted reservation read back for a gang already known, its deadline earlier."""
        gangs = [g for g in self.core.gangs() if g.deadline is not None and g.deadline - 0.5 > self.now]
        if not gangs:
            return
        g = data.draw(st.sampled_from(gangs))
        assert g.deadline is not None
        deadline = g.deadline - 0.5
        assert isinstance(self.core.restore(g.request, [], self.now, deadline), GangPlacement)
        assert g.deadline == deadline

    @rule(data=st.data())
    def evict(self, data: st.DataObject) -> None:
        """A gang let go whose pods are evicted (a superseded attempt): its running pods keep their
        GPUs in a gang of their own until they are gone (`gangs.keep_until_gone`)."""
        gangs = [g.name for g in self.core.gangs() if g.live_slots() and not g.evicting]
        if gangs:
            self.core.evict_gang(data.draw(st.sampled_from(gangs)), self.now)
        for g in self.core.gangs():  # the gang its pods now run in may be filtered again, as any
            self.requests.setdefault(g.name, g.request)

    @rule(data=st.data())
    def withdraw_promotion(self, data: st.DataObject) -> None:
        gangs = [g.name for g in self.core.gangs() if g.request.promote_when_quota]
        if gangs:
            assert self.core.withdraw_promotion(data.draw(st.sampled_from(gangs)))


def _open(g: Gang) -> list[Slot]:
    return [s for s in g.slots if s.pod_uid is None and not s.finished and not s.released_early]


CopyingMachine.TestCase.settings = CoreMachine.TestCase.settings
TestCopies = CopyingMachine.TestCase


def test_a_copy_of_another_core_or_series_is_not_shared_from() -> None:
    """Only the copy `clone_since` returned last for this very core is shared from: a copy of
    another core, an older copy, or a plain `clone`, gets a full copy (no gang object in common)."""
    core, other = Core(rack_cluster()), Core(rack_cluster())
    for c in (core, other):
        assert isinstance(c.reserve(gang("g", "a", (2, 1)), 0.0), GangPlacement)
    first = clone_since(core, None)
    assert clone_since(core, first).gang("g") is first.gang("g")  # the last copy: shared from
    for stale in (clone_since(other, None), clone(core), first):
        if stale is first:
            clone_since(core, first)  # a newer copy: `first` is no longer the last
        taken = clone_since(core, stale)
        ids = {id(g) for g in stale.reservations.by_id.values()}
        assert not any(id(g) in ids for g in taken.reservations.by_id.values())


def test_a_pod_gone_from_a_gang_still_running_is_in_the_next_copy() -> None:
    """A member deleted while the others run only opens its slot (`gangs.release_pod`): the one
    change no other call in the same verb notes for it (a sequence the machine above may miss)."""
    core = Core(rack_cluster())
    assert isinstance(core.reserve(gang("g", "a", (2, 1)), 0.0), GangPlacement)
    g = core.gang("g")
    assert g is not None
    for s in g.slots:
        core.claim("g", f"p{s.index}", s.leaf_number, 0.0, node=None)
    first = clone_since(core, None)
    core.release_pod("p0", 1.0)
    taken = clone_since(core, first)
    assert registry(taken) == registry(core)
    assert [s.pod_uid for s in first.gang("g").slots] == ["p0", "p1"]  # type: ignore[union-attr]


class SteppingMachine(CopyingMachine):
    """The first copy of a series taken in steps (`StepwiseCopy`, one gang a step here), the
    core's state machine changing the core between two steps: the copy it ends with holds exactly
    what the core holds then, shares no live gang or cell list, and is the series' next `previous`.
    A change between two steps that the core does not note leaves the step's copy of a gang stale,
    and fails here. Every other copy starts a new series, so most of them take several steps."""

    def __init__(self) -> None:
        super().__init__()
        self.stepping: StepwiseCopy | None = None
        self.steps = 0

    @invariant()
    def a_copy_since_the_last_is_the_core(self) -> None:  # replaces the one-step copies' check
        if self.stepping is not None and self.stepping.core is not self.core:
            self.stepping = None  # a reload replaced the core between two steps: a copy of the new one
        if self.stepping is None:
            series = self.copied is not None and self.steps % 2 == 0
            previous = self.copied[0] if self.copied is not None and series else None
            self.stepping = StepwiseCopy(self.core, previous, gangs_per_step=1)
        self.steps += 1
        taken = self.stepping.step()
        if taken is None:
            return
        self.stepping = None
        if self.copied is not None:
            assert registry(self.copied[0]) == self.copied[1], "a live change showed in a reader's copy"
        assert registry(taken) == registry(self.core), "a copy taken in steps missed a change to a gang"
        live = {id(g) for g in self.core.reservations.by_id.values()}
        assert not any(id(g) in live for g in taken.reservations.by_id.values()), "a live gang shared"
        cells = _cells(self.core)
        assert not any(v is cells[n] for n, v in _cells(taken).items()), "a live cell list shared"
        self.copied = (taken, registry(taken))


SteppingMachine.TestCase.settings = CoreMachine.TestCase.settings
TestStepwiseCopies = SteppingMachine.TestCase


def test_a_stepwise_copy_takes_a_step_per_gangs_and_shares_with_the_next() -> None:
    """Five gangs two a step: three steps of gangs and the last (the cells), then a copy in the
    series in one step, sharing every gang the stepwise copy holds; a gang changed between two
    steps is copied afresh by the last one."""
    core = Core(rack_cluster())
    for i in range(5):
        assert isinstance(core.reserve(gang(f"g{i}", "a", (1, 1)), 0.0), GangPlacement)
    copier = StepwiseCopy(core, None, gangs_per_step=2)
    assert copier.step() is None
    g0 = core.gang("g0")
    assert g0 is not None
    core.claim("g0", "p0", g0.slots[0].leaf_number, 0.0, node=None)  # g0 copied already: changed
    results = [copier.step() for _ in range(3)]
    assert results[:2] == [None, None] and results[2] is not None
    taken = results[2]
    assert registry(taken) == registry(core)
    assert taken.gang("g0").slots[0].pod_uid == "p0"  # type: ignore[union-attr]
    following = StepwiseCopy(core, taken, gangs_per_step=2).step()
    assert following is not None
    assert all(following.gang(f"g{i}") is taken.gang(f"g{i}") for i in range(5))
