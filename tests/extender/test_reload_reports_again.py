"""The watcher remembers the last rejected file's hash (and the last refused one) to report each
once, only while that report is its last word: a file rejected, then a good edit applied, then the
bad file written again is reported again. Before, it was ignored, and `/v1/config` went on saying
"applied" with no errors while the file on disk was one the extender refuses."""

from __future__ import annotations

from pathlib import Path

from tests.extender.helpers import run
from tests.extender.watched import EXAMPLE, watched

BASE = EXAMPLE
BAD = BASE.replace("childCellNumber: 2", "childCellNumber: 0", 1)
GOOD = BASE.replace("reservationTtlSeconds: 300", "reservationTtlSeconds: 301")


def test_a_bad_file_written_again_after_a_good_one_is_reported_again(tmp_path: Path) -> None:
    async def go() -> None:
        _, watcher, path = watched(tmp_path)
        path.write_text(BAD, encoding="utf-8")
        assert await watcher.check() == "rejected"
        path.write_text(GOOD, encoding="utf-8")
        assert await watcher.check() == "applied"
        path.write_text(BAD, encoding="utf-8")  # the same mistake made again
        assert await watcher.check() == "rejected"
        assert watcher.status.last_result == "rejected"
        assert any("childCellNumber" in e for e in watcher.status.last_errors)

    run(go())


def test_a_bad_file_after_an_unreadable_spell_is_reported_again(tmp_path: Path) -> None:
    async def go() -> None:
        _, watcher, path = watched(tmp_path)
        path.write_text(BAD, encoding="utf-8")
        assert await watcher.check() == "rejected"
        path.unlink()
        assert await watcher.check() == "unreadable"
        path.write_text(BAD, encoding="utf-8")
        await watcher.check()
        assert watcher.status.last_result == "rejected"  # was: still "unreadable", file readable

    run(go())
