"""The pods of an expired gang, as the tenant door asks after them (`ledger_api.gang_of_pod`).

A gang whose reservation's TTL ran out before it was whole is let go: the ledger keeps it as a
tombstone (phase Expired) for its barriers, and its members are in no gang any more (the bound ones
are being evicted). Their barriers may still poll. Each such pod is named its own gang while the
tombstone that counted it lasts, so the door lets it through and the route answers Expired (which
`topogang barrier` takes as final, 201) rather than 403 (which it takes as the ledger unreachable).
The door's rule holds: only its own gang, in its own namespace; once the pod is gone, or its gang is
placed afresh without it, or the tombstone is gone, nothing. A framework attempt's pod is told its
attempt is stale (409) once a newer attempt supersedes the expired one, as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import uvicorn

from extender.gangs.ledger import TOMBSTONE_SECONDS
from extender.gangs.ledger_records import Phase, Record
from extender.http.app import Service, build_app
from extender.http.doors import FRAMEWORK_PATH, GangRef, PodRef
from extender.http.ledger_api import gang_of_pod
from extender.kube.client import pod_path
from extender.kube.service import framework_path, kube_service
from loadtest.kubefake import FakeKube
from tests.extender.helpers import Clock, example, nodes, pod, ready_node, spec, until_ready
from tests.integration.test_read_doors import framework_object
from tests.ledger.fc import fc_pod, members
from tests.ledger.test_ledger_phases import World


def expire(w: World) -> None:
    released = w.core.expire(w.clock() + 61)
    assert released
    for r in released:
        w.ledger.released(w.core, r, w.wait_of)


def plain_gang(w: World) -> tuple[Any, Any]:
    """Gang `nlp/grp` of two pods: the first bound, the second filtered and waiting for its slot."""
    one, two = (
        w.seen(pod(f"p-{i}", f"job-{i}", "nlp", spec("nlp", 4, pods=2, group="nlp/grp"))) for i in range(2)
    )
    w.place(one)
    w.bind(one)
    return one, two


def test_an_expired_gangs_pods_read_its_tombstone_and_nothing_else() -> None:
    w = World()
    one, two = plain_gang(w)
    expire(w)
    assert one.uid not in w.ledger.pods and two.uid not in w.ledger.pods  # in no gang any more
    for pr in (one, two):
        assert gang_of_pod(w.ledger, PodRef("nlp", pr.name, pr.uid)) == GangRef("nlp", "grp", False)
    got = w.ledger.resolve(w.core, "nlp", "grp", None)  # what the route reads for that path
    assert isinstance(got, Record) and got.phase is Phase.EXPIRED and got.gang == one.gang
    doc = w.ledger.status(w.core, got, w.wait_of)
    assert doc["phase"] == "Expired" and "expired" in doc["reason"]
    assert {m["podUID"] for m in doc["members"]} <= {one.uid, None}  # its own gang's members only
    for other in (
        PodRef("vision", one.name, one.uid),  # another namespace
        PodRef("nlp", "job-9", one.uid),  # another name
        PodRef("nlp", one.name, "not-its-uid"),  # another pod of that name
    ):
        assert gang_of_pod(w.ledger, other) is None
    w.ledger.pod_gone(w.core, one.uid, w.wait_of)
    assert gang_of_pod(w.ledger, PodRef("nlp", one.name, one.uid)) is None  # gone: nothing


def test_a_gang_placed_afresh_or_a_tombstone_gone_names_an_old_pod_nothing() -> None:
    w = World()
    one, two = plain_gang(w)
    expire(w)
    me = PodRef("nlp", one.name, one.uid)
    assert gang_of_pod(w.ledger, me) == GangRef("nlp", "grp", False)
    w.seen(pod("p-1", "job-1", "nlp", spec("nlp", 4, pods=2, group="nlp/grp")))  # filtered again
    assert gang_of_pod(w.ledger, PodRef("nlp", two.name, two.uid)) == GangRef("nlp", "grp", False)
    assert gang_of_pod(w.ledger, me) is None  # no member of the gang placed afresh
    w.ledger.prune(w.core)
    assert one.uid not in w.ledger.parked.pods

    w = World()
    one, _two = plain_gang(w)
    expire(w)
    w.ledger.prune(w.core)  # the tombstone lasts: so does the pod kept for it
    assert gang_of_pod(w.ledger, PodRef("nlp", one.name, one.uid)) == GangRef("nlp", "grp", False)
    w.clock.t += TOMBSTONE_SECONDS + 1
    w.ledger.prune(w.core)
    assert "nlp/grp" not in w.ledger.records and not w.ledger.parked.pods
    assert gang_of_pod(w.ledger, PodRef("nlp", one.name, one.uid)) is None


def test_an_expired_attempts_pod_reads_its_tombstone_until_a_newer_attempt_supersedes_it() -> None:
    w = World()
    ps = w.seen(fc_pod("ml", "tf", "ps", 0, attempt="0_a"))
    w.seen(fc_pod("ml", "tf", "worker", 0, attempt="0_a"))
    w.place(ps)
    w.bind(ps)
    expire(w)
    me = PodRef("ml", ps.name, ps.uid)
    assert gang_of_pod(w.ledger, me) == GangRef("ml", "tf", True)
    for attempt in (None, "0_a"):  # the barrier's read, with its attempt or without
        got = w.ledger.resolve(w.core, "ml", "tf", attempt)
        assert isinstance(got, Record) and got.phase is Phase.EXPIRED and got.gang == ps.gang
    assert gang_of_pod(w.ledger, PodRef("nlp", ps.name, ps.uid)) is None
    new = fc_pod("ml", "tf", "ps", 0, attempt="1_b", uid="ps-0-of-1_b")
    assert w.ledger.seen(w.req(new), new).superseded == ps.gang
    assert gang_of_pod(w.ledger, me) == GangRef("ml", "tf", True)  # its own framework's, as before
    assert isinstance(w.ledger.resolve(w.core, "ml", "tf", "0_a"), str)  # and the route says 409


# ------------------------------------------------------------------------------------ over HTTP
@dataclass
class Scene:
    kube: FakeKube
    service: Service
    clock: Clock
    http: httpx.AsyncClient


@contextlib.asynccontextmanager
async def serving(pods: list[dict[str, Any]]) -> AsyncIterator[Scene]:
    """The Kubernetes-mode service on a real uvicorn over the in-memory API server, its clock ours."""
    kube = FakeKube()
    for n in nodes():
        kube.server.put(f"/api/v1/nodes/{n}", ready_node(n, 8))
    fw = framework_object("vision", "tf")
    for role in fw["status"]["attemptStatus"]["taskRoleStatuses"]:
        for task in role["taskStatuses"]:  # as FrameworkController writes them once its pods run
            task["attemptStatus"]["podIP"] = f"10.9.0.{task['index'] + 1}"
    kube.server.put(framework_path("vision", "tf"), fw)
    for p in pods:
        kube.server.put(pod_path(p["metadata"]["namespace"], p["metadata"]["name"]), p)
    clock = Clock(1000.0)
    service = kube_service(example(), kube, clock=clock, namespace="topogang-system")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    server = uvicorn.Server(uvicorn.Config(build_app(service), log_level="warning", access_log=False))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{sock.getsockname()[1]}", timeout=10) as h:
            await until_ready(h)
            yield Scene(kube, service, clock, h)
    finally:
        server.should_exit = True
        await task
        sock.close()


async def filter_and_bind(scene: Scene, p: dict[str, Any]) -> None:
    r = await scene.http.post("/v1/extender/filter", json={"Pod": p, "Nodes": None, "NodeNames": nodes()})
    assert r.json().get("NodeNames"), r.text
    m = p["metadata"]
    binding = {"PodName": m["name"], "PodNamespace": m["namespace"], "PodUID": m["uid"]}
    r = await scene.http.post("/v1/extender/bind", json={**binding, "Node": r.json()["NodeNames"][0]})
    assert r.json() == {"Error": ""}, r.text


def test_an_expired_gangs_pod_is_told_expired_through_the_tenant_door() -> None:
    """Kubernetes mode, the door in front: framework `vision/tf` (ps-0 and worker-0 bound, worker-1
    never placed) and gang `nlp/grp` (one of two bound) expire; `vision/lm` runs whole. Each expired
    pod reads its own gang, Expired, and its Framework with no pod IP; nothing of another gang or
    namespace; once gone, nothing."""
    fc = members("vision", "tf", attempt="0_cm-a")
    plain = [pod(f"p-{i}", f"job-{i}", "nlp", spec("nlp", 4, pods=2, group="nlp/grp")) for i in range(2)]
    other = members("vision", "lm", attempt="0_cm-z")

    async def go() -> None:
        async with serving(fc + plain + other) as scene:
            for p in (fc[0], fc[1], plain[0], *other):
                await filter_and_bind(scene, p)
            srv = scene.kube.server
            srv.pod_token("t-ps", fc[0])
            srv.pod_token("t-plain", plain[0])
            srv.pod_token("t-lm", other[0])
            ps, grp, lm = ({"Authorization": f"Bearer {t}"} for t in ("t-ps", "t-plain", "t-lm"))
            assert (await scene.http.get("/v1/gangs/vision/tf", headers=ps)).json()["phase"] == "Reserved"
            scene.clock.t += 400  # past the example's 300 s TTL
            assert sorted(r.gang for r in await scene.service.scheduler.expire()) == [
                "nlp/grp",
                "vision/tf/0_cm-a",
            ]
            for who, path in (
                (ps, "/v1/gangs/vision/tf"),
                (ps, "/v1/gangs/vision/tf?attempt=0_cm-a&waitFor=Ready&timeoutSeconds=5"),
                (grp, "/v1/gangs/nlp/grp"),
            ):
                r = await scene.http.get(path, headers=who)
                assert r.status_code == 200, (path, r.text)
                doc = r.json()
                assert doc["phase"] == "Expired" and "expired" in doc["reason"], doc
                gang_pods = {p["metadata"]["uid"] for p in (fc if who is ps else plain)}
                assert {m["podUID"] for m in doc["members"]} - {None} <= gang_pods  # its own only
            r = await scene.http.get(FRAMEWORK_PATH.format(namespace="vision", name="tf"), headers=ps)
            assert r.status_code == 200 and "10.9." not in r.text  # its own Framework, no pod IP
            for who, path in (
                (ps, "/v1/gangs/vision/lm"),
                (ps, "/v1/gangs/nlp/grp"),
                (ps, "/v1/gangs/nlp/tf"),
                (ps, FRAMEWORK_PATH.format(namespace="vision", name="lm")),
                (grp, "/v1/gangs/vision/tf"),
                (grp, "/v1/gangs/vision/grp"),
                (grp, FRAMEWORK_PATH.format(namespace="nlp", name="grp")),  # no framework: no proxy
                (lm, "/v1/gangs/vision/tf"),
                (lm, "/v1/gangs/nlp/grp"),
            ):
                r = await scene.http.get(path, headers=who)
                assert r.status_code == 403, (path, r.text)
            path = pod_path("vision", fc[0]["metadata"]["name"])
            assert srv.at(path)["metadata"].get("deletionTimestamp")  # evicted by the expiry
            assert srv.finalize(path)  # the kubelet stopped it: the pod is gone
            ledger = scene.service.scheduler.gang_ledger
            for _ in range(500):
                if fc[0]["metadata"]["uid"] not in ledger.parked.pods:
                    break
                await asyncio.sleep(0.02)
            else:
                raise AssertionError("the ledger kept the gone pod")
            assert (await scene.http.get("/v1/gangs/vision/tf", headers=ps)).status_code == 403

    asyncio.run(go())
