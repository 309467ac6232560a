"""A reload parses the bytes it hashed, not the file read a second time. Before, a ConfigMap update
landing between the two reads (kubelet swaps a symlink at any moment) made the extender apply one
text while recording another's hash and text as the config in force: `/v1/config` (what `topogang
diff --against` compares with) showed a config that was not running, and the file reverting to that
recorded text was never applied."""

from __future__ import annotations

from pathlib import Path

import pytest

from config.load import load_config_text
from extender.http.reload import ConfigWatcher
from extender.standalone import EXAMPLE_CONFIG
from tests.extender.helpers import Clock, run
from tests.extender.test_entitlement import make

BASE = EXAMPLE_CONFIG.read_text(encoding="utf-8")
X = BASE.replace("reservationTtlSeconds: 300", "reservationTtlSeconds: 111")
Y = BASE.replace("reservationTtlSeconds: 300", "reservationTtlSeconds: 222")


def test_the_config_recorded_as_applied_is_the_one_applied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def go() -> None:
        path = tmp_path / "c.yaml"
        path.write_text(BASE, encoding="utf-8")
        s, _ = make(load_config_text(BASE, str(path)))
        watcher = ConfigWatcher(s, path, clock=Clock())
        real_read = watcher._read
        swapped: list[bool] = []

        def update_lands_after_the_read() -> bytes | None:
            data = real_read()
            if not swapped:  # the ConfigMap's next version lands right after the watcher's read
                swapped.append(True)
                path.write_text(Y, encoding="utf-8")
            return data

        monkeypatch.setattr(watcher, "_read", update_lands_after_the_read)
        path.write_text(X, encoding="utf-8")
        assert await watcher.check() == "applied"
        ttl = s.ttl_seconds
        recorded = watcher.status.applied_text
        assert f"reservationTtlSeconds: {int(ttl)}" in recorded  # was: runs 222, records X (111)
        path.write_text(X, encoding="utf-8")  # the file now holds X (again)
        await watcher.check()
        assert s.ttl_seconds == 111.0  # was: 222 kept forever, the file's X taken as applied

    run(go())
