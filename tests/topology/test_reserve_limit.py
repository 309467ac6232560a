"""A tenant's reservations not yet filled are bounded (`FilterAsk.limit`, the edge's
`maxReservedGpus`): a gang not yet placed whose GPUs, added to those its namespace's gangs hold in
slots no pod has claimed, would pass the limit waits [TenantLimit], placing and preempting nothing;
other namespaces' gangs and members of placed gangs are answered as before."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.topology.fixtures import gang, rack_cluster, run
from tests.topology.test_queued import picture
from topology.asks import FilterAsk, MemberAsk, ReserveLimit, Slots, Waits
from topology.core import Core
from topology.decisions import Preemption, UserError, Wait, WaitCode
from topology.invariants import violations

LIMIT = ReserveLimit("ns", 16, "topogang.tenants.ns.maxReservedGpus")


def first_filter(core: Core, name: str, pods: int, uid: str, limit: ReserveLimit | None = LIMIT) -> Any:
    """The first member's filter of gang `name` (VC a, `pods` x 8 GPUs) under `limit`."""
    return core.filter(FilterAsk(MemberAsk(gang(name, "a", (pods, 8)), uid, 8), limit=limit), 0.0)


def bind_first_open(core: Core, name: str, pods: int, uid: str) -> None:
    """A member of placed gang `name` filtered and bound to its first open slot."""
    ask = MemberAsk(gang(name, "a", (pods, 8)), uid, 8)
    got = core.filter(FilterAsk(ask, limit=LIMIT), 0.0).outcome
    assert isinstance(got, Slots) and got.slots
    assert core.bind(ask, got.slots[0].node, 0.0) is not None


def test_a_gang_past_its_namespaces_limit_waits_and_nothing_changes() -> None:
    core = Core(rack_cluster())
    assert isinstance(first_filter(core, "ns/a", 2, "a0").outcome, Slots)  # holds 16 unclaimed
    before = picture(core)
    got = first_filter(core, "ns/b", 1, "b0")
    assert isinstance(got.outcome, Waits) and got.outcome.gang is None
    reason = got.outcome.wait.reason
    assert reason.code is WaitCode.TENANT_LIMIT and reason.needed == 8 and reason.available == 0
    assert "hold 16 GPUs" in reason.message and "topogang.tenants.ns.maxReservedGpus (16)" in reason.message
    assert core.gang("ns/b") is None and picture(core) == before
    # another namespace's gang is not held back, and neither is a member of the placed gang
    assert isinstance(first_filter(core, "other/c", 1, "c0", None).outcome, Slots)
    bind_first_open(core, "ns/a", 2, "a0")
    assert core.reservations.unclaimed_leaves("ns") == 8
    assert isinstance(first_filter(core, "ns/b", 1, "b0").outcome, Slots)  # 8 + 8 fits the 16
    assert violations(core) == []


def test_binding_the_namespaces_pods_lets_the_next_gang_go() -> None:
    core = Core(rack_cluster())
    first_filter(core, "ns/a", 2, "a0")
    assert isinstance(first_filter(core, "ns/b", 2, "b0").outcome, Waits)
    bind_first_open(core, "ns/a", 2, "a0")
    assert isinstance(first_filter(core, "ns/b", 2, "b0").outcome, Waits)  # 8 + 16 > 16
    bind_first_open(core, "ns/a", 2, "a1")
    assert core.reservations.unclaimed_leaves("ns") == 0
    assert isinstance(first_filter(core, "ns/b", 2, "b0").outcome, Slots)


def test_a_gang_larger_than_the_limit_is_refused_naming_the_setting() -> None:
    """It could never be placed under the bound: an error at once (the ledger says it never fits,
    nobody requeues it), not a wait; from the preempt verb too, and nothing changes."""
    core = Core(rack_cluster())
    before = picture(core)
    got = first_filter(core, "ns/big", 3, "x0")
    assert got.outcome is None and got.error is not None and got.error.field == "affinityGroup.members"
    assert "asks for 24 GPUs" in str(got.error) and "topogang.tenants.ns.maxReservedGpus: 16" in str(
        got.error
    )
    with pytest.raises(UserError, match="asks for 24 GPUs"):
        core.preempt_member(MemberAsk(gang("ns/big", "a", (3, 8)), "x0", 8), 0.0, None, LIMIT)
    assert core.gang("ns/big") is None and picture(core) == before


def test_a_gang_held_back_by_its_limit_preempts_nobody() -> None:
    def guest_on_the_rack() -> Core:
        """A guest on three of the rack's four nodes; ns holds VC a's last free node, not yet bound."""
        core = Core(rack_cluster(racks=1, vcs={"a": [("NODE", 2)], "b": [("NODE", 2)]}))
        run(core, gang("other/guest", "b", (3, 8), priority=-1), "o")
        assert isinstance(first_filter(core, "ns/first", 1, "f0", None).outcome, Slots)
        return core

    req = gang("ns/owner", "a", (1, 8))
    unlimited = guest_on_the_rack().preempt_member(MemberAsk(req, "u1", 8), 0.0)
    assert isinstance(unlimited.got, Preemption) and unlimited.got.victims
    core = guest_on_the_rack()
    before = picture(core)
    small = ReserveLimit("ns", 8, "topogang.defaultMaxReservedGpus")
    got = core.preempt_member(MemberAsk(req, "u1", 8), 0.0, None, small)
    assert isinstance(got.got, Wait) and got.got.reason.code is WaitCode.TENANT_LIMIT
    assert picture(core) == before and violations(core) == []
    filtered = core.filter(FilterAsk(MemberAsk(req, "u1", 8), preempt=True, limit=small), 0.0)
    assert isinstance(filtered.outcome, Waits) and filtered.outcome.preempted is None
    assert picture(core) == before


ops = st.lists(
    st.one_of(
        st.tuples(st.just("new"), st.sampled_from(["ns", "other"]), st.integers(1, 3)),
        st.tuples(st.just("bind"), st.integers(0, 20)),
        st.tuples(st.just("gone"), st.integers(0, 20)),
    ),
    max_size=25,
)


@settings(max_examples=60, deadline=None)
@given(ops)
def test_a_new_placement_never_takes_a_namespace_past_its_limit(steps: list[tuple[Any, ...]]) -> None:
    """Whatever the order of new gangs, binds and pods gone: a gang of a limited namespace is
    placed only when its GPUs and those the namespace held unclaimed fit the limit, and a gang
    held back leaves every cell as it was."""
    core = Core(rack_cluster())
    sizes: dict[str, int] = {}
    bound: list[tuple[str, str]] = []  # (gang, pod uid)
    for n, step in enumerate(steps):
        if step[0] == "new":
            name, pods = f"{step[1]}/g{n}", step[2]
            limit = LIMIT if step[1] == "ns" else None
            held, before = core.reservations.unclaimed_leaves("ns"), picture(core)
            got = first_filter(core, name, pods, f"{name}-0", limit)
            if isinstance(got.outcome, Slots):
                sizes[name] = pods
                assert limit is None or held + 8 * pods <= limit.gpus
            else:  # a wait, or refused outright (larger than the bound)
                assert core.gang(name) is None and picture(core) == before
        elif step[0] == "bind" and sizes:
            name = sorted(sizes)[step[1] % len(sizes)]
            g = core.gang(name)
            if g is not None and any(s.pod_uid is None for s in g.slots):
                uid = f"{name}-{len(bound)}"
                ask = MemberAsk(gang(name, "a", (sizes[name], 8)), uid, 8)
                out = core.filter(FilterAsk(ask), 0.0).outcome
                if isinstance(out, Slots) and out.slots and core.bind(ask, out.slots[0].node, 0.0):
                    bound.append((name, uid))
        elif step[0] == "gone" and bound:
            core.release_pod(bound.pop(step[1] % len(bound))[1], 0.0)
        assert violations(core) == []
