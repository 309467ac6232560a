"""`topogang barrier` run as a subprocess, as an init container runs it, against HTTP servers on
loopback: a scripted ledger and a scripted API server serving the Framework."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from extender.gangs.framework import injector
from tests.barrier.test_framework import framework

ROOT = Path(__file__).resolve().parents[2]
FRAMEWORK_PATH = "/apis/frameworkcontroller.microsoft.com/v1/namespaces/ml/frameworks/tf"


class Script:
    """What the fake servers answer: ledger replies in order (the last one repeats)."""

    def __init__(self) -> None:
        self.ledger: list[tuple[int, dict[str, Any]]] = [(404, {})]
        self.framework: dict[str, Any] | None = None
        self.calls: list[str] = []
        self.auth: list[str | None] = []  # each request's Authorization header


@pytest.fixture
def server() -> Iterator[tuple[str, Script]]:
    script = Script()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            script.calls.append(self.path)
            script.auth.append(self.headers.get("Authorization"))
            if self.path.startswith("/v1/gangs/ml/tf"):
                code, body = script.ledger[0] if len(script.ledger) == 1 else script.ledger.pop(0)
            elif self.path.split("?")[0] == FRAMEWORK_PATH and script.framework is not None:
                code, body = 200, script.framework
            else:
                code, body = 404, {"kind": "Status", "code": 404}
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", script
    finally:
        httpd.shutdown()


def barrier(tmp: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp),
        "FC_FRAMEWORK_NAMESPACE": "ml",
        "FC_FRAMEWORK_NAME": "tf",
        "FC_TASKROLE_NAME": "worker",
        "FC_TASK_INDEX": "1",
        "FC_FRAMEWORK_ATTEMPT_INSTANCE_UID": "0_abc",
        "BARRIER_CHECK_INTERVAL_SEC": "5",
        "BARRIER_CHECK_TIMEOUT_SEC": "60",
        "TOPOGANG_BARRIER_TIME_SCALE": "0.04",  # 0.2 s interval, 2.4 s timeout
        "TOPOGANG_BARRIER_DIR": str(tmp / "out"),
        "KUBECONFIG": str(tmp / "none"),
    }
    base.update(env)
    return subprocess.run(
        [sys.executable, str(ROOT / "topogang_cli.py"), "barrier"],
        env=base,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )


READY = {
    "phase": "Ready",
    "namespace": "ml",
    "framework": None,
    "members": [
        {"taskRole": "ps", "taskIndex": 0, "rank": 0, "node": "n1", "gpus": [0], "podIP": "10.0.0.1"},
        {"taskRole": "worker", "taskIndex": 0, "rank": 1, "node": "n1", "gpus": [1, 2], "podIP": "10.0.0.2"},
        {"taskRole": "worker", "taskIndex": 1, "rank": 2, "node": "n2", "gpus": [0, 1], "podIP": "10.0.0.3"},
    ],
}


def test_passes_when_the_ledger_says_ready(tmp_path: Path, server: tuple[str, Script]) -> None:
    url, script = server
    f = framework({"ps": ["10.0.0.1"], "worker": ["10.0.0.2", "10.0.0.3"]})
    script.framework = f
    script.ledger = [(404, {}), (200, {"phase": "Reserved"}), (200, READY)]
    r = barrier(tmp_path, TOPOGANG_LEDGER_URL=url, KUBE_APISERVER_ADDRESS=url)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "out"
    assert (out / "injector.sh").read_text() == injector(f)
    assert json.loads((out / "framework.json").read_text())["metadata"]["name"] == "tf"
    assert json.loads((out / "gang.json").read_text())["phase"] == "Ready"
    env = (out / "topogang.sh").read_text()
    assert "export TG_RANK=2\n" in env and "TG_WORLD_SIZE=3" in env and "TG_GPUS=0,1" in env
    assert "TG_WORKER_NODES=n1,n2" in env
    assert any("waitFor=Ready" in c and "attempt=0_abc" in c for c in script.calls)


def test_injector_from_the_ledger_alone_matches_the_framework_rule(
    tmp_path: Path, server: tuple[str, Script]
) -> None:
    url, script = server
    script.ledger = [(200, READY)]  # no Framework reachable: the ledger's members stand in for it
    r = barrier(tmp_path, TOPOGANG_LEDGER_URL=url, KUBE_APISERVER_ADDRESS="http://127.0.0.1:9")
    assert r.returncode == 0, r.stderr
    expected = injector(framework({"ps": ["10.0.0.1"], "worker": ["10.0.0.2", "10.0.0.3"]}))
    assert (tmp_path / "out" / "injector.sh").read_text() == expected


def test_a_ready_gang_waits_for_the_tasks_outside_it_to_have_a_pod_ip(
    tmp_path: Path, server: tuple[str, Script]
) -> None:
    """The gang holds only the task roles that opt in (the GPU workers, not a CPU parameter server):
    Ready says nothing of the ps task's pod. FrameworkBarrier's rule counts every task with its IP,
    so the barrier passes only once the ps has one too, and `injector.sh` names it."""
    url, script = server
    workers = [m for m in READY["members"] if m["taskRole"] == "worker"]  # type: ignore[index, union-attr]
    waiting = framework({"ps": [None], "worker": ["10.0.0.2", "10.0.0.3"]})
    running = framework({"ps": ["10.0.0.1"], "worker": ["10.0.0.2", "10.0.0.3"]})
    gang = {**READY, "members": workers}
    script.ledger = [(200, {**gang, "framework": waiting})] * 3 + [(200, {**gang, "framework": running})]
    r = barrier(tmp_path, TOPOGANG_LEDGER_URL=url, KUBE_APISERVER_ADDRESS=url)
    assert r.returncode == 0, r.stderr
    assert "waiting for the Framework's other tasks to have a pod IP" in r.stderr
    assert sum("/v1/gangs/ml/tf" in c for c in script.calls) == 4
    assert (tmp_path / "out" / "injector.sh").read_text() == injector(running)


def test_times_out_with_201(tmp_path: Path, server: tuple[str, Script]) -> None:
    url, script = server
    script.ledger = [(200, {"phase": "Reserved"})]
    r = barrier(tmp_path, TOPOGANG_LEDGER_URL=url)
    assert r.returncode == 201, r.stderr
    assert "timed out" in r.stderr
    assert not (tmp_path / "out" / "injector.sh").exists()


def test_fails_fast_with_201_when_the_gang_can_never_fit(tmp_path: Path, server: tuple[str, Script]) -> None:
    url, script = server
    script.ledger = [
        (200, {"phase": "Pending", "neverFits": True, "reason": "VC a has 8 GPUs; gang needs 16"})
    ]
    r = barrier(tmp_path, TOPOGANG_LEDGER_URL=url, BARRIER_CHECK_TIMEOUT_SEC="1200")
    assert r.returncode == 201 and "gang needs 16" in r.stderr
    assert len(script.calls) == 1


def test_fails_fast_with_201_when_the_gangs_reservation_expired(
    tmp_path: Path, server: tuple[str, Script]
) -> None:
    """Expired is final (the ledger's long-poll returns on it): the barrier stops at once with the
    ledger's reason, as FrameworkBarrier stops on its own timeout, rather than asking again until
    its timeout."""
    url, script = server
    reason = "the gang's reservation expired before all its members were bound"
    script.ledger = [(200, {"phase": "Reserved"}), (200, {"phase": "Expired", "reason": reason})]
    r = barrier(tmp_path, TOPOGANG_LEDGER_URL=url, BARRIER_CHECK_TIMEOUT_SEC="1200")
    assert r.returncode == 201, r.stderr
    assert "BarrierTransientConflictFailed: gang Expired: " + reason in r.stderr
    assert len(script.calls) == 2 and not (tmp_path / "out" / "injector.sh").exists()


def test_stale_attempt_is_permanent_210(tmp_path: Path, server: tuple[str, Script]) -> None:
    url, script = server
    script.ledger = [(409, {"message": "attempt 0_abc superseded by 1_def"})]
    r = barrier(tmp_path, TOPOGANG_LEDGER_URL=url)
    assert r.returncode == 210 and "superseded" in r.stderr


@pytest.mark.parametrize(
    ("env", "word"),
    [
        ({"FC_FRAMEWORK_NAME": ""}, "FC_FRAMEWORK_NAME"),
        ({"BARRIER_CHECK_INTERVAL_SEC": "4"}, "BARRIER_CHECK_INTERVAL_SEC"),
        ({"BARRIER_CHECK_TIMEOUT_SEC": "59"}, "BARRIER_CHECK_TIMEOUT_SEC"),
        ({"BARRIER_CHECK_TIMEOUT_SEC": "1201"}, "BARRIER_CHECK_TIMEOUT_SEC"),
        ({"BARRIER_CHECK_INTERVAL_SEC": "ten"}, "BARRIER_CHECK_INTERVAL_SEC"),
    ],
)
def test_bad_env_is_permanent_210(tmp_path: Path, env: dict[str, str], word: str) -> None:
    r = barrier(tmp_path, TOPOGANG_LEDGER_URL="http://127.0.0.1:9", **env)
    assert r.returncode == 210 and word in r.stderr


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_falls_back_to_the_framework_rule_when_the_ledger_is_down(
    tmp_path: Path, server: tuple[str, Script]
) -> None:
    url, script = server
    f = framework({"ps": ["10.0.0.1"], "worker": ["10.0.0.2", "10.0.0.3"]})
    script.framework = f
    r = barrier(tmp_path, TOPOGANG_LEDGER_URL=f"http://127.0.0.1:{free_port()}", KUBE_APISERVER_ADDRESS=url)
    assert r.returncode == 0, r.stderr
    assert "falling back" in r.stderr
    assert (tmp_path / "out" / "injector.sh").read_text() == injector(f)
    assert not (tmp_path / "out" / "gang.json").exists()


def test_framework_not_found_in_fallback_is_permanent(tmp_path: Path, server: tuple[str, Script]) -> None:
    url, _script = server
    r = barrier(tmp_path, KUBE_APISERVER_ADDRESS=url)  # no ledger configured, no Framework served
    assert r.returncode == 210 and "not found" in r.stderr


def test_the_barrier_sends_its_pods_token_read_fresh_for_every_request(
    tmp_path: Path, server: tuple[str, Script]
) -> None:
    """The extender lets a pod read only its own gang, so the barrier proves which pod it is: its
    projected ServiceAccount token as a bearer, to the ledger and to the Framework proxy alike."""
    url, script = server
    token = tmp_path / "token"
    token.write_text("projected-token-1\n")
    script.ledger = [(404, {}), (200, READY)]
    r = barrier(tmp_path, TOPOGANG_LEDGER_URL=url, TOPOGANG_TOKEN_FILE=str(token))
    assert r.returncode == 0, r.stderr
    assert script.auth and set(script.auth) == {"Bearer projected-token-1"}
    # the Framework fallback (KUBE_APISERVER_ADDRESS at the extender's proxy) sends it too
    script.auth.clear()
    script.framework = framework({"ps": ["10.0.0.1"], "worker": ["10.0.0.2", "10.0.0.3"]})
    r = barrier(tmp_path, KUBE_APISERVER_ADDRESS=url, TOPOGANG_TOKEN_FILE=str(token))
    assert r.returncode == 0, r.stderr
    assert set(script.auth) == {"Bearer projected-token-1"}
    # no token file (standalone, a laptop): no header at all
    script.auth.clear()
    r = barrier(tmp_path, TOPOGANG_LEDGER_URL=url, TOPOGANG_TOKEN_FILE=str(tmp_path / "absent"))
    assert r.returncode == 0, r.stderr
    assert set(script.auth) == {None}


def test_a_refused_token_is_logged_with_the_extenders_reason(
    tmp_path: Path, server: tuple[str, Script]
) -> None:
    url, script = server
    script.ledger = [(403, {"Error": "topogang: pod ml/x may read only its own gang (ml/x), not ml/tf"})]
    r = barrier(tmp_path, TOPOGANG_LEDGER_URL=url)
    assert r.returncode == 201
    assert "HTTP 403" in r.stderr and "may read only its own gang" in r.stderr
