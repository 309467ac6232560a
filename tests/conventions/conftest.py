"""The real standalone server of the integration tests, and pods written the way users write them."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conventions.manifests import pod
from tests.integration.conftest import client, node_names, server

__all__ = ["Made", "client", "made", "node_names", "server"]


class Made:
    """Pods a test creates (unique names per test); deleted from the server at the end."""

    def __init__(self, client: httpx.Client) -> None:
        self.client = client
        self.run = uuid.uuid4().hex[:6]
        self.uids: list[str] = []

    def pod(self, name: str, ns: str = "vision", **kw: Any) -> dict[str, Any]:
        full = f"{name}-{self.run}"
        p = pod(full, ns, uid=f"{full}-{len(self.uids)}", **kw)
        self.uids.append(p["metadata"]["uid"])
        return p

    def cleanup(self) -> None:
        for uid in self.uids:
            self.client.delete(f"/v1/standalone/pods/{uid}")


@pytest.fixture
def made(client: httpx.Client) -> Iterator[Made]:
    m = Made(client)
    try:
        yield m
    finally:
        m.cleanup()
