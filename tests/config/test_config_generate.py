"""`topogang generate`: valid, the requested size, deterministic, and the same cluster both ways."""

from __future__ import annotations

from pathlib import Path

import pytest

from config import GenerateError, generate_spec, generate_yaml, load_config, load_config_text
from config.cli import cli_generate
from config.summary import summary_data


def test_default_is_1000_nodes_of_8_gpus_and_validates() -> None:
    loaded = load_config_text(generate_yaml(), "gen.yaml")
    assert loaded.warnings == ()
    data = summary_data(loaded.spec)
    assert data["nodes"] == 1000
    assert data["gpus"] == {"A100": 8000}
    (chain,) = data["chains"]
    assert chain["topCells"] == 125
    assert [lv["cellType"] for lv in chain["levels"]] == [
        "A100-RACK",
        "A100-NODE",
        "A100-HALF",
        "A100-SWITCH",
        "A100",
    ]
    vcs = data["virtualClusters"]
    assert len(vcs) == 4
    assert sum(vc["gpus"] for vc in vcs) == 900 * 8  # 90% of the nodes
    assert all({c["cellType"] for c in vc["cells"]} == {"A100-RACK", "A100-NODE"} for vc in vcs)


@pytest.mark.parametrize(
    ("nodes", "gpus", "rack", "vcs", "levels"),
    [(16, 4, 4, 2, 4), (12, 6, 3, 3, 4), (10, 3, 5, 1, 3), (8, 8, 8, 0, 5), (9, 1, 3, 5, 3)],
)
def test_sizes(nodes: int, gpus: int, rack: int, vcs: int, levels: int) -> None:
    loaded = load_config_text(
        generate_yaml(nodes=nodes, gpus_per_node=gpus, rack_size=rack, vcs=vcs, leaf_type="H100")
    )
    data = summary_data(loaded.spec)
    assert data["nodes"] == nodes and data["gpus"] == {"H100": nodes * gpus}
    assert len(data["chains"][0]["levels"]) == levels
    assert len(data["virtualClusters"]) == vcs
    assert sum(vc["gpus"] for vc in data["virtualClusters"]) == (int(nodes * 0.9) * gpus if vcs else 0)


def test_deterministic_and_spec_matches_yaml() -> None:
    assert generate_yaml(nodes=64) == generate_yaml(nodes=64)
    assert generate_spec(nodes=64) == load_config_text(generate_yaml(nodes=64)).spec


@pytest.mark.parametrize(
    ("kwargs", "msg"),
    [
        ({"nodes": 10, "rack_size": 4}, "not a multiple"),
        ({"nodes": 0}, "at least 1"),
        ({"nodes": 8, "vcs": 8}, "more than the 7 nodes"),
        ({"leaf_type": "bad type"}, "--leaf-type"),
    ],
)
def test_bad_arguments(kwargs: dict[str, object], msg: str) -> None:
    with pytest.raises(GenerateError, match=msg):
        generate_yaml(**kwargs)  # type: ignore[arg-type]


def test_cli_writes_file_and_stdout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sub" / "gen.yaml"
    assert cli_generate(["--nodes", "32", "--rack-size", "8", "--vcs", "2", "--out", str(out)]) == 0
    assert summary_data(load_config(out).spec)["nodes"] == 32
    assert cli_generate(["--nodes", "32", "--vcs", "2"]) == 0
    assert capsys.readouterr().out == out.read_text()
    assert cli_generate(["--nodes", "30", "--rack-size", "8"]) == 2
    assert "is not a multiple of --rack-size 8" in capsys.readouterr().err
