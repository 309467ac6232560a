"""A reader's copy of the core (`topology.snapshot.clone`): the same answers, and nothing shared that
the verbs change, whatever the core did before and does after."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.topology.fixtures import gang, rack_cluster
from topology import inspect, snapshot
from topology.bestfit import BestFitIndex
from topology.core import Core
from topology.reservations import Gang
from topology.state import CellState


def view(core: Core) -> object:
    """Everything a reader shows: cells, VCs, and every gang with its slots."""
    gangs = [
        (g.name, g.phase.value, [(s.index, s.node, s.leaves, s.pod_uid, s.finished) for s in g.slots])
        for g in core.gangs()
    ]
    return inspect.physical_cluster(core), inspect.virtual_clusters(core), gangs


def test_every_field_is_named() -> None:
    """A field added to the core's classes must be given a way to be copied (else it would be
    shared between the live core and a reader's copy)."""
    core = Core(rack_cluster())
    assert set(vars(core.state)) == set(snapshot.STATE_FIELDS)
    assert {f.name for f in dataclasses.fields(Gang)} == set(snapshot.GANG_FIELDS)
    assert set(vars(core)) == set(snapshot.CORE_FIELDS) | {"state", "placer", "reservations"}
    assert set(vars(core.reservations)) == set(snapshot.RESERVATION_FIELDS)
    assert isinstance(core.state, CellState)


def test_a_copy_mid_transaction_is_refused() -> None:
    core = Core(rack_cluster())
    core.state.begin()
    core.state._log.append(lambda: None)
    try:
        snapshot.clone(core)
    except RuntimeError as err:
        assert "open transaction" in str(err)
    else:
        raise AssertionError("a copy of a core mid-transaction was taken")


ops = st.lists(
    st.tuples(st.sampled_from(["place", "claim", "release", "expire"]), st.integers(0, 7)), max_size=25
)


@settings(max_examples=40, deadline=None)
@given(before=ops, after=ops)
def test_a_copy_answers_the_same_and_shares_nothing(
    before: list[tuple[str, int]], after: list[tuple[str, int]]
) -> None:
    core = Core(rack_cluster())
    drive(core, before, "b")
    seen = view(core)
    copy = snapshot.clone(core)
    assert view(copy) == seen
    drive(core, after, "a")  # the live core moves on: the copy stays where it was
    assert view(copy) == seen
    # and the copy can be driven on its own (a what-if) without touching the live core
    live = view(core)
    drive(copy, after, "c")
    assert view(core) == live


def drive(core: Core, steps: list[tuple[str, int]], tag: str) -> None:
    for i, (op, k) in enumerate(steps):
        name = f"g{k}"
        if op == "place":
            core.reserve(gang(name, "a" if k % 2 else "b", (2, k % 4 + 1), priority=k % 3 - 1), float(i))
        elif op == "claim":
            g = core.gang(name)
            if g is not None:
                for s in g.slots:
                    if s.pod_uid is None:
                        core.claim(name, f"{tag}-{k}-{s.index}-{i}", s.leaf_number, float(i), node=None)
                        break
        elif op == "release":
            core.delete_gang(name)
        else:
            core.expire(float(i) + 1000.0)


def test_bestfit_rebuild_keeps_answers() -> None:
    """Heaps rebuilt to their valid entries answer as the grown ones did."""
    idx = BestFitIndex()
    for i in range(500):
        idx.update(0, i % 17, (i * 7) % 5)
    grown = [list(idx.first(0, range(1, 5)))]
    assert sum(len(h) for h in idx._heaps[0].values()) <= 4 * 17 + 64 + 17
    assert [list(idx.compacted().first(0, range(1, 5)))] == grown
