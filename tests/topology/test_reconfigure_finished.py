"""A reload keeps a finished member's slot finished: the namespace's bound does not count it, no
other pod may take it, and the gang, whole before the reload, gets no TTL (its running pod is not
evicted one TTL later)."""

from __future__ import annotations

from tests.topology.fixtures import gang, rack_cluster, run
from topology.core import Core
from topology.invariants import violations
from topology.reconfigure import reconfigure


def test_a_reload_keeps_a_finished_members_slot_finished() -> None:
    spec = rack_cluster()
    core = Core(spec)
    run(core, gang("ns/a", "a", (2, 8)), "a")
    core.release_pod("a-8-0", 10.0, finished=True)  # Succeeded; a-8-1 runs on
    before = core.gang("ns/a")
    assert before is not None and before.deadline is None
    assert core.reservations.unclaimed_leaves("ns") == 0
    new, _ = reconfigure(core, spec, 20.0)
    g = new.gang("ns/a")
    assert g is not None and [s.pod_uid for s in g.slots if s.pod_uid] == ["a-8-1"]
    assert new.reservations.unclaimed_leaves("ns") == 0
    assert g.deadline is None and new.open_slots("ns/a", 8) == []
    assert new.expire(20.0 + 10 * 300) == []
    assert violations(new) == []
