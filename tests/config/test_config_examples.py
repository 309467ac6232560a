"""The bundled examples validate, summarise, and describe the clusters their comments promise."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from config import load_config
from config.cli import cli_validate
from config.summary import summary_data

EXAMPLES = Path(__file__).resolve().parents[2] / "config" / "examples"

NAMES = ["example-cluster", "gb200-nvl72", "dgx1-v100", "hived-design"]


@pytest.mark.parametrize("name", NAMES)
def test_example_validates_and_prints_summary(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(EXAMPLES / f"{name}.yaml")
    assert cli_validate([path]) == 0
    out, err = capsys.readouterr()
    assert f"{path}: OK" in out
    for heading in ("Chains", "Virtual clusters (quota)", "HEADROOM", "GPUs promised to VCs"):
        assert heading in out
    assert "Traceback" not in out + err


@pytest.mark.parametrize("name", NAMES[:3])
def test_authored_examples_have_no_warnings(name: str) -> None:
    assert load_config(EXAMPLES / f"{name}.yaml").warnings == ()


def test_examples_are_all_listed() -> None:
    assert sorted(p.stem for p in EXAMPLES.glob("*.yaml")) == sorted(NAMES)


def test_example_cluster_shape() -> None:
    data = summary_data(load_config(EXAMPLES / "example-cluster.yaml").spec)
    assert data["nodes"] == 12
    assert data["gpus"] == {"A100": 96}
    (chain,) = data["chains"]
    assert chain["chain"] == "A100-RACK" and chain["topCells"] == 3
    assert [(lv["cellType"], lv["cells"], lv["gpusPerCell"]) for lv in chain["levels"]] == [
        ("A100-RACK", 3, 32),
        ("A100-NODE", 12, 8),
        ("A100-HALF", 24, 4),
        ("A100-SWITCH", 48, 2),
        ("A100", 96, 1),
    ]
    # what a new VC could be promised (the comments spell out the count)
    assert [lv["headroom"] for lv in chain["levels"]] == [0, 1, 2, 4, 8]
    assert {vc["name"]: vc["gpus"] for vc in data["virtualClusters"]} == {
        "vision": 48,
        "nlp": 24,
        "research": 16,
    }


def test_example_cluster_node_names_and_gpu_indices() -> None:
    from topology.layout import expand, type_infos

    spec = load_config(EXAMPLES / "example-cluster.yaml").spec
    cells = expand(spec, type_infos(spec)).cells
    nodes = [c.node for c in cells if c.cell_type == "A100-NODE"]
    assert nodes[0] == "a100-r1-n1" and nodes[-1] == "a100-r3-n4" and len(set(nodes)) == 12
    gpus = sorted(c.gpu_index or 0 for c in cells if c.level == 1 and c.node == "a100-r2-n3")
    assert gpus == list(range(8))


def test_gb200_is_two_nvl72_domains_of_18_four_gpu_trays() -> None:
    data = summary_data(load_config(EXAMPLES / "gb200-nvl72.yaml").spec)
    (chain,) = data["chains"]
    assert chain["topCells"] == 2 and chain["nodes"] == 36 and chain["gpus"] == 144
    levels = {lv["cellType"]: lv for lv in chain["levels"]}
    assert levels["GB200-NVL72"]["gpusPerCell"] == 72
    assert levels["GB200-TRAY"]["gpusPerCell"] == 4


def test_dgx1_pins_a_node_to_interns() -> None:
    loaded = load_config(EXAMPLES / "dgx1-v100.yaml")
    data = summary_data(loaded.spec)
    interns = next(vc for vc in data["virtualClusters"] if vc["name"] == "interns")
    assert [p["address"] for p in interns["pinnedCells"]] == ["dgx1-06"]
    assert [lv["headroom"] for lv in data["chains"][0]["levels"]] == [0, 1, 4]


def test_hived_design_example_loads_unchanged() -> None:
    loaded = load_config(EXAMPLES / "hived-design.yaml")
    m = loaded.model
    assert m.web_server_address == ":30096" and m.waiting_pod_scheduling_block_milli_sec == 50
    assert m.kube_api_server_address == ""  # explicitly empty: HiveD then skips $KUBE_APISERVER_ADDRESS
    assert [vc.name for vc in loaded.spec.virtual_clusters] == ["team-a", "team-b"]
    assert [w.message for w in loaded.warnings] == [
        "pinned cell 'pin-node-2' is not listed in any VC's pinnedCells, "
        "so it is scheduled as an ordinary cell"
    ]
    # hived.md §2.2: "GPU 0/gpu-node-1/1/3/7 is GPU index 7 on gpu-node-1: socket 1, switch 3"
    from topology.layout import expand, type_infos

    cells = expand(loaded.spec, type_infos(loaded.spec)).cells
    gpu = next(c for c in cells if c.address == "0/gpu-node-1/1/3/7")
    assert (gpu.node, gpu.gpu_index) == ("gpu-node-1", 7)


def test_json_output(capsys: pytest.CaptureFixture[str]) -> None:
    paths = [str(EXAMPLES / "example-cluster.yaml"), str(EXAMPLES / "hived-design.yaml")]
    assert cli_validate([*paths, "--json"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    doc = json.loads(out)
    assert [f["valid"] for f in doc["files"]] == [True, True]
    assert doc["files"][0]["summary"]["nodes"] == 12
    assert len(doc["files"][1]["warnings"]) == 1
