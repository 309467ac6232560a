"""A real standalone extender for the integration tests: `topogang serve` in a subprocess.

The server listens on a free 127.0.0.1 port (it binds port 0 itself and prints the address, so there
is no race for the port), the fixture waits for /readyz, and the process is always terminated, even
when a test fails. Tests drive it with httpx exactly as kube-scheduler would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from extender import kubesched
from tests.polling import listen_urls

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "config" / "examples" / "example-cluster.yaml"
ENABLE = "topogang.io/pod-scheduling-enable"
SPEC = "topogang.io/pod-scheduling-spec"
START_TIMEOUT = 30.0
JSON_TYPE = {"Content-Type": "application/json"}


class Doors(httpx.BaseTransport):
    """Sends each request to the door it belongs to, as the cluster around a real extender does: the
    verbs and standalone's state changes to the verbs listener (kube-scheduler's), the rest to the
    read listener. Tests of the doors themselves call each listener by its own URL."""

    def __init__(self, verbs_url: str, **kw: Any) -> None:
        self.verbs = httpx.URL(verbs_url)
        self.inner = httpx.HTTPTransport(**kw)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if is_verb(request.method, path):
            default_host = request.headers.get("host") == request.url.netloc.decode()
            request.url = request.url.copy_with(
                scheme=self.verbs.scheme, host=self.verbs.host, port=self.verbs.port
            )
            if default_host:  # a Host the test set on purpose is sent as it is
                request.headers["host"] = request.url.netloc.decode()
        return self.inner.handle_request(request)

    def close(self) -> None:
        self.inner.close()


def is_verb(method: str, path: str) -> bool:
    """Whether a request belongs behind the verbs' door (extender.http.app.build_apps)."""
    return path.startswith("/v1/extender/") or (path.startswith("/v1/standalone/") and method != "GET")


@dataclass
class Server:
    url: str
    process: subprocess.Popen[str]
    log: list[str] = field(default_factory=list)
    verbs_url: str = ""  # the verbs listener (kube-scheduler's door)

    def client(self, **kw: Any) -> httpx.Client:
        """A client of both listeners (`Doors`), its base URL the read listener's."""
        return httpx.Client(base_url=self.url, transport=Doors(self.verbs_url), **kw)


@contextmanager
def reloading(config: Path) -> Iterator[tuple[Server, httpx.Client]]:
    """`running_server` on `config`, which it reads again every 0.2 s (a hot reload follows an
    edit within a second), and a client of it."""
    with (
        running_server(config, {"TOPOGANG_CONFIG_POLL_SECONDS": "0.2"}) as server,
        server.client(timeout=10.0) as client,
    ):
        yield server, client


@contextmanager
def running_server(
    config: Path = CONFIG,
    env: dict[str, str] | None = None,
    args: tuple[str, ...] = (),
    program: tuple[str, ...] = (str(ROOT / "topogang_cli.py"),),
) -> Iterator[Server]:
    """`topogang serve` on `config` in a subprocess, ready; always terminated afterwards. An https
    server is only awaited until it prints its address (probing it needs the test's CA). `program`
    is what Python runs (a test may run the command through a module that lowers a bound first)."""
    cmd = [
        sys.executable,
        *program,
        "serve",
        "--config",
        str(config),
        "--listen",
        "127.0.0.1:0",
        *args,
    ]
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **(env or {})},
    )
    try:
        lines: list[str] = []
        deadline = time.monotonic() + START_TIMEOUT
        assert proc.stdout is not None
        urls = listen_urls(proc.stdout, lines)
        if urls is None:
            raise RuntimeError("the extender did not start:\n" + "".join(lines))
        url, verbs_url = urls
        while time.monotonic() < deadline and not url.startswith("https"):
            try:
                if httpx.get(f"{url}/readyz", timeout=1.0).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        else:
            if not url.startswith("https"):
                raise RuntimeError("the extender never became ready:\n" + "".join(lines))
        # keep reading its output: a server logging into a full pipe blocks mid-request (a busy
        # load test logs every eviction), so the log keeps its banner and a bounded tail
        threading.Thread(target=_drain, args=(proc, lines), daemon=True).start()
        yield Server(url, proc, lines, verbs_url or url)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _drain(proc: subprocess.Popen[str], lines: list[str], keep: int = 2000) -> None:
    assert proc.stdout is not None
    banner = len(lines)
    for line in proc.stdout:
        lines.append(line)
        if len(lines) > banner + 2 * keep:
            del lines[banner : len(lines) - keep]


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    with running_server() as s:
        yield s


@pytest.fixture(scope="session")
def client(server: Server) -> Iterator[httpx.Client]:
    with server.client(timeout=10.0) as c:
        yield c


@pytest.fixture(scope="session")
def node_names(client: httpx.Client) -> list[str]:
    return kubesched.node_names(client.get(kubesched.PHYSICAL_CLUSTER).json())


class Pods:
    """Pods a test creates; deleted from the server at the end of the test."""

    def __init__(self, client: httpx.Client) -> None:
        self.client = client
        self.uids: list[str] = []
        self.run = uuid.uuid4().hex[:8]

    def make(
        self,
        name: str,
        ns: str,
        spec: dict[str, Any] | str | None,
        *,
        annotations: dict[str, str] | None = None,
        enabled: bool = True,
    ) -> dict[str, Any]:
        uid = f"{name}-{self.run}-{len(self.uids)}"
        self.uids.append(uid)
        ann = dict(annotations or {})
        if spec is not None:
            ann[SPEC] = spec if isinstance(spec, str) else json.dumps(spec)
        limits = {ENABLE: "1"} if enabled else {"cpu": "1"}
        return {
            "metadata": {"uid": uid, "name": f"{name}-{self.run}", "namespace": ns, "annotations": ann},
            "spec": {"containers": [{"name": "main", "resources": {"limits": limits}}]},
            "status": {"phase": "Pending"},
        }

    def cleanup(self) -> None:
        for uid in self.uids:
            self.client.delete(f"/v1/standalone/pods/{uid}")


@pytest.fixture
def pods(client: httpx.Client) -> Iterator[Pods]:
    p = Pods(client)
    try:
        yield p
    finally:
        p.cleanup()


def state(client: httpx.Client) -> tuple[Any, Any, Any]:
    """What must not change under bad requests: cells, VCs, and every gang holding GPUs."""
    cluster = client.get("/v1/inspect/clusterstatus").json()
    groups = [
        g
        for g in client.get("/v1/inspect/affinitygroups/").json()["items"]
        if g["status"]["state"] != "Waiting"
    ]
    summary = client.get("/v1/inspect").json()
    return cluster, groups, (summary["gpus"], summary["virtualClusters"])
