"""`python -m loadtest.reader_flood` runs end to end at a tiny size; no speed is asserted."""

from __future__ import annotations

import pytest

from loadtest import reader_flood


def test_reader_flood_runs_at_a_tiny_size(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--nodes", "16", "--filters", "5", "--readers", "2", "--explainers", "1"]
    assert reader_flood.main(argv) == 0
    out = capsys.readouterr().out
    assert "filter alone" in out and "filter under flood" in out and "ratio (flood/alone)" in out
    assert "readers: /v1/" in out  # the readers were answered (200, or 429 past the limits)
