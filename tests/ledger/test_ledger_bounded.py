"""The ledger forgets gangs that are gone: tombstones after their time and beyond a count, and the
periodic expiry pass prunes even when nothing else happens (a quiet cluster's memory goes too)."""

from __future__ import annotations

import asyncio

import pytest

from config.load import load_config
from extender.gangs import ledger as ledger_mod
from extender.gangs.ledger import TOMBSTONE_SECONDS, GangLedger
from extender.gangs.ledger_records import Identity, Phase, Record
from extender.standalone import EXAMPLE_CONFIG, build_standalone


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def tombstone(ledger: GangLedger, name: str, at: float) -> None:
    rec = Record(name, Identity("ns", name), "vc", 1, phase=Phase.EXPIRED, expired_at=at)
    rec.tombstone = {"phase": "Expired"}
    ledger.records[name] = rec


def test_tombstones_go_after_their_time_and_beyond_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    led = GangLedger(clock=clock, wall=clock)
    monkeypatch.setattr(ledger_mod, "MAX_TOMBSTONES", 5)
    for k in range(12):
        tombstone(led, f"g{k}", clock.t + k)
    led.prune(None)
    assert sorted(led.records) == sorted(f"g{k}" for k in range(7, 12))  # the newest five stay
    clock.t += TOMBSTONE_SECONDS + 100
    led.maybe_prune(None)
    assert led.records == {}


def test_the_periodic_pass_prunes_a_quiet_ledger() -> None:
    clock = Clock()
    service = build_standalone(load_config(str(EXAMPLE_CONFIG)))
    s = service.scheduler
    s.gang_ledger.clock = clock
    s.gang_ledger.wall = clock
    s.gang_ledger._pruned = clock.t
    s.clock = clock
    for k in range(3):
        tombstone(s.gang_ledger, f"old{k}", clock.t)
    clock.t += TOMBSTONE_SECONDS + 100
    asyncio.run(s.expire())
    assert s.gang_ledger.records == {}
