"""What a hostile tenant sends a real server: each class of input that used to crash, stall, break or
5xx the extender, and the clear answer it gets now. The server of this module is its own, so a
crash here cannot hide behind another module's server."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.integration.conftest import ENABLE, SPEC, Server, running_server, state

NODES = ["a100-r1-n1", "a100-r1-n2"]
HANG = 10.0  # seconds: a reply slower than this is a stall


@pytest.fixture(scope="module")
def hostile_server() -> Iterator[Server]:
    with running_server() as s:
        yield s


@pytest.fixture(scope="module")
def c(hostile_server: Server) -> Iterator[httpx.Client]:
    with hostile_server.client(timeout=HANG) as client:
        yield client


def a_pod(spec: str | None, uid: str = "h1", name: str = "h1", **ann: str) -> dict[str, Any]:
    annotations = {SPEC: spec} if spec is not None else {}
    annotations.update(ann)
    return {
        "metadata": {"uid": uid, "name": name, "namespace": "vision", "annotations": annotations},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {ENABLE: "1"}}}]},
    }


def filter_body(pod: dict[str, Any]) -> dict[str, Any]:
    return {"Pod": pod, "Nodes": None, "NodeNames": NODES}


def alive(server: Server, c: httpx.Client) -> None:
    assert server.process.poll() is None, "the server process died:\n" + "".join(server.log[-30:])
    assert c.get("/healthz").status_code == 200


def json_reply(r: httpx.Response) -> Any:
    assert r.status_code < 500, (r.status_code, r.text[:300])
    assert r.headers["content-type"].startswith("application/json"), (r.headers, r.text[:300])
    return r.json()


BILLION_LAUGHS = "\n".join(
    ['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    + [f"{x}: &{x} [" + ", ".join([f"*{p}"] * 9) + "]" for p, x in zip("abcdefgh", "bcdefghi", strict=True)]
)

SPECS = {
    "deep flow sequence": ("[" * 50_000 + "]" * 50_000, "bytes; at most"),
    "deep but small": ("[" * 40 + "]" * 40, "nested more than 8 levels deep"),
    "recursive alias": ("&a [*a]", "anchors"),
    "billion laughs": (BILLION_LAUGHS, "anchors"),
    "NUL character": ("virtualCluster: vi\x00sion\nleafCellNumber: 1", "special characters are not allowed"),
    "explicit tag": ("virtualCluster: !!python/name:os.system vision\nleafCellNumber: 1", "tags"),
    "merge key": ("<<: {virtualCluster: vision}\nleafCellNumber: 1", "merge keys"),
    "lone surrogate": (
        '{"virtualCluster": "vision", "leafCellNumber": 1, "affinityGroup": {"name": "g\\ud83d", '
        '"members": [{"podNumber": 1, "leafCellNumber": 1}]}}',
        "affinityGroup.name: is not valid Unicode",
    ),
    "three million pods": (
        '{"virtualCluster": "vision", "leafCellNumber": 1, "affinityGroup": {"name": "big", '
        '"members": [{"podNumber": 3000000, "leafCellNumber": 1}]}}',
        "3000000 pods, more than the cluster's 96 GPUs: it can never run",
    ),
}


@pytest.mark.parametrize("case", sorted(SPECS))
def test_hostile_specs_get_a_user_error_on_every_verb_and_the_server_lives(
    hostile_server: Server, c: httpx.Client, case: str
) -> None:
    text, reason = SPECS[case]
    before = state(c)
    pod = a_pod(text, uid=f"hostile-{case}")
    got = json_reply(c.post("/v1/extender/filter", json=filter_body(pod)))
    assert "User Error" in got["Error"] and reason in got["Error"], got["Error"]
    scores = json_reply(c.post("/v1/extender/prioritize", json=filter_body(pod)))
    assert all(h["Score"] == 0 for h in scores)
    r = c.post("/v1/extender/preempt", json={"Pod": pod, "NodeNameToMetaVictims": {NODES[0]: {"Pods": []}}})
    assert r.status_code == 400 and reason in json_reply(r)["Error"]
    r = c.post("/v1/explain", json=pod)
    assert r.status_code == 422 and reason in json_reply(r)["error"]
    alive(hostile_server, c)
    assert state(c) == before


def test_bodies_nested_too_deep_are_refused_naming_the_limit(hostile_server: Server, c: httpx.Client) -> None:
    """orjson reads 1,024 levels but writes only 255: a node object nested 300 deep used to be read,
    then fail the reply that echoes it."""
    deep: Any = "x"
    for _ in range(300):
        deep = {"k": deep}
    node = {"metadata": {"name": NODES[0]}, "spec": deep}
    body = {"Pod": a_pod(None), "Nodes": {"items": [node]}, "NodeNames": None}
    got = json_reply(c.post("/v1/extender/filter", json=body))
    assert "Nodes.items[0]" in got["Error"] and "nested more than 64 levels deep" in got["Error"]
    pod = a_pod('{"virtualCluster": "vision", "leafCellNumber": 1}')
    pod["spec"]["deep"] = deep
    got = json_reply(c.post("/v1/extender/filter", json=filter_body(pod)))
    assert "Pod" in got["Error"] and "nested more than 64 levels deep" in got["Error"]
    alive(hostile_server, c)


def test_an_emoji_gang_name_is_scheduled_and_every_view_still_answers(
    hostile_server: Server, c: httpx.Client
) -> None:
    """The name as `json.dumps` writes it: a surrogate pair of JSON escapes, which YAML alone reads as
    two lone surrogates that no UTF-8 writer accepts."""
    text = json.dumps(
        {
            "virtualCluster": "vision",
            "leafCellNumber": 1,
            "affinityGroup": {
                "name": "vision/g\U0001f600",
                "members": [{"podNumber": 1, "leafCellNumber": 1}],
            },
        }
    )
    assert "\\ud83d\\ude00" in text
    pod = a_pod(text, uid="emoji-1", name="emoji-1")
    try:
        got = json_reply(c.post("/v1/extender/filter", json=filter_body(pod)))
        assert got["Error"] == "" and got["NodeNames"], got
        bind = {
            "PodName": "emoji-1",
            "PodNamespace": "vision",
            "PodUID": "emoji-1",
            "Node": got["NodeNames"][0],
        }
        assert json_reply(c.post("/v1/extender/bind", json=bind)) == {"Error": ""}
        gangs = json_reply(c.get("/v1/gangs"))
        assert any(g["name"] == "g\U0001f600" and g["phase"] == "Ready" for g in gangs["items"]), gangs
        groups = json_reply(c.get("/v1/inspect/affinitygroups/"))
        assert any(g["metadata"]["name"] == "vision/g\U0001f600" for g in groups["items"])
        json_reply(c.get("/v1/ui/state"))
        bound = json_reply(c.get("/v1/standalone/bindings"))
        assert "emoji-1" in json.dumps(bound)
    finally:
        c.delete("/v1/standalone/pods/emoji-1")
    alive(hostile_server, c)


def raw_http(server: Server, request: bytes) -> tuple[str, dict[str, str], bytes]:
    """Send bytes no HTTP client would, and read the whole answer (the server closes after it)."""
    parts = urlsplit(server.url)
    with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 80), timeout=HANG) as s:
        s.sendall(request)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return lines[0], headers, body


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"FOO /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /healthz HTTP/9.9\r\nHost: x\r\n\r\n",
        b"GET\r\n\r\n",
        b"POST /v1/extender/filter HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n",
    ],
)
def test_malformed_http_is_answered_in_json(
    hostile_server: Server, c: httpx.Client, request_bytes: bytes
) -> None:
    status, headers, body = raw_http(hostile_server, request_bytes)
    assert " 400 " in status, status
    assert headers["content-type"] == "application/json"
    assert "malformed HTTP request" in json.loads(body)["Error"]
    alive(hostile_server, c)


def test_unknown_routes_and_methods_are_json_404_and_405(c: httpx.Client) -> None:
    r = c.get("/no/such/path")
    assert r.status_code == 404 and "Path not found" in json_reply_any(r)["Error"]
    r = c.delete("/v1/extender/filter")
    assert r.status_code == 405 and "NotImplemented" in json_reply_any(r)["Error"]
    r = c.request("PATCH", "/v1/gangs")
    assert r.status_code == 405 and r.headers["content-type"].startswith("application/json")


def json_reply_any(r: httpx.Response) -> Any:
    assert r.headers["content-type"].startswith("application/json"), r.text[:200]
    return r.json()


@pytest.mark.parametrize("uid", ["a/b", "..", "."])
def test_a_uid_that_no_url_can_name_is_refused_before_it_holds_anything(
    hostile_server: Server, c: httpx.Client, uid: str
) -> None:
    """Standalone mode lets a pod go by `DELETE /v1/standalone/pods/{uid}`: a UID with a '/', or a
    dot segment that every client folds away, would reserve (and once bound, hold) GPUs no request
    could release (`make fuzz` seed 51 bound a gang for the UID '..'). The verbs refuse it, naming
    the field; a UID with other characters URL-encodes and goes as usual."""
    spec = json.dumps({"virtualCluster": "vision", "priority": 0, "leafCellNumber": 1})
    before = state(c)
    for verb in ("filter", "prioritize", "preempt"):
        body = filter_body(a_pod(spec, uid=uid, name="dots"))
        got = json_reply(
            c.post(f"/v1/extender/{verb}", json=body if verb != "preempt" else {"Pod": body["Pod"]})
        )
        assert "metadata.uid" in got["Error"] and "cannot name a pod in a URL path" in got["Error"], got
    bind = {"PodName": "dots", "PodNamespace": "vision", "PodUID": uid, "Node": NODES[0]}
    got = json_reply(c.post("/v1/extender/bind", json=bind))
    assert "PodUID" in got["Error"] and "cannot name a pod in a URL path" in got["Error"], got
    assert state(c) == before
    odd = a_pod(spec, uid="a?b#%", name="odd")
    assert json_reply(c.post("/v1/extender/filter", json=filter_body(odd)))["NodeNames"]
    gone = json_reply(c.delete("/v1/standalone/pods/a%3Fb%23%25"))
    assert gone["uid"] == "a?b#%" and gone["releasedGang"] == "vision/pod:odd", gone
    assert state(c) == before
    alive(hostile_server, c)


def test_a_query_value_no_reader_takes_is_a_400_naming_it(hostile_server: Server, c: httpx.Client) -> None:
    """`str.isdigit` accepts a superscript "²" and 5,000 nines, which `int` refuses: a gang ledger
    query with either, as an attempt instance UID's head or as a page's `limit`, is a 400 naming
    the parameter, not a 500, and the ledger still answers for the attempt that is there."""
    spec = json.dumps(
        {
            "virtualCluster": "vision",
            "leafCellNumber": 1,
            "affinityGroup": {"name": "fw", "members": [{"podNumber": 1, "leafCellNumber": 1}]},
        }
    )
    fc = {
        "FC_FRAMEWORK_NAMESPACE": "vision",
        "FC_FRAMEWORK_NAME": "fw",
        "FC_FRAMEWORK_ATTEMPT_INSTANCE_UID": "1_abc",
        "FC_TASKROLE_NAME": "worker",
        "FC_TASK_INDEX": "0",
    }
    try:
        got = json_reply(
            c.post("/v1/extender/filter", json=filter_body(a_pod(spec, "fc-1", "fw-worker-0", **fc)))
        )
        assert got["NodeNames"], got
        assert c.get("/v1/gangs/vision/fw", params={"attempt": "1_abc"}).status_code == 200
        for bad in ("\u00b2_x", "9" * 5000, "1 abc"):
            r = c.get("/v1/gangs/vision/fw", params={"attempt": bad})
            assert r.status_code == 400 and "attempt: " in json_reply(r)["Error"], (
                r.status_code,
                r.text[:200],
            )
        for bad in ("\u00b2", "9" * 5000):
            r = c.get("/v1/gangs", params={"limit": bad})
            assert r.status_code == 400 and "limit: " in json_reply(r)["Error"], (r.status_code, r.text[:200])
    finally:
        c.delete("/v1/standalone/pods/fc-1")
    alive(hostile_server, c)
