"""A superseded attempt's barrier is told 409 through the tenant door, in Kubernetes mode: a real
uvicorn serving the Kubernetes-mode service against the in-memory API server (`test_read_doors`).

FrameworkController starts attempt `1_cm-b` of `vision/tf`: the new attempt's first pod is filtered,
which lets the old attempt's gang go and evicts its pods. An old pod still terminating (its barrier
may still be polling) is in no gang any more, yet the door lets it through to its own framework's
route, which answers its `?attempt=0_cm-a` with 409, so `topogang barrier` exits 210 at once rather
than reading a 403 as the ledger unreachable and falling back to the Framework. The door's rule is
otherwise as before: only its own framework (another tenant's gang, or its framework's name read in
another namespace, is 403), and once the pod is gone, nothing.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from extender.gangs import barrier
from extender.http.doors import FRAMEWORK_PATH
from extender.kube.client import pod_path
from tests.extender.helpers import nodes
from tests.integration.test_read_doors import ATTEMPT, Scene, barrier_env, place, serving
from tests.ledger.fc import fc_pod

NEXT = "1_cm-b"


async def next_attempt(scene: Scene) -> None:
    """FrameworkController replaces the old attempt's ps-0 with the new attempt's, which is filtered:
    the old attempt is superseded, its workers evicted (terminating: their kubelet has not stopped them)."""
    srv = scene.kube.server
    path = pod_path("vision", "tf-ps-0")
    srv.delete(path)
    srv.finalize(path)
    new = fc_pod("vision", "tf", "ps", 0, attempt=NEXT)
    srv.put(path, new)
    ledger = scene.service.scheduler.gang_ledger
    for _ in range(500):
        r = await scene.http.post(
            "/v1/extender/filter", json={"Pod": new, "Nodes": None, "NodeNames": nodes()}
        )
        if r.json().get("NodeNames"):
            break
        await asyncio.sleep(0.02)  # until the watch has brought the new pod
    else:
        raise AssertionError(f"the new attempt's pod was never placed: {r.text}")
    assert (
        ledger.frameworks[("vision", "tf")].attempt == NEXT and f"vision/tf/{ATTEMPT}" not in ledger.records
    )
    old = [p for p in scene.pods[("vision", "tf")] if p["metadata"]["name"] != "tf-ps-0"]
    for _ in range(500):
        if all(
            srv.at(pod_path("vision", p["metadata"]["name"]))["metadata"].get("deletionTimestamp")
            for p in old
        ):
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the old attempt's workers were never evicted")


def test_a_superseded_attempts_barrier_is_told_409_until_its_pod_is_gone(tmp_path: Path) -> None:
    async def go() -> None:
        async with serving() as scene:
            await place(scene)
            srv = scene.kube.server
            worker = scene.pods[("vision", "tf")][1]
            assert worker["metadata"]["name"] == "tf-worker-0"
            srv.pod_token("t-old-worker", worker)
            srv.pod_token("t-pod-b", scene.pods[("nlp", "lm")][0])
            h = {"Authorization": "Bearer t-old-worker"}
            await next_attempt(scene)

            stale = await scene.http.get(f"/v1/gangs/vision/tf?attempt={ATTEMPT}", headers=h)
            assert stale.status_code == 409, stale.text
            assert stale.json()["reason"] == "StaleAttempt" and NEXT in stale.json()["message"]
            current = await scene.http.get("/v1/gangs/vision/tf", headers=h)  # its own framework's
            assert current.status_code == 200 and current.json()["gang"]["attemptInstanceUID"] == NEXT
            framework = await scene.http.get(FRAMEWORK_PATH.format(namespace="vision", name="tf"), headers=h)
            assert framework.status_code == 200  # the stock barrier's read: its own Framework
            for path in (
                "/v1/gangs/nlp/lm",
                "/v1/gangs/nlp/tf",
                "/v1/gangs/vision/lm",
                FRAMEWORK_PATH.format(namespace="nlp", name="lm"),
                FRAMEWORK_PATH.format(namespace="nlp", name="tf"),
            ):
                refused = await scene.http.get(path, headers=h)  # nothing else, in no other namespace
                assert refused.status_code == 403, (path, refused.text)
                assert "may read only its own" in refused.json()["Error"]
            other = await scene.http.get("/v1/gangs/vision/tf", headers={"Authorization": "Bearer t-pod-b"})
            assert other.status_code == 403  # the other tenant's pod: as before

            env = {
                **barrier_env(scene, "worker"),
                "TOPOGANG_TOKEN_FILE": str(tmp_path / "token"),
                "TOPOGANG_BARRIER_DIR": str(tmp_path / "out"),
            }
            (tmp_path / "token").write_text("t-old-worker\n")
            lines: list[str] = []
            got = await asyncio.to_thread(barrier.run, barrier.settings_from_env(env), log=lines.append)
            assert got == barrier.EXIT_PERMANENT, lines

            path = pod_path("vision", "tf-worker-0")
            assert srv.finalize(path)  # the kubelet stopped it: the pod is gone
            ledger = scene.service.scheduler.gang_ledger
            for _ in range(500):
                if worker["metadata"]["uid"] not in ledger.parked.pods:
                    break
                await asyncio.sleep(0.02)
            else:
                raise AssertionError("the ledger kept the gone pod")
            gone = await scene.http.get(f"/v1/gangs/vision/tf?attempt={ATTEMPT}", headers=h)
            assert gone.status_code == 403, gone.text

    asyncio.run(go())
