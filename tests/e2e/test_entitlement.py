"""Tenants stay in their own lane, end to end: the real extender behind the real kube-scheduler, with
the config edited (hot reload) to give two team namespaces their entitlements and close every other
namespace (`defaultEntitlement: opportunistic`; the e2e session itself runs in mode open).

Team A may use nlp up to priority 500; team B may use research up to priority 50. Team A's gang takes
its priority from its PriorityClass and binds whole; pods of team B naming team A's gang, nlp and
priority 1000 stay Pending with a NotEntitled Warning Event, and team A's gang keeps running,
unpreempted, with no member of team B.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from tests.e2e.conftest import E2ECluster, Extender, priority_classes
from tests.e2e.helpers import (
    SPEC,
    assert_whole_gang,
    delete_pods,
    gang_pod,
    hold_for,
    none_bound,
    object_names,
    pods_of,
    wait_gone,
    wait_running,
    wait_until,
)

pytestmark = pytest.mark.e2e

TEAM_CLASS = "e2e-topogang-team-a"  # value 300: team A's gangs' priority, from Kubernetes


def config_file(ext: Extender) -> Path:
    return Path(ext.argv[ext.argv.index("--config") + 1])


def applied(ext: Extender, before: object) -> bool:
    status = ext.get("/v1/config")
    return bool(status["lastResult"] == "applied" and status["appliedHash"] != before)


@pytest.fixture
def teams(e2e_cluster: E2ECluster, extender: Extender, gang_ns: str) -> Iterator[tuple[str, str]]:
    """(team A's namespace, team B's namespace), entitled by a config edit that is undone afterwards."""
    core = e2e_cluster.core
    team_b = f"e2e-b-{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace.model_validate({"metadata": {"name": team_b}}))
    path = config_file(extender)
    original = path.read_text(encoding="utf-8")
    entitled = original.rstrip("\n") + (
        "\n  defaultEntitlement: opportunistic\n  tenants:\n"
        f"    {gang_ns}: {{virtualClusters: [nlp], maxPriority: 500}}\n"
        f"    {team_b}: {{virtualClusters: [research], maxPriority: 50}}\n"
    )
    before = extender.get("/v1/config")["appliedHash"]
    path.write_text(entitled, encoding="utf-8")
    wait_until("the entitlements applied", lambda: applied(extender, before), 60)
    try:
        yield gang_ns, team_b
    finally:
        names = object_names(core.list_namespaced_pod(team_b).items)
        delete_pods(core, team_b, names)
        wait_gone(core, team_b, names, 60)
        now = extender.get("/v1/config")["appliedHash"]
        path.write_text(original, encoding="utf-8")
        wait_until("the original config applied again", lambda: applied(extender, now), 60)


def unprioritized(pod: Any) -> Any:
    """The pod with no `priority` in its scheduling spec: its PriorityClass gives it."""
    spec = yaml.safe_load(pod.metadata.annotations[SPEC])
    del spec["priority"]
    pod.metadata.annotations[SPEC] = yaml.safe_dump(spec)
    return pod


def not_entitled_event(core: client.CoreV1Api, ns: str, name: str) -> str | None:
    for e in core.list_namespaced_event(ns).items:
        if e.reason == "NotEntitled" and e.involved_object.name == name and e.type == "Warning":
            return str(e.message)
    return None


def test_a_tenant_cannot_take_another_teams_vc_and_priority_comes_from_the_class(
    e2e_cluster: E2ECluster, extender: Extender, teams: tuple[str, str]
) -> None:
    core = e2e_cluster.core
    team_a, team_b = teams
    priority_classes(e2e_cluster, {TEAM_CLASS: 300})
    names = [f"train-{i}" for i in range(3)]
    for n in names:
        pod = gang_pod(
            n, gang=f"{team_a}/train", vc="nlp", members=[(3, 8)], gpus=8, priority_class=TEAM_CLASS
        )
        core.create_namespaced_pod(team_a, unprioritized(pod))
    running = wait_running(core, team_a, names)
    assert_whole_gang(running, 8)
    groups = extender.get("/v1/inspect/affinitygroups/")["items"]
    (train,) = [
        g for g in groups if g["metadata"]["name"].endswith("/train") and team_a in g["metadata"]["name"]
    ]
    assert train["status"]["priority"] == 300 and train["status"]["vc"] == "nlp"

    take = ["take-0", "take-1"]
    for n in take:
        core.create_namespaced_pod(
            # team A's gang name, team A's VC, a priority above team B's ceiling (and team A's)
            team_b,
            gang_pod(n, gang=f"{team_a}/train", vc="nlp", members=[(2, 8)], gpus=8, priority=1000),
        )
    message = wait_until("a NotEntitled event", lambda: not_entitled_event(core, team_b, "take-0"), 60)
    for words in (team_b, "'nlp'", "1000", f"topogang.tenants.{team_b}.maxPriority"):
        assert words in message, message
    hold_for("the refused pods stay Pending", lambda: none_bound(core, team_b, take), 5)
    now = pods_of(core, team_a, names)
    assert {n: (p.node, p.gpus) for n, p in now.items()} == {n: (p.node, p.gpus) for n, p in running.items()}
    assert not any(
        team_b in g["metadata"]["name"] for g in extender.get("/v1/inspect/affinitygroups/")["items"]
    )
    # the ledger's gang of team A lists team A's three pods and nobody else
    ledger = extender.get(f"/v1/gangs/{team_a}/train")
    assert sorted(m["podName"] for m in ledger["members"]) == sorted(names), ledger
