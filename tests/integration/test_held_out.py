"""Checks the route tables alone would not make: random requests at both listeners and across the
doors, a job pod's token trying every way into another namespace's gang, and a connection flood
against both listeners while kube-scheduler still needs its filter answered.

Nothing here judges time; hypothesis' examples are bounded, floods are a fixed number of sockets."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlparse

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extender import kubesched
from tests.integration.conftest import ENABLE, SPEC, Server, running_server, state
from tests.integration.test_read_doors import SECRET, place, serving, tokens
from tests.polling import poll

EXAMPLES = 150
# nlp/lm's gang, spelt every way a path can be bent towards it
OTHER_GANG = (
    "nlp/lm", "nlp%2Flm", "vision/..%2F..%2Fnlp/lm", "vision/tf/../../nlp/lm", "NLP/lm", "nlp/lm/",
    "nlp//lm", "vision/%2e%2e/nlp/lm", "nlp/lm%00", "vision/tf%2F..%2F..%2Fnlp%2Flm",
)  # fmt: skip

# Paths of both apps, and the other app's, with their odd neighbours.
PATHS = (
    "/", "/healthz", "/readyz", "/metrics", "/ui", "/ui/", "/ui/static/ui.css", "/ui/static/../../etc/passwd",
    "/v1/inspect", "/v1/inspect/clusterstatus", "/v1/inspect/clusterstatus/physicalcluster",
    "/v1/inspect/clusterstatus/virtualclusters/nlp", "/v1/inspect/clusterstatus/virtualclusters/%00",
    "/v1/inspect/affinitygroups/", "/v1/inspect/affinitygroups/a/b/c", "/v1/explain", "/v1/ui/state",
    "/v1/config", "/v1/gangs", "/v1/gangs/", "/v1/gangs/default/x", "/v1/gangs/%2e%2e/%2e%2e",
    "/v1/extender/filter", "/v1/extender/prioritize", "/v1/extender/preempt", "/v1/extender/bind",
    "/v1/extender/", "/v1/extender/filter/../bind", "/v1/standalone/bindings",
    "/v1/standalone/pods/no-such-uid", "/v1/standalone/pods/", "/v1/standalone/nodes/no-such-node",
    "/apis/frameworkcontroller.microsoft.com/v1/namespaces/default/frameworks/x", "/%ff", "//v1//gangs",
)  # fmt: skip
METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD")
HEADERS = st.dictionaries(
    st.sampled_from(("Content-Type", "Host", "Authorization", "Accept", "X-Forwarded-For", "Origin")),
    st.sampled_from(
        (
            "application/json",
            "text/plain",
            "application/json; charset=utf-16",
            "",
            "evil.example",
            "127.0.0.1",
            "localhost:1",
            "Bearer x",
            "Bearer " + "a" * 5000,
            "Basic eDp5",
            "*/*",
            "\t",
        )
    ),
    max_size=4,
)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=12),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=8), kids, max_size=3),
    max_leaves=10,
)
NOT_A_POD = {"metadata": {"uid": 7, "name": ["x"]}, "spec": "none"}
BODIES = st.one_of(
    st.just(b""),
    st.binary(max_size=200),
    JSON.map(lambda v: json.dumps(v).encode()),
    st.sampled_from(
        [
            b'{"Pod": null, "NodeNames": ["a100-r1-n1"]}',
            json.dumps({"Pod": NOT_A_POD, "Nodes": None, "NodeNames": ["a100-r1-n1"]}).encode(),
            b'{"PodName": "x", "PodNamespace": "y", "PodUID": "z", "Node": "no-such-node"}',
            b'{"ready": false, "badGpus": [0, 1]}',  # for a node that does not exist
            b"[" * 5000,
        ]
    ),
)


@pytest.fixture(scope="module")
def standalone() -> Iterator[Server]:
    with running_server(args=("--max-connections", "40", "--head-timeout", "1")) as s:
        yield s


def test_random_requests_at_both_listeners_get_no_5xx_and_change_nothing(standalone: Server) -> None:
    """Any method, path (either app's, at either listener), headers and body: never a 5xx, and the
    cluster's cells, gangs and quotas are as they were. The verbs' paths at the read listener are
    never answered there (404, or the 415/421 every path gets for a bad type or Host)."""
    with standalone.client(timeout=30.0) as api:
        before = state(api)
        bases = {"read": standalone.url, "verbs": standalone.verbs_url}
        seen: set[tuple[str, int]] = set()
        with httpx.Client(timeout=30.0) as raw:

            @settings(
                max_examples=EXAMPLES,
                deadline=None,
                database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
            )
            @given(
                st.sampled_from(sorted(bases)),
                st.sampled_from(METHODS),
                st.sampled_from(PATHS),
                HEADERS,
                BODIES,
            )
            def check(door: str, method: str, path: str, headers: dict[str, str], body: bytes) -> None:
                try:
                    r = raw.request(method, bases[door] + path, headers=headers, content=body)
                except httpx.LocalProtocolError:
                    return  # a header httpx itself will not send
                seen.add((door, r.status_code))
                assert r.status_code < 500, (door, method, path, headers, body[:200], r.text[:300])
                if door == "read" and path.startswith("/v1/extender/"):  # never served there
                    assert r.status_code in (404, 405, 415, 421), (method, path, r.status_code)
                assert standalone.process.poll() is None, "".join(standalone.log[-40:])

            check()
        assert state(api) == before
    assert {d for d, _ in seen} == {"read", "verbs"}


def test_a_pods_token_reads_nothing_of_another_namespace_by_any_path() -> None:
    """pod-a (vision/tf) with its own, valid token, at every spelling of nlp/lm's gang and Framework
    (encoded slashes and dots, long-polls, lists filtered to nlp, other attempts, case): never a 5xx,
    never a body with nlp's pods or the Framework's secret."""

    async def go() -> None:
        async with serving() as scene:
            await place(scene)
            h = tokens(scene)["pod-a"]
            fw = "/apis/frameworkcontroller.microsoft.com/v1/namespaces/{}/frameworks/{}"
            names = OTHER_GANG
            paths = [f"/v1/gangs/{n}" for n in names]
            paths += [f"/v1/gangs/{n}?waitFor=Ready&timeoutSeconds=1" for n in names[:3]]
            paths += [f"/v1/gangs/{n}?attempt=0_cm-a" for n in names[:3]]
            paths += ["/v1/gangs?namespace=nlp", "/v1/gangs/?namespace=nlp&limit=1", "/v1/gangs?vc=nlp"]
            paths += [
                fw.format("nlp", "lm"),
                fw.format("nlp", "lm/"),
                fw.format("vision", "..%2F..%2Fnlp%2Flm"),
            ]
            paths += [
                fw.format("nlp", "lm") + "?resourceVersion=0",
                "/v1/inspect/affinitygroups/nlp/lm/0_cm-a",
            ]
            for path in paths:
                for method in ("GET", "HEAD"):
                    r = await scene.http.request(method, path, headers=h)
                    assert r.status_code < 500, (method, path, r.text[:300])
                    assert "lm-" not in r.text and SECRET not in r.text, (
                        method,
                        path,
                        r.status_code,
                        r.text[:300],
                    )
                    if r.status_code in (307, 308):  # a trailing slash redirected: where it leads
                        r = await scene.http.request(method, r.headers["location"], headers=h)
                        assert "lm-" not in r.text and SECRET not in r.text, (method, path, r.text[:300])
                    assert r.status_code in (400, 401, 403, 404, 405, 422), (method, path, r.status_code)
            # and its own gang still reads
            own = await scene.http.get("/v1/gangs/vision/tf", headers=h)
            assert own.status_code == 200 and own.json()["name"] == "tf"

    asyncio.run(go())


def _addr(url: str) -> tuple[str, int]:
    u = urlparse(url)
    assert u.hostname is not None and u.port is not None
    return u.hostname, u.port


def test_a_connection_flood_on_both_listeners_leaves_healthz_and_a_filter_answering(
    standalone: Server,
) -> None:
    """More idle sockets than the server keeps (40), half on each listener, and more half-sent
    request heads: /healthz still answers, and so does a filter, which places a gang."""
    idle: list[socket.socket] = []
    try:
        for url in (standalone.url, standalone.verbs_url):
            for k in range(30):
                s = socket.create_connection(_addr(url), timeout=5)
                if k % 3 == 0:
                    s.sendall(b"POST /v1/extender/filter HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # never ends
                idle.append(s)
        with standalone.client(timeout=10.0) as api:
            assert api.get("/healthz").status_code == 200
            nodes = kubesched.node_names(api.get(kubesched.PHYSICAL_CLUSTER).json())
            spec = {"virtualCluster": "nlp", "leafCellNumber": 1}
            uid = "flood-filter-pod"
            pod: dict[str, Any] = {
                "metadata": {
                    "uid": uid,
                    "name": uid,
                    "namespace": "nlp",
                    "annotations": {SPEC: json.dumps(spec)},
                },
                "spec": {"containers": [{"name": "m", "resources": {"limits": {ENABLE: "1"}}}]},
            }
            try:
                r = api.post("/v1/extender/filter", json={"Pod": pod, "Nodes": None, "NodeNames": nodes})
                assert r.status_code == 200 and not r.json().get("Error") and r.json()["NodeNames"], r.text
            finally:
                api.delete(f"/v1/standalone/pods/{uid}")

            def some_dropped() -> bool:
                gone = 0
                for s in idle:
                    s.settimeout(0.05)
                    try:
                        gone += s.recv(65536) == b""
                    except TimeoutError:
                        pass
                    except OSError:
                        gone += 1
                return gone >= 10

            poll("idle and half-sent connections to be dropped", some_dropped, tries=60, interval=0.2)
            assert api.get("/healthz").status_code == 200
    finally:
        for s in idle:
            s.close()
