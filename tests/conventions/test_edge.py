"""The edge with a fake API server: PodGroups read through the cached lookup (Kubernetes mode)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from extender.conventions import edge
from extender.conventions.common import ObjRef
from extender.http import wire
from loadtest.kubefake import FakeApiServer, FakeKube, Fault
from tests.conventions.manifests import coscheduling_podgroup, pod, podgroup, volcano_podgroup
from tests.extender.helpers import Clock, scheduler
from topology.decisions import Member, UserError

COSCHEDULING = "/apis/scheduling.x-k8s.io/v1alpha1"
VOLCANO = "/apis/scheduling.volcano.sh/v1beta1"


def api(objects: Mapping[str, Mapping[str, Any]]) -> FakeKube:
    """The in-memory API server holding these objects by path; every request recorded."""
    kube = FakeKube(FakeApiServer(clock=lambda: 0.0), record=True)
    for path, obj in objects.items():
        kube.server.put(path, obj)
    return kube


def test_podgroups_are_read_from_their_api_paths_and_cached() -> None:
    kube = api(
        {
            f"{COSCHEDULING}/namespaces/vision/podgroups/llm": coscheduling_podgroup("llm", "vision", 2),
            "/apis/scheduling.volcano.sh/v1beta1/namespaces/nlp/podgroups/vj": volcano_podgroup(
                "vj", "nlp", 3
            ),
        }
    )
    kube.inject(Fault("GET", "/podgroups/missing$", "error", status=500))

    def asked() -> list[str]:
        return [path for method, path, _ in kube.calls if method == "GET"]

    clock = Clock()
    s = scheduler(clock=clock, conventions=edge.Conventions(edge.kube_fetch(kube.request), clock=clock))

    def req(p: Mapping[str, Any]) -> Any:
        return asyncio.run(s.request_of(wire.parse_pod(dict(p))))

    a = req(pod("w0", gpus=8, labels={"scheduling.x-k8s.io/pod-group": "llm"}))
    assert (a.gang, a.request.members) == ("vision/llm", (Member(2, 8),))
    req(pod("w1", gpus=8, labels={"scheduling.x-k8s.io/pod-group": "llm"}))
    assert len(asked()) == 1  # cached
    b = req(pod("v0", "nlp", gpus=4, annotations={"scheduling.k8s.io/group-name": "vj"}))
    assert b.request.members == (Member(3, 4),)
    with pytest.raises(UserError, match="cannot be read"):
        req(pod("x", gpus=8, labels={"scheduling.x-k8s.io/pod-group": "missing"}))
    assert edge.object_path(ObjRef("pod", "ns", "d")) == "/api/v1/namespaces/ns/pods/d"


def test_what_the_conventions_remember_is_forgotten_once_it_no_longer_matters() -> None:
    """PodGroup reads past their TTL and the timeouts of gangs no longer placed are dropped, so the
    memory and each tick's work follow the gangs placed now, not every gang ever seen; a gang whose
    member was filtered since the last sweep keeps its timeout even if it is not placed (yet)."""
    path = f"{COSCHEDULING}/namespaces/vision/podgroups/"
    kube = api({path + name: coscheduling_podgroup(name, "vision", 1) for name in ("old", "kept", "new")})

    async def go() -> None:
        clock = Clock()
        conv = edge.Conventions(edge.kube_fetch(kube.request), clock=clock)
        s = scheduler(clock=clock, conventions=conv)

        async def filter_(name: str) -> None:
            p = pod(f"{name}-0", gpus=1, labels={"scheduling.x-k8s.io/pod-group": name}, uid=f"u-{name}")
            await s.filter(wire.parse_extender_args({"Pod": p, "NodeNames": list(s.core.topo.node_names)}))

        await filter_("old")
        await filter_("kept")
        assert s.core.delete_gang("vision/old") is not None  # its pods went away
        assert list(conv.hard) == ["vision/old", "vision/kept"] and len(conv._objects) == 2
        clock.t += edge.OBJECT_TTL + 1
        await conv.tick(s)  # both were filtered since the last sweep: kept this time
        assert list(conv.hard) == ["vision/old", "vision/kept"]
        clock.t += edge.OBJECT_TTL + 1
        await filter_("new")
        assert s.core.delete_gang("vision/new") is not None  # filtered, not placed (yet)
        await conv.tick(s)
        assert list(conv.hard) == ["vision/kept", "vision/new"]  # old: gone; kept: placed
        assert [r.name for r in conv._objects] == ["new"]  # the others are past their TTL
        clock.t += edge.OBJECT_TTL + 1
        await conv.tick(s)
        assert list(conv.hard) == ["vision/kept"] and conv._objects == {}

    asyncio.run(go())


def test_podgroups_are_read_as_v1beta1_then_v1alpha2_and_their_topology_key_checked() -> None:
    """1.37 serves PodGroups as v1beta1, 1.36 as v1alpha2 (a 404 for the other): either is read.
    A topology key naming a level the cell hierarchy has becomes the gang's required level; one it
    lacks is the user's error, in the PodGroup's words, naming the levels there are."""
    beta, alpha = "/apis/scheduling.k8s.io/v1beta1", "/apis/scheduling.k8s.io/v1alpha2"
    kube = api(
        {
            f"{beta}/namespaces/vision/podgroups/new": podgroup("new", "vision", 4, topology=["x.io/rack"]),
            f"{alpha}/namespaces/vision/podgroups/old": podgroup(
                "old", "vision", 2, version="scheduling.k8s.io/v1alpha2"
            ),
            f"{beta}/namespaces/vision/podgroups/zoned": podgroup(
                "zoned", "vision", 2, topology=["topology.kubernetes.io/zone"]
            ),
        }
    )
    clock = Clock()
    s = scheduler(clock=clock, conventions=edge.Conventions(edge.kube_fetch(kube.request), clock=clock))

    def req(group: str) -> Any:
        p = pod(f"{group}-0", gpus=8, spec={"schedulingGroup": {"podGroupName": group}})
        return asyncio.run(s.request_of(wire.parse_pod(p)))

    new = req("new")
    assert (new.gang, new.request.members, new.request.within_level) == (
        "vision/new",
        (Member(4, 8),),
        "rack",
    )
    old = req("old")
    assert (old.gang, old.request.members, old.request.within_level) == ("vision/old", (Member(2, 8),), None)
    asked = [path for method, path, _ in kube.calls if method == "GET"]
    assert asked == [
        f"{beta}/namespaces/vision/podgroups/new",
        f"{beta}/namespaces/vision/podgroups/old",
        f"{alpha}/namespaces/vision/podgroups/old",
    ]
    with pytest.raises(UserError) as err:
        req("zoned")
    assert err.value.field == "PodGroup vision/zoned spec.schedulingConstraints.topology[0].key"
    assert "'topology.kubernetes.io/zone' cannot be a required level" in err.value.message
    assert "A100-NODE, A100-RACK" in err.value.message
