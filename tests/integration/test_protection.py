"""The server protects itself and reading never stalls scheduling (`extender.http.limits`,
`extender.http.snapshot`), against a real `topogang serve` with its limits lowered so the floods
stay small. Nothing here judges time: each test asserts what was answered, and waits in tries."""

from __future__ import annotations

import json
import re
import socket
import threading
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlparse

import httpx
import pytest

from extender import kubesched
from tests.integration.conftest import JSON_TYPE, SPEC, Pods, Server, running_server
from tests.polling import poll

LIMITS = (
    "--max-explains", "1", "--explains-per-client", "1", "--long-polls-per-client", "2",
    "--head-timeout", "1", "--max-connections", "40", "--max-reads", "8", "--reads-per-client", "4",
)  # fmt: skip


@pytest.fixture(scope="module")
def guarded() -> Iterator[Server]:
    with running_server(args=LIMITS) as s:
        yield s


@pytest.fixture(scope="module")
def api(guarded: Server) -> Iterator[httpx.Client]:
    with guarded.client(timeout=10.0) as c:
        yield c


@pytest.fixture
def pods(api: httpx.Client) -> Iterator[Pods]:
    p = Pods(api)
    try:
        yield p
    finally:
        p.cleanup()


def addr(server: Server) -> tuple[str, int]:
    u = urlparse(server.url)
    assert u.hostname is not None and u.port is not None
    return u.hostname, u.port


def raw(server: Server) -> socket.socket:
    return socket.create_connection(addr(server), timeout=5)


def closed_by_server(s: socket.socket) -> bool:
    s.settimeout(0.2)
    try:
        return s.recv(65536) == b""
    except TimeoutError:
        return False
    except OSError:
        return True


def names(api: httpx.Client) -> list[str]:
    return kubesched.node_names(api.get(kubesched.PHYSICAL_CLUSTER).json())


def one_pod_gang(pods: Pods, name: str, gpus: int = 1, count: int = 1) -> dict[str, Any]:
    group = {"name": f"default/{name}-{pods.run}", "members": [{"podNumber": count, "leafCellNumber": gpus}]}
    return pods.make(
        name, "default", {"virtualCluster": "nlp", "leafCellNumber": gpus, "affinityGroup": group}
    )


def filter_ok(api: httpx.Client, pod: dict[str, Any], nodes: list[str]) -> list[str]:
    r = api.post("/v1/extender/filter", json={"Pod": pod, "Nodes": None, "NodeNames": nodes})
    assert r.status_code == 200, r.text
    body = r.json()
    assert not body.get("Error"), body
    return list(body["NodeNames"] or [])


def read_ok(api: httpx.Client, path: str) -> Any:
    """A read that may be told 429 while a flood holds every read slot: asked again until served."""
    got: list[Any] = []

    def served() -> bool:
        r = api.get(path)
        assert r.status_code in (200, 429), r.text
        if r.status_code == 200:
            got.append(r.json())
        return bool(got)

    poll(f"{path} to be served", served, tries=100, interval=0.05)
    return got[0]


def metric(api: httpx.Client, name: str) -> float:
    text = api.get("/metrics").text
    m = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


# ---------------------------------------------------------------------------------- who may post what
def test_verbs_take_only_json_from_a_known_host(api: httpx.Client, pods: Pods) -> None:
    pod = one_pod_gang(pods, "ctype")
    body = json.dumps({"Pod": pod, "Nodes": None, "NodeNames": names(api)})
    r = api.post("/v1/extender/filter", content=body, headers={"Content-Type": "text/plain"})
    assert r.status_code == 415 and "text/plain" in r.json()["Error"]
    r = api.post("/v1/extender/filter", content=body)  # no Content-Type at all
    assert r.status_code == 415 and "none" in r.json()["Error"]
    r = api.post("/v1/explain", content=body, headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert r.status_code == 415
    for host in ("evil.example", "rebind.attacker.test:9096"):
        r = api.post("/v1/extender/filter", content=body, headers={**JSON_TYPE, "Host": host})
        assert r.status_code == 421 and host in r.json()["Error"]
        assert api.get("/v1/inspect", headers={"Host": host}).status_code == 421
        assert api.get("/healthz", headers={"Host": host}).status_code == 200  # probes: any Host
    for host in ("localhost:1", "127.0.0.1", "[::1]:9096", "topogang-extender.topogang-system.svc"):
        r = api.post("/v1/extender/filter", content=body, headers={**JSON_TYPE, "Host": host})
        assert r.status_code == 200 and not r.json()["Error"], (host, r.text)
    r = api.post(
        "/v1/extender/filter", content=body, headers={"Content-Type": "application/json; charset=utf-8"}
    )
    assert r.status_code == 200


def test_a_deeply_nested_spec_is_a_4xx_naming_the_depth(api: httpx.Client, pods: Pods) -> None:
    deep = "[" * 1000 + "]" * 1000
    spec = '{"virtualCluster":"nlp","leafCellNumber":1,"x":' + deep + "}"
    pod = pods.make("deep", "default", spec)
    r = api.post("/v1/explain", json={"Pod": pod})
    assert r.status_code == 422, r.text
    assert "nested more than" in r.json()["error"]
    r = api.post("/v1/extender/filter", json={"Pod": pod, "Nodes": None, "NodeNames": names(api)})
    assert r.status_code == 200 and "nested more than" in r.json()["Error"]


# ---------------------------------------------------------------------------------- expensive reads
def test_explain_is_limited_per_caller_while_filters_answer(
    guarded: Server, api: httpx.Client, pods: Pods
) -> None:
    """An explain whose body is still coming holds its caller's only explain slot: the next one is
    told 429 with Retry-After, and filters are answered meanwhile."""
    pod = one_pod_gang(pods, "whatif")
    body = json.dumps({"Pod": pod}).encode()
    held = raw(guarded)
    head = (
        f"POST /v1/explain HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    held.sendall(head + body[:10])
    # no other explain runs meanwhile, so the held one is taken, not refused: it stays unanswered
    held.settimeout(0.2)
    for _ in range(5):
        with pytest.raises(TimeoutError):
            held.recv(1)
    r = api.post("/v1/explain", json={"Pod": pod})
    assert r.status_code == 429 and r.headers["retry-after"] and "explain" in r.json()["Error"]
    other = one_pod_gang(pods, "meanwhile")
    assert filter_ok(api, other, names(api))  # the verbs never wait for readers
    held.sendall(body[10:])
    held.settimeout(10)
    answer = held.recv(65536)
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
    held.close()
    poll("explain to be served again", lambda: api.post("/v1/explain", json={"Pod": pod}).status_code == 200,
         tries=50, interval=0.1)  # fmt: skip


def test_readers_share_one_copy_of_an_unchanged_state(api: httpx.Client) -> None:
    """Thirty reads of an unchanged state share a copy of it: the readers never render under the
    verbs' lock, and take it only for a copy when something changed."""
    before = metric(api, "topogang_read_snapshot_lock_seconds_count")
    for _ in range(30):
        assert api.get("/v1/inspect/clusterstatus").status_code == 200
    assert api.get("/v1/ui/state").status_code == 200
    # one copy per state change; the periodic expiry pass (every 5 s) may count as one: even on a
    # slow machine far fewer copies than reads (a reader rendering under the lock would be 31)
    assert metric(api, "topogang_read_snapshot_lock_seconds_count") - before < 10


def test_a_reader_flood_while_scheduling(guarded: Server, api: httpx.Client, pods: Pods) -> None:
    """Eight readers loop on the dearest reads while gangs are filtered and bound: every verb is
    answered, readers get their documents or a 429, and a read after a bind shows the bind."""
    stop = threading.Event()
    seen: list[int] = []

    def reader() -> None:
        with httpx.Client(base_url=guarded.url, timeout=30.0) as c:
            for _ in range(40):
                if stop.is_set():
                    return
                for path in ("/v1/inspect/clusterstatus", "/v1/ui/state", "/v1/inspect/affinitygroups"):
                    seen.append(c.get(path).status_code)

    nodes = names(api)  # read before the flood (a read during it may be told 429)
    threads = [threading.Thread(target=reader) for _ in range(8)]
    for t in threads:
        t.start()
    try:
        for k in range(6):
            pod = one_pod_gang(pods, f"flood{k}")
            placed = filter_ok(api, pod, nodes)
            assert placed, "a free cluster places a one-GPU gang"
            r = api.post(
                "/v1/extender/bind",
                json={"PodName": pod["metadata"]["name"], "PodNamespace": "default",
                      "PodUID": pod["metadata"]["uid"], "Node": placed[0]},
            )  # fmt: skip
            assert r.status_code == 200 and not r.json()["Error"], r.text
            groups = read_ok(api, "/v1/inspect/affinitygroups")["items"]
            mine = [g for g in groups if g["metadata"]["name"].endswith(f"flood{k}-{pods.run}")]
            assert mine and mine[0]["status"]["state"] == "Allocated"
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
    assert seen and set(seen) <= {200, 429}


# ---------------------------------------------------------------------------------- connections
def test_a_slowloris_is_dropped_and_the_server_keeps_serving(guarded: Server, api: httpx.Client) -> None:
    slow = raw(guarded)
    slow.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    trickled = 0

    def dropped() -> bool:
        nonlocal trickled
        if closed_by_server(slow):
            return True
        try:
            slow.sendall(b"X-a: b\r\n")  # one more header line, never the end of the head
            trickled += 1
        except OSError:
            return True
        assert api.get("/healthz").status_code == 200
        return False

    poll("the half-sent head to be dropped", dropped, tries=60, interval=0.2)
    slow.close()
    assert api.get("/healthz").status_code == 200


def test_idle_sockets_cannot_lock_out_healthz(guarded: Server, api: httpx.Client) -> None:
    """More idle connections than the server keeps (40 here): the oldest idle ones are dropped to
    make room, and /healthz and the verbs are still answered."""
    idle = [raw(guarded) for _ in range(50)]
    try:
        with httpx.Client(base_url=guarded.url, timeout=10.0) as fresh:
            assert fresh.get("/healthz").status_code == 200
            assert fresh.get("/readyz").status_code == 200
        poll("idle sockets to be dropped", lambda: sum(closed_by_server(s) for s in idle) >= 10,
             tries=50, interval=0.1)  # fmt: skip
    finally:
        for s in idle:
            s.close()


def test_long_polls_are_capped_per_caller_and_end_with_their_client(
    guarded: Server, api: httpx.Client, pods: Pods
) -> None:
    pod = one_pod_gang(pods, "polled", count=2)
    assert filter_ok(api, pod, names(api))
    path = f"/v1/gangs/default/polled-{pods.run}?waitFor=Ready&timeoutSeconds=50"
    quick = path.replace("timeoutSeconds=50", "timeoutSeconds=0")  # a poll too, answered at once
    assert api.get(quick).status_code == 200
    polls = []
    for _ in range(2):
        s = raw(guarded)
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        polls.append(s)
    poll("a third poll to be refused", lambda: api.get(quick).status_code == 429, tries=50, interval=0.1)
    assert "2 poll requests" in api.get(quick).json()["Error"]
    for s in polls:
        s.close()  # the callers leave: their polls end, and free their slots
    poll(
        "a long-poll to be accepted again", lambda: api.get(quick).status_code == 200, tries=50, interval=0.1
    )


# ---------------------------------------------------------------------------------- paging
def test_gangs_are_listed_a_page_at_a_time(api: httpx.Client, pods: Pods) -> None:
    nodes = names(api)
    ns = f"page{uuid.uuid4().hex[:6]}"
    for k in range(5):
        group = {"name": f"{ns}/g{k}", "members": [{"podNumber": 2, "leafCellNumber": 1}]}
        pod = pods.make(f"g{k}", ns, {"virtualCluster": "nlp", "leafCellNumber": 1, "affinityGroup": group})
        filter_ok(api, pod, nodes)
    got: list[str] = []
    token = None
    for _ in range(10):
        q = f"/v1/gangs?namespace={ns}&limit=2" + (f"&continue={token}" if token else "")
        body = api.get(q).json()
        assert len(body["items"]) <= 2
        got += [i["name"] for i in body["items"]]
        token = body["metadata"]["continue"]
        if token is None:
            break
    assert sorted(got) == [f"g{k}" for k in range(5)] and len(set(got)) == 5
    assert api.get("/v1/gangs?continue=bogus").status_code == 400
    assert api.get("/v1/gangs?limit=0").status_code == 400
    assert SPEC  # the pods carry the scheduling spec annotation
