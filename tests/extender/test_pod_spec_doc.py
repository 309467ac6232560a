"""docs/pod-spec.md lists every field the pod contract reads: a field added to the parser
(`extender/gangs/podspec.py`, `specfields.py`) or a key added to a convention
(`extender/conventions/`) without a line in the doc fails here."""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType

from extender.conventions import common, coscheduling, spark, volcano, workload, yunikorn
from extender.gangs import optin, podspec, specfields

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "pod-spec.md"


def documented() -> set[str]:
    """Every backticked name in the doc, whole and split at dots, `[]` and spaces."""
    out: set[str] = set()
    for token in re.findall(r"`([^`]+)`", DOC.read_text(encoding="utf-8")):
        out.add(token)
        out.update(p for p in re.split(r"\[\]|[\s,()]|(?<![a-z0-9-])\.|\.(?=[A-Za-z])", token) if p)
    return out


def spec_fields() -> set[str]:
    """The spec annotation's fields as the parser reads them: `spec_int/spec_str/spec_bool(spec,
    "field", …)` (`extender/gangs/specfields.py`, the members' fields there too),
    `spec.get("field")` / `group.get("field")`, and the renamed pre-v0.3 fields."""
    src = "".join(Path(str(m.__file__)).read_text(encoding="utf-8") for m in (podspec, specfields))
    found = set(re.findall(r'\bspec_(?:int|str|bool)\(\w+,\s*"(\w+)"', src))
    found |= set(re.findall(r'\b(?:spec|group)\.get\("(\w+)"\)', src))
    found |= set(re.findall(r'\("(gpu\w+)",\s*"\w+"\)', src))
    return found


def _keys(module: ModuleType) -> set[str]:
    """A module's public constants that name a label, annotation, resource or Spark conf key (API
    versions and internal numbers are not a tenant's to write)."""
    out: set[str] = set()
    for name, value in vars(module).items():
        if not name.isupper() or "VERSION" in name or name in ("KINDS", "ORDER", "PATHS"):
            continue
        values = (
            [value] if isinstance(value, str) else list(value) if isinstance(value, tuple | frozenset) else []
        )
        out.update(v for v in values if isinstance(v, str))
    return out


def pod_keys() -> set[str]:
    keys = {k for m in (common, coscheduling, optin, spark, volcano, workload, yunikorn) for k in _keys(m)}
    keys |= set(podspec.ENABLE_RESOURCES) | set(podspec.SPEC_ANNOTATIONS)
    keys |= {
        podspec.FC_NAMESPACE,
        podspec.FC_FRAMEWORK,
        podspec.FC_ATTEMPT,
        podspec.FC_ROLE,
        podspec.FC_INDEX,
    }
    keys |= {"spec.workloadRef", "spec.schedulingGroup.podGroupName"}  # workload.py's pod fields
    return keys


def test_every_spec_field_the_parser_reads_is_documented() -> None:
    fields = spec_fields()
    assert {
        "virtualCluster",
        "leafCellNumber",
        "affinityGroup",
        "taskRole",
        "gpuType",
    } <= fields  # the scan works
    assert sorted(fields - documented()) == []


def test_every_pod_key_of_the_conventions_is_documented() -> None:
    keys = pod_keys()
    assert {"scheduling.x-k8s.io/pod-group", "FC_TASK_INDEX", "topogang.io/min-member"} <= keys
    assert sorted(keys - documented()) == []


def test_a_field_missing_from_the_doc_is_caught() -> None:
    assert "promoteWhenQuota" in documented()
    assert "noSuchField" not in documented()
