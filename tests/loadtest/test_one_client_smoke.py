"""`python -m loadtest.one_client` runs end to end at a tiny size; no speed is asserted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from loadtest import one_client
from loadtest.servers import ROOT, Server


def test_one_client_runs_at_a_tiny_size(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert one_client.main(["--nodes", "16", "--jobs", "3", "--rounds", "1", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    rows = [ln for ln in out.splitlines() if ln.startswith(("noop", "topogang"))]
    assert [r.split()[0] for r in rows] == ["noop", "topogang"]
    assert all("place p50/p90/p99" in r and "member p50/p90/p99" in r for r in rows)
    assert "all-filter p99 ratio of topogang to noop per round" in out
    assert "the ratios' denominators, noop's all-filter p99 per round: " in out
    goal = [ln for ln in out.splitlines() if ln.startswith("goal: ")]
    assert len(goal) == 1 and "median of the rounds" in goal[0] and "target <= 1.5x" in goal[0]
    assert goal[0].endswith(("PASS", "FAIL"))


@pytest.mark.parametrize("reuse", [False, True])
def test_each_round_starts_fresh_servers_unless_told_to_reuse_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, reuse: bool
) -> None:
    """Rounds on the same server processes are not independent (a process can stay slow for its
    life), so each round gets its own by default."""
    started: list[list[int]] = []
    real = one_client.start_servers

    def counting(*a: Any) -> list[Server]:
        servers = real(*a)
        started.append([srv.proc.pid for srv in servers])
        return servers

    monkeypatch.setattr(one_client, "start_servers", counting)
    args = ["--nodes", "16", "--jobs", "2", "--rounds", "2", "--out", str(tmp_path)]
    assert one_client.main([*args, *(["--reuse-servers"] if reuse else [])]) == 0
    out = capsys.readouterr().out
    assert len(started) == (1 if reuse else 2)
    if not reuse:  # new processes, not the old ones again
        assert not set(started[0]) & set(started[1])
    assert ("the same servers every round" if reuse else "fresh servers each round") in out
    assert len([ln for ln in out.splitlines() if ln.startswith("topogang ")]) == 2  # a row per round


def test_verdict_is_the_median_of_the_rounds_against_the_goal() -> None:
    passing = one_client.verdict("noop", [1.0, 2.4, 1.3], [1.8, 1.2, 1.4])
    assert "1.000, 2.400, 1.300 ms" in passing and "1.40x [1.20-1.80]" in passing
    assert passing.rstrip().endswith("PASS")
    assert one_client.verdict("noop", [1.0, 1.0, 1.0], [1.8, 1.6, 1.2]).rstrip().endswith("FAIL")


def test_one_client_compares_mutual_tls_with_plain_http(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--nodes", "16", "--jobs", "3", "--rounds", "1", "--tls", "--out", str(tmp_path)]
    assert one_client.main(args) == 0
    out = capsys.readouterr().out
    rows = [ln for ln in out.splitlines() if ln.startswith(("topogang", "mtls"))]
    assert [r.split()[0] for r in rows] == ["topogang", "mtls"]
    assert all("place p50/p90/p99" in r for r in rows)  # filters answered over both
    assert "all-filter p99 ratio of mtls to topogang per round" in out
    assert "goal: " not in out  # the 1-user goal is against the no-op


def test_one_client_serves_another_checkout_beside_this_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--against` serves a checkout's extender as a third server taking the same jobs (here this
    very checkout: an older commit's worktree in use)."""
    args = ["--nodes", "16", "--jobs", "3", "--rounds", "1", "--against", str(ROOT)]
    assert one_client.main([*args, "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    rows = [ln for ln in out.splitlines() if ln.startswith(("noop", "topogang", "against"))]
    assert [r.split()[0] for r in rows] == ["noop", "topogang", "against"]
    assert all("place p50/p90/p99 " in r and "nan" not in r for r in rows)
    assert "all-filter p99 ratio of topogang to noop per round" in out
    assert "all-filter p99 ratio of against to noop per round" in out
    assert (tmp_path / "against.server.log").exists()
