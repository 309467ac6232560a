"""A VC's gangs start in the order they were created (`topogang.vcQueueing`, `extender.gangs.vc_order`):
who is held back (a gang of the same VC, not yet placed, at the waiting gang's priority or below),
what its pod is told (the gang ahead by name only within one namespace), when it goes (once the
gang ahead is placed, gone, stale, or waits for what it can never get), and which gang is older
(its newest pod's `creationTimestamp`, else when it first waited)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from extender.gangs.vc_order import BEST_EFFORT_FIFO
from extender.http.verbs import Scheduler
from tests.extender.helpers import Clock, args, nodes, pod, run, scheduler, spec
from tests.extender.test_entitlement import config, make
from topology import inspect


def gang(
    name: str, pods: int, *, ns: str = "nlp", vc: str = "nlp", gpus: int = 8, **extra: Any
) -> list[dict[str, Any]]:
    """`pods` pods of `gpus` GPUs in `vc`, gang `name` of namespace `ns`."""
    text = spec(vc, gpus, pods, name, **extra)
    return [pod(f"{ns}-{name}-{i}", f"{name}-{i}", ns, text) for i in range(pods)]


async def filtered(s: Scheduler, p: dict[str, Any]) -> tuple[list[str], str]:
    """The nodes that passed for `p`, and every reason given for the others, joined."""
    r = await s.filter(args(p))
    reasons = " ".join(
        [*r.get("FailedNodes", {}).values(), *r.get("FailedAndUnresolvableNodes", {}).values()]
    )
    return list(r.get("NodeNames") or []), reasons + (r.get("Error") or "")


async def bound(s: Scheduler, members: list[dict[str, Any]]) -> None:
    """Every member filtered and bound where its filter sent it."""
    from tests.extender.helpers import bind_args

    for p in members:
        passed, why = await filtered(s, p)
        assert passed, why
        assert await s.bind(bind_args(p, passed[0])) == {"Error": ""}


async def nlp_with_a_big_gang_waiting(s: Scheduler) -> list[dict[str, Any]]:
    """nlp (3 nodes of quota) runs gang `one` on a node; gang `big` (3 nodes) waits for its quota.
    The pods of `one`."""
    one = gang("one", 1)
    await bound(s, one)
    passed, why = await filtered(s, gang("big", 3)[0])
    assert not passed and "[InsufficientQuota]" in why, why
    return one


def test_a_later_gang_of_the_vc_waits_behind_the_older_gang_that_waits_for_room() -> None:
    async def go() -> None:
        s = scheduler()
        one = await nlp_with_a_big_gang_waiting(s)
        small = gang("small", 1)[0]
        passed, why = await filtered(s, small)  # it would fit: two of nlp's nodes are free
        assert not passed and "[Queued]" in why and "gang nlp/big" in why, why
        assert s.core.gang("nlp/small") is None, "nothing is placed for a queued gang"
        assert s.waiting["nlp/small"].reason.code.value == "Queued"
        # another VC's gang is not held back: a VC's quota is its own
        passed, why = await filtered(s, gang("r", 1, ns="research", vc="research", gpus=4)[0])
        assert passed, why
        # `one` finishes: big is placed, and small (turned away behind it) is due for a requeue
        await s.pod_gone(str(one[0]["metadata"]["uid"]), finished=True)
        passed, why = await filtered(s, gang("big", 3)[0])
        assert passed, why
        due = {p.uid for p in s.requeue.take(100)}
        assert str(small["metadata"]["uid"]) in due
        passed, why = await filtered(s, small)  # now it waits for nlp's quota, which big holds
        assert not passed and "[InsufficientQuota]" in why, why

    run(go())


def test_a_gang_of_higher_priority_is_not_held_back() -> None:
    async def go() -> None:
        s = scheduler()
        await nlp_with_a_big_gang_waiting(s)
        passed, why = await filtered(s, gang("urgent", 1, priority=100)[0])
        assert passed, why

    run(go())


def test_best_effort_fifo_lets_a_later_gang_go_on() -> None:
    async def go() -> None:
        s = scheduler()
        s.vc_queueing = BEST_EFFORT_FIFO
        await nlp_with_a_big_gang_waiting(s)
        passed, why = await filtered(s, gang("small", 1)[0])
        assert passed, why

    run(go())


def test_another_namespaces_gang_ahead_is_not_named() -> None:
    async def go() -> None:
        s = scheduler()  # the example cluster's entitlement is open: vision may ask for nlp's quota
        await nlp_with_a_big_gang_waiting(s)
        passed, why = await filtered(s, gang("mine", 1, ns="vision")[0])
        assert not passed and "[Queued]" in why, why
        assert "nlp/big" not in why and "another namespace (3 pods" in why, why

    run(go())


GUESTS_ONLY = "  defaultEntitlement: opportunistic\n"  # a namespace of no VC runs opportunistic gangs only


def test_a_guest_of_the_vc_holds_none_of_its_gangs_back() -> None:
    """Opportunistic gangs may name any VC. A namespace given no VC (`defaultEntitlement:
    opportunistic`) whose guest gang waits in vision must not keep vision's own opportunistic
    gangs queued: only a namespace that may take a VC's quota has a place in its queue, under the
    rules in force (a reload that gives it the VC gives it its place, for the wait it has)."""

    async def go() -> None:
        s, _ = make(config(GUESTS_ONLY))
        await bound(s, gang("run", 1, ns="vision", vc="vision"))  # 88 GPUs left: the guest waits
        passed, why = await filtered(s, gang("hog", 12, ns="outsider", vc="vision", priority=-1)[0])
        assert not passed and "[InsufficientCapacity]" in why, why
        assert s.waiting["outsider/hog"].holds
        mine = gang("mine", 1, ns="vision", vc="vision", priority=-1, promoteWhenQuota=True)[0]
        passed, why = await filtered(s, mine)
        assert passed, why
        s.entitlement.configure(
            config(GUESTS_ONLY + "  tenants:\n    outsider: {virtualClusters: [vision]}\n").extras
        )
        passed, why = await filtered(s, gang("later", 1, ns="vision", vc="vision", priority=-1)[0])
        assert not passed and "[Queued]" in why and "another namespace (12 pods" in why, why

    run(go())


def test_a_gang_ahead_not_seen_for_a_ttl_holds_nobody_back() -> None:
    async def go() -> None:
        clock = Clock()
        s = scheduler(clock=clock)
        await nlp_with_a_big_gang_waiting(s)
        clock.t += 301.0  # big's pods were not filtered again for a reservation TTL
        passed, why = await filtered(s, gang("small", 1)[0])
        assert passed, why

    run(go())


def test_a_gang_that_can_never_run_holds_nobody_back() -> None:
    async def go() -> None:
        s = scheduler()
        passed, why = await filtered(s, gang("huge", 4)[0])  # 32 GPUs, nlp's whole quota is 24
        assert not passed and "[Queued]" not in why, why
        assert not s.waiting["nlp/huge"].holds
        passed, why = await filtered(s, gang("small", 1)[0])
        assert passed, why

    run(go())


def test_gangs_queued_behind_one_do_not_queue_behind_each_other() -> None:
    """Two later gangs queue behind `big`; once it goes, both are due for a requeue and each starts
    as soon as it is filtered, in whichever order kube-scheduler sends them: a gang that only waits
    behind another holds nobody back, or they would start one requeue round trip at a time."""

    async def go() -> None:
        s = scheduler()
        await nlp_with_a_big_gang_waiting(s)
        first, second = gang("first", 1)[0], gang("second", 1)[0]
        for p in (first, second):
            passed, why = await filtered(s, p)
            assert not passed and "gang nlp/big" in why, why
        assert not s.waiting["nlp/first"].holds
        await s.pod_gone(str(gang("big", 3)[0]["metadata"]["uid"]))  # big's job is deleted
        due = {p.uid for p in s.requeue.take(100)}
        assert {str(first["metadata"]["uid"]), str(second["metadata"]["uid"])} <= due
        for p in (second, first):
            passed, why = await filtered(s, p)
            assert passed, why

    run(go())


def test_the_preempt_verb_names_no_victims_for_a_queued_gang() -> None:
    async def go() -> None:
        from extender.http import wire

        s = scheduler()
        await nlp_with_a_big_gang_waiting(s)
        # an opportunistic guest on nlp's free nodes, which a guaranteed gang could preempt
        await bound(s, gang("guest", 1, ns="vision", vc="vision", priority=-1))
        small = gang("small", 1)[0]
        got = await s.preempt(wire.parse_preemption_args({"Pod": small, "NodeNameToMetaVictims": {}}))
        assert not got.get("NodeNameToMetaVictims"), got
        assert s.core.gang("nlp/small") is None

    run(go())


def test_a_gang_waiting_for_hardware_to_heal_holds_nobody_back() -> None:
    """nlp's quota can only map onto a node that is down: its gang waits [BadHardware], and a later
    gang of nlp is not queued behind it (a node down for days would stop the VC's every gang)."""

    async def go() -> None:
        s = scheduler()
        await bound(s, gang("one", 1))
        await bound(s, gang("two", 1))
        free = [n for n in nodes() if len(inspect.node_unheld_gpus(s.core, n)) == 8]
        for n in free:  # every free node down: nlp's last quota node can only be bad hardware
            s.core.set_node_health(n, False)
        passed, why = await filtered(s, gang("big", 1)[0])
        assert not passed and "[BadHardware]" in why, why
        assert not s.waiting["nlp/big"].holds
        passed, why = await filtered(s, gang("small", 1)[0])
        assert not passed and "[Queued]" not in why and "[BadHardware]" in why, why

    run(go())


WALL = 1_800_000_000.0  # the API server's clock when the scheduler's reads 0


def created_at(members: list[dict[str, Any]], t: float) -> list[dict[str, Any]]:
    """The pods, created (`creationTimestamp`, as the API server writes it) at scheduler time `t`."""
    for p in members:
        p["metadata"]["creationTimestamp"] = datetime.fromtimestamp(WALL + t, UTC).strftime(
            "%Y-%m-%dT%H:%M:%SZ"
        )
    return members


def on_the_api_servers_clock(clock: Clock) -> Scheduler:
    s = scheduler(clock=clock)
    s.holders.wall = lambda: WALL + clock.t
    return s


def test_the_older_gang_goes_first_though_a_younger_one_waited_first() -> None:
    """What a restart or a new leader meets: kube-scheduler retries the younger gang first. It waits
    for room first, yet the older gang, filtered after it, is not queued behind it: the order is
    the pods' creation, which the API server keeps, not who this process saw waiting first."""

    async def go() -> None:
        clock = Clock()
        s = on_the_api_servers_clock(clock)
        await bound(s, gang("one", 1))
        old, young = created_at(gang("old", 3), 900.0), created_at(gang("young", 3), 950.0)
        passed, why = await filtered(s, young[0])
        assert not passed and "[InsufficientQuota]" in why, why
        assert s.waiting["nlp/young"].holds
        clock.t += 5.0
        passed, why = await filtered(s, old[0])
        assert not passed and "[InsufficientQuota]" in why and "[Queued]" not in why, why
        passed, why = await filtered(s, young[0])
        assert not passed and "[Queued]" in why and "gang nlp/old" in why, why
        small = created_at(gang("small", 1), 990.0)[0]  # it would fit, but old is older
        passed, why = await filtered(s, small)
        assert not passed and "gang nlp/old" in why, why

    run(go())


def test_a_gang_is_as_old_as_its_newest_pod() -> None:
    """One pod created early and the rest later buys no place: once its newer pod is read, the gang
    is as old as that pod, and a gang created in between goes first."""

    async def go() -> None:
        clock = Clock()
        s = on_the_api_servers_clock(clock)
        await bound(s, gang("one", 1))
        early = gang("early", 3)
        created_at(early[:1], 800.0)
        created_at(early[1:], 980.0)
        passed, why = await filtered(s, early[0])
        assert not passed and "[InsufficientQuota]" in why, why
        passed, why = await filtered(s, early[1])
        assert not passed and "[InsufficientQuota]" in why, why
        clock.t += 5.0
        between = created_at(gang("between", 3), 900.0)
        passed, why = await filtered(s, between[0])
        assert not passed and "[Queued]" not in why, why
        passed, why = await filtered(s, early[0])
        assert not passed and "gang nlp/between" in why, why

    run(go())


def test_pods_without_a_creation_time_keep_the_order_they_first_waited_in() -> None:
    """A standalone caller's pods carry no `creationTimestamp`: a gang's place is its first wait,
    kept while it waits, however often it is filtered again."""

    async def go() -> None:
        clock = Clock()
        s = on_the_api_servers_clock(clock)
        await nlp_with_a_big_gang_waiting(s)
        clock.t += 60.0
        passed, why = await filtered(s, gang("later", 3)[0])
        assert not passed and "gang nlp/big" in why, why
        clock.t += 60.0
        passed, why = await filtered(s, gang("big", 3)[0])  # big again: still first
        assert not passed and "[InsufficientQuota]" in why, why
        assert s.waiting["nlp/big"].order == 1000.0

    run(go())
