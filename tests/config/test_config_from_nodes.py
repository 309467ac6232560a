"""`topogang generate --from-cluster`: Node objects in, a config out that loads without a warning, with a
note for every node the admin should look at. The pure part (`config.from_nodes`) on hand-made nodes; the
command with the node list read from a stand-in API (the e2e reads real KWOK nodes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml

from config.cli import cli_generate, cli_validate
from config.from_nodes import CLIQUE_LABEL, ZONE_LABEL, FromNodesError, from_nodes, render_yaml
from config.load import load_config_text
from scripts.e2e.fake_nodes import fake_nodes
from topology.layout import expand, type_infos

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "examples" / "example-cluster.yaml"
RACK = "example.com/rack"


def node(
    name: str,
    gpus: int | None,
    product: str | None = "A100",
    alloc: int | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A Node as the API server returns it."""
    meta: dict[str, Any] = {"name": name, "labels": dict(labels or {})}
    if product is not None:
        meta["labels"]["nvidia.com/gpu.product"] = product
    status: dict[str, Any] = {"capacity": {"cpu": "64"}, "allocatable": {"cpu": "64"}}
    if gpus is not None:
        status["capacity"]["nvidia.com/gpu"] = str(gpus)
        status["allocatable"]["nvidia.com/gpu"] = str(gpus if alloc is None else alloc)
    return {"metadata": meta, "status": status}


def loads(result: Any) -> Any:
    """The rendered config loads, with no warning (a generated file must not start with noise)."""
    loaded = load_config_text(render_yaml(result, "topogang generate --from-cluster"), "gen.yaml")
    assert loaded.warnings == ()
    return loaded


def nodes_of(loaded: Any) -> dict[str, tuple[str, int]]:
    """node name -> (top cell type, GPUs) as the core sees the loaded config."""
    types = type_infos(loaded.spec)
    out: dict[str, tuple[str, int]] = {}
    for c in expand(loaded.spec, types).cells:
        if types[c.cell_type].is_node_level and c.node is not None:
            out[c.node] = (c.chain, types[c.cell_type].leaf_count)
    return out


def test_the_example_clusters_own_nodes_give_back_its_racks() -> None:
    """KWOK's nodes for the example cluster (as the e2e makes them), with a rack label: 3 racks of 4
    nodes of 8 A100s, one type per level, one VC owning the 3 racks."""
    kube_nodes = fake_nodes(EXAMPLE)
    for n in kube_nodes:
        n["metadata"]["labels"][RACK] = n["metadata"]["name"].rsplit("-", 1)[0]
    result = from_nodes(kube_nodes, rack_labels=[RACK])
    cell_types = result.data["physicalCluster"]["cellTypes"]
    assert cell_types == {
        "A100-NODE": {"childCellType": "A100", "childCellNumber": 8, "isNodeLevel": True},
        "A100-RACK": {"childCellType": "A100-NODE", "childCellNumber": 4},
    }
    tops = result.data["physicalCluster"]["physicalCells"]
    assert [[k["cellAddress"] for k in t["cellChildren"]] for t in tops] == [
        [f"a100-r{r}-n{n}" for n in range(1, 5)] for r in range(1, 4)
    ]
    assert result.data["virtualClusters"] == {
        "all": {"virtualCells": [{"cellType": "A100-RACK", "cellNumber": 3}]}
    }
    assert result.notes == ()
    assert result.top_comments[0] == f"rack {RACK}=a100-r1: 4 nodes, 32 x A100"
    loaded = loads(result)
    assert set(nodes_of(loaded)) == {n["metadata"]["name"] for n in kube_nodes}


def test_nvl72_racks_from_the_clique_label_by_default() -> None:
    """GB200 trays (4 GPUs each) in two NVLink domains: NVIDIA's clique label makes the racks, the zone
    label the level above; the product label names every type."""
    trays = [
        node(
            f"gb-r{r}-t{t:02d}",
            4,
            "NVIDIA-GB200",
            labels={CLIQUE_LABEL: f"uuid.{r}", ZONE_LABEL: "z"},
        )
        for r in (1, 2)
        for t in range(1, 19)
    ]
    result = from_nodes(trays)
    assert result.data["physicalCluster"]["cellTypes"] == {
        "NVIDIA-GB200-NODE": {"childCellType": "NVIDIA-GB200", "childCellNumber": 4, "isNodeLevel": True},
        "NVIDIA-GB200-RACK": {"childCellType": "NVIDIA-GB200-NODE", "childCellNumber": 18},
        "NVIDIA-GB200-ZONE": {"childCellType": "NVIDIA-GB200-RACK", "childCellNumber": 2},
    }
    (zone,) = result.data["physicalCluster"]["physicalCells"]
    assert [len(r["cellChildren"]) for r in zone["cellChildren"]] == [18, 18]
    assert result.top_comments == (f"zone {ZONE_LABEL}=z: 36 nodes, 144 x NVIDIA-GB200",)
    assert set(nodes_of(loads(result))) == {t["metadata"]["name"] for t in trays}


def test_a_rack_of_mixed_nodes_is_split_and_said() -> None:
    rack = {CLIQUE_LABEL: "c1"}
    nodes = [
        node("n1", 8, labels=rack),
        node("n2", 8, labels=rack),
        node("n3", 4, labels=rack),
        node("n4", 8, "H100", labels=rack),
    ]
    result = from_nodes(nodes)
    types = result.data["physicalCluster"]["cellTypes"]
    assert types["A100-8GPU-NODE"]["childCellNumber"] == 8 and types["A100-4GPU-NODE"]["childCellNumber"] == 4
    assert types["H100-NODE"] == {"childCellType": "H100", "childCellNumber": 8, "isNodeLevel": True}
    tops = {
        t["cellType"]: [k["cellAddress"] for k in t["cellChildren"]]
        for t in result.data["physicalCluster"]["physicalCells"]
    }
    assert tops == {"A100-8GPU-2NODE-RACK": ["n1", "n2"], "A100-4GPU-1NODE-RACK": ["n3"], "H100-RACK": ["n4"]}
    (note,) = [n for n in result.notes if "holds different kinds" in n]
    assert f"rack {CLIQUE_LABEL}=c1" in note and "written as 3 rack cells" in note
    loaded = loads(result)
    assert nodes_of(loaded) == {
        "n1": ("A100-8GPU-2NODE-RACK", 8),
        "n2": ("A100-8GPU-2NODE-RACK", 8),
        "n3": ("A100-4GPU-1NODE-RACK", 4),
        "n4": ("H100-RACK", 8),
    }


def test_racks_of_different_sizes_get_their_own_types_and_a_hint() -> None:
    nodes = [node(f"r1-n{i}", 8, labels={RACK: "r1"}) for i in range(4)]
    nodes += [node(f"r2-n{i}", 8, labels={RACK: "r2"}) for i in range(3)]
    result = from_nodes(nodes, rack_labels=[RACK])
    assert [t["cellType"] for t in result.data["physicalCluster"]["physicalCells"]] == [
        "A100-4NODE-RACK",
        "A100-3NODE-RACK",
    ]
    (note,) = result.notes
    assert "A100 racks differ in size" in note and "add it by hand" in note
    loads(result)


def test_nodes_without_a_rack_label_stand_alone_and_are_named() -> None:
    nodes = [node("a", 8, labels={RACK: "r1"}), node("b", 8), node("c", 8)]
    result = from_nodes(nodes, rack_labels=[RACK], zone_labels=[])
    tops = result.data["physicalCluster"]["physicalCells"]
    assert tops[1:] == [
        {"cellType": "A100-NODE", "cellAddress": "b"},
        {"cellType": "A100-NODE", "cellAddress": "c"},
    ]
    assert any(f"2 GPU node(s) carry none of the rack labels ({RACK}): b, c" in n for n in result.notes)
    assert result.data["virtualClusters"]["all"]["virtualCells"] == [
        {"cellType": "A100-RACK", "cellNumber": 1},
        {"cellType": "A100-NODE", "cellNumber": 2},
    ]
    loads(result)


def test_the_first_rack_label_a_node_carries_counts() -> None:
    nodes = [
        node("a", 4, labels={CLIQUE_LABEL: "x", RACK: "r1"}),
        node("b", 4, labels={RACK: "r1"}),
    ]
    result = from_nodes(nodes, rack_labels=[CLIQUE_LABEL, RACK])
    assert result.top_comments == (
        f"rack {CLIQUE_LABEL}=x: 1 node, 4 x A100",
        f"rack {RACK}=r1: 1 node, 4 x A100",
    )
    loads(result)


def test_cpu_nodes_missing_products_odd_names_and_sick_gpus_are_noted() -> None:
    nodes = [
        node("cpu-1", None, None),
        node("cpu-2", 0),
        node("plain", 2, None),
        node("dotted", 8, "Tesla.V100"),
        node("sick", 8, "H100", alloc=6),
    ]
    result = from_nodes(nodes, default_product="GPU")
    notes = "\n".join(result.notes)
    assert "2 node(s) without nvidia.com/gpu are left out" in notes
    assert "1 GPU node(s) have no nvidia.com/gpu.product label" in notes and "'GPU': plain" in notes
    assert "Tesla.V100" in notes
    assert "fewer allocatable GPUs than installed (sick)" in notes
    loaded = loads(result)
    assert nodes_of(loaded) == {
        "plain": ("GPU-NODE", 2),
        "dotted": ("Tesla-V100-NODE", 8),
        "sick": ("H100-NODE", 8),
    }


def test_no_gpu_node_is_an_error_that_says_what_to_check() -> None:
    with pytest.raises(FromNodesError, match=r"none of the 2 nodes has nvidia\.com/gpu .*device plugin"):
        from_nodes([node("a", None), node("b", 0)])


def test_products_that_read_the_same_as_type_names_are_refused() -> None:
    with pytest.raises(FromNodesError, match=r"products A100-X, A100\.X give the same cell type names"):
        from_nodes([node("a", 8, "A100.X"), node("b", 8, "A100-X")])


def test_names_sort_naturally() -> None:
    nodes = [node(f"n{i}", 1, labels={RACK: "r"}) for i in (10, 2, 1)]
    (rack,) = from_nodes(nodes, rack_labels=[RACK]).data["physicalCluster"]["physicalCells"]
    assert [k["cellAddress"] for k in rack["cellChildren"]] == ["n1", "n2", "n10"]
    # racks follow their nodes' names, not their label values (a clique's value is a UUID)
    racks = [node("n9", 1, labels={RACK: "b7e2"}), node("n10", 1, labels={RACK: "0c41"})]
    tops = from_nodes(racks, rack_labels=[RACK]).data["physicalCluster"]["physicalCells"]
    assert [t["cellChildren"][0]["cellAddress"] for t in tops] == ["n9", "n10"]


# ------------------------------------------------------------------------------------------ the command
class FakeApi:
    """The API server's node list as `config.fetch.list_nodes` would read it, and the kubeconfig asked for."""

    nodes: ClassVar[list[dict[str, Any]]] = []
    kubeconfig: ClassVar[list[str | None]] = []

    @classmethod
    def list_nodes(cls, kubeconfig: str | None) -> list[dict[str, Any]]:
        cls.kubeconfig.append(kubeconfig)
        return cls.nodes


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> type[FakeApi]:
    import config.cli

    FakeApi.kubeconfig = []
    monkeypatch.setattr(config.cli, "list_nodes", FakeApi.list_nodes)
    return FakeApi


def test_the_command_writes_a_file_validate_accepts(
    api: type[FakeApi], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    api.nodes = [node(f"n{i}", 8, labels={"rack": f"r{i // 2}"}) for i in range(4)] + [
        node("loose", 8),
        node("cpu", None),
    ]
    out = tmp_path / "cluster.yaml"
    rc = cli_generate(
        [
            "--from-cluster",
            "--kubeconfig",
            "kc",
            "--rack-label",
            "rack",
            "--zone-label",
            "",
            "--out",
            str(out),
        ]
    )
    err = capsys.readouterr().err
    assert rc == 0 and api.kubeconfig == ["kc"]
    assert "note: 1 node(s) without nvidia.com/gpu are left out" in err
    text = out.read_text(encoding="utf-8")
    assert text.startswith(
        "# Generated by: topogang generate --from-cluster --rack-label rack --zone-label ''\n"
    )
    assert "#  - 1 GPU node(s) carry none of the rack labels (rack): loose" in text
    assert "  # rack rack=r0: 2 nodes, 16 x A100\n  - cellType: A100-RACK\n" in text
    assert yaml.safe_load(text)["virtualClusters"]["all"]["virtualCells"] == [
        {"cellType": "A100-RACK", "cellNumber": 2},
        {"cellType": "A100-NODE", "cellNumber": 1},
    ]
    assert cli_validate([str(out)]) == 0
    assert "GPUs: 40" in capsys.readouterr().out


def test_the_command_says_why_it_cannot_read_the_nodes(
    monkeypatch: pytest.MonkeyPatch, api: type[FakeApi], capsys: pytest.CaptureFixture[str]
) -> None:
    api.nodes = [node("cpu", None)]
    assert cli_generate(["--from-cluster"]) == 1
    assert "error: none of the 1 nodes has nvidia.com/gpu" in capsys.readouterr().err

    import config.cli

    def refuse(path: str | None) -> list[dict[str, Any]]:
        raise RuntimeError("Invalid kube-config file. No configuration found.")

    monkeypatch.setattr(config.cli, "list_nodes", refuse)
    assert cli_generate(["--from-cluster"]) == 1
    assert "cannot list the cluster's nodes: Invalid kube-config file" in capsys.readouterr().err
