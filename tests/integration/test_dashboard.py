"""The Grafana dashboard deploy/grafana/topogang.json is importable as is and never drifts from the code:
every metric its PromQL names is exported by a real extender's /metrics (uvicorn on 127.0.0.1, driven
through filter, bind, preempt and a config reload first, so the labelled series exist), and every label it
selects, groups by or shows in a legend is one those series carry."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from extender import kubesched
from tests.integration.conftest import CONFIG, Pods, reloading
from tests.integration.test_reload import wait_for
from tests.integration.test_server import schedule

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "topogang.json"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
# labels Prometheus adds to every scraped series, and the bucket bound of a histogram
TARGET_LABELS = {"job", "instance"}
FUNCTIONS = {"sum", "max", "min", "avg", "count", "rate", "increase", "irate", "histogram_quantile"}
KEYWORDS = {"and", "or", "unless", "bool", "offset"}
GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
# what the issue asks the dashboard to show, as the metrics that show it
TOPICS = {
    "verb latency": "topogang_extender_request_duration_seconds_bucket",
    "decisions by outcome": "topogang_extender_decisions_total",
    "gangs by phase": "topogang_gangs",
    "per-VC GPUs": "topogang_vc_gpus",
    "free cells per level": "topogang_cells_free",
    "reservation expiries": "topogang_reservation_expiries_total",
    "config reloads": "topogang_config_reloads_total",
    "leader": "topogang_leader",
}


def dashboard() -> dict[str, Any]:
    doc = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert isinstance(doc, dict)
    return doc


def queries() -> Iterator[tuple[str, dict[str, Any]]]:
    """(panel title, target) for every query of every panel."""
    for panel in dashboard()["panels"]:
        for target in panel.get("targets", []):
            yield panel["title"], target


def parse(expr: str) -> tuple[dict[str, set[str]], set[str]]:
    """The metrics a PromQL expression selects, each with the label names its matchers use, and the
    label names of its grouping clauses. Anything that is neither a known function nor a keyword nor a
    metric fails the test."""
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', expr)  # label values and strings
    text = re.sub(r"\[[^\]]*\]", "", text)  # range selectors ([5m], [$__rate_interval])
    grouped = {
        name.strip() for m in GROUPING.finditer(text) for name in m.group(2).split(",") if name.strip()
    }
    text = GROUPING.sub(" ", text)
    metrics: dict[str, set[str]] = {}
    for m in re.finditer(r"([A-Za-z_:][A-Za-z0-9_:]*)\s*(\{[^}]*\})?\s*(\()?", text):
        name, matchers, call = m.groups()
        if call:
            assert name in FUNCTIONS, f"unknown function {name} in {expr}"
        elif name in KEYWORDS:
            continue
        else:
            assert name.startswith("topogang_"), f"{name} in {expr} is not a topogang metric"
            labels = set(re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)", matchers or ""))
            metrics.setdefault(name, set()).update(labels)
    return metrics, grouped


def test_the_dashboard_is_an_importable_grafana_model_with_a_datasource_variable() -> None:
    doc = dashboard()
    assert doc["title"] and doc["uid"] and isinstance(doc["schemaVersion"], int)
    variables = {v["name"]: v for v in doc["templating"]["list"]}
    assert (
        variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    )
    assert variables["job"]["datasource"] == DATASOURCE
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    cells: set[tuple[int, int]] = set()
    for panel in doc["panels"]:
        g = panel["gridPos"]
        assert g["x"] >= 0 and g["w"] > 0 and g["x"] + g["w"] <= 24, panel["title"]
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not mine & cells, f"{panel['title']} overlaps another panel"
        cells |= mine
        if panel["type"] != "row":
            assert panel["datasource"] == DATASOURCE and panel["targets"], panel["title"]
    for title, target in queries():
        assert target["datasource"] == DATASOURCE and target["refId"] and target["expr"], title
    named = {name for _, target in queries() for name in parse(target["expr"])[0]}
    missing = {topic for topic, metric in TOPICS.items() if metric not in named}
    assert not missing, f"no panel shows {missing}"


@dataclass(frozen=True)
class Exported:
    """What /metrics declares (every sample name its families can have) and the label names of the samples
    it holds; a labelled family with no series yet (Events, GangReservation writes: Kubernetes mode only;
    internal errors) is declared without samples, so only its name can be checked."""

    declared: set[str]
    labels: dict[str, set[str]]


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Exported:
    """/metrics of a real extender after a filter, a bind, a preempt and a config reload."""
    config = tmp_path_factory.mktemp("dashboard") / "cluster.yaml"
    text = CONFIG.read_text(encoding="utf-8")
    config.write_text(text, encoding="utf-8")
    with reloading(config) as (_, client):
        nodes = kubesched.node_names(client.get(kubesched.PHYSICAL_CLUSTER).json())
        pods = Pods(client)
        spec = {"virtualCluster": "nlp", "priority": 0, "leafCellNumber": 8}
        assert schedule(client, pods.make("dash", "nlp", spec), nodes) is not None
        preempt = {"Pod": pods.make("pre", "nlp", spec), "NodeNameToMetaVictims": {}}
        assert client.post("/v1/extender/preempt", json=preempt).status_code == 200
        config.write_text(text.replace("cellNumber: 3", "cellNumber: 4", 1), encoding="utf-8")
        wait_for(client, "applied")
        body = client.get("/metrics").text
        pods.cleanup()
    out = Exported(set(), {})
    for family in text_string_to_metric_families(body):
        suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}.get(
            family.type, ("",)
        )
        out.declared.update(family.name + suffix for suffix in suffixes)
        for sample in family.samples:
            out.labels.setdefault(sample.name, set()).update(sample.labels)
    return out


def test_every_metric_and_label_the_dashboard_queries_is_exported(exported: Exported) -> None:
    # what the dashboard is for has series: a broken exporter would otherwise pass on names alone
    assert set(TOPICS.values()) <= set(exported.labels)
    for title, target in queries():
        metrics, grouped = parse(target["expr"])
        for name, labels in metrics.items():
            assert name in exported.declared, f"panel {title!r}: {name} is not exported by /metrics"
            if name in exported.labels:
                unknown = labels - exported.labels[name] - TARGET_LABELS
                assert not unknown, f"panel {title!r}: {name} has no label {unknown}"
        if all(n in exported.labels for n in metrics):
            known = set().union(*(exported.labels[n] for n in metrics)) | TARGET_LABELS
            assert grouped <= known, (
                f"panel {title!r} groups by {grouped - known}, not labels of {set(metrics)}"
            )
            shown = set(re.findall(r"\{\{\s*(\w+)\s*\}\}", target.get("legendFormat", "")))
            assert shown <= known, f"panel {title!r} legend shows {shown - known}"
