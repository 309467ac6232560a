"""Every pod template in examples/ parses with the pod contract into the gang its comments promise,
against the bundled example cluster's VCs."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from config import load_config
from extender.conventions import resolve
from extender.conventions.common import ObjRef
from extender.gangs.podspec import PodRequest, is_enabled, pod_request, spec_text
from extender.standalone import EXAMPLE_CONFIG

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
# API group of each kind of object a convention reads
GROUPS = {
    "coscheduling": "scheduling.x-k8s.io/",
    "volcano": "scheduling.volcano.sh/",
    "podgroup": "scheduling.k8s.io/",
    "workload": "scheduling.k8s.io/",
}


def templates(doc: Mapping[str, Any]) -> Iterator[tuple[dict[str, Any], dict[str, str]]]:
    """(pod template, annotations a controller adds) for each pod a workload object creates."""
    kind, spec = doc["kind"], doc.get("spec", {})
    if kind == "Pod":
        yield dict(doc), {}
    elif kind == "Job":
        yield spec["template"], {}
    elif kind == "JobSet":
        for rj in spec["replicatedJobs"]:
            yield rj["template"]["spec"]["template"], {}
    elif kind == "Framework":
        ns, name = doc["metadata"]["namespace"], doc["metadata"]["name"]
        for role in spec["taskRoles"]:
            fc = {
                "FC_FRAMEWORK_NAMESPACE": ns,
                "FC_FRAMEWORK_NAME": name,
                "FC_FRAMEWORK_ATTEMPT_INSTANCE_UID": "attempt-0",
                "FC_TASKROLE_NAME": role["name"],
                "FC_TASK_INDEX": "0",
            }
            yield role["task"]["pod"], fc


def as_pod(template: Mapping[str, Any], owner: Mapping[str, Any], extra: Mapping[str, str]) -> dict[str, Any]:
    meta = dict(template.get("metadata") or {})
    meta.update(
        uid=f"uid-{owner['metadata']['name']}",
        name=f"{owner['metadata']['name']}-0",
        namespace=owner["metadata"]["namespace"],
        annotations={**(meta.get("annotations") or {}), **extra},
    )
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": template["spec"]}


def parse(pod: dict[str, Any], docs: list[dict[str, Any]]) -> PodRequest:
    m = pod["metadata"]
    vcs = load_config(EXAMPLE_CONFIG).extras.namespace_virtual_clusters
    if spec_text(pod)[1] is not None:
        return pod_request(pod, m["uid"], m["namespace"], m["name"], namespace_vcs=vcs)
    refs = resolve.references(pod, m["namespace"])
    objects: dict[ObjRef, Mapping[str, Any] | None] = {
        ref: next(
            (
                d
                for d in docs
                if d["metadata"]["name"] == ref.name and d["apiVersion"].startswith(GROUPS.get(ref.kind, "-"))
            ),
            None,
        )
        for ref in refs
    }
    got = resolve.resolve(pod, m["uid"], m["namespace"], m["name"], namespace_vcs=vcs, objects=objects)
    assert got is not None, "no convention applies"
    return got.request


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_pods_parse_into_a_gang_of_a_known_vc(path: Path) -> None:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    vcs = {v.name for v in load_config(EXAMPLE_CONFIG).spec.virtual_clusters}
    seen = 0
    for doc in docs:
        for template, extra in templates(doc):
            pod = as_pod(template, doc, extra)
            assert is_enabled(pod), f"{path.name}: {doc['kind']} pods do not opt in"
            pr = parse(pod, docs)
            assert pr.request.vc in vcs
            assert pr.leaf_number >= 1
            assert any(m.leaf_number == pr.leaf_number for m in pr.request.members)
            seen += 1
    assert seen >= 1, f"{path.name} has no pod template"


def test_the_examples_cover_each_kind_of_workload() -> None:
    kinds = {
        d["kind"] + ":" + d["apiVersion"].split("/")[0]
        for p in EXAMPLES
        for d in yaml.safe_load_all(p.read_text())
        if d
    }
    for want in (
        "Pod:v1",
        "Job:batch",
        "JobSet:jobset.x-k8s.io",
        "Framework:frameworkcontroller.microsoft.com",
        "PodGroup:scheduling.k8s.io",
        "PodGroup:scheduling.volcano.sh",
        "PodGroup:scheduling.x-k8s.io",
    ):
        assert want in kinds


def test_gang_shapes_match_the_comments() -> None:
    def gang(name: str) -> PodRequest:
        path = ROOT / "examples" / name
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        doc = next(d for d in docs if d["kind"] not in ("PodGroup",))
        template, extra = next(templates(doc))
        return parse(as_pod(template, doc, extra), docs)

    assert gang("indexed-job.yaml").request.members[0].pod_number == 4
    assert gang("podgroup-kubernetes.yaml").request.within_level == "rack"
    assert gang("podgroup-volcano.yaml").request.members[0].pod_number == 2
    assert gang("podgroup-coscheduling.yaml").request.members[0].pod_number == 3
    fw = gang("framework.yaml")
    assert fw.gang == "nlp/bert/attempt-0" and fw.slot_key == "worker/0"
    assert sum(m.pod_number for m in gang("jobset.yaml").request.members) == 5
