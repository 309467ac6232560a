"""A leader's writes (a Binding, an eviction, a GangReservation) are fenced on its Lease at the
moment of each write (`LeaderElector.holds`), not only through the flag the renewing loop sets when
it wakes: a replica whose process was paused (a VM freeze, CPU starvation, a long synchronous step)
past its renew deadline comes back with `leading` still set, and what ran first after the pause (a
bind request that arrived meanwhile, an eviction) wrote to the cluster while another replica held
the Lease. A leader that has not renewed within `renew_deadline` has stopped leading."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from extender.gangs.disruption import reservation_expired
from extender.kube.client import pod_path
from extender.kube.leader import LeaseSettings, lease_path, micro_time
from loadtest.kubefake import FakeKube
from tests.extender.helpers import Clock, bind_args, run, spec
from tests.extender.test_kube_durable import NS, cluster, submit, until
from tests.extender.test_kube_no_answer import _stop, replica

LEASE = LeaseSettings(NS, "lead", lease_seconds=0.3, renew_deadline=0.2, retry_seconds=0.05)


def _pause_while_b_takes_the_lease(shared: FakeKube) -> None:
    """The loop stops (a's renewals with it) for longer than the Lease; meanwhile replica b, in
    another process, sees the Lease unrenewed for its duration and takes it."""
    time.sleep(LEASE.lease_seconds + 0.1)
    lease = shared.server.at(lease_path(NS, "lead"))
    now = micro_time(datetime.now(UTC))
    spec_ = {**lease["spec"], "holderIdentity": "b", "acquireTime": now, "renewTime": now}
    spec_["leaseTransitions"] = int(spec_.get("leaseTransitions") or 0) + 1
    shared.server.put(lease_path(NS, "lead"), {**lease, "spec": spec_})


def test_a_leader_past_its_renew_deadline_does_not_bind() -> None:
    async def go() -> None:
        shared, clock = cluster(), Clock()
        a = replica(FakeKube(shared.server), clock, "a", lease=LEASE)
        await until("a leads", lambda: a.s.ready)
        p = submit(shared, "u1", "solo", "vision", spec("vision", 8))
        r = await a.verb("filter", p)
        assert r["NodeNames"], r
        _pause_while_b_takes_the_lease(shared)
        # the bind request kube-scheduler sent during the pause is served first
        got = await a.s.bind(bind_args(p, r["NodeNames"][0]))
        bound = shared.server.at(pod_path("vision", "solo"))["spec"].get("nodeName")
        holder = shared.server.at(lease_path(NS, "lead"))["spec"]["holderIdentity"]
        await _stop(a)
        assert bound is None, f"replica a bound the pod to {bound} while {holder!r} held the Lease: {got}"

    run(go())


def test_a_leader_past_its_renew_deadline_does_not_evict() -> None:
    async def go() -> None:
        shared, clock = cluster(), Clock()
        a = replica(FakeKube(shared.server), clock, "a", lease=LEASE)
        await until("a leads", lambda: a.s.ready)
        p = submit(shared, "u1", "solo", "vision", spec("vision", 8))
        await a.place(p)
        await until("a watched the bind", lambda: a.s.promotions.locate[0]("u1") is not None)
        evictor = a.s.evictor
        assert evictor is not None
        _pause_while_b_takes_the_lease(shared)
        await evictor(["u1"], reservation_expired())
        going = shared.server.at(pod_path("vision", "solo"))["metadata"].get("deletionTimestamp")
        holder = shared.server.at(lease_path(NS, "lead"))["spec"]["holderIdentity"]
        await _stop(a)
        assert going is None, f"replica a deleted the pod while {holder!r} held the Lease"

    run(go())


def test_a_leader_past_its_renew_deadline_does_not_write_reservations() -> None:
    """The filter kube-scheduler sent during the pause reserves a gang, and the reservation is
    written through as a GangReservation object beside the new leader's."""

    async def go() -> None:
        shared, clock = cluster(), Clock()
        a = replica(FakeKube(shared.server), clock, "a", lease=LEASE)
        await until("a leads", lambda: a.s.ready)
        p = submit(shared, "u1", "big-0", "vision", spec("vision", 8, 2, "vision/big"))
        _pause_while_b_takes_the_lease(shared)
        before = set(shared.server.objects)
        await a.verb("filter", p)
        written = [k for k in set(shared.server.objects) - before if k[1] == "gangreservations"]
        await _stop(a)
        assert not written, f"replica a wrote {written} while b held the Lease"

    run(go())
