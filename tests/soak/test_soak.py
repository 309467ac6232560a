"""The soak (`tests.soak.driver`) in the suite: a few seeds, a few thousand operations in all, on
virtual time. `pytest -s tests/soak` prints each seed's figures.

Longer, by hand: `.venv/bin/python -m tests.soak.driver --ops 50000 --seed 7` (see the driver), or
this file with TOPOGANG_SOAK_OPS (operations per seed), TOPOGANG_SOAK_SECONDS (real-time bound per
seed) and TOPOGANG_SOAK_SEEDS (comma-separated).

It also checks that the soak can fail: with a bug put back into the extender on purpose, the
invariants it checks must report it.
"""

from __future__ import annotations

import os
import re
from typing import Any

import pytest

from extender.gangs.entitlement import Gate
from extender.kube.sync import ClusterSync
from tests.soak.driver import Options, Report, run_soak
from topology import asks
from topology.core import Core

OPS = int(os.environ.get("TOPOGANG_SOAK_OPS", "1000"))
# and a time bound per seed (real seconds; about 2 s are needed here): a soak stops by itself
SECONDS = float(os.environ.get("TOPOGANG_SOAK_SECONDS", "180"))
SEEDS = [int(s) for s in os.environ.get("TOPOGANG_SOAK_SEEDS", "1,2,3").split(",")]
MIB = 1024  # RSS figures are in KiB

pytestmark = pytest.mark.soak


def show(report: Report) -> None:
    print("\n" + "\n".join(report.lines()))


@pytest.mark.parametrize("seed", SEEDS)
def test_every_invariant_holds_under_randomized_faults(seed: int) -> None:
    report = run_soak(Options(ops=OPS, seconds=SECONDS, seed=seed))
    show(report)
    assert report.violation_count == 0, "\n".join(report.lines())
    assert 0 < report.ops <= OPS
    assert report.outcomes["bind ok"] > 0
    # the faults it is about did happen: a soak that injected none would prove nothing
    fired = report.faults
    assert sum(n for kind, n in fired.items() if re.fullmatch(r"binding \d+", kind)) > 0
    for kind in (
        "binding reply lost (applied)",
        "binding timeout (not applied)",
        "watch cut",
        "watch 410 Gone",
        "duplicate bind",
        "stale bind",
        "filter after bind",
    ):
        assert fired[kind] > 0, f"no {kind!r} in {fired}"
    assert report.restarts > 0
    # memory: every per-pod collection is empty at the end (else a violation above); Python objects
    # come back to where they started, whatever the number of operations, and RSS grows no more in
    # the second half than in the first (generous bounds: these catch leaks, not noise)
    assert report.objects["end"] - report.objects["start"] < 2000, report.objects
    rss = report.rss_kib
    assert rss["end of operations"] - rss["middle"] <= max(rss["middle"] - rss["start"], 32 * MIB), rss


def test_a_seed_replays_exactly() -> None:
    def figures(r: Report) -> tuple[Any, ...]:
        return (r.ops_by_kind, r.faults, r.outcomes, r.restarts, r.virtual_seconds, r.violations)

    assert figures(run_soak(Options(ops=250, seed=11))) == figures(run_soak(Options(ops=250, seed=11)))


def test_the_soak_reports_a_sync_that_misses_deletions(monkeypatch: pytest.MonkeyPatch) -> None:
    heard = ClusterSync.on_pod

    async def deaf(self: ClusterSync, kind: str, pod: dict[str, Any]) -> None:
        if kind != "DELETED":
            await heard(self, kind, pod)

    monkeypatch.setattr(ClusterSync, "on_pod", deaf)
    report = run_soak(Options(ops=300, seed=1, restarts=False))
    assert any("deleted in the API" in v for v in report.violations), "\n".join(report.lines())


def test_the_soak_reports_reservations_that_never_expire(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Core, "expire", lambda self, now: [])
    report = run_soak(Options(ops=300, seed=1, restarts=False))
    assert any("members bound for" in v for v in report.violations), "\n".join(report.lines())


@pytest.mark.parametrize("seed", [4, 6])
def test_tenants_stay_in_their_lanes_under_randomized_faults(seed: int) -> None:
    """The soak with hostile tenants (`tests.soak.tenants`): other namespaces' jobs under live gang
    names, forged framework identities, specs edited in place, entitlements reloaded, through
    restarts and faults. No gang the core holds is one its namespace may not hold under the rules
    it was given its rights by, and every other invariant holds."""
    report = run_soak(Options(ops=OPS, seconds=SECONDS, seed=seed, hostile=True))
    show(report)
    assert report.violation_count == 0, "\n".join(report.lines())
    # what it is about did happen: refusals, other tenants' pods running, edits, restarts
    assert report.outcomes["filter refused: not entitled"] > 0
    assert report.outcomes["bind ok: another tenant's pod"] > 0
    assert report.faults["request edited in place"] > 0 and report.restarts > 0
    assert report.faults["entitlements reloaded"] > 0
    assert report.outcomes["filter waits: tenant limit"] > 0  # a hoarder reached its bound


def test_the_soak_reports_a_tenant_past_its_reservation_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the bound left out of the filter, the oracle (`Judge._past_bound`) reports a hoarder."""
    real = asks.held_back
    monkeypatch.setattr(asks, "held_back", lambda cluster, req, behind, _: real(cluster, req, behind, None))
    report = run_soak(Options(ops=300, seed=9, hostile=True, restarts=False))
    assert any("past its bound" in v for v in report.violations), "\n".join(report.lines())


def test_the_soak_reports_a_tenant_past_its_entitlement(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Gate, "check", lambda self, pr, pod: pr)  # every namespace may ask for anything
    report = run_soak(Options(ops=300, seed=4, hostile=True, restarts=False))
    assert any("may use" in v or "may ask for at most" in v for v in report.violations), "\n".join(
        report.lines()
    )


@pytest.mark.parametrize("seed", [9, 12])
def test_the_admin_edits_the_cells_while_tenants_push(seed: int) -> None:
    """The hostile soak with the cells edited too (`tests.soak.layouts`): VCs grown and shrunk, a
    rack added, a rack taken out for repair while its pods run, through hot reloads (some refused,
    some confirmed) and restarts that read the file as it is. Nothing runs on GPUs the core thinks
    free, no gang stays partial past its TTL, and every other invariant holds."""
    report = run_soak(Options(ops=OPS, seconds=SECONDS, seed=seed, hostile=True, cells=True))
    show(report)
    assert report.violation_count == 0, "\n".join(report.lines())
    # an edit confirmed was refused first (left refused, it counts as "refused")
    assert report.faults["cells reloaded: applied"] > 0 and report.faults["cells reload confirmed"] > 0
    assert report.restarts > 0
