"""The gang ledger forgets gangs that are gone, on a real `topogang serve` (a 1 s reservation TTL,
the tombstone cap lowered to `CAP` by `tests.integration.small_ledger`): a released gang's record
goes when its last pod does, a gang whose pods went before it was whole goes too, and Expired
tombstones beyond the cap are dropped. `python -m loadtest.ledger_growth` runs the same at the
report's scale (21,500 gangs) and prints the memory. Nothing here judges time: expiry is waited for
in tries."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from extender import kubesched
from tests.integration.conftest import CONFIG, Pods, Server, running_server
from tests.polling import poll

CAP = 3
NS = "nlp"


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    text = CONFIG.read_text()
    assert "reservationTtlSeconds: 300" in text
    cfg: Path = tmp_path_factory.mktemp("ledger") / "cluster.yaml"
    cfg.write_text(text.replace("reservationTtlSeconds: 300", "reservationTtlSeconds: 1"))
    with running_server(cfg, program=("-m", "tests.integration.small_ledger", str(CAP))) as s:
        yield s


@pytest.fixture(scope="module")
def api(small: Server) -> Iterator[httpx.Client]:
    with small.client(timeout=10.0) as c:
        yield c


@pytest.fixture
def pods(api: httpx.Client) -> Iterator[Pods]:
    p = Pods(api)
    try:
        yield p
    finally:
        p.cleanup()


def members(pods: Pods, name: str) -> list[dict[str, Any]]:
    group = {"name": f"{NS}/{name}", "members": [{"podNumber": 2, "leafCellNumber": 1}]}
    spec = {"virtualCluster": "nlp", "leafCellNumber": 1, "affinityGroup": group}
    return [pods.make(f"{name}-m{i}", NS, spec) for i in range(2)]


def place(api: httpx.Client, pod: dict[str, Any]) -> str:
    nodes = kubesched.node_names(api.get(kubesched.PHYSICAL_CLUSTER).json())
    r = api.post("/v1/extender/filter", json={"Pod": pod, "Nodes": None, "NodeNames": nodes})
    assert r.status_code == 200 and not r.json().get("Error"), r.text
    got = r.json()["NodeNames"]
    assert got, r.text
    return str(got[0])


def bind(api: httpx.Client, pod: dict[str, Any], node: str) -> None:
    m = pod["metadata"]
    args = {"PodName": m["name"], "PodNamespace": m["namespace"], "PodUID": m["uid"], "Node": node}
    r = api.post("/v1/extender/bind", json=args)
    assert r.status_code == 200 and not r.json().get("Error"), r.text


def delete(api: httpx.Client, pod: dict[str, Any]) -> None:
    assert api.delete(f"/v1/standalone/pods/{pod['metadata']['uid']}").status_code == 200


def phase(api: httpx.Client, name: str) -> str | None:
    """The gang's ledger phase, or None when the ledger no longer knows it."""
    r = api.get(f"/v1/gangs/{NS}/{name}")
    if r.status_code == 404:
        return None
    assert r.status_code == 200, r.text
    return str(r.json()["phase"])


def listed(api: httpx.Client) -> set[str]:
    return {i["name"] for i in api.get("/v1/gangs", params={"namespace": NS, "limit": 500}).json()["items"]}


def expired_records(api: httpx.Client) -> int:
    m = re.search(r'^topogang_ledger_gangs\{phase="Expired"\} (\S+)$', api.get("/metrics").text, re.M)
    return int(float(m.group(1))) if m else 0


def test_a_finished_gang_is_forgotten_with_its_last_pod(api: httpx.Client, pods: Pods) -> None:
    for k in range(3):
        name = f"done{k}-{pods.run}"
        gang = members(pods, name)
        for pod in gang:
            bind(api, pod, place(api, pod))
        assert phase(api, name) in ("Bound", "Ready")
        assert name in listed(api)
        delete(api, gang[0])
        assert phase(api, name) is not None  # one member is still running
        delete(api, gang[1])
        assert phase(api, name) is None
        assert name not in listed(api)


def test_a_gang_whose_pods_went_before_it_was_whole_goes_after_its_ttl(api: httpx.Client, pods: Pods) -> None:
    name = f"gone-{pods.run}"
    first, _second = members(pods, name)
    bind(api, first, place(api, first))
    delete(api, first)  # the job was deleted while its gang waited for the second member
    poll(f"{name} to leave Reserved", lambda: phase(api, name) in (None, "Expired"), tries=200, interval=0.1)
    assert expired_records(api) <= CAP


def test_expired_tombstones_are_capped(api: httpx.Client, pods: Pods) -> None:
    names = [f"left{k}-{pods.run}" for k in range(2 * CAP + 1)]
    for name in names:
        place(api, members(pods, name)[0])  # the second member never comes

    def all_expired() -> bool:
        return all(phase(api, n) in (None, "Expired") for n in names)

    poll("every abandoned gang to expire", all_expired, tries=300, interval=0.1)
    kept = [n for n in names if phase(api, n) == "Expired"]
    assert len(kept) == CAP == expired_records(api)
    assert set(kept) == {n for n in listed(api) if n in names}
