"""Durable reservations, leader election and Events of the Kubernetes-mode service, against an
in-memory API server: a restart or fail-over is a second service over the same objects."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from config.load import LoadedConfig, load_config_text
from extender.gangs import reservation_objects as rsv
from extender.http import podrequests
from extender.http.app import Service, build_app
from extender.kube import reservation_sync as reservations
from extender.kube.client import pod_path
from extender.kube.events import EventRecorder, ObjectRef
from extender.kube.leader import LeaderElector, LeaseSettings, lease_path
from extender.kube.service import kube_service
from extender.ops.metrics import Metrics
from extender.standalone import EXAMPLE_CONFIG
from loadtest.kubefake import FakeKube, parse_path
from tests.extender.helpers import Clock, example, nodes, pod, ready_node, run, scheduler, spec
from topology.core import Core
from topology.invariants import violations
from topology.reservations import GangPhase

NS = "topogang-system"
COLLECTION = rsv.collection_path(NS)


def cluster() -> FakeKube:
    kube = FakeKube()
    for n in nodes():
        kube.server.put(f"/api/v1/nodes/{n}", ready_node(n, 8))
    return kube


def submit(kube: FakeKube, uid: str, name: str, ns: str, text: str) -> dict[str, Any]:
    return kube.server.put(pod_path(ns, name), pod(uid, name, ns, text))


async def until(what: str, ok: Callable[[], bool], seconds: float = 5.0) -> None:
    for _ in range(int(seconds / 0.01)):
        if ok():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


class Running:
    """A service with its background tasks, and an HTTP client on its app (no sockets)."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self.s = service.scheduler
        self.tasks = [asyncio.create_task(fn()) for fn in service.background]
        self.http = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=build_app(service)), base_url="http://localhost"
        )

    async def verb(self, name: str, p: dict[str, Any], **extra: Any) -> Any:
        body = {"Pod": p, "Nodes": None, "NodeNames": nodes(), **extra}
        r = await self.http.post(f"/v1/extender/{name}", json=body)
        return r.json()

    async def place(self, p: dict[str, Any]) -> str:
        r = await self.verb("filter", p)
        assert r["NodeNames"], r
        node = str(r["NodeNames"][0])
        m = p["metadata"]
        b = await self.http.post(
            "/v1/extender/bind",
            json={"PodName": m["name"], "PodNamespace": m["namespace"], "PodUID": m["uid"], "Node": node},
        )
        assert b.json() == {"Error": ""}, b.json()
        return node

    async def stop(self) -> None:
        for t in self.tasks:
            t.cancel()
        for t in self.tasks:
            with pytest.raises(asyncio.CancelledError):
                await t
        await self.http.aclose()


async def start(kube: FakeKube, clock: Clock, **kw: Any) -> Running:
    r = Running(kube_service(example(), kube, clock=clock, namespace=NS, **kw))
    await until("ready", lambda: r.s.ready)
    return r


def where(core: Core, gang: str) -> list[tuple[str, tuple[int, ...]]]:
    g = core.gang(gang)
    assert g is not None, gang
    return [(p.node, p.gpu_indices) for p in core.placement_of(g).pods]


# ---------------------------------------------------------------------------------- encoding
def test_a_reservation_object_round_trips_and_bad_ones_name_the_field() -> None:
    core = Core(example().spec)
    from topology.decisions import GangRequest, Member

    req = GangRequest("ml/x", "vision", (Member(2, 8), Member(1, 2)), priority=100, slot_keys=("a", "b", "c"))
    got = core.reserve(req, 10.0)
    g = core.gang("ml/x")
    assert g is not None and not isinstance(got, str)
    wall = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    body = rsv.encode(core, g, clock_now=10.0, wall_now=wall)
    assert body["spec"]["expiresAt"] == "2026-01-02T03:09:05Z"  # deadline 310 on a clock at 10
    back = rsv.decode(body)
    assert back.request == req
    assert rsv.deadline_of(back, clock_now=500.0, wall_now=wall) == 800.0
    fresh = Core(example().spec)
    placed = fresh.restore(back.request, back.slots, 500.0, 800.0)
    assert not isinstance(placed, str) and placed.pods == core.placement_of(g).pods
    assert rsv.object_name("ml/x") != rsv.object_name("ml-x") and len(rsv.object_name("a" * 300)) < 64
    # two gangs whose stems read alike differ by the hash alone: 128 bits of it, past a tenant's search
    a, b = rsv.object_name("team-a/train"), rsv.object_name("team/a-train")
    assert a.rsplit("-", 1)[0] == b.rsplit("-", 1)[0] and len(a.rsplit("-", 1)[1]) * 4 >= 128
    broken = {**body, "spec": {**body["spec"], "slots": body["spec"]["slots"][:1]}}
    with pytest.raises(rsv.BadReservationError, match=r"spec\.slots: 1 slots for 3 pods"):
        rsv.decode(broken)
    with pytest.raises(rsv.BadReservationError, match=r"spec\.priority"):
        rsv.decode({**body, "spec": {**body["spec"], "priority": "high"}})


# ---------------------------------------------------------------------------------- durability
def test_a_reservation_nobody_has_bound_yet_survives_a_restart() -> None:
    async def go() -> None:
        kube, clock = cluster(), Clock()
        a = await start(kube, clock)
        text = spec("vision", 8, 2, "vision/pair")
        p0 = submit(kube, "p0", "pair-0", "vision", text)
        r = await a.verb("filter", p0)
        assert r["NodeNames"], r
        before = where(a.s.core, "vision/pair")
        objects = kube.server.list(COLLECTION)[0]
        assert [o["spec"]["gang"] for o in objects] == ["vision/pair"]  # written before filter answered
        await a.stop()

        clock.t += 30
        b = await start(kube, clock)
        assert where(b.s.core, "vision/pair") == before
        g = b.s.core.gang("vision/pair")
        assert g is not None and g.phase is GangPhase.RESERVED
        assert g.deadline == pytest.approx(clock.t + 300.0, abs=1.5)  # the wall-clock deadline kept
        # both members now bind where the reservation is, and the object goes once one is bound
        p1 = submit(kube, "p1", "pair-1", "vision", text)
        got = {await b.place(kube.server.at(pod_path("vision", n))) for n in ("pair-0", "pair-1")}
        assert got == {n for n, _ in before}
        await until("the object deleted", lambda: kube.server.list(COLLECTION)[0] == [])
        assert p1["metadata"]["uid"] == "p1" and violations(b.s.core) == []
        await b.stop()

    run(go())


def test_a_lone_pod_is_not_written_inside_the_cycle_but_a_lingering_one_is_synced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A one-pod gang binds in the cycle that reserved it, so its filter answers without waiting for
    an object (kube-scheduler's rate would halve on that write); if it lingers unbound, the sync
    still writes it, and a restart then finds it."""
    monkeypatch.setattr(reservations, "SYNC_SECONDS", 3600.0)  # the first sync runs at start only

    async def go() -> None:
        kube, clock = cluster(), Clock()
        a = await start(kube, clock)
        solo = submit(kube, "s0", "solo", "vision", spec("vision", 8))
        assert (await a.verb("filter", solo))["NodeNames"]
        assert kube.server.list(COLLECTION)[0] == []  # nothing written before filter answered
        solo_gang = a.s.core.gang("vision/pod:solo")
        assert solo_gang is not None and rsv.needs_object(solo_gang)
        pair = submit(kube, "p0", "pair-0", "vision", spec("vision", 8, 2, "vision/pair"))
        assert (await a.verb("filter", pair))["NodeNames"]
        written = [o["spec"]["gang"] for o in kube.server.list(COLLECTION)[0]]
        assert written == ["vision/pair"]  # a gang of two is written before its filter answers
        placed = where(a.s.core, "vision/pod:solo")
        await a.stop()
        for fn in a.service.on_stop:  # the same sync that runs every second
            await fn()
        written = sorted(o["spec"]["gang"] for o in kube.server.list(COLLECTION)[0])
        assert written == ["vision/pair", "vision/pod:solo"]  # the sync writes the lingering lone pod

        b = await start(kube, clock)
        assert where(b.s.core, "vision/pod:solo") == placed
        await b.stop()

    run(go())


def test_a_clean_stop_deletes_the_object_of_a_gang_released_since_the_last_sync(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(reservations, "SYNC_SECONDS", 3600.0)  # no periodic sync after the first

    async def go() -> None:
        kube, clock = cluster(), Clock()
        a = await start(kube, clock)
        p0 = submit(kube, "p0", "pair-0", "vision", spec("vision", 8, 2, "vision/pair"))
        assert (await a.verb("filter", p0))["NodeNames"]
        kube.server.delete(pod_path("vision", "pair-0"))  # the job goes before any member is bound
        await until("the gang released", lambda: a.s.core.gang("vision/pair") is None)
        assert len(kube.server.list(COLLECTION)[0]) == 1  # its object, until the next sync
        await a.stop()
        for fn in a.service.on_stop:
            await fn()
        assert kube.server.list(COLLECTION)[0] == []
        b = await start(kube, clock)
        assert b.s.core.gang("vision/pair") is None  # nothing memberless comes back to hold cells
        await b.stop()

    run(go())


@pytest.mark.parametrize("unsure", [False, True])
def test_a_reservation_its_namespace_lost_the_vc_of_is_dropped_or_not_promoted(unsure: bool) -> None:
    """A reservation written while its namespace could use its VC, read back after a restart under
    a config that took the VC away. Its pod now asks what its namespace may not, so no bind could
    claim it: it is dropped. Where a pod of the namespace names its gang only through a convention
    (here a GPU pod of the profile), the reservation comes back (what was given stands until its
    TTL), but its `promoteWhenQuota` opt-in no longer holds, as a reload without the restart would
    have withdrawn it (found by the hostile soak's entitlement reloads, seeds 10 and 64)."""

    def tenancy(vcs: str) -> LoadedConfig:
        text = (
            EXAMPLE_CONFIG.read_text(encoding="utf-8")
            + f"  tenants:\n    lab: {{virtualClusters: [{vcs}]}}\n"
        )
        return load_config_text(text, "example-cluster.yaml")

    async def go() -> None:
        kube, clock = cluster(), Clock()
        a = Running(kube_service(tenancy("nlp"), kube, clock=clock, namespace=NS))
        await until("ready", lambda: a.s.ready)
        text = spec("nlp", 8, 2, "lab/opp", priority=-1, promoteWhenQuota=True)
        assert (await a.verb("filter", submit(kube, "o0", "opp-0", "lab", text)))["NodeNames"]
        assert [o["spec"]["gang"] for o in kube.server.list(COLLECTION)[0]] == ["lab/opp"]
        if unsure:
            kube.server.put(pod_path("lab", "gpu-0"), pod("g0", "gpu-0", "lab"))
        await a.stop()
        clock.t += 30
        b = Running(kube_service(tenancy("vision"), kube, clock=clock, namespace=NS))
        await until("ready", lambda: b.s.ready)
        g = b.s.core.gang("lab/opp")
        if not unsure:
            assert g is None
        else:
            assert g is not None and g.phase is GangPhase.RESERVED and g.priority == -1
            assert not g.request.promote_when_quota
        await b.stop()

    run(go())


def test_a_reservation_no_pod_asks_for_any_more_is_not_restored_after_a_crash(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A gang released less than a sync before the extender dies still has its object. Restored,
    it held its cells until its TTL for nobody (the hostile soak, seed 206: released 0.3 s before
    a restart, held 55 s). Now only a reservation some listed pod may still claim comes back."""
    monkeypatch.setattr(reservations, "SYNC_SECONDS", 3600.0)  # no periodic sync after the first

    async def go() -> None:
        kube, clock = cluster(), Clock()
        a = await start(kube, clock)
        gone = submit(kube, "p0", "pair-0", "vision", spec("vision", 8, 2, "vision/pair"))
        kept = submit(kube, "k0", "kept-0", "vision", spec("vision", 8, 2, "vision/kept"))
        for p in (gone, kept):
            assert (await a.verb("filter", p))["NodeNames"]
        kube.server.delete(pod_path("vision", "pair-0"))  # the job goes before any member is bound
        await until("the gang released", lambda: a.s.core.gang("vision/pair") is None)
        assert len(kube.server.list(COLLECTION)[0]) == 2  # its object, until the next sync
        await a.stop()  # a crash: no clean stop deletes it
        b = await start(kube, clock)
        assert b.s.core.gang("vision/pair") is None  # nothing holds cells for a gang no pod asks for
        g = b.s.core.gang("vision/kept")
        assert g is not None and g.phase is GangPhase.RESERVED  # its pod still asks for it
        await b.stop()

    run(go())


def test_which_reservations_the_listed_pods_may_claim(monkeypatch: pytest.MonkeyPatch) -> None:
    """The gang a pod's spec names; a namespace with a pod whose gang its spec alone does not name
    (a GPU pod of the profile) or whose content breaks the read keeps every reservation; a pod
    whose spec is refused, or asks what its namespace may not, finished or being deleted claims
    nothing (hostile soak seed 64: a released reservation of a namespace that may run nothing
    since a reload came back at a restart, its pods alive but refused)."""
    s = scheduler()
    named = pod("a", "a", "nlp", spec("nlp", 8, 2, "nlp/pair"))
    bad = pod("b", "b", "research", "{not json")
    done = {**pod("c", "c", "nlp", spec("nlp", 8, 2, "nlp/done")), "status": {"phase": "Succeeded"}}
    bare = pod("d", "d", "vision")  # no spec: a convention reads its gang
    got = reservations.Claimers.of(s, [named, bad, done, bare])
    assert got.may_claim("nlp/pair") and not got.may_claim("nlp/done") and not got.may_claim("research/x")
    assert got.may_claim("vision/anything")
    # a namespace that may run nothing (defaultEntitlement none) claims nothing either
    strict = load_config_text(
        EXAMPLE_CONFIG.read_text(encoding="utf-8") + "  defaultEntitlement: none\n", "c.yaml"
    )
    s.entitlement.configure(strict.extras)
    intruder = pod("i", "i", "intruder", spec("research", 8, 2, "intruder/fw"))
    its_gpu_pod = pod("j", "j", "intruder")  # its gang read by a convention: still nothing
    got = reservations.Claimers.of(s, [named, intruder, its_gpu_pod])
    assert got.may_claim("nlp/pair") and not got.may_claim("intruder/fw")

    def broken(*_: Any) -> Any:
        raise RuntimeError("a pod nobody thought of")

    monkeypatch.setattr(podrequests, "parse", broken)
    assert reservations.Claimers.of(s, [named]).may_claim("nlp/other")  # unsure, so kept


def test_a_preemption_in_flight_survives_a_restart_with_its_victims() -> None:
    async def go() -> None:
        kube, clock = cluster(), Clock()
        a = await start(kube, clock)
        a.s.evictor = None  # the victims stay until after the restart
        low = spec("vision", 8, 4, "vision/low", priority=10)
        for i in range(4):
            await a.place(submit(kube, f"l{i}", f"low-{i}", "vision", low))
        high = spec("vision", 8, 6, "vision/high", priority=500)
        h0 = submit(kube, "h0", "high-0", "vision", high)
        r = await a.verb("filter", h0)
        g = a.s.core.gang("vision/high")
        assert g is not None and g.phase is GangPhase.PREEMPTING, r
        victims = {a.s.core.reservations.by_id[v].name for v in g.victims}
        assert victims == {"vision/low"}
        before = where(a.s.core, "vision/high")
        await until(  # low's object went at the sync after its first bind; high's was written at once
            "only the preemptor's object",
            lambda: [o["spec"]["gang"] for o in kube.server.list(COLLECTION)[0]] == ["vision/high"],
        )
        obj = kube.server.list(COLLECTION)[0][0]
        assert obj["status"]["phase"] == "Preempting"
        await a.stop()

        b = await start(kube, clock)
        h = b.s.core.gang("vision/high")
        assert h is not None and h.phase is GangPhase.PREEMPTING
        assert where(b.s.core, "vision/high") == before
        assert {b.s.core.reservations.by_id[v].name for v in h.victims} == victims
        assert violations(b.s.core) == []
        # the victims go: the restored preemptor gets their cells
        for i in range(4):
            await b.s.pod_gone(f"l{i}")
        h = b.s.core.gang("vision/high")
        assert h is not None and h.phase is GangPhase.RESERVED and violations(b.s.core) == []
        await b.stop()

    run(go())


def test_an_unreadable_or_expired_object_is_dropped_and_nothing_breaks() -> None:
    async def go() -> None:
        kube, clock = cluster(), Clock()
        kube.server.put(f"{COLLECTION}/junk", {"metadata": {"name": "junk"}, "spec": {"gang": 3}})
        core = Core(example().spec)
        from topology.decisions import GangRequest, Member

        core.reserve(GangRequest("vision/old", "vision", (Member(1, 8),), priority=1), 0.0)
        g = core.gang("vision/old")
        assert g is not None
        body = rsv.encode(core, g, clock_now=0.0, wall_now=datetime.now(UTC) - timedelta(hours=1))
        kube.server.put(f"{COLLECTION}/{body['metadata']['name']}", body)
        b = await start(kube, clock)
        assert b.s.core.gangs() == []
        await until("both objects deleted", lambda: kube.server.list(COLLECTION)[0] == [])
        await b.stop()

    run(go())


def test_without_the_crd_the_service_still_starts() -> None:
    async def go() -> None:
        kube, clock = cluster(), Clock()
        kube.server.absent.add(parse_path(COLLECTION).kind_key)
        b = await start(kube, clock)
        assert b.s.ready
        await b.stop()

    run(go())


# ---------------------------------------------------------------------------------- leader election
class FakeTime:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    async def sleep(self, dt: float) -> None:
        self.t += dt
        await asyncio.sleep(0)


def test_lease_one_leader_takeover_after_expiry_and_at_once_after_release() -> None:
    async def go() -> None:
        kube, t = FakeKube(), FakeTime()
        cfg = LeaseSettings(NS, "lead", lease_seconds=15, renew_deadline=10, retry_seconds=2)
        a = LeaderElector(kube, cfg, "a", clock=t, sleep=t.sleep)
        b = LeaderElector(kube, cfg, "b", clock=t, sleep=t.sleep)
        assert await a.try_acquire_or_renew()
        assert not await b.try_acquire_or_renew() and b.holder == "a"
        lease = kube.server.at(lease_path(NS, "lead"))
        assert lease["spec"]["holderIdentity"] == "a" and lease["spec"]["leaseDurationSeconds"] == 15
        t.t += 14  # a renews in time: b keeps waiting
        assert await a.try_acquire_or_renew()
        t.t += 14
        assert not await b.try_acquire_or_renew()
        t.t += 16  # a went silent for longer than the lease: b takes it
        assert await b.try_acquire_or_renew()
        assert kube.server.at(lease_path(NS, "lead"))["spec"]["leaseTransitions"] == 1
        # a, silent past its renew deadline, stops leading at its next look
        a.leading = True
        await asyncio.wait_for(a.hold(), 1)
        assert not a.leading
        # a replica that renewed moments ago notices another holder at its next renewal
        a.leading, a.renewed_at = True, t.t
        await asyncio.wait_for(a.hold(), 1)
        assert not a.leading and a.holder == "b"
        b.leading = True
        await b.release()
        assert await a.try_acquire_or_renew()  # no wait for expiry after a clean hand-over

    run(go())


def test_a_standby_is_not_ready_and_takes_over_with_the_reservations() -> None:
    async def go() -> None:
        kube, clock = cluster(), Clock()
        lease = LeaseSettings(NS, "lead", lease_seconds=0.3, renew_deadline=0.2, retry_seconds=0.05)
        lost: list[str] = []
        a = await start(kube, clock, lease=lease, identity="a", on_lost=lambda: lost.append("a"))
        b = Running(kube_service(example(), kube, clock=clock, namespace=NS, lease=lease, identity="b"))
        await until("b synced, as standby", lambda: b.s.not_ready_reason.endswith("held by a"))
        r = await b.http.get("/readyz")
        assert r.status_code == 503 and "held by a" in r.json()["reason"]
        assert (await b.verb("filter", pod("z", "z", "vision", spec("vision", 8))))["Error"].startswith(
            "topogang: not ready: standby"
        )
        p0 = submit(kube, "p0", "pair-0", "vision", spec("vision", 8, 2, "vision/pair"))
        await a.verb("filter", p0)
        before = where(a.s.core, "vision/pair")
        await a.stop()  # the leader dies without releasing: b waits out the lease, then leads
        await until("b leads", lambda: b.s.ready, 10)
        assert where(b.s.core, "vision/pair") == before
        assert kube.server.at(lease_path(NS, "lead"))["spec"]["holderIdentity"] == "b"
        await b.stop()

    run(go())


# ---------------------------------------------------------------------------------- events
def test_events_are_deduplicated_and_rate_limited() -> None:
    async def go() -> None:
        kube, t = FakeKube(), FakeTime()
        metrics = Metrics()
        rec = EventRecorder(kube, metrics, clock=t, instance="x", repeat_seconds=60, rate=1, burst=3)
        ref = ObjectRef("Pod", "ml", "w-0", "u0")
        assert rec.record(ref, "GangWaiting", "no room", warning=True)
        assert not rec.record(ref, "GangWaiting", "no room")  # a repeat within a minute
        assert rec.record(ref, "GangWaiting", "still no room, other reason")
        assert rec.record(ObjectRef("Pod", "ml", "w-1"), "GangWaiting", "no room")
        assert not rec.record(ObjectRef("Pod", "ml", "w-2"), "GangWaiting", "no room")  # bucket empty
        t.t += 61
        assert rec.record(ref, "GangWaiting", "no room")  # once a minute is fine
        await until("written", lambda: len(kube.server.events) == 4)
        e = kube.server.events[0]
        assert (e["reason"], e["type"], e["involvedObject"]["uid"]) == ("GangWaiting", "Warning", "u0")
        rec.forget()
        t.t += 61
        rec.forget()
        assert rec.sent == {}

    run(go())


def test_gang_transitions_and_waits_become_events_on_member_pods() -> None:
    async def go() -> None:
        kube, clock = cluster(), Clock()
        a = await start(kube, clock)
        text = spec("vision", 8, 2, "vision/pair")
        p = [submit(kube, f"p{i}", f"pair-{i}", "vision", text) for i in range(2)]
        for x in p:
            await a.place(x)
        huge = submit(kube, "h", "huge", "nlp", spec("nlp", 8, 9, "nlp/huge"))
        await a.verb("filter", huge)
        await until(
            "events", lambda: {"GangBound", "GangWaiting"} <= {e["reason"] for e in kube.server.events}
        )
        bound = [e for e in kube.server.events if e["reason"] == "GangBound"]
        assert {e["involvedObject"]["name"] for e in bound} == {"pair-0", "pair-1"}
        waiting = [e for e in kube.server.events if e["reason"] == "GangWaiting"]
        assert waiting[0]["involvedObject"]["name"] == "huge" and "nlp" in waiting[0]["message"]
        await a.stop()

    run(go())


def test_a_reservation_object_of_a_gang_with_no_namespace_is_dropped() -> None:
    """Gang names are per namespace: an object whose gang names none (written when names were
    global) is no gang any pod names now, so it is dropped rather than holding GPUs until its TTL."""

    async def go() -> None:
        kube, clock = cluster(), Clock()
        a = await start(kube, clock)
        pair = submit(kube, "p0", "pair-0", "vision", spec("vision", 8, 2, "pair"))
        assert (await a.verb("filter", pair))["NodeNames"]
        await a.stop()
        (obj,) = kube.server.list(COLLECTION)[0]
        assert obj["spec"]["gang"] == "vision/pair"
        obj["spec"]["gang"] = "pair"  # as a global name was written
        kube.server.put(f"{COLLECTION}/{obj['metadata']['name']}", obj)
        kube.server.forget(pod_path("vision", "pair-0"))

        b = await start(kube, clock)
        assert b.s.core.gangs() == [] and violations(b.s.core) == []
        await b.stop()

    run(go())
