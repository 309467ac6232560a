"""The edge with a fake API server: PodGroups read through the cached lookup (Kubernetes mode)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from extender import wire
from extender.conventions import edge
from extender.conventions.common import ObjRef
from tests.conventions.manifests import coscheduling_podgroup, pod, volcano_podgroup
from tests.extender.helpers import Clock, scheduler
from topology.decisions import Member, UserError


def test_podgroups_are_read_from_their_api_paths_and_cached() -> None:
    objects = {
        "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/vision/podgroups/llm": coscheduling_podgroup(
            "llm", "vision", 2
        ),
        "/apis/scheduling.volcano.sh/v1beta1/namespaces/nlp/podgroups/vj": volcano_podgroup("vj", "nlp", 3),
    }
    asked: list[str] = []

    async def request(method: str, path: str) -> dict[str, Any] | None:
        asked.append(path)
        if path not in objects:
            raise RuntimeError("404 not found")
        return objects[path]

    clock = Clock()
    s = scheduler(clock=clock)
    edge.attach(s, edge.Conventions(edge.kube_fetch(request), clock=clock))

    def req(p: Mapping[str, Any]) -> Any:
        return asyncio.run(s.request_of(wire.parse_pod(dict(p))))

    a = req(pod("w0", gpus=8, labels={"scheduling.x-k8s.io/pod-group": "llm"}))
    assert (a.gang, a.request.members) == ("vision/llm", (Member(2, 8),))
    req(pod("w1", gpus=8, labels={"scheduling.x-k8s.io/pod-group": "llm"}))
    assert len(asked) == 1  # cached
    b = req(pod("v0", "nlp", gpus=4, annotations={"scheduling.k8s.io/group-name": "vj"}))
    assert b.request.members == (Member(3, 4),)
    with pytest.raises(UserError, match="cannot be read"):
        req(pod("x", gpus=8, labels={"scheduling.x-k8s.io/pod-group": "missing"}))
    assert edge.object_path(ObjRef("pod", "ns", "d")) == "/api/v1/namespaces/ns/pods/d"
