"""The loader: HiveD's format as written, scalars as text, paths in errors, warnings for extras."""

from __future__ import annotations

import pytest

from config import ConfigError, ConfigWarning, load_config_text
from config.load import parse_yaml, render_loc

BASE = """\
physicalCluster:
  cellTypes:
    N: {childCellType: G, childCellNumber: 4, isNodeLevel: true}
    R: {childCellType: N, childCellNumber: 2}
  physicalCells:
  - cellType: R
    cellChildren: [{cellAddress: n1}, {cellAddress: n2}]
virtualClusters:
  a:
    virtualCells: [{cellType: R.N, cellNumber: 1}]
"""


def errors(text: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config_text(text, "f.yaml")
    return info.value.lines()


def test_config_error_lines_and_str() -> None:
    err = ConfigError("f.yaml", [("a.b[0]", "bad"), ("", "file-level")])
    assert str(err) == "f.yaml: a.b[0]: bad\nf.yaml: file-level"
    assert err.errors == [("a.b[0]", "bad"), ("", "file-level")]


def test_unknown_keys_are_warnings_with_paths_and_hints() -> None:
    text = BASE.replace("physicalCluster:", "someFutureKey: 1\nphysicalCluster:").replace(
        "cellAddress: n1}", "cellAddress: n1, cellAdress: x}"
    )
    loaded = load_config_text(text + "topogang: {listenAdress: ':1'}\n")
    assert [(w.path, w.message) for w in loaded.warnings] == [
        ("someFutureKey", "unknown key 'someFutureKey' is ignored"),
        (
            "physicalCluster.physicalCells[0].cellChildren[0].cellAdress",
            "unknown key 'cellAdress' is ignored (did you mean 'cellAddress'?)",
        ),
        ("topogang.listenAdress", "unknown key 'listenAdress' is ignored (did you mean 'listenAddress'?)"),
    ]
    assert all(isinstance(w, ConfigWarning) for w in loaded.warnings)


def test_snake_case_keys_are_not_silently_accepted() -> None:
    text = BASE.replace("cellNumber: 1", "cellNumber: 1, cell_number: 2")
    loaded = load_config_text(text)
    assert [w.path for w in loaded.warnings] == ["virtualClusters.a.virtualCells[0].cell_number"]


def test_hived_ignored_keys_accepted_silently() -> None:
    text = BASE.replace(
        "  physicalCells:", "  skuTypes: {G: {gpu: 1, cpu: 8, memory: 64Gi}}\n  physicalCells:"
    )
    loaded = load_config_text(text + "quotaExcludeVCs: [a]\n")
    assert loaded.warnings == ()


def test_scalars_stay_text_like_go_yaml() -> None:
    text = BASE.replace("cellAddress: n1", "cellAddress: 007").replace("cellAddress: n2", "cellAddress: 12")
    loaded = load_config_text(text)  # YAML 1.1 would read 7 and 12; HiveD (Go) reads "007" and "12"
    rack = loaded.spec.physical_cells[0]
    assert [c.address for c in rack.children] == ["007", "12"]


def test_int_gpu_addresses_become_text() -> None:
    text = BASE.replace(
        "{cellAddress: n1}",
        "{cellAddress: n1, cellChildren: [{cellAddress: 3}, {cellAddress: 2},"
        " {cellAddress: 1}, {cellAddress: 0}]}",
    )
    loaded = load_config_text(text)
    node = loaded.spec.physical_cells[0].children[0]
    assert [c.address for c in node.children] == ["3", "2", "1", "0"]


def test_yes_and_quoted_booleans_parse() -> None:
    for value in ("yes", "True", "'true'", "on"):
        loaded = load_config_text(BASE.replace("isNodeLevel: true", f"isNodeLevel: {value}"))
        assert loaded.spec.cell_type("N") is not None and loaded.spec.cell_type("N").is_node_level  # type: ignore[union-attr]


def test_nulls_mean_empty_or_default() -> None:
    text = BASE + "  b:\n    virtualCells:\n    pinnedCells:\nwebServerAddress:\nforcePodBindThreshold:\n"
    loaded = load_config_text(text)
    assert loaded.model.web_server_address == ":9096"
    assert loaded.model.force_pod_bind_threshold == 3
    assert [w.path for w in loaded.warnings] == ["virtualClusters.b"]  # the VC is empty


def test_topogang_extras_defaults_and_values() -> None:
    loaded = load_config_text(BASE)
    assert loaded.extras.reservation_ttl_seconds == 300
    assert loaded.extras.namespace_virtual_clusters == {}
    assert loaded.model.listen_address == ":9096"
    loaded = load_config_text(
        BASE
        + "topogang:\n  listenAddress: ':8888'\n  reservationTtlSeconds: 60\n"
        + "  namespaceVirtualClusters: {ml: a}\n"
    )
    assert loaded.model.listen_address == ":8888"
    assert loaded.extras.reservation_ttl_seconds == 60
    assert loaded.spec.namespace_vcs == (("ml", "a"),)


def test_pydantic_paths_use_brackets_for_lists_and_dots_for_keys() -> None:
    text = BASE.replace("cellNumber: 1", "cellNumber: []").replace("cellAddress: n2}", "cellAddress: [x]}")
    assert errors(text) == [
        "f.yaml: physicalCluster.physicalCells[0].cellChildren[1].cellAddress: "
        "Input should be a valid string, got ['x'] (line 7, column 40)",
        "f.yaml: virtualClusters.a.virtualCells[0].cellNumber: Input should be a valid integer, got [] "
        "(line 10, column 36)",
    ]


def test_numeric_mapping_keys_render_as_keys_not_indexes() -> None:
    raw = {"virtualClusters": {1: {"virtualCells": [{"cellNumber": "x"}]}}}
    assert render_loc(("virtualClusters", 1, "virtualCells", 0, "cellNumber"), raw) == (
        "virtualClusters.1.virtualCells[0].cellNumber"
    )


def test_wrong_container_types() -> None:
    assert errors("physicalCluster: [1, 2]\n") == [
        "f.yaml: physicalCluster: Input should be a mapping of keys, got ['1', '2'] (line 1, column 1); "
        "'physicalCluster' needs a mapping (its keys on the lines below it, indented further), not a list"
    ]


def test_duplicate_keys_in_nested_mappings() -> None:
    text = BASE.replace(
        "    R: {childCellType: N, childCellNumber: 2}",
        "    R: {childCellType: N, childCellNumber: 2, childCellNumber: 2}",
    )
    assert errors(text) == [
        "f.yaml: physicalCluster.cellTypes.R.childCellNumber: duplicate key 'childCellNumber' at line 4 "
        "(first at line 4); YAML would silently keep only the last one"
    ]


def test_anchors_and_merge_keys_work() -> None:
    text = """\
physicalCluster:
  cellTypes:
    N: &node {childCellType: G, childCellNumber: 4, isNodeLevel: true}
    M:
      <<: *node
      childCellNumber: 8
  physicalCells:
  - {cellType: N, cellAddress: n1}
  - {cellType: M, cellAddress: n2}
"""
    loaded = load_config_text(text)
    assert loaded.spec.cell_type("M") is not None and loaded.spec.cell_type("M").child_number == 8  # type: ignore[union-attr]


def test_recursive_alias_is_an_error_not_a_hang() -> None:
    raw, errs = parse_yaml("a: &x [*x]\n")
    assert raw is None and errs == [("a[0]", "alias *x refers to itself")]
    with pytest.raises(ConfigError, match="refers to itself"):
        load_config_text("physicalCluster: &x {physicalCells: [*x]}\n")


def test_alias_bombs_and_deep_nesting_are_errors() -> None:
    """A config comes from a ConfigMap: a billion laughs or a 50,000-deep document is an error that
    says so, not a stall or a crash."""
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 10)]
    raw, errs = parse_yaml("\n".join(lines) + "\n")
    assert raw is None and errs and "expands to more than" in errs[0][1]
    raw, errs = parse_yaml("a: " + "[" * 50_000 + "]" * 50_000 + "\n")
    assert raw is None and errs == [("a" + "[0]" * 63, "is nested more than 64 levels deep")]


def test_multiple_documents_are_an_error() -> None:
    lines = errors(BASE + "---\n" + BASE)
    assert lines == [
        "f.yaml: line 11, column 1: YAML syntax error: "
        "expected a single document in the stream at line 1, column 1, but found another document"
    ]


def test_check_false_skips_semantic_validation() -> None:
    text = BASE.replace("cellNumber: 1", "cellNumber: 5")
    assert any("Insufficient physical cells" in line for line in errors(text))
    loaded = load_config_text(text, check=False)
    assert loaded.spec.virtual_clusters[0].virtual_cells[0].number == 5
