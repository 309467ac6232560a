"""docs/metrics.md names every metric family the code registers, with its labels: a family added to
`extender/ops/metrics.py` (or anywhere in the product packages) without a row in the doc fails here.

The families are found in the source (every `Counter(...)`, `GaugeMetricFamily(...)`, ... whose name
is a literal), so a family that is only created on some path (Kubernetes mode, hot reload) counts."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "metrics.md"
PACKAGES = ("extender", "config", "topology")
KINDS = {"Counter", "Gauge", "Histogram", "Summary", "Info", "Enum"}
FAMILIES = {"GaugeMetricFamily", "CounterMetricFamily", "HistogramMetricFamily", "SummaryMetricFamily"}


def _strings(node: ast.expr | None) -> list[str] | None:
    if isinstance(node, ast.List | ast.Tuple):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return None


def registered() -> dict[str, tuple[str, ...]]:
    """family name -> label names, for every metric the product code creates with a literal name."""
    out: dict[str, tuple[str, ...]] = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not isinstance(node, ast.Call):
                    continue
                func = node.func
                name = (
                    func.id
                    if isinstance(func, ast.Name)
                    else func.attr
                    if isinstance(func, ast.Attribute)
                    else ""
                )
                if name not in KINDS | FAMILIES or not node.args:
                    continue
                first = node.args[0]
                if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
                    continue
                if not first.value.startswith("topogang_"):
                    continue
                keywords = {k.arg: k.value for k in node.keywords}
                labels = _strings(node.args[2]) if len(node.args) > 2 else None
                labels = (
                    labels or _strings(keywords.get("labels")) or _strings(keywords.get("labelnames")) or []
                )
                out[first.value] = tuple(labels)
    return out


def documented() -> dict[str, tuple[str, ...]]:
    """family -> labels, from the doc's table rows (`| `name` | type | `a`, `b` | ... |`)."""
    out: dict[str, tuple[str, ...]] = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        m = re.match(r"\|\s*`(topogang_\w+)`\s*\|[^|]*\|([^|]*)\|", line)
        if m:
            out[m.group(1)] = tuple(re.findall(r"`(\w+)`", m.group(2)))
    return out


def test_the_scan_finds_the_known_families() -> None:
    found = registered()
    assert found["topogang_extender_decisions"] == ("verb", "outcome")
    assert found["topogang_cells_free"] == ("chain", "level", "cell_type")
    assert "topogang_config_reloads" in found and "topogang_ledger_waiters" in found


def test_every_registered_family_is_documented_with_its_labels() -> None:
    found, doc = registered(), documented()
    assert sorted(set(found) - set(doc)) == [], "families registered but not in docs/metrics.md"
    assert {n: found[n] for n in found if doc[n] != found[n]} == {}, "labels differ from docs/metrics.md"


def test_the_doc_lists_no_family_the_code_does_not_register() -> None:
    assert sorted(set(documented()) - set(registered())) == []
