"""The chart's optional Prometheus Operator objects (values `monitoring.*`, template monitoring.yaml): off by
default; when on, `helm lint --strict` is clean, the ServiceMonitor scrapes the extender Service's port,
and every alert the issue asks for is there, its PromQL naming only metric families (and their labels)
that the code registers (the same scan that holds docs/metrics.md to the code), with the thresholds the
values set."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from scripts import manifests
from tests.deploy.test_chart import EXAMPLE, one, render
from tests.extender.test_metrics_doc import DOC, registered

CONFIG = ("--set-file", f"config={EXAMPLE}")
ON = ("--set", "monitoring.serviceMonitor.enabled=true", "--set", "monitoring.prometheusRule.enabled=true")
# what each alert is for (the list), by alert name
ALERTS = {
    "TopogangExtenderNotReady": "extender not ready",
    "TopogangNoLeader": "no leader",
    "TopogangVerbLatencyHigh": "verb p99 high",
    "TopogangGangsWaiting": "gangs waiting past a threshold",
    "TopogangReservationExpiriesClimbing": "reservation expiries climbing",
    "TopogangPromotionWritesFailing": "promotion write-backs failing",
}
FUNCTIONS = {"sum", "max", "min", "rate", "increase", "histogram_quantile", "absent"}
KEYWORDS = {"and", "or", "unless", "bool"}
TARGET_LABELS = {"job", "namespace", "instance", "pod", "service"}  # added by the scrape
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


def family_types() -> dict[str, str]:
    """family -> its type (counter, gauge, histogram), from docs/metrics.md's table."""
    out = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        m = re.match(r"\|\s*`(topogang_\w+)`\s*\|\s*(\w+)\s*\|", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def series_names() -> dict[str, tuple[str, tuple[str, ...]]]:
    """every series name Prometheus sees -> (family, the family's labels)."""
    types, families = family_types(), registered()
    return {
        family + suffix: (family, labels)
        for family, labels in families.items()
        for suffix in SUFFIXES[types[family]]
    }


def selected(expr: str) -> dict[str, set[str]]:
    """The series an expression selects, each with the label names its matchers and groupings use.
    Anything that is neither a known function, a keyword, nor a topogang series fails the test."""
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', expr)
    text = re.sub(r"\[[^\]]*\]", "", text)
    grouped = {
        n.strip() for m in re.finditer(r"\b(?:by|without)\s*\(([^)]*)\)", text) for n in m.group(1).split(",")
    }
    text = re.sub(r"\b(?:by|without)\s*\([^)]*\)", " ", text)
    out: dict[str, set[str]] = {}
    for m in re.finditer(r"([A-Za-z_:][A-Za-z0-9_:]*)\s*(\{[^}]*\})?\s*(\()?", text):
        name, matchers, call = m.groups()
        if call:
            assert name in FUNCTIONS, f"unknown function {name} in {expr}"
        elif name not in KEYWORDS:
            labels = set(re.findall(r"([A-Za-z_]\w*)\s*(?:=~|!~|!=|=)", matchers or ""))
            out.setdefault(name, set()).update(labels | (grouped - {"le"}))
    return out


def monitoring(helm: Path, *values: str) -> list[dict[str, Any]]:
    return [d for d in render(helm, *CONFIG, *values) if d["kind"] in ("ServiceMonitor", "PrometheusRule")]


def rules(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    (group,) = one(docs, "PrometheusRule")["spec"]["groups"]
    return {r["alert"]: r for r in group["rules"]}


def test_off_by_default(helm: Path) -> None:
    assert monitoring(helm) == []


def test_lint_is_clean_with_both_on(helm: Path) -> None:
    out = manifests.helm(helm, "lint", "--strict", str(manifests.CHART), *CONFIG, *ON)
    assert "1 chart(s) linted, 0 chart(s) failed" in out
    assert "[WARNING]" not in out and "[ERROR]" not in out, out


def test_the_service_monitor_scrapes_the_extender_service(helm: Path) -> None:
    docs = render(helm, *CONFIG, *ON, "--set", "monitoring.serviceMonitor.labels.release=prom")
    monitor, service = one(docs, "ServiceMonitor"), one(docs, "Service", "topogang-extender")
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == [service["metadata"]["namespace"]]
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    # the read port is HTTPS by default, checked with the CA the chart publishes, under the Service's name
    assert (endpoint["path"], endpoint["scheme"]) == ("/metrics", "https")
    ca = one(docs, "ConfigMap", "topogang-ca")
    assert endpoint["tlsConfig"]["ca"]["configMap"] == {"name": ca["metadata"]["name"], "key": "ca.crt"}
    assert endpoint["tlsConfig"]["serverName"].startswith(service["metadata"]["name"] + ".")
    own = render(helm, *CONFIG, *ON, "--set", "extender.tls.secretName=s")
    assert (
        "tlsConfig" not in one(own, "ServiceMonitor")["spec"]["endpoints"][0]
    )  # the admin's CA: theirs to say
    plain = render(helm, *CONFIG, *ON, "--set", "extender.tls.enabled=false")
    assert one(plain, "ServiceMonitor")["spec"]["endpoints"][0]["scheme"] == "http"


def test_every_alert_uses_only_registered_families_and_their_labels(helm: Path) -> None:
    got = rules(monitoring(helm, *ON))
    assert set(got) == set(ALERTS), f"missing: {set(ALERTS) - set(got)}, unexpected: {set(got) - set(ALERTS)}"
    known = series_names()
    for alert, rule in got.items():
        series = selected(rule["expr"])
        assert series, f"{alert} selects no series"
        for name, labels in series.items():
            assert name in known, f"{alert}: {name} is no series of a registered family ({rule['expr']})"
            family, own = known[name]
            unknown = labels - set(own) - TARGET_LABELS
            assert not unknown, f"{alert}: {family} has no label {unknown}"
        assert rule["labels"]["severity"] in ("critical", "warning") and rule["annotations"]["summary"]


def test_thresholds_and_selector_come_from_the_values(helm: Path) -> None:
    t = "monitoring.prometheusRule.thresholds"
    got = rules(
        monitoring(
            helm, *ON,
            "--set", f"{t}.verbP99Seconds=2.5", "--set", f"{t}.gangsWaitingFor=1h",
            "--set", f"{t}.reservationExpiries=12", "--set", "namespace=gpu",
            "--set", 'monitoring.prometheusRule.selector=cluster="a"',
        )
    )  # fmt: skip
    assert got["TopogangVerbLatencyHigh"]["expr"].endswith("> 2.5")
    assert got["TopogangGangsWaiting"]["for"] == "1h"
    assert got["TopogangReservationExpiriesClimbing"]["expr"].endswith("> 12")
    assert all('{cluster="a"' in r["expr"] for r in got.values())
    default = rules(monitoring(helm, *ON, "--set", "namespace=gpu"))
    assert all('job="topogang-extender",namespace="gpu"' in r["expr"] for r in default.values())


@pytest.mark.parametrize(
    ("expr", "error"),
    [
        ("max(topogang_readyy) < 1", "no series of a registered family"),
        ('sum(topogang_gangs{vc="a"}) > 0', "has no label {'vc'}"),
        ("sum(increase(topogang_promotion_writes[5m]))", "no series of a registered family"),
    ],
)
def test_the_check_catches_a_wrong_name_or_label(expr: str, error: str) -> None:
    known = series_names()
    with pytest.raises(AssertionError, match=re.escape(error)):
        for name, labels in selected(expr).items():
            assert name in known, f"{name} is no series of a registered family"
            unknown = labels - set(known[name][1]) - TARGET_LABELS
            assert not unknown, f"has no label {unknown}"
