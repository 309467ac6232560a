"""HiveD's algorithm test table (`cases.yaml`, from microsoft/hivedscheduler, MIT) over the wire.

Each scenario of HiveD's `TestHivedAlgorithm` runs on its own `topogang serve` of HiveD's design
config; every step's answer is compared with the table's. The steps and the reasons for each
deliberate difference are data (`cases.yaml`, docs/hived-conformance.md), not code.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conformance.hived.driver import (
    CONFIG,
    Cluster,
    cluster_for,
    design_config,
    edited,
    load_cases,
    validate,
)

CASES = load_cases()
SCENARIOS = {s["name"]: s for s in CASES["scenarios"]}


def expanded(steps: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Steps with `{repeat: SCENARIO, first: N}` replaced by that scenario's first N steps."""
    out: list[Mapping[str, Any]] = []
    for step in steps:
        if "repeat" in step:
            out.extend(expanded(SCENARIOS[step["repeat"]]["steps"])[: step["first"]])
        else:
            out.append(step)
    return out


def run_step(c: Cluster, step: Mapping[str, Any], where: str) -> None:
    if "schedule" in step:
        got = c.schedule(step["schedule"], c.suggested(step.get("nodes")))
        assert got.as_expected() == step["expect"], f"{where}: {got}"
    elif "filter_only" in step:
        got = c.filter_outcome(step["filter_only"], c.suggested(step.get("nodes")))
        assert step["expect"] == "any" or got.kind == step["expect"], f"{where}: {got}"
        assert "node" not in step or got.node == step["node"], f"{where}: {got}"
    elif "bound" in step:
        node, gpus = c.bound(step["bound"])
        assert [node, list(gpus)] == step["expect"], where
    elif "delete" in step:
        c.delete(step["delete"])
    elif "node" in step:
        c.node_health(step["node"], step["ready"])
    elif "group" in step:
        assert c.group_state(step["group"]) == step["expect"], where
    elif "vc_cells" in step:
        cells = c.vc_cells(step["vc_cells"], step["chain"])
        assert cells, f"{where}: the VC has no cells on {step['chain']}"
        if step["expect"] == "healthy":
            assert all(h == "Healthy" for h, _ in cells), f"{where}: {cells}"
        else:  # HiveD: every free cell is doomed bad
            assert all(h == "Bad" for h, state in cells if state == "Free"), f"{where}: {cells}"
    elif "reconfigure" in step:
        c.reconfigure(step["reconfigure"])
    else:
        raise AssertionError(f"{where}: unknown step {step}")


RUNNABLE = [s["name"] for s in CASES["scenarios"] if not any("rejected" in st for st in s["steps"])]


@pytest.mark.parametrize("name", RUNNABLE)
def test_hived_scenario(name: str, tmp_path: Path) -> None:
    scenario = SCENARIOS[name]
    with cluster_for(CASES, scenario.get("config") or [], tmp_path) as c:
        for i, step in enumerate(expanded(scenario["steps"])):
            run_step(c, step, f"{name}, step {i}: {step}")


def test_invalid_initial_assignment_is_rejected(tmp_path: Path) -> None:
    (scenario,) = [s for s in CASES["scenarios"] if s["name"] == "invalid initial assignment"]
    path = tmp_path / "hivedscheduler.yaml"
    path.write_text(yaml.safe_dump(edited(design_config(), scenario["config"]), sort_keys=False))
    got = validate(path)
    assert got.returncode == 1
    assert scenario["steps"][0]["rejected"] in got.stderr, got.stderr


def test_the_design_config_validates_byte_for_byte() -> None:
    got = validate(CONFIG)
    assert got.returncode == 0, got.stderr
    assert " error" not in got.stderr and "OK" in got.stdout


def test_every_case_of_the_table_is_run() -> None:
    """Every pod of HiveD's table is scheduled by some scenario (pod13-15 and the other user errors
    included), and every scenario names the HiveD test function it comes from."""
    scheduled = {
        step.get("schedule") or step.get("filter_only")
        for s in CASES["scenarios"]
        for step in expanded(s["steps"])
    }
    assert set(CASES["pods"]) <= scheduled
    assert all(s.get("hived") for s in CASES["scenarios"])


def test_every_deviation_is_documented() -> None:
    """A step that answers differently from HiveD names its reason, and the reason is in the docs'
    table (`| D<n> |`), with HiveD's own answer kept next to topogang's."""
    table = (Path(__file__).resolve().parents[3] / "docs" / "hived-conformance.md").read_text()
    used = set()
    for s in CASES["scenarios"]:
        for step in s["steps"]:
            if "hived" in step or "deviation" in step:
                assert "hived" in step and "deviation" in step and step["hived"] != step["expect"], step
                used.add(step["deviation"])
    assert used, "no deviations at all: then the table should go too"
    for d in sorted(used):
        assert f"| {d} |" in table, d
