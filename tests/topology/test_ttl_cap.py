"""The reservation TTL is a cap on how long a gang holds cells while not whole.

Each case is one way a gang could otherwise stay placed, not whole, past its TTL: members deleted
and re-created, every bound member churned, members filtered again after an expiry, a restart.
"""

from __future__ import annotations

from tests.topology.fixtures import gang, rack_cluster
from topology.core import Core
from topology.decisions import AdoptedPod, Bind, GangPlacement, Wait, WaitCode
from topology.invariants import violations

TTL = 100.0


def _core() -> Core:
    return Core(rack_cluster())


def _bind(core: Core, name: str, uid: str, now: float) -> None:
    g = core.gang(name)
    assert g is not None
    d = core.schedule(g.request, uid, 8, now)
    assert isinstance(d, Bind), d


def test_churning_a_member_does_not_extend_a_gang_that_is_not_whole() -> None:
    core = _core()
    req = gang("g", "a", (3, 8), ttl_seconds=TTL)
    assert isinstance(core.reserve(req, 0.0), GangPlacement)
    _bind(core, "g", "p0", 1.0)
    _bind(core, "g", "p1", 2.0)
    for k, t in enumerate((30.0, 60.0, 90.0)):  # the second member, deleted and re-created
        core.release_pod(f"p1{'x' * k}", t)
        _bind(core, "g", f"p1{'x' * (k + 1)}", t)
    g = core.gang("g")
    assert g is not None and g.deadline == TTL
    assert core.expire(TTL - 0.5) == []
    released = core.expire(TTL)
    assert [r.reason for r in released] == ["expired"] and core.gang("g") is None
    assert sorted(released[0].evict_pod_uids) == ["p0", "p1xxx"]
    assert violations(core) == []


def test_filtering_again_after_an_expiry_waits_a_ttl() -> None:
    core = _core()
    req = gang("g", "a", (2, 8), ttl_seconds=TTL)
    assert isinstance(core.reserve(req, 0.0), GangPlacement)
    assert isinstance(core.reserve(req, 50.0), GangPlacement)  # a filter moves nothing
    g = core.gang("g")
    assert g is not None and g.deadline == TTL
    assert [r.reason for r in core.expire(TTL)] == ["expired"]
    for t in (TTL, TTL + 1, 2 * TTL - 1):
        w = core.reserve(req, t)
        assert isinstance(w, Wait) and w.reason.code is WaitCode.EXPIRED, w
        assert core.gang("g") is None
    p = core.preempt(req, TTL + 1)  # nor does the preempting phase place it
    assert isinstance(p, Wait) and p.reason.code is WaitCode.EXPIRED
    assert isinstance(core.reserve(req, 2 * TTL), GangPlacement)  # a TTL later: a new window
    g = core.gang("g")
    assert g is not None and g.deadline == 3 * TTL


def test_deleting_every_bound_member_carries_the_window_into_the_next_placement() -> None:
    core = _core()
    req = gang("g", "a", (2, 8), ttl_seconds=TTL)
    assert isinstance(core.reserve(req, 0.0), GangPlacement)
    _bind(core, "g", "p0", 10.0)
    released = core.release_pod("p0", 40.0)  # its only bound member: the gang goes
    assert released is not None and core.gang("g") is None
    assert isinstance(core.reserve(req, 41.0), GangPlacement)  # re-created at once
    g = core.gang("g")
    assert g is not None and g.deadline == TTL  # the window it had, not 41 + TTL
    _bind(core, "g", "p0b", 42.0)
    assert core.release_pod("p0b", TTL - 1) is not None
    w = core.reserve(req, TTL + 1)  # placed again only after its window ran out: waits
    assert isinstance(w, Wait) and w.reason.code is WaitCode.EXPIRED
    assert isinstance(core.reserve(req, 2 * TTL), GangPlacement)


def test_a_gang_that_was_whole_gets_a_new_window_when_it_loses_a_member() -> None:
    core = _core()
    req = gang("g", "a", (2, 8), ttl_seconds=TTL)
    assert isinstance(core.reserve(req, 0.0), GangPlacement)
    _bind(core, "g", "p0", 1.0)
    _bind(core, "g", "p1", 2.0)
    g = core.gang("g")
    assert g is not None and g.deadline is None
    core.release_pod("p1", 500.0)
    assert g.deadline == 500.0 + TTL
    core.release_pod("p0", 510.0)  # a finished member would not count; a deleted one does not move it
    assert core.gang("g") is None
    assert isinstance(core.reserve(req, 520.0), GangPlacement)
    h = core.gang("g")
    assert h is not None and h.deadline == 500.0 + TTL


def test_a_restart_keeps_the_deadline_of_a_gang_adopted_from_its_members() -> None:
    core = _core()
    req = gang("g", "a", (2, 8), ttl_seconds=TTL)
    got = core.reserve(req, 0.0)
    assert isinstance(got, GangPlacement)
    _bind(core, "g", "p0", 1.0)
    g = core.gang("g")
    assert g is not None
    records = [
        AdoptedPod(
            s.pod_uid or "", *core.slot_place(s), s.pod_name, s.key, core.quota_cell_types(g, s.leaves)
        )
        for s in g.slots
    ]
    fresh = _core()
    fresh.adopt(req, records, 60.0)  # from the bound member's annotations: a fresh TTL
    h = fresh.gang("g")
    assert h is not None and h.deadline == 60.0 + TTL
    assert isinstance(fresh.restore(req, records, 60.0, g.deadline), GangPlacement)
    assert h.deadline == TTL  # the persisted deadline, the earlier one
    assert [r.reason for r in fresh.expire(TTL)] == ["expired"]
