"""Indentation slips anywhere in the example config: loading never crashes, and every error of a
file that parses as YAML names its place (a config path, and the line for shape errors)."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from config.load import ConfigError, load_config_text

TEXT = (Path(__file__).resolve().parents[2] / "config" / "examples" / "example-cluster.yaml").read_text()
LINES = TEXT.splitlines()
CONTENT = [i for i, line in enumerate(LINES) if line.strip() and not line.lstrip().startswith("#")]


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(CONTENT), st.sampled_from([-4, -2, 2, 4])), min_size=1, max_size=3))
def test_shifted_lines_give_errors_with_a_place(shifts: list[tuple[int, int]]) -> None:
    lines = list(LINES)
    for i, by in shifts:
        line = lines[i]
        lines[i] = " " * by + line if by > 0 else line[min(-by, len(line) - len(line.lstrip())) :]
    try:
        load_config_text("\n".join(lines) + "\n", "f.yaml")
    except ConfigError as exc:
        assert exc.errors
        for path, reason in exc.errors:
            assert path or reason.startswith("YAML syntax error") or "mapping" in reason, (path, reason)
            if "Input should be" in reason:
                assert "(line " in reason, reason
