"""The load test itself works: a few seconds of headless locust against a real `topogang serve`.

A check of `loadtest/locustfile.py` (kube-scheduler-like users), not of speed: every verb it claims
to exercise (filter, prioritize, bind, preempt, finish) is exercised with zero failures, the exact
latencies it writes for `loadtest.bench` are there, and a stopped test leaves no pod of its own
bound. On the bundled 12-node cluster, 4 users, 4 s a session: Philly's mix nearly full (it
preempts), then 4-pod x 8-GPU gangs (they get prioritized). How many requests a session makes
depends on how busy the machine is, so the two alternate until every verb was seen (at most four
sessions); every session must be failure-free.
"""

from __future__ import annotations

import csv
import json
import subprocess
from pathlib import Path

import httpx

from loadtest.servers import locust_argv, make_certificates
from tests.integration.conftest import ROOT, Server, running_server

VERBS = ("filter", "prioritize", "bind", "preempt", "finish")
# Philly's mix on a nearly full cluster preempts often (opportunistic jobs, priority-1000 pods);
# 4-pod gangs get prioritized (half are HiveD groups: any open slot)
MIXES = (
    ("--mix", "philly", "--fill", "0.9", "--urgent-every", "3"),
    ("--mix", "gang4x8", "--fill", "0.6", "--urgent-every", "4"),
)
SESSIONS = 4


def session(server: Server, prefix: Path, mix: tuple[str, ...]) -> dict[str, tuple[int, int]]:
    """One bounded headless run; (requests, failures) per request name from locust's CSV."""
    argv = [*locust_argv(server.verbs_url, 4, 4, prefix), "--read-host", server.url, *mix]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, f"locust failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    with open(f"{prefix}_stats.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return {
        r["Name"]: (int(r["Request Count"]), int(r["Failure Count"]))
        for r in rows
        if r["Name"] != "Aggregated"
    }


def test_locust_session_exercises_every_verb_without_failures(tmp_path: Path) -> None:
    seen: dict[str, int] = dict.fromkeys(VERBS, 0)
    with running_server() as server:
        for i in range(SESSIONS):
            prefix = tmp_path / f"smoke{i}"
            stats = session(server, prefix, MIXES[i % len(MIXES)])
            failed = {name: fails for name, (_, fails) in stats.items() if fails}
            assert not failed, (
                f"session {i + 1} had failures: {failed}\n" + Path(f"{prefix}_failures.csv").read_text()
            )
            for verb in VERBS:
                seen[verb] += stats.get(verb, (0, 0))[0]
            latencies = json.loads(prefix.with_suffix(".latency.json").read_text())
            start, stop = latencies["window"]
            assert 0 < start < stop
            assert len(latencies["latencies"].get("filter", [])) >= stats.get("filter", (0, 0))[0]
            # the stopped test deleted every pod it had bound (gangs that never bound a member keep
            # their reservation until its TTL, as for any pod deleted while pending)
            assert httpx.get(f"{server.url}/v1/standalone/bindings", timeout=10).json() == {}
            if all(seen.values()):
                break
    assert all(seen.values()), f"verbs never exercised in {SESSIONS} sessions: {seen}"


def test_locust_speaks_mutual_tls_to_the_verbs_listener(tmp_path: Path) -> None:
    """`make bench TLS=1`'s users: the client certificate the server's allowlist names, the CA that
    signed the server's; every filter, prioritize and bind answered without a failure, and the pods
    it bound deleted over the same door when it stops."""
    pki = make_certificates(tmp_path / "pki")
    with running_server(args=tuple(pki.server_args())) as server:
        assert server.verbs_url.startswith("https://")
        prefix = tmp_path / "tls"
        argv = [*locust_argv(server.verbs_url, 2, 3, prefix), "--read-host", server.url, *MIXES[1]]
        done = subprocess.run(
            [*argv, *pki.locust_args()], cwd=ROOT, capture_output=True, text=True, timeout=90
        )
        assert done.returncode == 0, f"locust failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
        with open(f"{prefix}_stats.csv", newline="") as f:
            stats = {r["Name"]: (int(r["Request Count"]), int(r["Failure Count"])) for r in csv.DictReader(f)}
        assert all(stats.get(v, (0, 0))[0] > 0 for v in ("filter", "prioritize", "bind")), stats
        assert stats["Aggregated"][1] == 0, Path(f"{prefix}_failures.csv").read_text()
        assert httpx.get(f"{server.url}/v1/standalone/bindings", timeout=10).json() == {}
