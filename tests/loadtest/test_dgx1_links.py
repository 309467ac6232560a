"""`loadtest.dgx1_links` counts linked pods on the DGX-1 example, and refuses a config without links."""

from __future__ import annotations

from pathlib import Path

import pytest

from config.load import load_config
from loadtest import dgx1_links
from topology.model import Topology

ROOT = Path(__file__).resolve().parents[2]


def test_counts_the_same_pods_with_and_without_links(capsys: pytest.CaptureFixture[str]) -> None:
    spec = load_config(ROOT / "config/examples/dgx1-v100.yaml").spec
    judge = Topology(spec)
    before = dgx1_links.linked_share(dgx1_links.without_links(spec), judge, 0.8, 1500, 1)
    after = dgx1_links.linked_share(spec, judge, 0.8, 1500, 1)
    for size in dgx1_links.SIZES:
        assert before[size][0] == after[size][0] > 0  # links change which GPUs, never whether
        assert 0 <= before[size][1] <= before[size][0] and after[size][1] >= before[size][1]
    assert dgx1_links.main(["--decisions", "200", "--seeds", "1"]) == 0
    assert "config/examples/dgx1-v100.yaml, fill 80%" in capsys.readouterr().out


def test_a_config_without_links_has_nothing_to_compare(capsys: pytest.CaptureFixture[str]) -> None:
    assert dgx1_links.main(["--config", str(ROOT / "config/examples/example-cluster.yaml")]) == 1
    assert "declares no nvlinks" in capsys.readouterr().out
