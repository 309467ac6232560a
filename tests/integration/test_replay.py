"""`topogang replay` against the real server: it schedules its job mix, and /metrics counted it."""

from __future__ import annotations

import re
import subprocess
import sys

import httpx

from tests.integration.conftest import ROOT, Server, running_server, state


def decisions(client: httpx.Client) -> dict[tuple[str, str], float]:
    out = {}
    for m in re.finditer(
        r'^topogang_extender_decisions_total\{outcome="([^"]+)",verb="([^"]+)"\} ([0-9.e+]+)$',
        client.get("/metrics").text,
        re.M,
    ):
        out[(m.group(2), m.group(1))] = float(m.group(3))
    return out


def test_replay_drives_the_server_and_metrics_count_its_decisions(
    server: Server, client: httpx.Client
) -> None:
    before, counts, everything = state(client), decisions(client), everything_shown(client)
    done = replay(server)
    out = done.stdout
    assert done.returncode == 0, done.stderr + out
    summary = re.search(r"summary: (\d+)/(\d+) pods bound; gangs placed (\d+), waiting (\d+)", out)
    assert summary is not None, out
    bound, total, placed, waiting = map(int, summary.groups())
    assert bound >= 12 and total == 16 and placed >= 6 and waiting >= 1
    assert "[InsufficientQuota]" in out  # the too-big gang waits with its reason
    assert "decision counters (/metrics):" in out and 'verb="bind"' in out
    after = decisions(client)
    assert after[("bind", "bound")] - counts.get(("bind", "bound"), 0) == bound
    assert after[("filter", "wait")] - counts.get(("filter", "wait"), 0) >= 3
    assert after[("preempt", "victims")] - counts.get(("preempt", "victims"), 0) >= 1
    assert state(client) == before  # the replay deletes what it created
    assert everything_shown(client) == everything  # waiting pods included: nothing is left waiting
    assert "deleted the 16 pods this replay created" in out
    # the urgent pod's label says what happens: it evicts lower-priority pods, named
    victims = re.search(
        r"preempt: victims on \d+ node\(s\); deleting (\d+) pod\(s\) on \S+: (.+)$", out, re.M
    )
    assert victims is not None and len(victims.group(2).split(", ")) == int(victims.group(1))
    assert "lower-priority pods hold its VC's quota, so it preempts" in out


def replay(server: Server, *args: str) -> subprocess.CompletedProcess[str]:
    urls = ("--url", server.url, "--verbs-url", server.verbs_url)
    return subprocess.run(
        [sys.executable, str(ROOT / "topogang_cli.py"), "replay", *urls, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def everything_shown(client: httpx.Client) -> tuple[object, ...]:
    """Every gang any view shows, waiting ones included, and the UI's waits (clocks and change tokens
    aside: other tests' waiting gangs may be there, and their waiting time grows)."""
    ui = client.get("/v1/ui/state").json()
    groups = client.get("/v1/inspect/affinitygroups/").json()["items"]
    return (
        client.get("/v1/inspect").json(),
        [(g["metadata"]["name"], g["status"]["state"], g["status"].get("waitReason")) for g in groups],
        [g["gang"] for g in client.get("/v1/gangs").json()["items"]],
        ui["waiting"],
        ui["gangs"],
    )


def test_replay_keep_leaves_its_gangs_for_the_next_commands_to_show() -> None:
    """What the README's curls after `topogang replay --keep` look at: gangs placed, one waiting with
    its reason, and gangs Ready in the ledger."""
    with running_server() as server, server.client(timeout=10) as client:
        done = replay(server, "--keep")
        assert done.returncode == 0, done.stderr + done.stdout
        assert "kept every pod (--keep)" in done.stdout
        summary = client.get("/v1/inspect").json()
        assert summary["gangs"]["Bound"] >= 5 and summary["gangs"]["Waiting"] == 1
        assert summary["gpus"]["free"] < summary["gpus"]["total"]
        groups = client.get("/v1/inspect/affinitygroups/").json()["items"]
        (waiting,) = [g for g in groups if g["status"]["state"] == "Waiting"]
        assert "it can never run" in waiting["status"]["waitReason"]["message"]
        assert any(g["phase"] == "Ready" for g in client.get("/v1/gangs").json()["items"])
