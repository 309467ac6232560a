"""DRA mode's claims over their whole life against the in-memory API: the finalizer kube-scheduler
adds, release after the resourceclaim controller dropped the reservation first, a pod deleted while
the pod watch was down, and bind-path writes that fail, get no answer or meet a conflict: what was
written is taken back, claim by claim, and what could not be is taken back by the next bind."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from extender.dra import claims as dc
from extender.http.ports import BindError
from extender.kube.client import pod_path
from extender.kube.dra import DraBinder, release
from extender.kube.sync import ClusterSync
from loadtest.kubefake import FakeKube, Fault
from tests.dra.test_kube_dra import ISO, NODE, NS, claim, make, pod, setup, target
from tests.extender.helpers import scheduler


def devices(kube: FakeKube, name: str) -> list[str]:
    return [r.device for r in dc.allocated(kube.server.at(dc.claim_path(NS, name)))]


def finalizers(kube: FakeKube, name: str) -> list[str]:
    return list(kube.server.at(dc.claim_path(NS, name))["metadata"].get("finalizers") or [])


def drop_reservations(kube: FakeKube, name: str) -> None:
    """What the resourceclaim controller does first for a deleted pod: `reservedFor` emptied."""
    c = dict(kube.server.at(dc.claim_path(NS, name)))
    c["status"] = {**c["status"], "reservedFor": []}
    kube.server.replace(dc.claim_path(NS, name) + "/status", c)


def fail_after_writes(binder: DraBinder, after: int, arm: Any) -> None:
    """Call `arm()` once `after` claims are written (to fault what follows: the Binding, the undo)."""
    orig = binder._write
    n = 0

    async def write(*args: Any, **kw: Any) -> None:
        nonlocal n
        await orig(*args, **kw)
        n += 1
        if n == after:
            arm()

    binder._write = write  # type: ignore[method-assign]


def test_bind_adds_the_finalizer_first_and_release_deallocates_after_the_controller_unreserved() -> None:
    """kube-scheduler's bind adds `resource.kubernetes.io/delete-protection` in a metadata update
    before the status; the resourceclaim controller deallocates only claims carrying it. When it
    drops a deleted pod's reservation before the extender hears of the deletion, the extender's
    release still deallocates, then removes the finalizer (else the claim could not be deleted)."""

    async def go() -> None:
        kube, _, binder = await setup()
        kube.record = True
        make(kube, claim("a", 2))
        p = make(kube, pod("w0", ["a"]))
        await binder.bind(target(p), NODE, {ISO: "0,1"})
        assert finalizers(kube, "a") == [dc.FINALIZER]
        puts = [path.rsplit("/", 1)[-1] for m, path, _ in kube.calls if m == "PUT"]
        assert puts == ["a", "status"]  # the finalizer, then the allocation
        drop_reservations(kube, "a")
        await release(kube, kube.server.at(pod_path(NS, "w0")))
        assert devices(kube, "a") == [] and finalizers(kube, "a") == []
        # a claim allocated without the finalizer (not by kube-scheduler), reserved for no one: kept
        kept = claim("kept", 1)
        kept["status"] = {
            "allocation": dc.allocation([dc.Result("gpus", "gpu.nvidia.com", NODE, "gpu-3")], NODE)
        }
        kube.server.put(dc.claim_path(NS, "kept"), kept)
        await release(kube, make(kube, pod("w1", ["kept"])))
        assert len(devices(kube, "kept")) == 1

    asyncio.run(go())


def test_a_pod_deleted_while_the_pod_watch_was_down_gets_its_claims_released() -> None:
    async def go() -> None:
        kube, _, binder = await setup()
        sync = ClusterSync(scheduler(), kube)

        async def on_gone(p: Any) -> None:
            await release(kube, p)

        sync.on_gone = on_gone
        make(kube, claim("a", 2))
        p = make(kube, pod("w0", ["a"]))
        await binder.bind(target(p), NODE, {ISO: "0,1"})
        bound = kube.server.at(pod_path(NS, "w0"))
        uid = bound["metadata"]["uid"]
        sync.live[uid] = (NS, "w0")
        sync.pods[uid] = bound
        kube.server.forget(pod_path(NS, "w0"))
        await sync.relist_pods([])  # the relist no longer lists it; no DELETED will come
        assert devices(kube, "a") == [] and dc.reserved_uids(kube.server.at(dc.claim_path(NS, "a"))) == []

    asyncio.run(go())


def test_an_undo_goes_through_every_claim_and_the_next_bind_takes_back_a_leftover() -> None:
    """The Binding fails and the undo of claim a gets no answer: b is taken back all the same, and
    a, left allocated to GPU 0 and reserved for this pod alone, is this pod's own leftover: the next
    bind, on other GPUs, writes it again."""

    async def go() -> None:
        kube, _, binder = await setup()
        make(kube, claim("a", 1))
        make(kube, claim("b", 1))
        p = make(kube, pod("w0", ["a", "b"]))
        kube.inject(Fault("POST", "/binding", "error", status=500))
        fail_after_writes(binder, 2, lambda: kube.inject(Fault("PUT", "resourceclaims/a/status", "timeout")))
        with pytest.raises(BindError):
            await binder.bind(target(p), NODE, {ISO: "0,1"})
        assert devices(kube, "a") == ["gpu-0"] and devices(kube, "b") == []
        await DraBinder(kube, binder.catalog).bind(target(p), NODE, {ISO: "4,5"})
        assert devices(kube, "a") == ["gpu-4"] and devices(kube, "b") == ["gpu-5"]
        assert dc.reserved_uids(kube.server.at(dc.claim_path(NS, "a"))) == [p["metadata"]["uid"]]
        # a claim on other devices reserved for another pod is never taken
        q = make(kube, pod("w1", ["a"]))
        with pytest.raises(BindError, match="allocated to other devices"):
            await binder.bind(target(q), NODE, {ISO: "6"})
        # nor are the claims of a pod bound already, whatever a bind on other GPUs asks
        with pytest.raises(BindError, match="refused the Binding"):
            await binder.bind(target(p), NODE, {ISO: "6,7"})
        assert devices(kube, "a") == ["gpu-4"] and devices(kube, "b") == ["gpu-5"]

    asyncio.run(go())


def test_an_allocation_whose_reply_was_lost_is_taken_back() -> None:
    async def go() -> None:
        kube, _, binder = await setup()
        make(kube, claim("a", 2))
        p = make(kube, pod("w0", ["a"]))
        kube.inject(Fault("PUT", "resourceclaims/a/status", "lost-reply"))
        with pytest.raises(BindError, match="allocating ResourceClaim ml/a"):
            await binder.bind(target(p), NODE, {ISO: "0,1"})
        assert devices(kube, "a") == [] and finalizers(kube, "a") == []
        assert not kube.server.at(pod_path(NS, "w0"))["spec"].get("nodeName")

    asyncio.run(go())


def test_an_undo_that_meets_a_conflict_reads_the_claim_again() -> None:
    """The resourceclaim controller writes the same claims: a 409 on the undo is retried."""

    async def go() -> None:
        kube, _, binder = await setup()
        make(kube, claim("a", 1))
        p = make(kube, pod("w0", ["a"]))
        kube.inject(Fault("POST", "/binding", "error", status=500))
        fail_after_writes(
            binder,
            1,
            lambda: kube.inject(Fault("PUT", "resourceclaims/a/status", "error", status=409, count=2)),
        )
        with pytest.raises(BindError):
            await binder.bind(target(p), NODE, {ISO: "0"})
        assert devices(kube, "a") == [] and dc.reserved_uids(kube.server.at(dc.claim_path(NS, "a"))) == []
        assert kube.injected.get("error") == 3  # the Binding, then two conflicts

    asyncio.run(go())
