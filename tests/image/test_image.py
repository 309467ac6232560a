"""The extender image: built from the repository's Dockerfile as it is, then run and asked to schedule.

`scripts/image/build.sh` builds it with buildah and no registry (a Debian stand-in for the FROM line's Python
base) and caches it under ~/.cache/topogang-image, keyed by a hash of the Dockerfile and its sources. The
image then runs as `docker run IMAGE --listen ...` would (its ENTRYPOINT, standalone on the bundled example
cluster), under `buildah run --isolation chroot` on the host's network.

Opt-in like the e2e tests: TOPOGANG_IMAGE=1 runs it (.ci/run sets it after installing buildah and
debootstrap), and then a missing tool or a failed build fails it; without it the test is skipped.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from extender import kubesched
from tests.polling import listen_urls, poll

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "scripts" / "image" / "build.sh"
IMAGE_USER = "10001:10001"  # the Dockerfile's USER

pytestmark = [
    pytest.mark.image,
    pytest.mark.skipif(
        os.environ.get("TOPOGANG_IMAGE") != "1",
        reason="image build opt-in: TOPOGANG_IMAGE=1 (needs root, buildah, debootstrap; .ci/run sets it)",
    ),
]


@dataclass(frozen=True)
class Built:
    name: str
    env: dict[str, str]  # the buildah storage the image lives in
    log: str


def buildah(built: Built, *args: str, timeout: float = 120.0) -> str:
    r = subprocess.run(
        ["buildah", *args], env=built.env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert r.returncode == 0, f"buildah {' '.join(args)}: {r.stderr}"
    return r.stdout.strip()


def image_config(built: Built) -> dict[str, Any]:
    """The image's OCI config (User, Entrypoint, Cmd, ...)."""
    inspected = json.loads(buildah(built, "inspect", "--type", "image", built.name))
    config: dict[str, Any] = inspected["OCIv1"]["config"]
    return config


@pytest.fixture(scope="module")
def image() -> Built:
    missing = [t for t in ("buildah", "debootstrap") if shutil.which(t) is None]
    assert not missing and os.geteuid() == 0, (
        f"TOPOGANG_IMAGE=1 needs root and buildah + debootstrap (missing: {missing or 'root'})"
    )
    r = subprocess.run(
        ["bash", str(BUILD)], cwd=ROOT, capture_output=True, text=True, timeout=1800, check=False
    )
    assert r.returncode == 0, f"scripts/image/build.sh failed:\n{r.stderr[-4000:]}"
    storage = subprocess.run(
        ["bash", str(BUILD), "--env"], capture_output=True, text=True, check=True
    ).stdout.strip()
    key, _, value = storage.partition("=")
    return Built(r.stdout.strip().splitlines()[-1], {**os.environ, key: value}, r.stderr)


@dataclass
class Running:
    url: str
    verbs_url: str
    process: subprocess.Popen[str]
    log: list[str]


@contextmanager
def running(built: Built, *args: str) -> Iterator[Running]:
    """The image's ENTRYPOINT with `args`, in a fresh container; always stopped and removed."""
    config = image_config(built)
    ctr = buildah(built, "from", "--pull=never", "--quiet", built.name)
    proc = subprocess.Popen(
        ["buildah", "run", "--isolation", "chroot", "--network", "host", ctr, "--",
         *config["Entrypoint"], *args],
        env=built.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        urls = listen_urls(proc.stdout, lines)
        assert urls is not None, "the image's extender did not start:\n" + "".join(lines)
        url, verbs_url = urls
        threading.Thread(target=lines.extend, args=(proc.stdout,), daemon=True).start()
        yield Running(url, verbs_url, proc, lines)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        subprocess.run(["buildah", "rm", ctr], env=built.env, capture_output=True, check=False)


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (the chroot isolation keeps the host's process table)."""
    children: dict[int, list[int]] = {}
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":\t", 1) for line in status.read_text().splitlines() if ":\t" in line)
        except OSError:  # ended while being read
            continue
        children.setdefault(int(fields["PPid"]), []).append(int(status.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def uid_of_server(proc: subprocess.Popen[str]) -> str:
    for pid in descendants(proc.pid):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        if b"serve" in cmdline and any(b"topogang" in part for part in cmdline):
            return next(line.split()[1] for line in status.splitlines() if line.startswith("Uid:"))
    raise AssertionError(f"no `topogang serve` process below {proc.pid}")


def test_the_image_runs_as_its_user_and_schedules_the_example_cluster(
    image: Built, record_property: Callable[[str, object], None]
) -> None:
    config = image_config(image)
    assert config["User"] == IMAGE_USER
    assert config["Entrypoint"] == ["topogang", "serve"]

    # as the Dockerfile's closing comment says: `docker run IMAGE --listen ...` serves the bundled example
    with running(image, "--listen", "127.0.0.1:0") as server:
        assert uid_of_server(server.process) == IMAGE_USER.split(":")[0], "".join(server.log)
        with httpx.Client(base_url=server.url, timeout=10.0) as reads:
            poll(
                "the image's extender to answer /readyz",
                lambda: reads.get("/readyz").status_code == 200,
                tries=300,
                interval=0.2,
            )
            names = kubesched.node_names(reads.get(kubesched.PHYSICAL_CLUSTER).json())
            assert names, "the bundled example cluster has no nodes"

            gang = "vision/image-check"
            spec = {
                "virtualCluster": "vision",
                "priority": 100,
                "leafCellNumber": 8,
                "affinityGroup": {"name": gang, "members": [{"podNumber": 1, "leafCellNumber": 8}]},
            }
            pod: dict[str, Any] = {
                "metadata": {
                    "uid": "image-check-0",
                    "name": "image-check-0",
                    "namespace": "vision",
                    "annotations": {"topogang.io/pod-scheduling-spec": json.dumps(spec)},
                },
                "spec": {
                    "containers": [
                        {"name": "main", "resources": {"limits": {"topogang.io/pod-scheduling-enable": "1"}}}
                    ]
                },
                "status": {"phase": "Pending"},
            }
            r = httpx.post(
                f"{server.verbs_url}/v1/extender/filter",
                json={"Pod": pod, "Nodes": None, "NodeNames": names},
                timeout=10.0,
            )
            assert r.status_code == 200, r.text
            answer = r.json()
            assert not answer.get("Error"), answer
            placement = reads.get(f"/v1/inspect/affinitygroups/{gang}").json()["status"]["physicalPlacement"]
            assert list(placement) == answer["NodeNames"] and set(answer["NodeNames"]) <= set(names)

    size = buildah(image, "images", "--noheading", "--format", "{{.Size}}", image.name)
    # printed at the end of the run (tests/conftest.py), also from an xdist worker
    summary = f"image {image.name}: {size}, runs as {IMAGE_USER}, answered /readyz and a filter"
    record_property("summary", summary)
