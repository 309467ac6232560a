"""Kubernetes' `basic` pod group policy: upstream schedules each pod of such a group on its own, with
standard Kubernetes behaviour, so no pod may be held to where another pod of its group went. Only a
topology constraint ties them together (upstream keeps even a basic group in one domain of its key).
"""

from __future__ import annotations

import asyncio
from typing import Any

from extender.conventions import edge
from extender.conventions.common import ObjRef
from extender.http import wire
from extender.http.verbs import Scheduler
from loadtest.kubefake import FakeApiServer, FakeKube
from tests.conventions.manifests import pod, podgroup, workload
from tests.conventions.test_resolve import member_of, run
from tests.extender.helpers import Clock, place, scheduler
from topology.decisions import Member

BETA = "/apis/scheduling.k8s.io/v1beta1/namespaces/vision/podgroups"
RACK = "topology.kubernetes.io/rack"


def test_a_basic_podgroups_pods_are_each_their_own_one_pod_gang() -> None:
    """Each pod of a basic PodGroup (1.36/1.37) or of a 1.35 Workload's basic pod group is the
    one-pod gang `pod:<pod>` of a plain GPU pod: not the group's gang, not elastic, so the edge never
    narrows it to another pod's domain nor keeps a group timeout for it."""
    ref = ObjRef("podgroup", "vision", "web")
    for name in ("b0", "b1"):
        p = pod(name, gpus=8, spec={"schedulingGroup": {"podGroupName": "web"}})
        r = run(p, {ref: podgroup("web", "vision", None, priority=50)})
        req = r.request.request
        assert (r.request.gang, req.members, req.within_level, req.priority) == (
            f"vision/pod:{name}",
            (Member(1, 8),),
            None,
            50,
        )
        assert (r.source, r.elastic, r.size) == ("workload", False, 1)
    w = pod("w-3", gpus=4, spec={"workloadRef": {"name": "serve", "podGroup": "replicas"}})
    r = run(w, {ObjRef("workload", "vision", "serve"): workload("serve", "vision", "replicas", None)})
    assert (r.request.gang, r.request.request.members, r.elastic) == (
        "vision/pod:w-3",
        (Member(1, 4),),
        False,
    )


def test_the_gang_policy_and_a_basic_group_with_a_topology_key_still_share_one_gang() -> None:
    """A gang policy is one elastic gang of minCount pods, as before. A basic group with a topology
    key keeps its pods in one domain of the key, as upstream does: one gang of one pod, elastic,
    whose later pods are extras in its domain."""
    ref = ObjRef("podgroup", "vision", "g")
    gang = run(member_of("g"), {ref: podgroup("g", "vision", 3)})
    assert (gang.request.gang, gang.request.request.members, gang.elastic) == (
        "vision/g",
        (Member(3, 8),),
        True,
    )
    racked = run(member_of("g"), {ref: podgroup("g", "vision", None, topology=[RACK])})
    req = racked.request.request
    assert (racked.request.gang, req.members, req.within_level, racked.elastic) == (
        "vision/g",
        (Member(1, 8),),
        "rack",
        True,
    )


def _scheduler(*groups: dict[str, Any]) -> tuple[Scheduler, edge.Conventions]:
    """A scheduler on the example cluster whose conventions read these PodGroups from an API server."""
    kube = FakeKube(FakeApiServer(clock=lambda: 0.0))
    for pg in groups:
        kube.server.put(f"{BETA}/{pg['metadata']['name']}", pg)
    clock = Clock()
    conv = edge.Conventions(edge.kube_fetch(kube.request), clock=clock)
    return scheduler(clock=clock, conventions=conv), conv


async def _schedule(s: Scheduler, group: str, count: int) -> list[tuple[str, str | None, str]]:
    """The group's pods of 8 GPUs through kube-scheduler's cycles, one by one: (gang, node, why)."""
    out = []
    for i in range(count):
        p = pod(
            f"{group}-{i}", gpus=8, spec={"schedulingGroup": {"podGroupName": group}}, uid=f"u-{group}-{i}"
        )
        pr = await s.request_of(wire.parse_pod(p))
        reply, node = await place(s, p)
        why = " ".join((reply.get("FailedAndUnresolvableNodes") or reply.get("FailedNodes") or {}).values())
        out.append((pr.gang, node, why))
    return out


def test_a_basic_podgroups_pods_go_wherever_their_vc_has_room() -> None:
    """Six 8-GPU pods of one basic PodGroup in VC vision (quota 48 GPUs) all bind, the later ones in
    another rack once the first pods' rack has no room for the VC, none held to the first pod's
    rack; the ledger has each pod's own gang and none for the PodGroup."""
    s, conv = _scheduler(podgroup("web", "vision", None))
    got = asyncio.run(_schedule(s, "web", 6))
    assert all(node is not None for _, node, _ in got), got
    assert [gang for gang, _, _ in got] == [f"vision/pod:web-{i}" for i in range(6)]
    racks = {node.rsplit("-", 1)[0] for _, node, _ in got if node is not None}
    assert len(racks) > 1, got  # the first pod's rack alone could not hold the group
    assert s.gang_ledger.resolve(s.core, "vision", "web", None) is None
    assert s.gang_ledger.resolve(s.core, "vision", "pod:web-5", None) is not None
    assert list(conv.hard) == [] and list(conv.soft) == []


def test_a_basic_podgroup_with_a_topology_key_stays_in_its_first_pods_domain() -> None:
    """Upstream keeps a basic group with a topology constraint in one domain of its key: later pods
    go to the first pod's rack, and wait while it is full although another rack has room."""
    s, conv = _scheduler(podgroup("racked", "vision", None, topology=[RACK]))
    got = asyncio.run(_schedule(s, "racked", 4))
    placed = [node for _, node, _ in got if node is not None]
    assert got[0][0] == "vision/racked" and placed and len({n.rsplit("-", 1)[0] for n in placed}) == 1
    waiting = [(gang, why) for gang, node, why in got if node is None]
    assert waiting and all(gang.startswith("vision/racked/extra/") for gang, _ in waiting), got
    assert all("[NoSuggestedNode]" in why for _, why in waiting), got
    assert list(conv.hard) == ["vision/racked"]


HOSTNAME = "kubernetes.io/hostname"


def test_a_group_keyed_by_hostname_keeps_its_extras_on_its_first_pods_node() -> None:
    """The key's domain is the extras' domain: with `kubernetes.io/hostname` every pod of the group
    must share the first pod's node (upstream: one value of the key). The domain was never smaller
    than a rack, so a later 4-GPU pod went to another node of the rack; now a third pod, which the
    node has no room for, waits."""

    async def go() -> list[tuple[str, str | None, str]]:
        out = []
        for i in range(3):
            p = pod(f"h-{i}", gpus=4, spec={"schedulingGroup": {"podGroupName": "h"}}, uid=f"u-h-{i}")
            pr = await s.request_of(wire.parse_pod(p))
            reply, node = await place(s, p)
            why = " ".join(
                (reply.get("FailedAndUnresolvableNodes") or reply.get("FailedNodes") or {}).values()
            )
            out.append((pr.gang, node, why))
        return out

    s, _ = _scheduler(podgroup("h", "vision", None, topology=[HOSTNAME]))
    got = asyncio.run(go())
    (first, n0, _), (second, n1, _), (_, n2, why) = got
    assert first == "vision/h" and n0 is not None and second.startswith("vision/h/extra/")
    assert n1 == n0, got  # the same node: 8 GPUs, two 4-GPU pods
    assert n2 is None and "[NoSuggestedNode]" in why, got  # a third has no room on that node
