"""One config per check: `topogang validate` prints exactly the expected lines.

Each file in broken/ (exit 1) and warnings/ (exit 0) states its expected lines in `# expect:`
comments, without the `FILE: ` prefix (and without `warning: ` for warnings/). The test asserts the
full set: the expected finding and no cascade of follow-on errors.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from config.cli import cli_validate

HERE = Path(__file__).resolve().parent

BROKEN = sorted((HERE / "broken").glob("*.yaml"))
WARNINGS = sorted((HERE / "warnings").glob("*.yaml"))


def expected(path: Path) -> list[str]:
    prefix = "# expect: "
    return [line[len(prefix) :] for line in path.read_text().splitlines() if line.startswith(prefix)]


@pytest.mark.parametrize("path", BROKEN, ids=[p.stem for p in BROKEN])
def test_broken_config_reports_exact_errors(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = cli_validate([str(path)])
    out, err = capsys.readouterr()
    assert rc == 1
    assert "Traceback" not in out + err
    errors = [line for line in err.splitlines() if ": warning: " not in line]
    assert sorted(errors) == sorted(f"{path}: {e}" for e in expected(path))
    assert out == ""


@pytest.mark.parametrize("path", WARNINGS, ids=[p.stem for p in WARNINGS])
def test_warning_config_still_loads(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = cli_validate([str(path)])
    out, err = capsys.readouterr()
    assert rc == 0
    assert "Traceback" not in out + err
    assert sorted(err.splitlines()) == sorted(
        f"{path}: {e.split(': ', 1)[0]}: warning: {e.split(': ', 1)[1]}" for e in expected(path)
    )
    assert f"{path}: OK" in out


def test_every_fixture_states_what_it_expects() -> None:
    assert len(BROKEN) >= 30
    for path in BROKEN + WARNINGS:
        assert expected(path), path
