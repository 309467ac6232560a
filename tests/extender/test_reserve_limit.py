"""A namespace's reservations not yet filled, bounded by the admin (`topogang.tenants.<ns>.
maxReservedGpus`, `topogang.defaultMaxReservedGpus`), through the verbs on the example cluster.

Who: any pod of the namespace, through kube-scheduler's filter and preempt. What it sees: the wait
[TenantLimit] with its own namespace's count and the key that sets the limit, nothing of other
namespaces. Namespace: the pod's own (`metadata.namespace`), never a name the pod writes: the
limit counts the gangs whose keys start with it."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from config.load import ConfigError
from extender.http.reload import ConfigWatcher
from extender.http.verbs import Scheduler
from extender.standalone import EXAMPLE_CONFIG
from tests.extender.helpers import Clock, bind_args, run
from tests.extender.test_entitlement import config, make
from tests.extender.test_vc_order import filtered, gang

LIMITED = """\
  defaultMaxReservedGpus: 8
  tenants:
    vision: {maxReservedGpus: 16}
    vision-b: {virtualClusters: [vision]}
"""


SHARED_VC = "  tenants:\n    vision: {maxReservedGpus: 16}\n    vision-b: {virtualClusters: [vision]}\n"


def limited() -> Scheduler:
    return make(config(LIMITED))[0]


async def first_member_reserved(s: Scheduler, members: list[dict[str, Any]]) -> None:
    """The gang placed by its first member's filter (its other pods not yet come)."""
    passed, why = await filtered(s, members[0])
    assert passed, why


def test_a_namespace_past_its_limit_waits_tenant_limit_and_other_namespaces_go_on() -> None:
    async def go() -> None:
        s = limited()
        a = gang("a", 2, ns="vision", vc="vision")
        await first_member_reserved(s, a)  # 16 GPUs held, no pod bound
        passed, why = await filtered(s, gang("b", 1, ns="vision", vc="vision")[0])
        assert not passed and "[TenantLimit]" in why, why
        assert "topogang.tenants.vision.maxReservedGpus (16)" in why and "hold 16 GPUs" in why, why
        assert s.core.gang("vision/b") is None, "nothing is reserved for a gang past its limit"
        assert s.waiting["vision/b"].reason.code.value == "TenantLimit"
        # another namespace in the same VC, with its own (default) limit, is not held back by vision's
        passed, why = await filtered(s, gang("c", 1, ns="vision-b", vc="vision")[0])
        assert passed, why
        # a's pods come and bind: vision holds nothing unbound, and b goes
        for p in a:
            passed, why = await filtered(s, p)
            assert passed, why
            assert await s.bind(bind_args(p, passed[0])) == {"Error": ""}
        passed, why = await filtered(s, gang("b", 1, ns="vision", vc="vision")[0])
        assert passed, why

    run(go())


def test_the_default_limit_holds_a_namespace_without_its_own() -> None:
    async def go() -> None:
        s = limited()
        passed, why = await filtered(s, gang("n", 2, ns="nlp", vc="nlp")[0])  # 16 > the default 8
        assert not passed and "asks for 16 GPUs" in why and "topogang.defaultMaxReservedGpus: 8" in why, why
        rec = s.gang_ledger.records["nlp/n"]
        assert s.gang_ledger.status(s.core, rec, s.waiting_of)["neverFits"] is True
        passed, why = await filtered(s, gang("m", 1, ns="nlp", vc="nlp")[0])
        assert passed, why

    run(go())


def test_a_gang_held_by_its_limit_does_not_hold_its_vcs_later_gangs_back() -> None:
    """Under StrictFIFO a gang waiting for room holds its VC's younger gangs; one kept back by its
    own namespace's limit would let a tenant stop every other namespace in a shared VC."""

    async def go() -> None:
        s = limited()
        await first_member_reserved(s, gang("a", 2, ns="vision", vc="vision"))
        passed, why = await filtered(s, gang("big", 2, ns="vision", vc="vision")[0])
        assert not passed and "[TenantLimit]" in why, why
        assert not s.waiting["vision/big"].holds
        passed, why = await filtered(s, gang("later", 1, ns="vision-b", vc="vision")[0])
        assert passed and "[Queued]" not in why, why

    run(go())


def test_a_gang_held_by_its_limit_is_given_no_victims_by_the_preempt_verb() -> None:
    async def go() -> None:
        from extender.http import wire

        # research's opportunistic gangs fill the cluster around a vision gang not yet bound; another
        # vision gang would preempt them
        loose = make(config(""))[0]
        tight = make(config("  tenants:\n    vision: {maxReservedGpus: 8}\n"))[0]
        victims: list[Any] = []
        for s in (loose, tight):
            fills = [gang(f"fill{i}", 4, ns="research", vc="research", priority=-1) for i in range(2)]
            fills.append(gang("fill2", 3, ns="research", vc="research", priority=-1))
            for i, members in enumerate(fills):
                if i == 2:
                    await first_member_reserved(s, gang("first", 1, ns="vision", vc="vision"))
                for p in members:
                    passed, why = await filtered(s, p)
                    assert passed, why
                    assert await s.bind(bind_args(p, passed[0])) == {"Error": ""}
            want = gang("want", 1, ns="vision", vc="vision")[0]
            body = {"Pod": want, "NodeNameToMetaVictims": {}}
            got = await s.preempt(wire.parse_preemption_args(body))
            victims.append(got.get("NodeNameToMetaVictims") or {})
        assert victims[0], "without the limit the gang preempts the guests"
        assert victims[1] == {}, "held back by its limit, it preempts nobody"
        assert tight.waiting["vision/want"].reason.code.value == "TenantLimit"

    run(go())


def test_a_negative_limit_is_refused_naming_the_key() -> None:
    with pytest.raises(ConfigError, match="maxReservedGpus"):
        config("  tenants:\n    vision: {maxReservedGpus: -1}\n")
    with pytest.raises(ConfigError, match="defaultMaxReservedGpus"):
        config("  defaultMaxReservedGpus: -8\n")


def test_a_reload_that_raises_the_limit_lets_the_waiting_gang_go(tmp_path: Path) -> None:
    """The admin's edit is applied by the extender's own watcher, and the pods held by the old
    bound are due for a requeue at once (kube-scheduler would otherwise retry them only on some
    unrelated event, or after its five-minute flush)."""

    async def go() -> None:
        path = tmp_path / "cluster.yaml"
        path.write_text(EXAMPLE_CONFIG.read_text(encoding="utf-8") + LIMITED, encoding="utf-8")
        s = limited()
        watcher = ConfigWatcher(s, path, clock=Clock())
        await first_member_reserved(s, gang("a", 2, ns="vision", vc="vision"))
        b = gang("b", 1, ns="vision", vc="vision")[0]
        passed, why = await filtered(s, b)
        assert not passed and "[TenantLimit]" in why, why
        raised = path.read_text(encoding="utf-8").replace("maxReservedGpus: 16", "maxReservedGpus: 24")
        path.write_text(raised, encoding="utf-8")
        assert await watcher.check() == "applied"
        assert str(b["metadata"]["uid"]) in {p.uid for p in s.requeue.take(100)}
        passed, why = await filtered(s, b)
        assert passed, why

    run(go())


def test_a_gang_held_by_its_bound_keeps_its_place_ahead_of_its_namespaces_later_gangs() -> None:
    """A gang as large as the bound goes only at a moment when none of its namespace's gangs waits
    for its pods. kube-scheduler binds asynchronously, so the next pod's filter lands between a
    small gang's filter and its bind: without an order, the namespace's later small gangs would go
    one after another while the big one waits [TenantLimit], until the VC is full. Under StrictFIFO
    they wait behind it [Queued], as a VC's later gangs wait behind its older one; another
    namespace's gangs do not."""

    async def go() -> None:
        s = make(config(SHARED_VC))[0]
        big = gang("big", 2, ns="vision", vc="vision")  # 16 GPUs, the oldest
        first = gang("s0", 1, ns="vision", vc="vision")[0]
        passed, why = await filtered(s, first)  # a small gang filtered, its bind in flight
        assert passed, why
        passed, why = await filtered(s, big[0])
        assert not passed and "[TenantLimit]" in why, why
        later = gang("s1", 1, ns="vision", vc="vision")[0]
        passed, why = await filtered(s, later)  # 8 + 8 fit the bound, but the big gang is older
        assert not passed and "[Queued]" in why and "gang vision/big" in why, why
        passed, why = await filtered(s, gang("o", 1, ns="vision-b", vc="vision")[0])
        assert passed, why  # another namespace is not held by vision's bound
        assert await s.bind(bind_args(first, (await filtered(s, first))[0][0])) == {"Error": ""}
        for p in big:  # nothing of vision waits for its pods now: the big gang goes
            passed, why = await filtered(s, p)
            assert passed, why
            assert await s.bind(bind_args(p, passed[0])) == {"Error": ""}
        passed, why = await filtered(s, later)
        assert passed, why

    run(go())


def test_the_admission_gates_what_if_takes_no_room_for_a_gang_its_bound_holds_back() -> None:
    """The gate lifts a VC's gangs while a what-if places them one after another. A gang its
    namespace's bound holds back is answered [TenantLimit] by its filter and places nothing, so in
    the what-if it takes nothing either: another namespace's gang that the filter would place is
    lifted too, not kept gated for a pass behind room nobody takes."""
    from extender.kube.admission_gate import GATE, GatedPods, GateKeeper
    from extender.kube.client import AsyncKube

    async def go() -> None:
        s = make(config(SHARED_VC))[0]
        await first_member_reserved(
            s, gang("a", 2, ns="vision", vc="vision")
        )  # 16 unbound; VC vision 32 left
        held = gang("b", 2, ns="vision", vc="vision")  # held back by vision's bound
        others = [gang("c", 3, ns="vision-b", vc="vision"), gang("d", 1, ns="vision-b", vc="vision")]
        book = GatedPods()
        for p in [*held, *others[0], *others[1]]:
            p["spec"]["schedulingGates"] = [{"name": GATE}]
            book.saw("ADDED", p)
        keeper = GateKeeper(s, book, kube=cast(AsyncKube, None), metrics=s.metrics)  # judging reads no API
        lift, _ = await keeper.judge()
        assert {p["metadata"]["name"] for p in lift} >= {"c-0", "c-1", "c-2", "d-0"}
        for members in others:  # and their filters place them both
            passed, why = await filtered(s, members[0])
            assert passed, why

    run(go())
