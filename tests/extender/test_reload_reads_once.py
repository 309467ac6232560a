"""A reload parses the bytes it hashed, not the file read a second time. Before, a ConfigMap update
landing between the two reads (kubelet swaps a symlink at any moment) made the extender apply one
text while recording another's hash and text as the config in force: `/v1/config` (what `topogang
diff --against` compares with) showed a config that was not running, and the file reverting to that
recorded text was never applied."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.extender.helpers import run
from tests.extender.watched import EXAMPLE, watched

BASE = EXAMPLE
X = BASE.replace("reservationTtlSeconds: 300", "reservationTtlSeconds: 111")
Y = BASE.replace("reservationTtlSeconds: 300", "reservationTtlSeconds: 222")


def test_the_config_recorded_as_applied_is_the_one_applied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def go() -> None:
        s, watcher, path = watched(tmp_path)
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
