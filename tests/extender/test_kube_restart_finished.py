"""A restart brings a Succeeded member's slot back finished, as it was: its gang, whole before,
stays whole (no TTL that would evict its running pods), and its namespace's bound does not count
the slot as reserved unbound."""

from extender.kube.recovery import recover
from extender.standalone import MemoryBinder
from tests.extender.helpers import bind_args, example, run
from tests.extender.test_entitlement import config, make
from tests.extender.test_kube_edge import bound_pods
from tests.extender.test_vc_order import filtered, gang
from topology.core import Core
from topology.invariants import violations


def test_a_restart_keeps_a_succeeded_members_slot_finished() -> None:
    async def go() -> None:
        s = make(config(""))[0]
        s.binder = binder = MemoryBinder()
        a = gang("a", 3, ns="vision", vc="vision")
        for p in a:
            passed, why = await filtered(s, p)
            assert passed, why
            assert await s.bind(bind_args(p, passed[0])) == {"Error": ""}
        api = bound_pods(s, binder, a)
        api[0]["status"] = {"phase": "Succeeded"}
        fresh = Core(example().spec)
        report = recover(fresh, api, now=0.0, namespace_vcs={"vision": "vision"})
        g = fresh.gang("vision/a")
        assert g is not None and report.open_slots == 0
        assert fresh.reservations.unclaimed_leaves("vision") == 0
        assert g.deadline is None and fresh.open_slots("vision/a", 8) == []
        assert fresh.expire(10_000.0) == []
        assert violations(fresh) == []

    run(go())
