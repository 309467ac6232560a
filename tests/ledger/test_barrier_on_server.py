"""`topogang barrier` as a subprocess (as an init container runs it) against the real server."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx

from extender.gangs.framework import injector
from tests.barrier.test_framework import framework
from tests.integration.test_server import filter_
from tests.ledger.conftest import Job

ROOT = Path(__file__).resolve().parents[2]


def start_barrier(tmp: Path, job: Job, scale: str, **env: str) -> subprocess.Popen[str]:
    base = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp),
        "FC_FRAMEWORK_NAMESPACE": job.ns,
        "FC_FRAMEWORK_NAME": job.fw,
        "FC_TASKROLE_NAME": "worker",
        "FC_TASK_INDEX": "1",
        "FC_FRAMEWORK_ATTEMPT_INSTANCE_UID": "0_cm-a",
        "BARRIER_CHECK_INTERVAL_SEC": "5",
        "BARRIER_CHECK_TIMEOUT_SEC": "60",
        "TOPOGANG_BARRIER_TIME_SCALE": scale,
        "TOPOGANG_BARRIER_DIR": str(tmp / "out"),
        "TOPOGANG_LEDGER_URL": str(job.api.base_url).rstrip("/"),
        "KUBE_APISERVER_ADDRESS": "http://127.0.0.1:9",  # no API server: the ledger is the source
        "KUBECONFIG": str(tmp / "none"),
        **env,
    }
    return subprocess.Popen(
        [sys.executable, str(ROOT / "topogang_cli.py"), "barrier"],
        env=base,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )


def finish(p: subprocess.Popen[str]) -> tuple[int, str]:
    _, err = p.communicate(timeout=60)
    return p.returncode, err


def test_the_barrier_passes_once_the_gang_is_ready(tmp_path: Path, job: Job) -> None:
    pods = job.pods()
    job.schedule(pods[0])
    proc = start_barrier(tmp_path, job, "0.1")  # 0.5 s interval, 6 s timeout
    time.sleep(0.3)
    for p in pods[1:]:
        job.schedule(p)
    code, err = finish(proc)
    assert code == 0, err
    members = {(m["taskRole"], m["taskIndex"]): m for m in job.get()["members"]}
    ips = {k: m["podIP"] for k, m in members.items()}
    expected = framework({"ps": [ips[("ps", 0)]], "worker": [ips[("worker", 0)], ips[("worker", 1)]]})
    out = tmp_path / "out"
    assert (out / "injector.sh").read_text() == injector(expected)
    env = (out / "topogang.sh").read_text()
    me = members[("worker", 1)]
    assert "export TG_RANK=2\n" in env and "TG_WORLD_SIZE=3" in env
    assert f"TG_NODE={me['node']}\n" in env and f"TG_GPUS={','.join(map(str, me['gpus']))}\n" in env


def test_the_barrier_times_out_with_201(tmp_path: Path, job: Job) -> None:
    filter_(job.api, job.pods()[0], job.nodes)  # Reserved, and nobody else comes
    code, err = finish(start_barrier(tmp_path, job, "0.02"))  # 1.2 s timeout
    assert code == 201, err
    assert "timed out" in err and not (tmp_path / "out" / "injector.sh").exists()


def test_the_barrier_of_a_stale_attempt_exits_210(tmp_path: Path, job: Job) -> None:
    filter_(job.api, job.pods()[0], job.nodes)
    filter_(job.api, job.pods(attempt="1_cm-b")[0], job.nodes)
    code, err = finish(start_barrier(tmp_path, job, "0.02"))
    assert code == 210, err
    assert "superseded" in err


def test_the_ledger_url_is_the_barriers_only_need(api: httpx.Client) -> None:
    assert api.get("/").json()["paths"].count("/v1/gangs/{namespace}/{name:path}") == 1
