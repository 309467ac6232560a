"""The bound on gang keys (`identity.check_text`, 512 characters) takes every legitimate key and
bounds every key. A Kubernetes Workload API pod (scheduling.k8s.io, `spec.workloadRef`: `name` a DNS
subdomain of up to 253, `podGroup` and `podGroupReplicaKey` DNS labels of up to 63, the namespace a
DNS label of up to 63) has the key `<ns>/<name>/<podGroup>/<replicaKey>`, up to 445 characters: a
bound of 400 refused such pods. And a FrameworkController gang's key, joined from annotations each
checked alone, is bounded as a whole (808 characters passed before)."""

from __future__ import annotations

from extender.conventions.common import ObjRef
from extender.conventions.resolve import resolve
from tests.conventions.manifests import pod, workload


def test_longest_valid_workload_ref_is_a_gang() -> None:
    ns = "n" * 63  # a DNS label
    name = ".".join(["w" * 63] * 3) + "." + "w" * 61  # a DNS subdomain of 253 characters
    assert len(name) == 253
    group, replica = "g" * 63, "r" * 63  # DNS labels
    p = pod(
        "w-0",
        ns,
        gpus=8,
        spec={"workloadRef": {"name": name, "podGroup": group, "podGroupReplicaKey": replica}},
    )
    ref = ObjRef("workload", ns, name)
    got = resolve(
        p,
        "uid-1",
        ns,
        "w-0",
        namespace_vcs={ns: "vision"},
        objects={ref: workload(name, ns, group, 2)},
    )
    assert got is not None
    assert got.request.gang == f"{ns}/{name}/{group}/{replica}"


def test_a_framework_gangs_key_is_bounded_as_the_docs_say() -> None:
    """docs/security.md and docs/pod-spec.md: "a gang's key is at most 512 printable characters".
    A FrameworkController gang's key `<ns>/<framework>/<attempt>` is built from two tenant-written
    annotations, each checked alone against the bound, so the key itself reached 63+1+400+1+400."""
    import json

    import pytest

    from extender.gangs.podspec import pod_request
    from tests.extender.helpers import fc_annotations, pod
    from topology.decisions import UserError

    text = json.dumps(
        {
            "virtualCluster": "vision",
            "leafCellNumber": 8,
            "affinityGroup": {"name": "ignored", "members": [{"podNumber": 1, "leafCellNumber": 8}]},
        }
    )
    p = pod("u0", "fw-0", "vision", text)
    p["metadata"]["annotations"].update(fc_annotations("vision", "f" * 400, "a" * 400, "worker", 0))
    try:
        got = pod_request(p, "u0", "vision", "fw-0", namespace_vcs={"vision": "vision"})
    except UserError:
        return  # refused, naming the field: the documented bound holds
    pytest.fail(f"a FrameworkController gang's key of {len(got.request.name)} characters was accepted")
