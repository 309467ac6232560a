"""An API server that does not answer: the real client's failure, the Lease kept against it, and a
leader whose work fails. Two replicas must never both serve the verbs, and no failure may leave a
replica ready while the loop that keeps it right is dead."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator

import pytest
from kubernetes import client as k8s

from extender.http.app import Service, build_app
from extender.kube.client import ApiError, KubeApi, NoAnswerError
from extender.kube.leader import LeaseSettings, lease_path
from extender.kube.requeue import Requeuer
from extender.kube.service import kube_service
from extender.standalone import build_standalone
from loadtest.kubefake import FakeKube, Fault
from tests.extender.helpers import Clock, example, run, spec
from tests.extender.test_kube_durable import NS, Running, cluster, submit, until


def _api(host: str) -> KubeApi:
    cfg = k8s.Configuration()
    cfg.host = host
    cfg.retries = 0
    return KubeApi(k8s.ApiClient(cfg))


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never answers."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        srv.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(srv.accept()[0])
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield srv.getsockname()[1]
    stop.set()
    t.join()
    for c in held:
        c.close()
    srv.close()


def test_the_real_client_raises_no_answer_for_a_refused_connection_and_a_read_timeout(
    silent_port: int,
) -> None:
    """The `kubernetes` client lets urllib3's errors through; every caller that retries on a failed
    call catches `ApiError` or `TimeoutError`, neither of which urllib3's are."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    closed = s.getsockname()[1]
    s.close()
    with pytest.raises(NoAnswerError) as refused:
        _api(f"http://127.0.0.1:{closed}").request("GET", "/api/v1/namespaces/x/pods/y")
    assert not isinstance(refused.value, ApiError)  # a Binding with no answer may have been applied
    assert isinstance(refused.value, TimeoutError) and "GET /api/v1/namespaces/x/pods/y" in str(refused.value)
    with pytest.raises(NoAnswerError):  # the read timeout, cut short here (30 s in service)
        _api(f"http://127.0.0.1:{silent_port}")._send(
            "GET", "/apis/coordination.k8s.io/v1/leases", timeout=0.3
        )


def _holder(kube: FakeKube) -> str | None:
    try:
        return str(kube.server.at(lease_path(NS, "lead"))["spec"]["holderIdentity"])
    except KeyError:
        return None


FAST = LeaseSettings(NS, "lead", lease_seconds=0.3, renew_deadline=0.2, retry_seconds=0.05)


def replica(
    kube: FakeKube, clock: Clock, name: str, *, lease: LeaseSettings = FAST, lost: list[str] | None = None
) -> Running:
    """Replica `name` of the service over `kube`, electing on `lease`; `lost` hears it give the lead up."""
    on_lost = (lambda: lost.append(name)) if lost is not None else None
    return Running(
        kube_service(example(), kube, clock=clock, namespace=NS, lease=lease, identity=name, on_lost=on_lost)
    )


async def leading() -> tuple[FakeKube, Clock, FakeKube, list[str], Running]:
    """A cluster, its clock, and replica "a" leading it on its own connection (faults go there),
    with the list that hears it give the lead up."""
    shared, clock = cluster(), Clock()
    ka = FakeKube(shared.server)
    lost: list[str] = []
    a = replica(ka, clock, "a", lost=lost)
    await until("a leads", lambda: a.s.ready)
    return shared, clock, ka, lost, a


async def _stop(*replicas: Running) -> None:
    for r in replicas:
        for t in r.tasks:
            t.cancel()
    await asyncio.sleep(0)


def test_a_lease_read_without_an_answer_is_one_failed_renewal_not_the_end_of_the_lead() -> None:
    async def go() -> None:
        shared, _, ka, lost, a = await leading()
        ka.inject(Fault("GET", "leases", "timeout", count=1))
        await asyncio.sleep(0.5)  # more than the Lease: a kept renewing after the failure
        assert a.s.ready and not lost
        assert shared.server.at(lease_path(NS, "lead"))["spec"]["holderIdentity"] == "a"
        assert not any(t.done() for t in a.tasks)
        await _stop(a)

    run(go())


def test_a_leader_whose_renewals_get_no_answer_stops_serving_before_a_standby_starts() -> None:
    """Before, the first renewal without an answer ended the loop that renews while the replica
    stayed ready: the standby took the Lease and both placed gangs on the same node."""

    async def go() -> None:
        shared, clock, ka, lost, a = await leading()
        b = replica(FakeKube(shared.server), clock, "b")
        await until("b is standby", lambda: b.s.not_ready_reason.endswith("held by a"))
        ka.inject(Fault("GET", "leases", "timeout", count=1000))
        both: list[bool] = []
        for _ in range(150):
            both.append(a.s.ready and b.s.ready)
            await asyncio.sleep(0.01)
        await until("b leads", lambda: b.s.ready)
        assert not any(both)
        assert lost == ["a"] and not a.s.ready and a.s.not_ready_reason == "lost the Lease"
        got = await a.verb("filter", submit(shared, "x", "x", "vision", spec("vision", 8)))
        assert got["Error"].startswith("topogang: not ready")
        await _stop(a, b)

    run(go())


def test_a_standby_whose_lease_read_gets_no_answer_still_takes_over() -> None:
    async def go() -> None:
        shared, clock = cluster(), Clock()
        a = replica(FakeKube(shared.server), clock, "a")
        await until("a leads", lambda: a.s.ready)
        kb = FakeKube(shared.server)
        kb.inject(Fault("GET", "leases", "timeout", count=2))
        b = replica(kb, clock, "b")
        await asyncio.sleep(0.2)
        await _stop(a)  # the leader dies without a word
        await until("b leads", lambda: b.s.ready)
        await _stop(b)

    run(go())


def test_a_slow_renewal_is_cut_at_the_renew_deadline_so_two_replicas_never_both_serve() -> None:
    """The real client waits 30 s a try, several tries, for a Lease that lasts 15 s: a renewal
    still waiting for its answer when the Lease runs out must already have ended the lead."""

    async def go() -> None:
        shared, clock = cluster(), Clock()
        lease = LeaseSettings(NS, "lead", lease_seconds=1.5, renew_deadline=1.0, retry_seconds=0.2)
        ka = FakeKube(shared.server)
        a = replica(ka, clock, "a", lease=lease)
        await until("a leads", lambda: a.s.ready)
        b = replica(FakeKube(shared.server), clock, "b", lease=lease)
        await until("b is standby", lambda: b.s.not_ready_reason.endswith("held by a"))
        ka.inject(Fault("GET", "leases", "delay", seconds=3.0, count=1000))
        both: list[bool] = []
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        while loop.time() - t0 < 4.0:
            both.append(a.s.ready and b.s.ready)
            await asyncio.sleep(0.01)
        assert b.s.ready and not a.s.ready and not any(both)
        await _stop(a, b)

    run(go())


def test_the_lease_is_renewed_while_the_new_leader_starts() -> None:
    """Listing and recovering a large cluster can outlast the Lease (14.5 s at 12,500 nodes against
    15 s): the Lease is renewed from the moment it is taken, so no standby takes it meanwhile."""

    async def go() -> None:
        shared, clock = cluster(), Clock()
        lease = LeaseSettings(NS, "lead", lease_seconds=1.5, renew_deadline=1.0, retry_seconds=0.2)
        ka = FakeKube(shared.server)
        ka.inject(Fault("LIST", "/api/v1/pods", "delay", seconds=2.5))
        a = replica(ka, clock, "a", lease=lease)
        await until("a holds the Lease", lambda: _holder(shared) == "a")
        b = replica(FakeKube(shared.server), clock, "b", lease=lease)
        both: list[bool] = []
        for _ in range(400):
            both.append(a.s.ready and b.s.ready)
            await asyncio.sleep(0.01)
        assert a.s.ready and not b.s.ready and not any(both)
        assert shared.server.at(lease_path(NS, "lead"))["spec"]["holderIdentity"] == "a"
        await _stop(a, b)

    run(go())


def test_reading_the_reservations_back_without_an_answer_is_retried() -> None:
    async def go() -> None:
        kube, clock = cluster(), Clock()
        kube.inject(Fault("LIST", "gangreservations", "timeout", count=1))
        r = Running(kube_service(example(), kube, clock=clock, namespace=NS))
        await until("ready after the retry", lambda: r.s.ready, 5.0)
        assert kube.injected.get("timeout") == 1
        await _stop(r)

    run(go())


def test_a_leader_task_that_fails_ends_the_lead_and_hands_the_lease_over(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The requeuer, the admission gate's keeper, the reservations' sync: a leader without one of
    them acts on a half-kept state; the lead ends (the CLI exits) and the Lease goes at once."""

    async def broken(self: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(Requeuer, "run", broken)

    async def go() -> None:
        shared, clock = cluster(), Clock()
        lost: list[str] = []
        a = replica(FakeKube(shared.server), clock, "a", lost=lost)
        await until("a gave up", lambda: bool(lost))
        assert not a.s.ready and a.s.not_ready_reason == "the leader's work failed (logged)"
        assert shared.server.at(lease_path(NS, "lead"))["spec"]["holderIdentity"] == ""  # released
        a.s.not_ready_reason = ""
        await asyncio.sleep(0.3)  # nothing turns it ready again
        assert not a.s.ready
        await _stop(a)

    run(go())


def test_a_background_task_that_fails_leaves_the_service_not_ready_and_says_so() -> None:
    """The app runs the background tasks (the watches, the lead, the reload); one that ends on an
    exception would leave its state stale without a word."""

    async def go() -> None:
        service: Service = build_standalone(example())
        failed: list[bool] = []

        async def breaks() -> None:
            await asyncio.sleep(0.01)
            raise RuntimeError("a bug")

        service.background.append(breaks)
        service.on_failed = lambda: failed.append(True)
        app = build_app(service)
        async with app.router.lifespan_context(app):
            await until("the failure seen", lambda: bool(failed))
            assert not service.scheduler.ready
            assert "breaks" in service.scheduler.not_ready_reason

    run(go())
