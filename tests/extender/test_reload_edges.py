"""Reloads at their edges: `topogang.reservationTtlSeconds` edited in a running config (a reload
that says "applied" must have applied it: it was read once, at the start, and the edit silently
ignored), and a config too large to load (rejected once and said, not retried on every poll)."""

from __future__ import annotations

from pathlib import Path

import pytest

from config.load import load_config_text
from extender.http.reload import ConfigWatcher
from extender.standalone import EXAMPLE_CONFIG
from tests.extender.helpers import Clock, args, pod, run, spec
from tests.extender.test_entitlement import make


def test_a_reload_applies_the_reservation_ttl_to_gangs_reserved_from_then_on(tmp_path: Path) -> None:
    async def go() -> None:
        base = EXAMPLE_CONFIG.read_text(encoding="utf-8")
        assert "  reservationTtlSeconds: 300\n" in base
        path = tmp_path / "c.yaml"
        path.write_text(base, encoding="utf-8")
        s, _ = make(load_config_text(base, str(path)), ttl_seconds=300.0)
        clock = s.clock
        assert isinstance(clock, Clock)
        watcher = ConfigWatcher(s, path, clock=clock)
        before = pod("b0", "before-0", "vision", spec("vision", 8, 2, "before"))
        assert (await s.filter(args(before)))["NodeNames"]
        path.write_text(
            base.replace("reservationTtlSeconds: 300", "reservationTtlSeconds: 60"), encoding="utf-8"
        )
        assert await watcher.check() == "applied"
        assert s.ttl_seconds == 60.0
        assert any("reservationTtlSeconds 300 -> 60" in line for line in watcher.status.last_report)
        now = clock()
        after = pod("a0", "after-0", "vision", spec("vision", 8, 2, "after"))
        assert (await s.filter(args(after)))["NodeNames"]
        new, old = s.core.gang("vision/after"), s.core.gang("vision/before")
        assert new is not None and new.deadline == now + 60.0
        assert old is not None and old.deadline is not None and old.deadline > now + 60.0  # kept

    run(go())


def test_a_watcher_told_not_to_follow_keeps_the_callers_ttl(tmp_path: Path) -> None:
    async def go() -> None:
        base = EXAMPLE_CONFIG.read_text(encoding="utf-8")
        path = tmp_path / "c.yaml"
        path.write_text(base, encoding="utf-8")
        s, _ = make(load_config_text(base, str(path)), ttl_seconds=5.0)
        watcher = ConfigWatcher(s, path, clock=Clock(), follow_ttl=False)
        path.write_text(
            base.replace("reservationTtlSeconds: 300", "reservationTtlSeconds: 60"), encoding="utf-8"
        )
        assert await watcher.check() == "applied"
        assert s.ttl_seconds == 5.0

    run(go())


def test_a_config_too_large_to_load_is_rejected_once_and_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever the checks miss (`config.check_cluster.MAX_CELLS` bounds what they know), a load
    that runs out of memory is a rejected config, not a silent retry every poll."""

    async def go() -> None:
        base = EXAMPLE_CONFIG.read_text(encoding="utf-8")
        path = tmp_path / "c.yaml"
        path.write_text(base, encoding="utf-8")
        s, _ = make(load_config_text(base, str(path)))
        watcher = ConfigWatcher(s, path, clock=Clock())
        loads: list[str] = []

        def too_big(data: bytes, file: object) -> None:
            loads.append(str(file))
            raise MemoryError

        monkeypatch.setattr("extender.http.reload.load_config_bytes", too_big)
        path.write_text(base + "# edited\n", encoding="utf-8")
        assert await watcher.check() == "rejected"
        assert watcher.status.last_errors == [f"{path}: too large to load (MemoryError)"]
        assert await watcher.check() is None and len(loads) == 1  # not loaded again

    run(go())
