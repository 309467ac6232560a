"""The entitlement keys: `topogang.tenants` and `topogang.defaultEntitlement`, checked against the VCs
and pinned cells of the file, and what `topogang validate` says about them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from config import ConfigError
from config.cli import cli_validate
from config.load import load_config_text
from extender.standalone import EXAMPLE_CONFIG

BASE = (
    EXAMPLE_CONFIG.read_text(encoding="utf-8")
    .replace(
        "    - cellAddress: a100-r3-n4\n", "    - cellAddress: a100-r3-n4\n      pinnedCellId: nlp-pin\n"
    )
    .replace(
        "      cellNumber: 3\n  research:",
        "      cellNumber: 3\n    pinnedCells: [{pinnedCellId: nlp-pin}]\n  research:",
    )
)


def errors(extra: str) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as info:
        load_config_text(BASE + extra, "c.yaml")
    return info.value.errors


def test_tenants_load_with_their_defaults() -> None:
    loaded = load_config_text(
        BASE
        + "  defaultEntitlement: opportunistic\n  tenants:\n"
        + "    research: {maxPriority: 100}\n"
        + "    ml: {virtualClusters: [nlp, vision], pinnedCellIds: [nlp-pin]}\n"
    )
    t = loaded.extras.tenants
    assert loaded.extras.default_entitlement == "opportunistic"
    assert (t["research"].virtual_clusters, t["research"].max_priority, t["research"].pinned_cell_ids) == (
        [],
        100,
        None,
    )
    assert t["ml"].pinned_cell_ids == ["nlp-pin"] and t["ml"].max_priority == 1000
    assert loaded.warnings == ()


def test_unknown_vcs_and_pinned_cells_are_errors_with_a_hint() -> None:
    got = errors("  tenants:\n    ml: {virtualClusters: [nlpp], pinnedCellIds: [nlp-pn]}\n")
    assert (
        "topogang.tenants.ml.virtualClusters[0]",
        "VC 'nlpp' is not defined in virtualClusters (did you mean 'nlp'?)",
    ) in got
    assert (
        "topogang.tenants.ml.pinnedCellIds[0]",
        "pinned cell 'nlp-pn' is not listed in any VC's pinnedCells (did you mean 'nlp-pin'?)",
    ) in got


def test_a_pinned_cell_of_a_vc_the_tenant_may_not_use_is_an_error() -> None:
    got = errors("  tenants:\n    ml: {virtualClusters: [vision], pinnedCellIds: [nlp-pin]}\n")
    assert got == [
        (
            "topogang.tenants.ml.pinnedCellIds[0]",
            "pinned cell 'nlp-pin' belongs to VC 'nlp', which namespace ml may not use: add 'nlp' to "
            "topogang.tenants.ml.virtualClusters",
        )
    ]
    # the namespace's own namespaceVirtualClusters VC counts as one it may use
    load_config_text(BASE + "  tenants:\n    nlp: {pinnedCellIds: [nlp-pin]}\n")


def test_bad_values_name_their_path() -> None:
    got = dict(errors("  defaultEntitlement: closed\n  tenants:\n    Bad_NS: {maxPriority: 1001}\n"))
    assert "topogang.defaultEntitlement" in got and "open" in got["topogang.defaultEntitlement"]
    assert "topogang.tenants.Bad_NS.maxPriority" in got
    got2 = dict(errors("  tenants:\n    Bad_NS: {maxPriority: 5}\n"))
    assert "invalid namespace name" in got2["topogang.tenants.Bad_NS"]


def test_validate_says_plainly_when_every_namespace_may_use_everything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    open_file, strict_file = tmp_path / "open.yaml", tmp_path / "strict.yaml"
    open_file.write_text(BASE, encoding="utf-8")
    strict_file.write_text(
        BASE + "  defaultEntitlement: none\n  tenants:\n    ml: {virtualClusters: [nlp]}\n"
    )
    assert cli_validate([str(open_file)]) == 0
    out = capsys.readouterr().out
    assert "NOTE: every namespace may use every VC, every pinned cell and every priority" in out
    assert cli_validate([str(strict_file)]) == 0
    out = capsys.readouterr().out
    assert "WARNING" not in out and "Entitlement (namespaces without an entry: none)" in out
    assert "  ml         nlp          1000  all of its VCs'" in out
    assert cli_validate([str(strict_file), "--json"]) == 0
    ent = json.loads(capsys.readouterr().out)["files"][0]["summary"]["entitlement"]
    assert ent == {
        "defaultEntitlement": "none",
        "defaultMaxReservedGpus": None,
        "tenants": {
            "ml": {
                "virtualClusters": ["nlp"],
                "maxPriority": 1000,
                "pinnedCellIds": None,
                "maxReservedGpus": None,
            }
        },
        "notice": None,
    }


def test_validate_shows_each_namespaces_bound_on_unbound_reservations(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bounded.yaml"
    path.write_text(
        BASE
        + "  defaultMaxReservedGpus: 16\n  tenants:\n    ml: {virtualClusters: [nlp], maxReservedGpus: 64}\n"
        "    cv: {virtualClusters: [nlp]}\n",
        encoding="utf-8",
    )
    assert cli_validate([str(path)]) == 0
    out = capsys.readouterr().out
    assert (
        "MAX RESERVED GPUS" in out and "GPUs any other namespace may hold reserved, not yet bound: 16" in out
    )
    rows = {
        line.split()[0]: line.split()[-1] for line in out.splitlines() if line.startswith(("  ml ", "  cv "))
    }
    assert rows == {"ml": "64", "cv": "16"}  # an entry without its own bound takes the default
    assert cli_validate([str(path), "--json"]) == 0
    ent = json.loads(capsys.readouterr().out)["files"][0]["summary"]["entitlement"]
    assert ent["defaultMaxReservedGpus"] == 16 and ent["tenants"]["ml"]["maxReservedGpus"] == 64
