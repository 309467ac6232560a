"""Text a tenant writes (a gang's name, a Framework's, a task role's) reaching the platform team's
logs and kube-scheduler's filter answers is bounded and printable: a key of more than 512
characters or with a control character is the pod's error (`identity.check_text`), and a request
path a caller sends is logged escaped (`extender.ops.logtext.shown`). Before, a name could forge
whole log lines (newlines, ANSI escapes), make 60 KB log lines, and make every filter answer about a
waiting gang repeat it on every node (nodes x 64 KiB)."""

from __future__ import annotations

import json
import logging
from typing import Any

import orjson
import pytest

from tests.extender.helpers import Clock, args, nodes, place, pod, run, scheduler

FORGED = "2026-11-28 07:00:00,000 INFO topogang.kube: leading: acquired Lease topogang-system/topogang as x"


def _gang_spec(name: str, pods: int, gpus: int = 8, vc: str = "vision") -> str:
    return json.dumps(
        {
            "virtualCluster": vc,
            "leafCellNumber": gpus,
            "affinityGroup": {"name": name, "members": [{"podNumber": pods, "leafCellNumber": gpus}]},
        }
    )


def _tenant_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith("topogang")]


def test_a_gang_name_cannot_forge_a_line_in_the_extenders_log(caplog: pytest.LogCaptureFixture) -> None:
    """A reservation whose members never all arrive expires, and the extender logs it by the gang's
    name: a name holding a newline writes a second, forged line into the admin's log (here one that
    claims another replica took the Lease); ANSI escapes and carriage returns pass the same way."""
    evil = f"train\n{FORGED}\r\x1b[2K\x1b[31m"
    clock = Clock()
    s = scheduler(clock=clock, ttl_seconds=60.0)

    async def go() -> None:
        with caplog.at_level(logging.INFO, logger="topogang"):
            reply, node = await place(s, pod("u0", "train-0", "vision", _gang_spec(evil, 2)))
            # either refused with a clear error naming the field, or reserved for two with one bound
            # (the other never comes) and expired, logged by name
            assert node is not None or "affinityGroup.name" in reply["Error"], reply
            clock.t += 10_000
            await s.expire()

    run(go())
    lines = _tenant_lines(caplog)
    bad = [m for m in lines if "\n" in m or "\r" in m or "\x1b" in m]
    assert not bad, f"tenant text reached the log raw: {bad!r}"


def test_a_gang_name_is_not_logged_at_any_length(caplog: pytest.LogCaptureFixture) -> None:
    """A 60 KiB gang name is logged whole, once per lifecycle event of every gang so named: one pod
    creator fills the platform's log pipeline with a few KB of YAML per pod."""
    clock = Clock()
    s = scheduler(clock=clock, ttl_seconds=60.0)
    long = "g" * 60_000

    async def go() -> None:
        with caplog.at_level(logging.INFO, logger="topogang"):
            reply, node = await place(s, pod("u1", "big-0", "vision", _gang_spec(long, 2)))
            assert node is not None or "affinityGroup.name" in reply["Error"], reply
            clock.t += 10_000
            await s.expire()

    run(go())
    lines = _tenant_lines(caplog) or [""]
    assert max(len(m) for m in lines) <= 4096, f"a log line of {max(len(m) for m in lines)} characters"


def test_a_waiting_gangs_filter_answer_does_not_repeat_its_name_on_every_node() -> None:
    """A gang that cannot fit waits; the filter's answer gives the reason on one node and a 'short'
    pointer on every other node, but the pointer repeats the gang's whole name: a 60 KiB name over
    kube-scheduler's node list makes every filter answer (each backoff, 1-10 s) nodes x 60 KiB, which
    the extender builds and encodes under the verbs' lock and kube-scheduler reads and keeps per node."""
    s = scheduler()
    names = nodes()
    long = "w" * 60_000

    async def go() -> dict[str, Any]:
        # 7 pods x 8 GPUs: more than VC vision's 48-GPU quota, so the gang waits
        return await s.filter(args(pod("u2", "wait-0", "vision", _gang_spec(long, 7)), names))

    reply = run(go())
    assert not reply["NodeNames"]  # it waits, or is refused with a clear error
    if not reply["Error"]:
        texts = {**reply["FailedNodes"], **reply["FailedAndUnresolvableNodes"]}
        assert len(texts) == len(names) > 1
    size = len(orjson.dumps(reply))
    # the reason once (it may name the gang), and a short pointer per node
    assert size <= 2 * len(long) + 1024 * len(names), (
        f"{size} bytes for {len(names)} nodes: the gang's name is repeated on every node"
    )


def test_a_job_pods_request_path_cannot_forge_a_line_in_the_extenders_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Any job pod holds a token the doors accept. Asking for a gang that is not its own is refused
    (403) and logged at info, the default level, with the request's path as the ASGI server decoded
    it: `%0A` in the URL is a newline in the admin's log, followed by whatever line the pod wants."""
    import httpx
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import BaseRoute, Route

    from extender.http.doors import GANG_PATH, Caller, Doors, GangRef, PodRef

    class OnePod:
        async def authenticate(self, token: str) -> Caller | None:
            return Caller("system:serviceaccount:nlp:default", "u", (), (), PodRef("nlp", "lm-0", "p1"))

        async def may(self, caller: Caller, verb: str, resource: str) -> bool:
            return False

        async def pod_exists(self, pod: PodRef) -> bool:
            return True

        def gang_of(self, pod: PodRef) -> GangRef | None:
            return GangRef("nlp", "lm", False)

    async def ok(_request: object) -> PlainTextResponse:
        return PlainTextResponse("ok")

    routes: list[BaseRoute] = [Route(GANG_PATH, ok)]
    app = Doors(Starlette(routes=routes), routes, OnePod())

    async def go() -> int:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://x") as http:
            forged = FORGED.replace("topogang-system/", "").replace(" ", "%20").replace(":", "%3A")
            # the namespace segment ([^/]+) matches a newline; the name segment (.*) would not
            r = await http.get(f"/v1/gangs/vision%0A{forged}/x", headers={"Authorization": "Bearer t"})
            return r.status_code

    with caplog.at_level(logging.INFO, logger="topogang"):
        assert run(go()) == 403
    lines = _tenant_lines(caplog)
    assert any("refused" in m for m in lines), lines
    bad = [m for m in lines if "\n" in m]
    assert not bad, f"the caller's path reached the log raw: {bad!r}"
