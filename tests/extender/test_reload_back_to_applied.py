"""The file put back to the config in force after a rejected edit: `/v1/config` says so."""

from __future__ import annotations

from pathlib import Path

from tests.extender.helpers import run
from tests.extender.watched import EXAMPLE, watched

BAD = EXAMPLE.replace("childCellNumber: 2", "childCellNumber: 0", 1)


def test_reverting_a_rejected_edit_clears_the_rejection(tmp_path: Path) -> None:
    async def go() -> None:
        _, watcher, path = watched(tmp_path)
        path.write_text(BAD, encoding="utf-8")
        assert await watcher.check() == "rejected"
        path.write_text(EXAMPLE, encoding="utf-8")  # the edit reverted
        await watcher.check()
        assert watcher.status.last_result != "rejected", watcher.status.last_errors

    run(go())
