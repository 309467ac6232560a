"""The doors' table and parts: every route of every mode has a door (a new route without one fails
here first), TokenReview answers read right, reviews are cached and bounded, and the Framework the
proxy hands a barrier holds only what the barrier reads."""

from __future__ import annotations

import asyncio
import base64
import gzip
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from starlette.routing import Mount, Route

from extender.gangs.framework import barrier_view, injector, ready_counts, task_role_statuses
from extender.http.app import Service, build_app
from extender.http.doors import ROUTES, Door, PodRef
from extender.kube.reviews import KubeAuthority, Reviews, TtlCache, caller_of
from extender.kube.service import kube_service
from extender.standalone import build_standalone
from loadtest.kubefake import FakeKube
from tests.extender.helpers import example


def _paths(service: Service) -> dict[str, set[str]]:
    """Every route of the app built for `service`: path template -> methods (a Mount: none)."""
    app = build_app(service)
    out: dict[str, set[str]] = {}
    for r in app.routes:
        if isinstance(r, Route):
            out[r.path] = set(r.methods or ())
        elif isinstance(r, Mount):
            out[r.path] = set()
        else:
            raise AssertionError(f"a route of an unknown kind: {r!r}")
    return out


def every_route() -> dict[str, set[str]]:
    """The routes of both modes (Kubernetes mode over a fake API: nothing is started)."""
    kube = kube_service(example(), FakeKube())
    return {**_paths(build_standalone(example())), **_paths(kube)}


def test_every_route_of_every_mode_has_a_door_and_the_table_names_no_route_that_is_gone() -> None:
    routes = every_route()
    missing = sorted(set(routes) - set(ROUTES))
    assert not missing, f"routes without a door in extender/http/doors.py ROUTES: {missing}"
    stale = sorted(set(ROUTES) - set(routes))
    assert not stale, f"ROUTES names paths no app serves: {stale}"
    for path, rule in ROUTES.items():
        assert rule.why, path
        if rule.door in (Door.ADMIN, Door.TENANT):
            assert rule.verb in ("get", "list") and rule.resource in ("clusterstatus", "gangs"), path
        else:
            assert not rule.verb and not rule.resource, path


def test_the_doors_that_write_or_judge_are_the_ones_expected() -> None:
    """Only kube-scheduler's verbs change the scheduler's state through the verbs door; every other
    route that takes a body or writes (explain, the standalone helpers) is an admin's."""
    routes = every_route()
    for path, methods in routes.items():
        rule = ROUTES[path]
        if methods - {"GET", "HEAD"}:
            assert rule.door in (Door.VERBS, Door.ADMIN), (path, methods, rule.door)
        if path.startswith("/v1/extender/"):
            assert rule.door is Door.VERBS


# ---------------------------------------------------------------------------------- TokenReview
def test_a_pod_bound_token_names_its_pod_and_other_tokens_name_only_a_user() -> None:
    status: dict[str, Any] = {
        "authenticated": True,
        "user": {
            "username": "system:serviceaccount:vision:default",
            "uid": "u1",
            "groups": ["system:serviceaccounts"],
            "extra": {
                "authentication.kubernetes.io/pod-name": ["tf-ps-0"],
                "authentication.kubernetes.io/pod-uid": ["p1"],
            },
        },
    }
    c = caller_of(status)
    assert (
        c is not None
        and c.pod == PodRef("vision", "tf-ps-0", "p1")
        and c.groups == ("system:serviceaccounts",)
    )
    alice = caller_of({"authenticated": True, "user": {"username": "alice", "groups": ["admins"]}})
    assert alice is not None and alice.pod is None and alice.describe() == "user alice"
    # a user that claims pod extras but is no ServiceAccount names no pod
    forged = caller_of({**status, "user": {**status["user"], "username": "mallory"}})
    assert forged is not None and forged.pod is None
    for bad in ({}, {"authenticated": False}, {"authenticated": True}, {"authenticated": "yes", "user": {}}):
        assert caller_of(bad) is None


@given(
    st.recursive(
        st.none() | st.booleans() | st.text(max_size=5) | st.integers(),
        lambda c: st.lists(c) | st.dictionaries(st.text(max_size=5), c),
        max_leaves=20,
    )
)
def test_any_review_answer_reads_as_a_caller_or_none_and_never_raises(doc: Any) -> None:
    got = caller_of(doc if isinstance(doc, dict) else {"authenticated": True, "user": doc})
    assert got is None or got.user


def test_reviews_are_cached_shared_and_bounded() -> None:
    async def go() -> None:
        kube = FakeKube()
        kube.server.add_token("t-alice", "alice", audiences=("topogang",))
        kube.server.add_token("t-api", "bob")  # for the API server's own audience only
        kube.server.grant("alice", "clusterstatus", "get")
        now = [0.0]
        r = Reviews(kube, clock=lambda: now[0], max_entries=3)
        callers = await asyncio.gather(*(r.authenticate("t-alice") for _ in range(20)))
        assert {c.user for c in callers if c is not None} == {"alice"}
        assert kube.server.reviews == 1  # twenty at once: one review
        assert await r.authenticate("t-api") is None  # another audience's token is not ours
        assert await r.authenticate("nonsense") is None
        assert await r.authenticate("x" * 20_000) is None  # never sent: too long for any token
        alice = callers[0]
        assert alice is not None
        assert await r.may(alice, "get", "clusterstatus") and not await r.may(alice, "list", "gangs")
        before = kube.server.reviews
        assert await r.may(alice, "get", "clusterstatus") and not await r.may(alice, "list", "gangs")
        assert kube.server.reviews == before  # both answers kept
        now[0] += 11  # a refusal is kept 10 s, a yes 60 s
        assert not await r.may(alice, "list", "gangs") and await r.may(alice, "get", "clusterstatus")
        assert kube.server.reviews == before + 1
        for i in range(10):
            await r.authenticate(f"other-{i}")
        assert len(r.tokens) == 3 and len(r.access) <= 3
        no_audience = Reviews(kube, audience="")
        bob = await no_audience.authenticate("t-api")
        assert bob is not None and bob.user == "bob"

    asyncio.run(go())


def test_a_review_that_names_no_audience_vouches_for_none_of_ours() -> None:
    """An authenticator unaware of audiences (an authenticating proxy, a webhook) answers without
    any: the token is then good for the API server's own audience only, as TokenReviewStatus says,
    and a client that asked for its own must see it named."""

    async def go() -> None:
        kube = FakeKube()
        kube.server.add_token("t-api", "bob")  # for the API server's own audience only
        kube.server.audience_unaware = True
        assert await Reviews(kube, audience="topogang").authenticate("t-api") is None
        bob = await Reviews(kube, audience="").authenticate("t-api")  # no audience asked: the server's
        assert bob is not None and bob.user == "bob"

    asyncio.run(go())


def test_an_unreachable_api_server_is_an_error_never_a_yes() -> None:
    from extender.http.doors import AuthorityUnavailableError
    from loadtest.kubefake import Fault

    async def go() -> None:
        kube = FakeKube()
        kube.inject(Fault("POST", "tokenreviews", "error"))
        r = Reviews(kube)
        with pytest.raises(AuthorityUnavailableError):
            await r.authenticate("t")

    asyncio.run(go())


def test_a_pod_is_checked_in_the_watched_cache_then_in_the_api_server() -> None:
    async def go() -> None:
        kube = FakeKube()
        kube.server.put("/api/v1/namespaces/ml/pods/a", {"metadata": {"uid": "ua"}})
        live = {"uw": ("ml", "w")}
        fetched: list[str] = []

        async def fetch(ns: str, name: str) -> Any:
            fetched.append(name)
            return await kube.request("GET", f"/api/v1/namespaces/{ns}/pods/{name}")

        a = KubeAuthority(kube, locate=live.get, fetch_pod=fetch, gang_of=lambda p: None)
        assert await a.pod_exists(PodRef("ml", "w", "uw")) and fetched == []
        assert await a.pod_exists(PodRef("ml", "a", "ua")) and fetched == ["a"]
        assert await a.pod_exists(PodRef("ml", "a", "ua")) and fetched == ["a"]  # kept
        assert not await a.pod_exists(PodRef("ml", "a", "another-uid"))  # same name, another pod
        assert not await a.pod_exists(PodRef("ml", "gone", "ug"))
        assert not await a.pod_exists(PodRef("other", "w", "uw"))  # the cache's pod is in ml

    asyncio.run(go())


def test_the_ttl_cache_forgets_when_due_and_drops_the_oldest() -> None:
    now = [0.0]
    c: TtlCache[str, int] = TtlCache(lambda: now[0], max_entries=2)
    c.put("a", 1, 5)
    c.put("b", 2, 50)
    c.put("c", 3, 50)
    assert c.get("a") == (False, None) and c.get("b") == (True, 2)
    now[0] = 60
    assert c.get("b") == (False, None) and len(c) == 1


# ---------------------------------------------------------------------------------- the Framework
SECRET = "hunter2-do-not-leak"


def framework(compressed: bool = False) -> dict[str, Any]:
    roles = [
        {
            "name": "ps",
            "podGracefulDeletionTimeoutSec": 30,
            "taskStatuses": [
                {
                    "index": 0,
                    "instanceUID": "0_t",
                    "deletionPending": False,
                    "state": "AttemptRunning",
                    "attemptStatus": {
                        "id": 0,
                        "podName": "tf-ps-0",
                        "podUID": "p0",
                        "podNodeName": "n1",
                        "podIP": "10.0.0.1",
                        "podHostIP": "192.168.0.1",
                        "completionStatus": {"diagnostics": SECRET},
                    },
                }
            ],
        }
    ]
    attempt: dict[str, Any] = {"id": 0, "instanceUID": "0_cm", "configMapName": "tf-attempt"}
    if compressed:
        attempt["taskRoleStatusesCompressed"] = base64.b64encode(gzip.compress(orjson.dumps(roles))).decode()
    else:
        attempt["taskRoleStatuses"] = roles
    env = [{"name": "DB_PASSWORD", "value": SECRET}]
    return {
        "apiVersion": "frameworkcontroller.microsoft.com/v1",
        "kind": "Framework",
        "metadata": {
            "name": "tf",
            "namespace": "vision",
            "uid": "f1",
            "annotations": {"note": SECRET},
            "managedFields": [{"manager": SECRET}],
        },
        "spec": {
            "executionType": "Start",
            "taskRoles": [
                {
                    "name": "ps",
                    "taskNumber": 1,
                    "task": {"pod": {"spec": {"containers": [{"name": "main", "env": env}]}}},
                }
            ],
        },
        "status": {"state": "AttemptRunning", "attemptStatus": attempt},
    }


@pytest.mark.parametrize("compressed", [False, True])
def test_the_barrier_view_keeps_what_barriers_read_and_nothing_else(compressed: bool) -> None:
    f = framework(compressed)
    view = barrier_view(f)
    text = orjson.dumps(view).decode()
    statuses = task_role_statuses(view)
    assert SECRET not in text and (statuses is not None and SECRET not in orjson.dumps(statuses).decode())
    assert ("taskRoleStatusesCompressed" in view["status"]["attemptStatus"]) is compressed
    assert view["spec"] == {"taskRoles": [{"name": "ps", "taskNumber": 1}]}
    assert view["metadata"] == {"name": "tf", "namespace": "vision", "uid": "f1"}
    task = statuses[0]["taskStatuses"][0]
    assert task["attemptStatus"] == {
        "id": 0,
        "podName": "tf-ps-0",
        "podUID": "p0",
        "podNodeName": "n1",
        "podIP": "10.0.0.1",
        "podHostIP": "192.168.0.1",
    }
    # what FrameworkBarrier decides and writes is the same on the view as on the whole object
    assert ready_counts(view) == ready_counts(f) and injector(view) == injector(f)


def test_a_corrupt_framework_shows_no_statuses_rather_than_failing() -> None:
    f = framework()
    f["status"]["attemptStatus"] = {"taskRoleStatusesCompressed": "not base64 gzip"}
    view = barrier_view(f)
    assert view["status"] == {"attemptStatus": {}} and ready_counts(view) == (0, 1)


def test_a_review_whose_first_asker_goes_away_still_answers_the_others() -> None:
    from loadtest.kubefake import Fault

    async def go() -> None:
        kube = FakeKube()
        kube.server.add_token("t", "alice", audiences=("topogang",))
        kube.inject(Fault("POST", "tokenreviews", "delay", seconds=0.05))
        r = Reviews(kube)
        first = asyncio.create_task(r.authenticate("t"))
        await asyncio.sleep(0.01)
        second = asyncio.create_task(r.authenticate("t"))
        await asyncio.sleep(0.01)
        first.cancel()  # its client disconnected
        got = await second
        assert got is not None and got.user == "alice" and first.cancelled()

    asyncio.run(go())
