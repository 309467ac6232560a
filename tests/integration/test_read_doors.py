"""Every route's door over HTTP, in Kubernetes mode: a real uvicorn on 127.0.0.1 serving the
Kubernetes-mode service against the in-memory API server (loadtest/kubefake.py), whose TokenReview and
SubjectAccessReview answer for this test's tokens.

Two tenants each run a FrameworkController job (`vision/tf`, `nlp/lm`) whose Framework's pod template
holds a secret in its env. Every route of the app is called by every kind of caller, and the answer's
status is the one its door (extender/http/doors.py) says: anonymous 401, a token for another
audience 401, a user without the ClusterRole 403, a job pod 200 for its own gang and Framework and 403
for anything else, the viewer 200, and the admin listener (what `kubectl port-forward` reaches) 200
without a token. What each one sees: its own gang with its members' IPs, the Framework without the
pod template, metrics without a gang's or a pod's name.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from starlette.routing import Mount, Route

from extender.gangs import barrier
from extender.http.app import Service, build_app
from extender.http.doors import FRAMEWORK_PATH, GANG_PATH, ROUTES, Door
from extender.kube.client import pod_path
from extender.kube.service import framework_path, kube_service
from loadtest.kubefake import FakeKube
from tests.extender.helpers import example, nodes, pod, ready_node, spec, until_ready
from tests.ledger.fc import members

SECRET = "hunter2-never-shown"
A, B = ("vision", "tf"), ("nlp", "lm")
ATTEMPT = "0_cm-a"


def _socket() -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    s.listen(64)
    return s


def framework_object(ns: str, name: str) -> dict[str, Any]:
    """The Framework as FrameworkController keeps it: the pod template (with a secret), statuses."""
    env = [{"name": "API_KEY", "value": SECRET}]
    roles = {"ps": 1, "worker": 2}
    return {
        "apiVersion": "frameworkcontroller.microsoft.com/v1",
        "kind": "Framework",
        "metadata": {"name": name, "namespace": ns, "annotations": {"owner-note": SECRET}},
        "spec": {
            "taskRoles": [
                {
                    "name": r,
                    "taskNumber": n,
                    "task": {"pod": {"spec": {"containers": [{"name": "m", "env": env}]}}},
                }
                for r, n in roles.items()
            ]
        },
        "status": {
            "attemptStatus": {
                "instanceUID": ATTEMPT,
                "taskRoleStatuses": [
                    {
                        "name": r,
                        "taskStatuses": [
                            {"index": i, "attemptStatus": {"podName": f"{name}-{r}-{i}", "podIP": None}}
                            for i in range(n)
                        ],
                    }
                    for r, n in roles.items()
                ],
            }
        },
    }


@dataclass
class Scene:
    kube: FakeKube
    service: Service
    http: httpx.AsyncClient
    admin: httpx.AsyncClient
    pods: dict[tuple[str, str], list[dict[str, Any]]]


@contextlib.asynccontextmanager
async def serving() -> AsyncIterator[Scene]:
    kube = FakeKube()
    for n in nodes():
        kube.server.put(f"/api/v1/nodes/{n}", ready_node(n, 8))
    jobs = {job: members(*job, attempt=ATTEMPT) for job in (A, B)}
    for ns, name in jobs:
        kube.server.put(framework_path(ns, name), framework_object(ns, name))
        for p in jobs[(ns, name)]:
            kube.server.put(pod_path(ns, p["metadata"]["name"]), p)
    service = kube_service(example(), kube, namespace="topogang-system")
    main, admin = _socket(), _socket()
    service.admin_port = admin.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(build_app(service), log_level="warning", access_log=False))
    task = asyncio.create_task(server.serve(sockets=[main, admin]))
    url = "http://127.0.0.1:{}"
    try:
        async with (
            httpx.AsyncClient(base_url=url.format(main.getsockname()[1]), timeout=10) as http,
            httpx.AsyncClient(base_url=url.format(admin.getsockname()[1]), timeout=10) as admin_http,
        ):
            await until_ready(http)
            yield Scene(kube, service, http, admin_http, jobs)
    finally:
        server.should_exit = True
        await task
        main.close()
        admin.close()


async def place(scene: Scene) -> None:
    """Every pod of both jobs filtered and bound (verbs: no token), then given a pod IP."""
    for job, pods in scene.pods.items():
        for i, p in enumerate(pods):
            r = await scene.http.post(
                "/v1/extender/filter", json={"Pod": p, "Nodes": None, "NodeNames": nodes()}
            )
            assert r.status_code == 200 and r.json()["NodeNames"], (job, r.text)
            m = p["metadata"]
            binding = {"PodName": m["name"], "PodNamespace": m["namespace"], "PodUID": m["uid"]}
            r = await scene.http.post("/v1/extender/bind", json={**binding, "Node": r.json()["NodeNames"][0]})
            assert r.json() == {"Error": ""}, r.text
            path = pod_path(m["namespace"], m["name"])
            live = scene.kube.server.at(path)
            live["status"] = {"phase": "Running", "podIP": f"10.9.{len(job[0])}.{i + 1}"}
            scene.kube.server.put(path, live)
    ledger = scene.service.scheduler.gang_ledger
    for _ in range(500):
        if len(ledger.pods) == 6 and all(f.ip for f in ledger.pods.values()):
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the watch never brought the pods' IPs")


def tokens(scene: Scene) -> dict[str, dict[str, str]]:
    """Caller -> request headers; each token known to the fake API server."""
    srv = scene.kube.server
    a0, b0 = scene.pods[A][0], scene.pods[B][0]
    srv.pod_token("t-pod-a", a0)
    srv.pod_token("t-pod-b", b0)
    srv.pod_token("t-pod-a-api-audience", a0, audiences=("",))  # the pod's default token: not ours
    gone = {"metadata": {**a0["metadata"], "uid": "a-pod-deleted-long-ago"}}
    srv.pod_token("t-pod-gone", gone)
    srv.add_token("t-alice", "alice", groups=["platform"], audiences=("topogang",))
    srv.add_token("t-bob", "bob", audiences=("topogang",))
    for resource, verb in (("clusterstatus", "get"), ("gangs", "get"), ("gangs", "list")):
        srv.grant("platform", resource, verb)  # the chart's topogang-viewer, bound to a group
    out = {
        "anonymous": {},
        "garbage": {"Authorization": "Bearer not-a-token"},
        "basic": {"Authorization": "Basic eDp5"},
        "empty": {"Authorization": "Bearer"},
        "long": {"Authorization": "Bearer " + "x" * 17_000},
    }
    for who in ("pod-a", "pod-b", "pod-a-api-audience", "pod-gone", "alice", "bob"):
        out[who] = {"Authorization": f"Bearer t-{who}"}
    return out


# Every route of the Kubernetes mode (but the verbs), as one concrete request each.
REQUESTS: dict[str, tuple[str, str]] = {
    "/": ("GET", "/"),
    "/healthz": ("GET", "/healthz"),
    "/readyz": ("GET", "/readyz"),
    "/metrics": ("GET", "/metrics"),
    "/ui/static": ("GET", "/ui/static/ui.css"),
    "/v1/inspect": ("GET", "/v1/inspect"),
    "/v1/inspect/clusterstatus": ("GET", "/v1/inspect/clusterstatus"),
    "/v1/inspect/clusterstatus/physicalcluster": ("GET", "/v1/inspect/clusterstatus/physicalcluster"),
    "/v1/inspect/clusterstatus/virtualclusters": ("GET", "/v1/inspect/clusterstatus/virtualclusters"),
    "/v1/inspect/clusterstatus/virtualclusters/": ("GET", "/v1/inspect/clusterstatus/virtualclusters/"),
    "/v1/inspect/clusterstatus/virtualclusters/{vc}": (
        "GET",
        "/v1/inspect/clusterstatus/virtualclusters/nlp",
    ),
    "/v1/inspect/affinitygroups": ("GET", "/v1/inspect/affinitygroups"),
    "/v1/inspect/affinitygroups/": ("GET", "/v1/inspect/affinitygroups/"),
    "/v1/inspect/affinitygroups/{name:path}": ("GET", f"/v1/inspect/affinitygroups/nlp/lm/{ATTEMPT}"),
    "/v1/explain": ("POST", "/v1/explain"),
    "/ui": ("GET", "/ui"),
    "/ui/": ("GET", "/ui/"),
    "/v1/ui/state": ("GET", "/v1/ui/state"),
    "/v1/config": ("GET", "/v1/config"),
    "/v1/gangs": ("GET", "/v1/gangs"),
    "/v1/gangs/": ("GET", "/v1/gangs/"),
    GANG_PATH: ("GET", "/v1/gangs/vision/tf"),
    FRAMEWORK_PATH: ("GET", "/apis/frameworkcontroller.microsoft.com/v1/namespaces/vision/frameworks/tf"),
}
# What each caller gets at each door (for `tenant`: the request above, vision/tf, pod-a's own job).
EXPECTED: dict[Door, dict[str, int]] = {
    Door.OPEN: {},  # 200 for everybody
    Door.ADMIN: {"pod-a": 403, "pod-b": 403, "bob": 403, "pod-gone": 403, "alice": 200},
    Door.TENANT: {"pod-a": 200, "pod-b": 403, "bob": 403, "pod-gone": 403, "alice": 200},
}
UNAUTHENTICATED = ("anonymous", "garbage", "basic", "empty", "long", "pod-a-api-audience")
EXPLAIN = pod("what-if", "what-if", "nlp", spec("nlp", 8, pods=4, group="nlp/big", priority=1000))


async def call(client: httpx.AsyncClient, path: str, headers: dict[str, str]) -> httpx.Response:
    method, url = REQUESTS[path]
    if method == "POST":
        return await client.post(url, json={"Pod": EXPLAIN}, headers=headers)
    return await client.get(url, headers=headers)


def test_every_route_answers_each_caller_as_its_door_says() -> None:
    async def go() -> None:
        async with serving() as scene:
            await place(scene)
            callers = tokens(scene)
            app_paths = {r.path for r in build_app(scene.service).routes if isinstance(r, Route | Mount)}
            verbs = {p for p in app_paths if ROUTES[p].door is Door.VERBS}
            assert set(REQUESTS) == app_paths - verbs, "every route is called here"
            seen = []
            for path in REQUESTS:
                door = ROUTES[path].door
                for who, headers in callers.items():
                    r = await call(scene.http, path, headers)
                    want = (
                        401
                        if who in UNAUTHENTICATED and door is not Door.OPEN
                        else EXPECTED[door].get(who, 200)
                    )
                    if want == 200 and path == "/ui/":
                        want = 307  # a redirect to /ui
                    seen.append((path, who, r.status_code, want))
                    if r.status_code == 401:
                        assert r.headers["www-authenticate"].startswith("Bearer"), path
                    if r.status_code in (401, 403):
                        body = r.json()
                        assert body["kind"] == "Status" and body["code"] == r.status_code and body["Error"]
                r = await call(scene.admin, path, {})  # the admin listener: no token, every door
                seen.append((path, "admin listener", r.status_code, 307 if path == "/ui/" else 200))
            wrong = [s for s in seen if s[2] != s[3]]
            assert not wrong, "\n".join(f"{p} as {w}: {got}, expected {want}" for p, w, got, want in wrong)

    asyncio.run(go())


def test_a_pod_reads_its_own_gang_and_framework_and_nothing_of_another_namespace() -> None:
    async def go() -> None:
        async with serving() as scene:
            await place(scene)
            h = tokens(scene)
            own = await scene.http.get("/v1/gangs/vision/tf", headers=h["pod-a"])
            doc = own.json()
            assert own.status_code == 200 and doc["phase"] == "Ready", doc
            assert sorted(m["podName"] for m in doc["members"]) == ["tf-ps-0", "tf-worker-0", "tf-worker-1"]
            assert SECRET not in own.text and doc["framework"]["spec"]["taskRoles"][0] == {
                "name": "ps",
                "taskNumber": 1,
            }
            fw = await scene.http.get(REQUESTS[FRAMEWORK_PATH][1], headers=h["pod-a"])
            assert fw.status_code == 200 and SECRET not in fw.text
            ips = [
                t["attemptStatus"]["podIP"]
                for r in fw.json()["status"]["attemptStatus"]["taskRoleStatuses"]
                for t in r["taskStatuses"]
            ]
            assert all(ip and ip.startswith("10.9.") for ip in ips), ips  # Ready: the ledger's IPs
            assert (
                "task" not in fw.json()["spec"]["taskRoles"][0] and "annotations" not in fw.json()["metadata"]
            )
            # the other tenant's gang and Framework, its own again, and names that are not its gang
            for path, who, status in (
                ("/v1/gangs/nlp/lm", "pod-a", 403),
                ("/apis/frameworkcontroller.microsoft.com/v1/namespaces/nlp/frameworks/lm", "pod-a", 403),
                ("/v1/gangs/nlp/lm", "pod-b", 200),
                ("/apis/frameworkcontroller.microsoft.com/v1/namespaces/nlp/frameworks/lm", "pod-b", 200),
                ("/v1/gangs/vision/tf-other", "pod-a", 403),
                ("/v1/gangs/nlp/tf", "pod-a", 403),
                (f"/v1/gangs/vision/tf?attempt={ATTEMPT}", "pod-a", 200),
            ):
                r = await scene.http.get(path, headers=h[who])
                assert r.status_code == status, (path, who, r.text)
                if status == 403:
                    assert "may read only its own" in r.json()["Error"] and "lm-" not in r.text
            # reading again and again costs no review: the answers are kept
            before = scene.kube.server.reviews
            for _ in range(5):
                assert (await scene.http.get("/v1/gangs/vision/tf", headers=h["pod-a"])).status_code == 200
            assert scene.kube.server.reviews == before

    asyncio.run(go())


def test_the_viewer_sees_every_namespace_and_metrics_name_no_gang_or_pod() -> None:
    async def go() -> None:
        async with serving() as scene:
            await place(scene)
            h = tokens(scene)
            listed = (await scene.http.get("/v1/gangs", headers=h["alice"])).json()
            assert sorted((g["namespace"], g["name"]) for g in listed["items"]) == [B, A]
            groups = (await scene.http.get("/v1/inspect/affinitygroups", headers=h["alice"])).json()
            assert {g["metadata"]["name"] for g in groups["items"]} == {
                f"vision/tf/{ATTEMPT}",
                f"nlp/lm/{ATTEMPT}",
            }
            explained = await scene.http.post("/v1/explain", json={"Pod": EXPLAIN}, headers=h["alice"])
            assert explained.status_code == 200, explained.text
            refused = await scene.http.post("/v1/explain", json={"Pod": EXPLAIN}, headers=h["pod-a"])
            assert refused.status_code == 403 and "clusterstatus" in refused.json()["Error"]
            metrics = (await scene.http.get("/metrics")).text
            assert "topogang_" in metrics
            for name in ("tf-ps-0", "lm-worker-1", "vision/tf", "nlp/lm", ATTEMPT, "10.9."):
                assert name not in metrics, name

    asyncio.run(go())


def test_an_api_server_that_cannot_review_is_a_503_never_a_yes() -> None:
    from loadtest.kubefake import Fault

    async def go() -> None:
        async with serving() as scene:
            await place(scene)
            h = tokens(scene)
            scene.kube.inject(Fault("POST", "tokenreviews", "error", count=1))
            r = await scene.http.get("/v1/inspect", headers=h["alice"])
            assert r.status_code == 503 and r.json()["reason"] == "ServiceUnavailable"
            assert (await scene.http.get("/v1/inspect", headers=h["alice"])).status_code == 200

    asyncio.run(go())


def barrier_env(scene: Scene, role: str) -> dict[str, str]:
    """What FrameworkController gives task 0 of `role` of framework vision/tf, with the extender
    serving both the ledger and the Framework proxy; quick: a barrier's minute is 1.2 s here."""
    return {
        "FC_FRAMEWORK_NAMESPACE": "vision",
        "FC_FRAMEWORK_NAME": "tf",
        "FC_FRAMEWORK_ATTEMPT_INSTANCE_UID": ATTEMPT,
        "FC_TASKROLE_NAME": role,
        "FC_TASK_INDEX": "0",
        "BARRIER_CHECK_INTERVAL_SEC": "5",
        "BARRIER_CHECK_TIMEOUT_SEC": "60",
        "TOPOGANG_BARRIER_TIME_SCALE": "0.02",
        "TOPOGANG_LEDGER_URL": str(scene.http.base_url),
        "KUBE_APISERVER_ADDRESS": str(scene.http.base_url),
    }


def test_topogang_barrier_passes_with_its_pods_token_and_not_without(tmp_path: Path) -> None:
    """`topogang barrier` as a job pod's init container runs it: its pod's projected token in a file,
    the ledger at the extender. With the token it passes on the gang's Ready; without, the ledger
    and the Framework proxy refuse it and it times out (201), as a stranger's barrier would."""

    async def go() -> None:
        async with serving() as scene:
            await place(scene)
            tokens(scene)
            (tmp_path / "token").write_text("t-pod-a\n")
            env = barrier_env(scene, "ps")
            lines: list[str] = []
            ok = barrier.settings_from_env(
                {
                    **env,
                    "TOPOGANG_TOKEN_FILE": str(tmp_path / "token"),
                    "TOPOGANG_BARRIER_DIR": str(tmp_path / "a"),
                }
            )
            assert await asyncio.to_thread(barrier.run, ok, log=lines.append) == barrier.EXIT_PASS, lines
            assert "export FB_WORKER_IPS=10.9." in (tmp_path / "a" / "injector.sh").read_text()
            assert SECRET not in (tmp_path / "a" / "framework.json").read_text()
            stranger = barrier.settings_from_env(
                {
                    **env,
                    "TOPOGANG_TOKEN_FILE": str(tmp_path / "none"),
                    "TOPOGANG_BARRIER_DIR": str(tmp_path / "b"),
                }
            )
            lines.clear()
            assert await asyncio.to_thread(barrier.run, stranger, log=lines.append) == barrier.EXIT_TIMEOUT
            assert any("HTTP 401" in line for line in lines), lines
            assert not (tmp_path / "b").exists()

    asyncio.run(go())


def test_a_pod_reads_no_other_gang_of_its_namespace_through_a_name_that_leads_elsewhere() -> None:
    """The door compares the path with the caller's gang; the route reads what the path names
    (`GangLedger.key_at`). Two names made them differ: a plain gang named like a framework of its
    namespace (the path reads the framework's gang), and one named `<ns>/<ns>/x` (the path reads
    gang `x`). Such a pod now reads neither path: its own gang has no path of its own."""

    async def go() -> None:
        async with serving() as scene:
            await place(scene)
            ledger = scene.service.scheduler.gang_ledger
            posers = {
                "tf": pod("uid-tf", "poser-tf", "vision", spec("vision", 1, pods=1, group="tf")),
                "alias": pod(
                    "uid-al", "poser-al", "vision", spec("vision", 1, pods=1, group="vision/vision/x")
                ),
                "x": pod("uid-x", "holder-x", "vision", spec("vision", 1, pods=1, group="x")),
            }
            for p in posers.values():
                scene.kube.server.put(pod_path("vision", p["metadata"]["name"]), p)
            await asyncio.sleep(0.3)  # the watch brings them
            for p in posers.values():
                got = await scene.http.post(
                    "/v1/extender/filter", json={"Pod": p, "Nodes": None, "NodeNames": nodes()}
                )
                assert got.json().get("NodeNames"), got.json()
            for _ in range(200):
                if {"uid-tf", "uid-al", "uid-x"} <= set(ledger.pods):
                    break
                await asyncio.sleep(0.02)
            for key, p in posers.items():
                scene.kube.server.pod_token(f"t-{key}", p)
            tf = {"Authorization": "Bearer t-tf"}
            alias = {"Authorization": "Bearer t-alias"}
            assert (await scene.http.get("/v1/gangs/vision/tf", headers=tf)).status_code == 403
            assert (await scene.http.get("/v1/gangs/vision/vision/x", headers=alias)).status_code == 403
            assert (await scene.http.get("/v1/gangs/vision/x", headers=alias)).status_code == 403
            own = await scene.http.get("/v1/gangs/vision/x", headers={"Authorization": "Bearer t-x"})
            assert own.status_code == 200 and own.json()["gang"]["name"] == "x", own.json()

    asyncio.run(go())
