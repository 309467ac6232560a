"""Malformed requests at every endpoint: an error that names the problem, never a 500 or a hang, and
nothing in the cluster's state changes. The verbs with semantic checks of each answer, then every
route with hostile content (`tests.fuzz.hostile`; `make fuzz` runs it longer)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, TypeVar

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz import hostile
from tests.integration.conftest import ENABLE, SPEC, running_server, state

T = TypeVar("T")
FUZZ_EXAMPLES = 250  # a few seconds; `make fuzz` sends 10,000

VERBS = ("filter", "prioritize", "preempt", "bind")
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=12), kids, max_size=4),
    max_leaves=16,
)
BAD_SPECS = st.sampled_from(
    [
        "",
        "{",
        "[1, 2]",
        "virtualCluster: [",
        '{"virtualCluster": "nope", "leafCellNumber": 1}',
        '{"virtualCluster": "vision", "leafCellNumber": 0}',
        '{"virtualCluster": "vision", "leafCellNumber": 99}',
        '{"virtualCluster": "vision", "leafCellNumber": 1, "priority": 5000}',
        '{"virtualCluster": "vision", "leafCellNumber": "many"}',
        '{"virtualCluster": "vision", "leafCellNumber": 1, "affinityGroup": {"name": "g"}}',
        '{"virtualCluster": "vision", "leafCellNumber": 2, "affinityGroup": {"name": "g", "members": '
        '[{"podNumber": 1, "leafCellNumber": 4}]}}',
        "x" * 300_000,
    ]
)


NEVER = (
    '{"virtualCluster": "research", "leafCellNumber": 8, "affinityGroup": {"name": "fuzz/never", '
    '"members": [{"podNumber": 3, "leafCellNumber": 8}]}}'
)


def a_pod(spec: str | None, uid: object = "fuzz-uid", enabled: bool = True) -> dict[str, Any]:
    ann = {SPEC: spec} if spec is not None else {}
    return {
        "metadata": {"uid": uid, "name": "fuzz", "namespace": "vision", "annotations": ann},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {ENABLE: "1" if enabled else "0"}}}]},
    }


@st.composite
def bodies(draw: st.DrawFn) -> tuple[str, bytes]:
    verb = draw(st.sampled_from(VERBS))
    kind = draw(
        st.sampled_from(
            ["bytes", "text", "json", "wrong-type", "missing", "huge", "unknown-nodes", "bad-spec"]
        )
    )
    if kind == "bytes":
        return verb, draw(st.binary(max_size=200))
    if kind == "text":
        return verb, draw(st.text(max_size=200)).encode()
    if kind == "json":
        return verb, json.dumps(draw(JSON_VALUES)).encode()
    # well-formed but never placeable: even a request that a mutation left valid changes nothing
    pod = a_pod(NEVER)
    cases: dict[str, dict[str, Any]] = {
        "filter": {"Pod": pod, "Nodes": None, "NodeNames": ["a100-r1-n1"]},
        "prioritize": {"Pod": pod, "Nodes": None, "NodeNames": ["a100-r1-n1"]},
        "preempt": {
            "Pod": pod,
            "NodeNameToVictims": None,
            "NodeNameToMetaVictims": {"a100-r1-n1": {"Pods": []}},
        },
        "bind": {
            "PodName": "fuzz",
            "PodNamespace": "vision",
            "PodUID": "never-filtered",
            "Node": "a100-r1-n1",
        },
    }
    valid = cases[verb]
    key = draw(st.sampled_from(sorted(valid)))
    if kind == "wrong-type":
        valid[key] = draw(st.integers() | st.lists(st.integers(), max_size=3) | st.booleans())
    elif kind == "missing":
        del valid[key]
    elif kind == "huge":
        n = draw(st.integers(min_value=10_000, max_value=50_000))
        valid[key] = [f"node-{i}" for i in range(n)] if verb != "bind" else "x" * n
    elif kind == "unknown-nodes":
        names = draw(st.lists(st.text(min_size=1, max_size=30), min_size=1, max_size=20))
        if verb == "bind":
            valid["Node"] = names[0]
        elif verb == "preempt":
            valid["NodeNameToMetaVictims"] = {
                n: {"Pods": [{"UID": "x"}], "NumPDBViolations": 0} for n in names
            }
        else:
            valid["NodeNames"] = [f"unknown-{n}" for n in names]
    else:  # bad-spec
        spec = draw(BAD_SPECS)
        if verb == "bind":
            valid["PodUID"] = spec[:50] or "u"
        else:
            valid["Pod"] = a_pod(spec)
    return verb, json.dumps(valid).encode()


def test_malformed_bodies_get_errors_never_500_and_change_nothing(client: httpx.Client) -> None:
    before = state(client)

    @settings(
        max_examples=300,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(bodies())
    def check(case: tuple[str, bytes]) -> None:
        verb, body = case
        r = client.post(f"/v1/extender/{verb}", content=body, headers={"Content-Type": "application/json"})
        assert r.status_code in (200, 400, 413), (r.status_code, r.text[:300])
        doc = r.json()
        if r.status_code != 200:
            assert isinstance(doc, dict) and doc.get("Error"), doc
            return
        if isinstance(doc, dict) and doc.get("Error"):
            assert doc["Error"].startswith("topogang: ")
            return
        if verb == "filter":
            asked = set(json.loads(body).get("NodeNames") or [])
            assert set(doc["NodeNames"] or []) <= asked
            assert set(doc["FailedNodes"]) | set(doc["FailedAndUnresolvableNodes"]) <= asked
        elif verb == "prioritize":
            assert isinstance(doc, list) and all(0 <= h["Score"] <= 10 for h in doc)
        elif verb == "preempt":
            assert doc == {"NodeNameToMetaVictims": None}
        else:
            raise AssertionError(f"bind of a never-filtered pod succeeded: {doc}")

    check()
    assert state(client) == before


def test_every_get_endpoint_with_odd_paths(client: httpx.Client) -> None:
    for path in (
        "/v1/inspect/affinitygroups/%00",
        "/v1/inspect/clusterstatus/virtualclusters/%2F..",
        "/metrics?x=1",
    ):
        r = client.get(path)
        assert r.status_code in (200, 404), (path, r.status_code)
    for verb in VERBS:
        r = client.get(f"/v1/extender/{verb}")
        assert r.status_code == 405


class _Draws:
    """hypothesis' draws as a `tests.fuzz.hostile.Source`: a failure shrinks to its smallest choices."""

    def __init__(self, data: st.DataObject) -> None:
        self.data = data

    def pick(self, options: Sequence[T]) -> T:
        return self.data.draw(st.sampled_from(options))

    def number(self, low: int, high: int) -> int:
        return self.data.draw(st.integers(low, high))


def test_hostile_requests_on_every_route_get_answers_and_leave_placed_gangs_alone() -> None:
    """Every route, hostile content (`tests.fuzz.hostile`): no 5xx, JSON, no hang, the process
    lives, and the gangs placed before (the highest priority: nothing may move them) stay as they were,
    in the cluster and in the ledger. Its own server: the baseline and the fuzzing's leftovers are
    nobody else's business."""
    ctx = hostile.Context()
    with (
        running_server() as server,
        server.client(timeout=hostile.HANG_SECONDS) as client,
    ):
        hostile.place_baseline(client, ctx)
        before = hostile.placed_state(client)
        assert all(before), before  # a baseline that is not there would make the last check vacuous
        routes: set[str] = set()

        @settings(
            max_examples=FUZZ_EXAMPLES,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        @given(st.data())
        def check(data: st.DataObject) -> None:
            p = hostile.probe(_Draws(data), ctx)
            r = hostile.send(client, server.url, p)
            ctx.heard(p, r)
            routes.add(p.route)
            assert server.process.poll() is None, f"the server died on {p.describe()}\n" + "".join(
                server.log[-40:]
            )
            assert not hostile.violations(p, r), (p.describe(), r)

        check()
        hostile.forget_fuzz_pods(client, ctx)
        assert hostile.placed_state(client) == before
    assert server.process.returncode in (0, -15), server.process.returncode
    assert len(routes) >= 15, sorted(routes)  # the draws did reach (nearly) every route
