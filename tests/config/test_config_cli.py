"""`topogang validate` on files that are not configs at all: one line each, exit 1, no traceback."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from config.cli import cli_generate, cli_schema, cli_validate, main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = str(ROOT / "config" / "examples" / "example-cluster.yaml")
BROKEN = str(Path(__file__).resolve().parent / "broken" / "insufficient.yaml")

Write = Callable[..., str]


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    rc = cli_validate(argv)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return rc, out, err


def test_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = str(tmp_path / "nope.yaml")
    assert run([missing], capsys) == (1, "", f"{missing}: no such file\n")


def test_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run([str(tmp_path)], capsys) == (1, "", f"{tmp_path}: is a directory, not a config file\n")


def test_empty_file(write: Write, capsys: pytest.CaptureFixture[str]) -> None:
    path = write("")
    expected = f"{path}: empty config: expected a mapping with physicalCluster and virtualClusters\n"
    assert run([path], capsys) == (1, "", expected)


@pytest.mark.parametrize(
    ("text", "kind"),
    [("- a\n- b\n", "a list"), ("just words\n", "the text 'just words'"), ("42\n", "the text '42'")],
)
def test_not_a_mapping(text: str, kind: str, write: Write, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(text)
    assert run([path], capsys) == (1, "", f"{path}: the top level must be a mapping of keys, not {kind}\n")


def test_binary_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bin.yaml"
    path.write_bytes(b"\xff\xfe\x00garbage")
    rc, _, err = run([str(path)], capsys)
    assert rc == 1 and err.startswith(f"{path}: not UTF-8 text")


def test_yaml_error_has_line_and_column(write: Write, capsys: pytest.CaptureFixture[str]) -> None:
    path = write("physicalCluster:\n  cellTypes: [\n")
    rc, _, err = run([path], capsys)
    assert rc == 1
    assert err.startswith(f"{path}: line 3, column 1: YAML syntax error: ")


def test_many_errors_reported_at_once(write: Write, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(
        "physicalCluster:\n"
        "  cellTypes:\n"
        "    N: {childCellType: G, childCellNumber: 0, isNodeLevel: true}\n"
        "  physicalCells:\n"
        "  - {cellType: N, cellAddress: Bad_Name}\n"
        "virtualClusters:\n"
        "  Bad_VC:\n"
        "    virtualCells: [{cellType: X, cellNumber: 0}]\n"
    )
    rc, _, err = run([path], capsys)
    assert rc == 1
    # five: the VC name Bad_VC is fine (HiveD takes any VC name)
    assert len(err.splitlines()) == 5, err


def test_mixed_files_exit_1_and_report_both(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run([EXAMPLE, BROKEN], capsys)
    assert rc == 1
    assert f"{EXAMPLE}: OK" in out
    assert err.startswith(f"{BROKEN}: virtualClusters: Illegal initial VC assignment")


def test_usage_errors_return_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_validate([]) == 2
    assert cli_validate(["--bogus", EXAMPLE]) == 2
    assert cli_generate(["--nodes", "ten"]) == 2
    assert cli_schema(["--what"]) == 2
    assert main([]) == 2
    assert main(["frobnicate"]) == 2
    assert cli_validate(["--help"]) == 0
    assert "Traceback" not in "".join(capsys.readouterr())


def test_main_dispatches(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", EXAMPLE]) == 0
    assert f"{EXAMPLE}: OK" in capsys.readouterr().out


def _subprocess(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)


def test_subprocess_python_c(tmp_path: Path) -> None:
    missing = str(tmp_path / "missing.yaml")
    code = "import sys, config.cli; sys.exit(config.cli.cli_validate(sys.argv[1:]))"
    proc = _subprocess([sys.executable, "-c", code, BROKEN, missing, str(tmp_path)])
    assert proc.returncode == 1
    assert "Traceback" not in proc.stdout + proc.stderr
    lines = proc.stderr.splitlines()
    assert lines[0].startswith(f"{BROKEN}: virtualClusters: Illegal initial VC assignment: Insufficient")
    assert lines[1:] == [f"{missing}: no such file", f"{tmp_path}: is a directory, not a config file"]


def test_subprocess_python_m_config() -> None:
    proc = _subprocess([sys.executable, "-m", "config", "validate", EXAMPLE])
    assert proc.returncode == 0, proc.stderr
    assert "Chains" in proc.stdout and proc.stderr == ""


def test_generate_help_prints_a_plain_percent_sign(capsys: pytest.CaptureFixture[str]) -> None:
    """argparse formats help strings with %, not descriptions: `%%` there is printed as is."""
    assert cli_generate(["--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "~90% of the nodes" in out and "%%" not in out
