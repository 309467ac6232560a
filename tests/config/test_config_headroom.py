"""The summary's HEADROOM is what a new VC can be promised: at each level, a new VC asking for exactly
that many cells validates and one more is refused by the same quota count. Cells merely unpromised
at a level once showed 2 free racks in the example, where one more rack is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from config.generate import generate_yaml
from config.load import ConfigError, load_config_text
from config.summary import summary_data

EXAMPLES = Path(__file__).resolve().parents[2] / "config" / "examples"


def with_new_vc(text: str, cell_path: str, number: int) -> str:
    raw: dict[str, Any] = yaml.safe_load(text)
    raw["virtualClusters"]["newcomer"] = {"virtualCells": [{"cellType": cell_path, "cellNumber": number}]}
    return yaml.safe_dump(raw, sort_keys=False)


def assert_headroom_is_exact(text: str) -> list[int]:
    """Each level's headroom fits a new VC, one more cell does not; the headrooms, top first."""
    (chain,) = summary_data(load_config_text(text).spec)["chains"]
    path: list[str] = []
    for lv in chain["levels"][:-1]:  # a VC is promised cells above the leaf (the GPU type is no cell type)
        path.append(lv["cellType"])
        room = lv["headroom"]
        if room > 0:
            load_config_text(with_new_vc(text, ".".join(path), room))
        with pytest.raises(ConfigError, match=f"Insufficient physical cells at chain {chain['chain']}"):
            load_config_text(with_new_vc(text, ".".join(path), room + 1))
    return [lv["headroom"] for lv in chain["levels"]]


def test_the_example_has_no_free_rack_for_a_new_vc() -> None:
    text = (EXAMPLES / "example-cluster.yaml").read_text(encoding="utf-8")
    # one more rack leaves 4 nodes for 5 promised ones: refused, so no rack is free
    with pytest.raises(ConfigError, match="level 4: 5 needed, 4 available"):
        load_config_text(with_new_vc(text, "A100-RACK", 1))
    assert assert_headroom_is_exact(text) == [0, 1, 2, 4, 8]


def test_a_generated_thousand_node_cluster_has_the_racks_its_free_nodes_make() -> None:
    text = generate_yaml(nodes=1000, gpus_per_node=8, rack_size=8, vcs=4, leaf_type="A100")
    (chain,) = summary_data(load_config_text(text).spec)["chains"]
    racks, nodes = chain["levels"][0], chain["levels"][1]
    # 125 racks, 56 promised as racks and 452 nodes promised: 69 racks hold them, 100 nodes are free,
    # and 12 whole racks can be made of them (the summary once said 69)
    assert (racks["cells"], racks["vcCells"], nodes["vcCells"]) == (125, 56, 452)
    assert (racks["headroom"], nodes["headroom"]) == (12, 100)
    load_config_text(with_new_vc(text, "A100-RACK", 12))
    with pytest.raises(ConfigError, match="Insufficient physical cells"):
        load_config_text(with_new_vc(text, "A100-RACK", 13))


def test_headroom_is_exact_with_pinned_cells() -> None:
    text = (EXAMPLES / "dgx1-v100.yaml").read_text(encoding="utf-8")
    assert_headroom_is_exact(text)
