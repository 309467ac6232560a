"""Edits that would silently lose capacity are refused, with the file, path, line and a suggestion.

The cases of an admin's first week (issue #30), on the bundled example cluster: one misspelt
childCellType used to validate as "OK (2 warnings)" with half the GPUs gone."""

from __future__ import annotations

from pathlib import Path

import pytest

from config import load_config
from config.cli import cli_validate
from config.problems import errors_of, warnings_of

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "config" / "examples" / "example-cluster.yaml"
HIVED = ROOT / "tests" / "conformance" / "hived" / "hivedscheduler.yaml"


def _edit(tmp_path: Path, old: str, new: str) -> Path:
    text = EXAMPLE.read_text()
    assert old in text
    path = tmp_path / "cluster.yaml"
    path.write_text(text.replace(old, new, 1))
    return path


def _errors(path: Path, capsys: pytest.CaptureFixture[str]) -> list[str]:
    assert cli_validate([str(path)]) == 1
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err
    return [line for line in err.splitlines() if ": warning: " not in line]


def test_misspelt_child_type_is_an_error_naming_the_type_it_cuts_off(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _edit(tmp_path, "childCellType: A100-SWITCH", "childCellType: A100-SWTICH")
    (line,) = _errors(path, capsys)
    assert line.startswith(f"{path}: physicalCluster.cellTypes.A100-HALF.childCellType: 'A100-SWTICH' ")
    assert "cutting off the defined type 'A100-SWITCH'" in line
    assert line.endswith("did you mean 'A100-SWITCH'?")


def test_orphan_type_without_a_close_name_is_still_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _edit(tmp_path, "childCellType: A100-SWITCH", "childCellType: GPU")
    (line,) = _errors(path, capsys)
    assert line.startswith(f"{path}: physicalCluster.cellTypes.A100-SWITCH: cell type 'A100-SWITCH' ")
    assert "no type at or below it is node-level" in line and "Is a childCellType misspelt?" in line


def test_finer_grouping_of_gpus_still_in_the_cluster_is_a_warning(tmp_path: Path) -> None:
    """HiveD's reconfiguration test shortens a chain and leaves its finer types: no GPU type is lost."""
    path = _edit(tmp_path, "childCellType: A100-SWITCH", "childCellType: A100")
    loaded = load_config(path)
    (warning,) = [w for w in loaded.warnings if w.path.endswith("A100-SWITCH")]
    assert "its GPU type (A100) is in the cluster under other cell types" in warning.message


def test_vc_cell_type_typo_gets_a_suggestion(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _edit(tmp_path, "- cellType: A100-RACK.A100-NODE", "- cellType: A100-RACK.A100-NDOE")
    (line,) = _errors(path, capsys)
    assert line == (
        f"{path}: virtualClusters.vision.virtualCells[1].cellType: cellType A100-NDOE in VirtualCells is "
        "not found in cell types definition (did you mean 'A100-NODE'?)"
    )


def test_namespace_mapped_to_a_misspelt_vc_gets_a_suggestion(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _edit(tmp_path, "    research: research", "    research: reserch")
    (line,) = _errors(path, capsys)
    assert line == (
        f"{path}: topogang.namespaceVirtualClusters.research: VC 'reserch' is not defined in "
        "virtualClusters (did you mean 'research'?)"
    )


def test_dedented_key_names_its_line_and_the_indentation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _edit(tmp_path, "      isNodeLevel: true", "    isNodeLevel: true")
    lines = _errors(path, capsys)
    number = 1 + next(i for i, t in enumerate(path.read_text().splitlines()) if t == "    isNodeLevel: true")
    assert lines == [
        f"{path}: physicalCluster.cellTypes.isNodeLevel: Input should be a mapping of keys, got 'true' "
        f"(line {number}, column 5); 'isNodeLevel' is a key of a cell type, not a name here: it looks "
        "indented too little; indent it to column 7 to put it under 'A100-NODE' "
        f"(line {number - 3}, column 5)"
    ]


def test_hived_design_config_keeps_loading_with_its_unused_chain_as_warnings() -> None:
    loaded = load_config(HIVED)
    assert not errors_of(loaded.warnings)
    unused = [w for w in warnings_of(loaded.warnings) if "whole chain" in w.message]
    assert [w.path.rsplit(".", 1)[-1] for w in unused] == [
        "DGX1-V100-PCI-SWITCH",
        "DGX1-V100-CPU-SOCKET",
        "DGX1-V100-NODE",
        "2-DGX1-V100-NODE",
    ]
    assert all("no GPU is lost" in w.message for w in unused)


@pytest.mark.parametrize("name", ["explain-pod.json", "pod.yaml"])
def test_a_pod_given_to_validate_is_named_as_a_pod(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = ROOT / "examples" / name
    (line,) = _errors(path, capsys)
    assert line.startswith(f"{path}: this is a Kubernetes Pod (it has kind/metadata), not a topogang config")
