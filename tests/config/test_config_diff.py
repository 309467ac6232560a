"""`topogang diff OLD NEW`: GPUs, nodes, cells, VC quotas and namespaces an edit changes, as text
and as JSON; exit 0 for no change, 1 for a change, 2 when a config is invalid."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from config.cli import cli_diff

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "config" / "examples" / "example-cluster.yaml"


def _edit(tmp_path: Path, *pairs: tuple[str, str]) -> Path:
    text = EXAMPLE.read_text()
    for old, new in pairs:
        assert old in text
        text = text.replace(old, new, 1)
    path = tmp_path / "new.yaml"
    path.write_text(text)
    return path


def _json(old: Path, new: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    rc = cli_diff([str(old), str(new), "--json"])
    return rc, json.loads(capsys.readouterr().out)


def test_same_config_is_no_change(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_diff([str(EXAMPLE), str(EXAMPLE)]) == 0
    assert "no change" in capsys.readouterr().out


def test_quota_change_and_new_vc(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    new = _edit(
        tmp_path,
        ("      cellNumber: 3", "      cellNumber: 2"),
        (
            "virtualClusters:\n  vision:",
            "virtualClusters:\n  speech:\n    virtualCells:\n"
            "    - {cellType: A100-RACK.A100-NODE.A100-HALF, cellNumber: 1}\n  vision:",
        ),
    )
    rc, d = _json(EXAMPLE, new, capsys)
    assert rc == 1 and d["changed"] is True
    vcs = d["virtualClusters"]
    assert vcs["added"] == [{"name": "speech", "gpus": 4, "cells": {"A100-RACK/A100-HALF": 1}}]
    assert vcs["removed"] == []
    assert vcs["changed"] == [
        {
            "name": "nlp",
            "oldGpus": 24,
            "newGpus": 16,
            "cells": [{"name": "A100-RACK/A100-NODE", "old": 3, "new": 2}],
        }
    ]
    assert d["gpus"] == {"old": 96, "new": 96, "byType": []}
    assert cli_diff([str(EXAMPLE), str(new)]) == 1
    text = capsys.readouterr().out
    assert "  + speech: 4 GPUs (A100-RACK/A100-HALF x1)" in text
    assert "  ~ nlp: 24 -> 16 (-8) GPUs [A100-RACK/A100-NODE 3 -> 2]" in text
    assert "WARNING" not in text


def test_removed_rack_is_flagged_with_gpus_nodes_and_cells(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rack3 = EXAMPLE.read_text().split("  - cellType: A100-RACK           # rack 3\n")[1].split("\n\n")[0]
    new = _edit(
        tmp_path,
        ("  - cellType: A100-RACK           # rack 3\n" + rack3 + "\n", ""),
        ("      cellNumber: 3", "      cellNumber: 1"),  # the quotas must still fit two racks
        ("      cellNumber: 4", "      cellNumber: 2"),
    )
    rc, d = _json(EXAMPLE, new, capsys)
    assert rc == 1
    assert d["gpus"]["old"] == 96 and d["gpus"]["new"] == 64
    assert d["nodes"]["removed"] == [f"a100-r3-n{i}" for i in range(1, 5)] and d["nodes"]["added"] == []
    assert {"name": "A100-RACK/A100-RACK", "old": 3, "new": 2} in d["cells"]
    assert cli_diff([str(EXAMPLE), str(new)]) == 1
    text = capsys.readouterr().out
    assert "WARNING: the cluster loses 32 of its 96 GPUs" in text
    assert "WARNING: 4 nodes leave the cluster: a100-r3-n1 a100-r3-n2 a100-r3-n3 a100-r3-n4" in text
    assert "GPUs:  96 -> 64 (-32)" in text


def test_namespace_mapping_changes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    new = _edit(tmp_path, ("    research: research", "    research: nlp"))
    rc, d = _json(EXAMPLE, new, capsys)
    assert rc == 1
    assert d["namespaceVirtualClusters"] == [{"namespace": "research", "old": "research", "new": "nlp"}]


def test_an_invalid_config_is_not_compared(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    new = _edit(tmp_path, ("childCellType: A100-SWITCH", "childCellType: A100-SWTICH"))
    assert cli_diff([str(EXAMPLE), str(new)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "did you mean 'A100-SWITCH'?" in err and "fix the errors above first" in err


def test_against_needs_one_file_and_an_extender_that_answers(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_diff([str(EXAMPLE)]) == 2
    assert "give OLD NEW, or --against URL NEW" in capsys.readouterr().err
    assert cli_diff(["--against", "http://127.0.0.1:9", str(EXAMPLE), str(EXAMPLE)]) == 2
    capsys.readouterr()
    assert cli_diff(["--against", "ftp://example.invalid", str(EXAMPLE)]) == 2
    assert "must start with http:// or https://" in capsys.readouterr().err
    assert cli_diff(["--against", "http://127.0.0.1:9", str(EXAMPLE)]) == 2  # the discard port: nobody
    assert "cannot read the running extender at http://127.0.0.1:9" in capsys.readouterr().err
