"""The chart's default kube-scheduler is the Kubernetes version the e2e suite tests
(scripts/e2e/versions.sh K8S_VERSION): a minor apart, an install would run a scheduler nobody tested
with this extender. Read from the files, no helm needed."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def minor(version: str) -> tuple[int, int]:
    m = re.fullmatch(r"v?(\d+)\.(\d+)\.\d+", version)
    assert m, version
    return int(m.group(1)), int(m.group(2))


def e2e_version() -> str:
    text = (ROOT / "scripts" / "e2e" / "versions.sh").read_text()
    m = re.search(r"^K8S_VERSION=\$\{K8S_VERSION:-(v[\d.]+)\}", text, re.M)
    assert m, "K8S_VERSION default not found in scripts/e2e/versions.sh"
    return m.group(1)


def test_chart_default_kube_scheduler_is_the_tested_minor() -> None:
    values = yaml.safe_load((ROOT / "deploy" / "helm" / "topogang" / "values.yaml").read_text())
    image = values["scheduler"]["image"]
    assert image["repository"] == "registry.k8s.io/kube-scheduler"
    assert minor(image["tag"]) == minor(e2e_version()), (image["tag"], e2e_version())


def test_rendered_manifest_uses_the_tested_minor() -> None:
    text = (ROOT / "deploy" / "scheduler.yaml").read_text()
    (tag,) = re.findall(r'image: "registry\.k8s\.io/kube-scheduler:(v[\d.]+)"', text)
    assert minor(tag) == minor(e2e_version())
