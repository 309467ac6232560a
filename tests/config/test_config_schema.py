"""The committed JSON Schema is exactly what the models generate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from config.cli import SCHEMA_FILE, cli_schema, schema_text


def test_schema_file_is_up_to_date() -> None:
    assert SCHEMA_FILE.read_text(encoding="utf-8") == schema_text(), "run: python -m config schema"


def test_schema_check_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_schema(["--check"]) == 0
    stale = tmp_path / "s.json"
    stale.write_text("{}\n")
    assert cli_schema(["--check", "--out", str(stale)]) == 1
    assert "out of date" in capsys.readouterr().err
    assert cli_schema(["--out", str(stale)]) == 0
    assert cli_schema(["--check", "--out", str(stale)]) == 0


def test_schema_to_stdout_is_json_with_hived_keys(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_schema(["--out", "-"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert set(schema["properties"]) >= {
        "kubeApiServerAddress",
        "kubeConfigFilePath",
        "webServerAddress",
        "forcePodBindThreshold",
        "waitingPodSchedulingBlockMilliSec",
        "physicalCluster",
        "virtualClusters",
        "topogang",
    }
    assert schema["required"] == ["physicalCluster"]
    cell = schema["$defs"]["PhysicalCellModel"]["properties"]
    assert set(cell) == {"cellType", "cellAddress", "pinnedCellId", "cellChildren"}
