"""The fake API server behaves as the soak needs the real one to: these are the semantics the
extender's Kubernetes edge relies on, checked here so a soak failure is never the fake's."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from extender.kube.client import ApiError, GoneError
from loadtest.kubefake import ConnectionClosedError, FakeApiServer, FakeKube, Fault, merge_patch, parse_path
from tests.soak import vclock

RESERVATIONS = "/apis/topogang.io/v1alpha1/namespaces/topogang-system/gangreservations"
PODS = "/api/v1/namespaces/ml/pods"


def pod(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"app": "x"}}, "spec": {"containers": []}}


def binding(uid: str, node: str, **annotations: str) -> dict[str, Any]:
    return {"metadata": {"uid": uid, "annotations": annotations}, "target": {"name": node}}


def test_paths_parse_for_the_core_group_named_groups_and_subresources() -> None:
    r = parse_path("/api/v1/namespaces/ml/pods/p-0/binding")
    assert (r.group_version, r.resource, r.namespace, r.name, r.subresource) == (
        "v1",
        "pods",
        "ml",
        "p-0",
        "binding",
    )
    r = parse_path(f"{RESERVATIONS}/g1")
    assert (r.group_version, r.resource, r.namespace, r.name) == (
        "topogang.io/v1alpha1",
        "gangreservations",
        "topogang-system",
        "g1",
    )
    assert parse_path("/api/v1/nodes").namespace is None and parse_path("/api/v1/pods").name is None
    with pytest.raises(ApiError):
        parse_path("/healthz")
    assert merge_patch({"a": {"b": 1, "c": 2}}, {"a": {"b": None, "d": 3}}) == {"a": {"c": 2, "d": 3}}


def test_any_custom_resource_gets_create_read_update_delete_with_preconditions() -> None:
    async def go() -> None:
        kube = FakeKube(FakeApiServer())
        made = await kube.request("POST", RESERVATIONS, body={"metadata": {"name": "g1"}, "spec": {"n": 1}})
        assert made is not None
        uid, rv = made["metadata"]["uid"], made["metadata"]["resourceVersion"]
        with pytest.raises(ApiError) as exists:
            await kube.request("POST", RESERVATIONS, body={"metadata": {"name": "g1"}})
        assert exists.value.status == 409 and exists.value.reason == "AlreadyExists"
        newer = await kube.request(
            "PUT",
            f"{RESERVATIONS}/g1",
            body={"metadata": {"name": "g1", "resourceVersion": rv}, "spec": {"n": 2}},
        )
        assert newer is not None and newer["spec"] == {"n": 2} and newer["metadata"]["uid"] == uid
        with pytest.raises(ApiError) as stale:  # the resourceVersion it was read at is gone
            await kube.request(
                "PUT", f"{RESERVATIONS}/g1", body={"metadata": {"name": "g1", "resourceVersion": rv}}
            )
        assert stale.value.status == 409
        patched = await kube.request("PATCH", f"{RESERVATIONS}/g1", body={"spec": {"m": 3}})
        assert patched is not None and patched["spec"] == {"n": 2, "m": 3}
        items, list_rv = await kube.list(RESERVATIONS)
        assert [i["metadata"]["name"] for i in items] == ["g1"] and int(list_rv) >= 3
        with pytest.raises(ApiError) as wrong:
            await kube.request("DELETE", f"{RESERVATIONS}/g1", body={"preconditions": {"uid": "other"}})
        assert wrong.value.status == 409
        await kube.request("DELETE", f"{RESERVATIONS}/g1", body={"preconditions": {"uid": uid}})
        assert await kube.request("GET", f"{RESERVATIONS}/g1") is None  # 404 reads as None
        assert await kube.request("DELETE", f"{RESERVATIONS}/g1") is None

    vclock.run(go())


def test_bindings_and_graceful_deletion_of_pods_work_as_the_api_servers() -> None:
    async def go() -> None:
        server = FakeApiServer()
        kube = FakeKube(server)
        p = await kube.request("POST", PODS, body=pod("p-0"))
        assert p is not None
        uid = p["metadata"]["uid"]
        with pytest.raises(ApiError) as other:  # a re-created pod of the same name is refused
            await kube.request("POST", f"{PODS}/p-0/binding", body=binding("not-it", "n1"))
        assert other.value.status == 409
        await kube.request("POST", f"{PODS}/p-0/binding", body=binding(uid, "n1", gpus="0,1"))
        bound = await kube.request("GET", f"{PODS}/p-0")
        assert bound is not None and bound["spec"]["nodeName"] == "n1"
        assert bound["metadata"]["annotations"] == {"gpus": "0,1"}
        with pytest.raises(ApiError) as again:
            await kube.request("POST", f"{PODS}/p-0/binding", body=binding(uid, "n1"))
        assert again.value.status == 409 and "already assigned" in again.value.message
        assert await kube.request("POST", f"{PODS}/gone/binding", body=binding(uid, "n1")) is None
        await kube.request("DELETE", f"{PODS}/p-0")
        going = await kube.request("GET", f"{PODS}/p-0")
        assert going is not None and going["metadata"]["deletionTimestamp"]  # until the kubelet lets go
        assert server.finalize(f"{PODS}/p-0") and await kube.request("GET", f"{PODS}/p-0") is None
        unbound = await kube.request("POST", PODS, body=pod("p-1"))
        assert unbound is not None
        await kube.request("DELETE", f"{PODS}/p-1")
        assert await kube.request("GET", f"{PODS}/p-1") is None  # never scheduled: gone at once
        await kube.request("POST", "/api/v1/namespaces/ml/events", body={"reason": "X"})
        assert server.event_count == 1 and not server.items("v1", "events")

    vclock.run(go())


def test_watches_resume_answer_410_after_compaction_and_can_be_cut_or_ended() -> None:
    async def go() -> None:
        server = FakeApiServer()
        kube = FakeKube(server)
        await kube.request("POST", PODS, body=pod("a"))
        _, rv = await kube.list("/api/v1/pods")
        await kube.request("POST", PODS, body=pod("b"))
        seen: list[tuple[str, str]] = []

        async def follow(start: str) -> None:
            async for kind, obj in kube.watch("/api/v1/pods", start):
                seen.append((kind, obj["metadata"]["name"]))

        task = asyncio.create_task(follow(rv))
        await asyncio.sleep(0.1)
        assert seen == [("ADDED", "b")] and kube.caught_up("/api/v1/pods")
        await kube.request("DELETE", f"{PODS}/a")
        await asyncio.sleep(0.1)
        assert seen[-1] == ("DELETED", "a")
        kube.cut_watches()
        with pytest.raises(ConnectionResetError):
            await task
        task = asyncio.create_task(follow(rv))
        await asyncio.sleep(0.1)
        kube.end_watches()
        await task  # ends cleanly
        server.compact()
        with pytest.raises(GoneError):
            await follow(rv)
        task = asyncio.create_task(follow(str(server.rv)))
        await asyncio.sleep(server.watch_seconds + 1)  # the server's own timeout ends it too
        assert task.done() and task.exception() is None
        kube.close()
        with pytest.raises(ConnectionClosedError):
            await kube.request("GET", f"{PODS}/b")

    vclock.run(go())


def test_injected_faults_fire_as_described_and_only_on_matching_requests() -> None:
    async def go() -> None:
        server = FakeApiServer()
        kube = FakeKube(server)
        await kube.request("POST", PODS, body=pod("p"))
        kube.inject(Fault("POST", r"/binding$", "error", 1, 503, label="b503"))
        kube.inject(Fault("POST", r"/binding$", "timeout", 1))
        kube.inject(Fault("POST", r"/binding$", "lost-reply", 1))
        assert await kube.request("GET", f"{PODS}/p") is not None  # not a match: untouched
        uid = server.objects[("v1", "pods", "ml", "p")]["metadata"]["uid"]
        with pytest.raises(ApiError) as err:
            await kube.request("POST", f"{PODS}/p/binding", body=binding(uid, "n1"))
        assert err.value.status == 503
        with pytest.raises(TimeoutError):
            await kube.request("POST", f"{PODS}/p/binding", body=binding(uid, "n1"))
        assert "nodeName" not in server.objects[("v1", "pods", "ml", "p")]["spec"]  # not applied
        with pytest.raises(TimeoutError):
            await kube.request("POST", f"{PODS}/p/binding", body=binding(uid, "n1"))
        assert server.objects[("v1", "pods", "ml", "p")]["spec"]["nodeName"] == "n1"  # applied
        kube.inject(Fault("GET", r"/pods/p$", "delay", 1, seconds=30))
        t0 = asyncio.get_running_loop().time()
        await kube.request("GET", f"{PODS}/p")
        assert asyncio.get_running_loop().time() - t0 >= 30
        assert kube.injected == {"b503": 1, "timeout": 1, "lost-reply": 1, "delay": 1} and not kube.faults

    vclock.run(go())


def test_the_virtual_clock_runs_timers_in_order_without_waiting_and_reports_deadlocks() -> None:
    async def go() -> list[float]:
        loop = asyncio.get_running_loop()
        fired: list[float] = []
        for d in (300.0, 5.0, 60.0):
            loop.call_later(d, lambda: fired.append(loop.time()))
        await asyncio.sleep(400)
        return fired

    clock = vclock.VirtualClock(1000.0)
    assert vclock.run(go(), clock) == [1005.0, 1060.0, 1300.0] and clock.now == 1400.0

    async def stuck() -> None:
        await asyncio.Event().wait()

    with pytest.raises(vclock.DeadlockError, match="wait on each other"):
        vclock.run(stuck())
