"""`topogang --version` and `topogang version` print the version the package metadata declares."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

import topogang_cli

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("argv", [["--version"], ["-V"], ["version"]])
def test_version_prints_the_declared_version(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert topogang_cli.main(argv) == 0
    assert capsys.readouterr().out == f"topogang {declared}\n"


def test_version_refuses_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    assert topogang_cli.main(["version", "extra"]) == 2
    assert "unexpected arguments" in capsys.readouterr().err


def test_usage_lists_version() -> None:
    assert "version" in topogang_cli.USAGE
