"""A new user's first hour, as the README writes it, on a fresh clone with nothing beside it.

The test clones this repository's committed HEAD into an empty temporary directory (so nothing
is beside the repository, as in a clone from a Git host), then, inside the clone: `make run` until
/readyz answers (a fresh venv with the runtime dependencies only, from the package index through
pip's cache), the README's "Try it" commands as written there (the replay, then every curl, sent to
127.0.0.1 on a free port), and `topogang simulate --days 1`; and it checks that a wheel built from
the clone simulates with nothing beside it. The server is always stopped at the end.

A clone sees committed files only: uncommitted changes in this work tree are not tested here.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.polling import poll

ROOT = Path(__file__).resolve().parents[1]
INSTALL_TRIES = 1200  # half a second apart: a fresh venv and the runtime dependencies (~30 s, warm pip cache)
STEP_TIMEOUT = 120.0
BIND_ATTEMPTS = 3

pytestmark = pytest.mark.clone


@dataclass
class Clone:
    dir: Path
    url: str
    port: int
    make_output: Path

    def run(self, *cmd: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
        """A command in the clone; its stdout. Fails the test, with the output, when it fails."""
        done = subprocess.run(
            cmd,
            cwd=cwd or self.dir,
            capture_output=True,
            text=True,
            timeout=STEP_TIMEOUT,
            env={**os.environ, **(env or {})},
        )
        assert done.returncode == 0, (
            f"{shlex.join(cmd)} exited {done.returncode}:\n{done.stdout}{done.stderr}"
        )
        return done.stdout


def free_port_pair() -> int:
    """A port free now with the next one free too: `serve` puts its verbs listener on port + 1."""
    for _ in range(100):
        with socket.socket() as read, socket.socket() as verbs:
            read.bind(("127.0.0.1", 0))
            port: int = read.getsockname()[1]
            try:
                verbs.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
            return port
    raise AssertionError("no two neighbouring free ports on 127.0.0.1 in 100 tries")


def get(url: str, data: bytes | None = None, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(
        url, data=data, headers=headers or {}, method="POST" if data is not None else "GET"
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def stop(proc: subprocess.Popen[bytes]) -> None:
    """`make run` and the server it started: the whole process group, politely first."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=20)


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Clone]:
    if shutil.which("git") is None or shutil.which("make") is None or not (ROOT / ".git").exists():
        pytest.skip("needs git, make and a git checkout to clone")
    base = tmp_path_factory.mktemp("fresh")
    target = base / "topogang"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(target)], check=True, timeout=STEP_TIMEOUT)
    assert sorted(p.name for p in base.iterdir()) == ["topogang"]  # nothing beside the clone
    log = base / "make-run.log"
    proc, port = started(target, log)
    try:
        yield Clone(target, f"http://127.0.0.1:{port}", port, log)
    finally:
        stop(proc)


def started(target: Path, log: Path) -> tuple[subprocess.Popen[bytes], int]:
    """`make run` serving, and its port. The ports are free when picked, not reserved: another
    process may take one during the install. A start that lost that race is started again on new
    ports (quickly: the install is done by then)."""
    for _ in range(BIND_ATTEMPTS):
        port = free_port_pair()
        proc = start_make_run(target, port, log)
        try:
            if serves(proc, f"http://127.0.0.1:{port}", log):
                return proc, port
        except BaseException:
            stop(proc)
            raise
    raise AssertionError(f"every port picked was taken before make run bound it:\n{log.read_text()}")


def serves(proc: subprocess.Popen[bytes], url: str, log: Path) -> bool:
    """Whether `make run` came up at `url` (False: its port was taken first; any other exit fails)."""
    taken: list[bool] = []

    def ready() -> bool:
        if proc.poll() is not None:
            said = log.read_text()
            assert "address already in use" in said.lower(), f"make run exited {proc.returncode}:\n{said}"
            taken.append(True)
            return True
        try:
            return get(url + "/readyz")[0] == 200
        except OSError:
            return False

    poll(f"make run to be ready (log: {log})", ready, tries=INSTALL_TRIES, interval=0.5)
    return not taken


def start_make_run(target: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            ["make", "run", f"PORT={port}", f"PY={sys.executable}"],
            cwd=target,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stop() ends make and the server
            env={k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON"))},
        )


def readme_try_it(readme: str) -> list[str]:
    """The commands of the README's "Try it" block, comments stripped."""
    section = readme.split("## Try it", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block is not None
    return [line.split("  #", 1)[0].strip() for line in block.group(1).splitlines() if line.strip()]


def test_make_run_installs_quietly_and_only_what_serving_needs(clone: Clone) -> None:
    before_serving = clone.make_output.read_text().split("topogang: listening on", 1)[0]
    assert not re.search(r"warn|deprecat", before_serving, re.I), before_serving
    assert f"listening on http://127.0.0.1:{clone.port}" in clone.make_output.read_text()
    venv = clone.dir / ".venv" / "bin"
    assert (venv / "topogang").exists()
    for dev_tool in ("pytest", "ruff", "mypy", "locust"):
        assert not (venv / dev_tool).exists(), f"make run installed {dev_tool}"


def test_the_readme_try_it_commands_work_and_show_what_it_says(clone: Clone) -> None:
    commands = readme_try_it((clone.dir / "README.md").read_text())
    shown: dict[str, Any] = {}
    for command in commands:
        argv = shlex.split(command)
        if argv[0] == "curl":
            path = next(a for a in argv if a.startswith("localhost:9096")).removeprefix("localhost:9096")
            body = next((a[1:] for a in argv if a.startswith("@")), None)
            pairs = itertools.pairwise(argv)
            headers = dict(h.split(": ", 1) for flag, h in pairs if flag == "-H")  # as curl sends them
            status, raw = get(clone.url + path, (clone.dir / body).read_bytes() if body else None, headers)
            assert status == 200, f"{command}: HTTP {status} {raw[:300]!r}"
            shown[path] = json.loads(raw)
        else:
            assert argv[0] == ".venv/bin/topogang", command
            extra = ["--url", clone.url] if argv[1] == "replay" else []
            shown[argv[1]] = clone.run(str(clone.dir / argv[0]), *argv[1:], *extra)
    assert {
        "replay",
        "demo",
        "/v1/inspect",
        "/v1/inspect/affinitygroups/",
        "/v1/gangs",
        "/v1/explain",
    } <= set(shown)
    assert "summary:" in shown["replay"] and "decision counters (/metrics):" in shown["replay"]
    # "GPUs, gangs and VC usage": the replay's gangs are still there (--keep)
    inspect = shown["/v1/inspect"]
    assert inspect["gangs"]["Bound"] >= 1 and inspect["gpus"]["free"] < inspect["gpus"]["total"]
    assert any(vc["used"] > 0 for vc in inspect["virtualClusters"].values())
    # "placement, or why each waits"
    groups = shown["/v1/inspect/affinitygroups/"]["items"]
    placed = [g for g in groups if g["status"].get("physicalPlacement")]
    waiting = [g for g in groups if g["status"]["state"] == "Waiting"]
    assert placed and waiting and len(placed) + len(waiting) == len(groups)
    assert all("it can never run" in g["status"]["waitReason"]["message"] for g in waiting)
    # "each gang's phase, Ready ones with pod IPs"
    ready = [g for g in shown["/v1/gangs"]["items"] if g["phase"] == "Ready"]
    assert ready and all(m["podIP"] for g in ready for m in g["members"])
    # "would this 2 x 8-GPU gang fit now, where?"
    explained = shown["/v1/explain"]
    assert explained["fitsNow"] is True and [len(p["gpus"]) for p in explained["placement"]["pods"]] == [8, 8]


def test_simulate_runs_from_the_clone_on_the_shipped_trace(clone: Clone) -> None:
    out = clone.run(str(clone.dir / ".venv/bin/topogang"), "simulate", "--days", "1", "--no-progress")
    assert "G3a" in out and "wrote" in out
    report = (clone.dir / "results" / "simulate" / "report.md").read_text()
    assert "philly_jobs_week_2017-10-23.csv" in report
    assert "Plots skipped" in report  # matplotlib is a load/dev extra, not a runtime dependency


def test_a_wheel_built_from_the_clone_simulates_with_nothing_beside_it(clone: Clone, tmp_path: Path) -> None:
    pip = str(clone.dir / ".venv/bin/pip")
    clone.run(pip, "wheel", "--quiet", "--no-deps", "--wheel-dir", str(tmp_path / "wheel"), str(clone.dir))
    (wheel,) = (tmp_path / "wheel").glob("topogang-*.whl")
    site = tmp_path / "site"
    clone.run(pip, "install", "--quiet", "--no-deps", "--target", str(site), str(wheel))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code = (
        "import sys, loadtest; from loadtest.simulate.cli import main; "
        f"assert loadtest.__file__.startswith({str(site)!r}), loadtest.__file__; "
        "sys.exit(main(['--days', '0.25', '--policies', 'topogang', '--no-progress']))"
    )
    python = str(clone.dir / ".venv/bin/python")
    out = clone.run(python, "-c", code, cwd=elsewhere, env={"PYTHONPATH": str(site)})
    assert "G5a" in out and (elsewhere / "results" / "simulate" / "metrics.json").exists()
