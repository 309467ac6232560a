"""Real standalone extenders for the ledger's tests (the integration tests' subprocess fixture): one
with the example config, one whose reservations expire after a second."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from extender import kubesched
from tests.integration.conftest import CONFIG, Server, running_server
from tests.integration.test_server import schedule
from tests.ledger.fc import fc_pod, members


@pytest.fixture(scope="session")
def ledger_server() -> Iterator[Server]:
    with running_server() as s:
        yield s


@pytest.fixture(scope="session")
def api(ledger_server: Server) -> Iterator[httpx.Client]:
    with ledger_server.client(timeout=30.0) as c:
        yield c


@pytest.fixture(scope="session")
def short_ttl_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    text = CONFIG.read_text().replace("reservationTtlSeconds: 300", "reservationTtlSeconds: 1")
    assert "reservationTtlSeconds: 1\n" in text
    config: Path = tmp_path_factory.mktemp("ttl") / "cluster.yaml"
    config.write_text(text)
    with running_server(config) as s, s.client(timeout=30.0) as c:
        yield c


class Job:
    """One framework's pods on the server; every pod is deleted at the end of the test."""

    def __init__(self, api: httpx.Client, nodes: list[str], **kw: Any) -> None:
        self.api = api
        self.nodes = nodes
        self.ns = kw.pop("ns", "vision")
        self.fw = f"tf-{uuid.uuid4().hex[:6]}"
        self.kw = kw
        self.uids: list[str] = []

    def pods(self, **kw: Any) -> list[dict[str, Any]]:
        out = members(self.ns, self.fw, **{**self.kw, **kw})
        self.uids += [p["metadata"]["uid"] for p in out]
        return out

    def pod(self, role: str, index: int, **kw: Any) -> dict[str, Any]:
        p = fc_pod(self.ns, self.fw, role, index, **{**self.kw, **kw})
        self.uids.append(p["metadata"]["uid"])
        return p

    def schedule(self, pod: dict[str, Any]) -> str:
        node = schedule(self.api, pod, self.nodes)
        assert node is not None
        return node

    def get(self, query: str = "", status: int = 200) -> dict[str, Any]:
        r = self.api.get(f"/v1/gangs/{self.ns}/{self.fw}{query}")
        assert r.status_code == status, r.text
        doc: dict[str, Any] = r.json()
        return doc

    def delete(self, pod: dict[str, Any]) -> None:
        assert self.api.delete(f"/v1/standalone/pods/{pod['metadata']['uid']}").status_code == 200

    def cleanup(self) -> None:
        for uid in self.uids:
            self.api.delete(f"/v1/standalone/pods/{uid}")


@pytest.fixture(scope="session")
def nodes(api: httpx.Client) -> list[str]:
    return node_names(api)


def node_names(api: httpx.Client) -> list[str]:
    return kubesched.node_names(api.get(kubesched.PHYSICAL_CLUSTER).json())


@pytest.fixture
def job(api: httpx.Client, nodes: list[str]) -> Iterator[Job]:
    j = Job(api, nodes)
    try:
        yield j
    finally:
        j.cleanup()
