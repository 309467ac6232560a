"""`topogang replay` against the real server: it schedules its job mix, and /metrics counted it."""

from __future__ import annotations

import re
import subprocess
import sys

import httpx

from tests.integration.conftest import ROOT, Server, state


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
    before, counts = state(client), decisions(client)
    done = subprocess.run(
        [sys.executable, str(ROOT / "topogang_cli.py"), "replay", "--url", server.url],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
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
