"""Each convention's manifests through the extender verbs of the real standalone server."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

from tests.conventions.conftest import Made
from tests.conventions.manifests import task_groups
from tests.integration.test_server import bind, filter_, schedule
from tests.polling import poll

COSCHED = "scheduling.x-k8s.io/pod-group"
VOLCANO = "scheduling.k8s.io/group-name"
MIN = "topogang.io/min-member"


def group(client: httpx.Client, name: str) -> dict[str, Any] | None:
    r = client.get(f"/v1/inspect/affinitygroups/{name}")
    if r.status_code == 404:
        return None
    assert r.status_code == 200, r.text
    doc: dict[str, Any] = r.json()
    return doc


def shape(doc: dict[str, Any] | None) -> list[int]:
    assert doc is not None
    return sorted(len(s["leafCellIndices"]) for s in doc["status"]["slots"])


def bindings(client: httpx.Client) -> dict[str, Any]:
    doc: dict[str, Any] = client.get("/v1/standalone/bindings").json()
    return doc


def eventually(check: Callable[[], bool]) -> None:
    poll("the extender to see the change", check, tries=80, interval=0.1)


def test_coscheduling_podgroup_pods_are_one_gang(
    client: httpx.Client, made: Made, node_names: list[str]
) -> None:
    pg = f"llm-{made.run}"
    pods = [made.pod(f"llm-w{i}", gpus=8, labels={COSCHED: pg}, annotations={MIN: "4"}) for i in range(4)]
    filter_(client, pods[2], node_names)
    doc = group(client, f"vision/{pg}")
    assert doc is not None and shape(doc) == [8, 8, 8, 8] and doc["status"]["vc"] == "vision"
    nodes = {schedule(client, p, node_names) for p in pods}
    doc = group(client, f"vision/{pg}")
    assert (
        doc is not None
        and doc["status"]["state"] == "Allocated"
        and nodes == set(doc["status"]["physicalPlacement"])
    )


def test_volcano_podgroup_pods_are_one_gang(client: httpx.Client, made: Made, node_names: list[str]) -> None:
    pg = f"job-{made.run}"
    ann = {VOLCANO: pg, MIN: "2"}
    pods = [made.pod(f"job-worker-{i}", "nlp", gpus=4, annotations=ann, enable=True) for i in range(2)]
    for p in pods:
        assert schedule(client, p, node_names) is not None
    doc = group(client, f"nlp/{pg}")
    assert doc is not None and shape(doc) == [4, 4] and doc["status"]["vc"] == "nlp"
    assert doc["status"]["state"] == "Allocated" and len(doc["status"]["physicalPlacement"]) == 1


def test_yunikorn_task_groups_are_one_gang(client: httpx.Client, made: Made, node_names: list[str]) -> None:
    app = f"yk-{made.run}"
    groups = task_groups(("driver", 1, 0), ("worker", 2, 2))
    ann = {"yunikorn.apache.org/task-group-name": "worker", "yunikorn.apache.org/task-groups": groups}
    pods = [
        made.pod(f"yk-w{i}", "research", gpus=2, labels={"applicationId": app}, annotations=ann)
        for i in range(2)
    ]
    for p in pods:
        assert schedule(client, p, node_names) is not None
    doc = group(client, f"research/{app}")
    assert doc is not None and shape(doc) == [2, 2] and doc["status"]["vc"] == "research"
    assert doc["status"]["lcaCellType"] in ("A100-HALF", "A100-SWITCH")


def test_spark_driver_first_then_its_executors(
    client: httpx.Client, made: Made, node_names: list[str]
) -> None:
    app = f"spark-{made.run}"
    driver = made.pod(
        "pi-driver",
        gpus=1,
        labels={"spark-app-selector": app, "spark-role": "driver"},
        args=["driver", "--conf", "spark.executor.instances=3"],
    )
    assert schedule(client, driver, node_names) is not None
    doc = group(client, f"vision/{app}")
    assert doc is not None and shape(doc) == [1, 1, 1, 1]  # the whole application, reserved
    assert doc["status"]["state"] == "Reserved"
    labels = {"spark-app-selector": app, "spark-role": "executor"}
    for i in range(3):
        ex = made.pod(f"pi-exec-{i + 1}", gpus=1, labels=labels)
        ex["metadata"]["ownerReferences"] = [{"kind": "Pod", "name": driver["metadata"]["name"]}]
        assert schedule(client, ex, node_names) is not None
    doc = group(client, f"vision/{app}")
    assert doc is not None and doc["status"]["state"] == "Allocated"


def test_a_job_with_only_a_gpu_request(client: httpx.Client, made: Made, node_names: list[str]) -> None:
    p = made.pod("batch-job-x7k2p", "nlp", gpus=2)
    assert "topogang.io/pod-scheduling-enable" not in str(p)
    node = schedule(client, p, node_names)
    doc = group(client, f"nlp/pod:{p['metadata']['name']}")
    assert doc is not None and shape(doc) == [2] and doc["status"]["physicalPlacement"].keys() == {node}
    other = made.pod("not-ours", "nlp", gpus=2, scheduler="default-scheduler")
    assert filter_(client, other, node_names)["NodeNames"] == node_names  # not topogang's: passed through


def test_conflicting_conventions_are_an_error_naming_both(
    client: httpx.Client, made: Made, node_names: list[str]
) -> None:
    p = made.pod("confused", gpus=8, labels={COSCHED: "a"}, annotations={VOLCANO: "b", MIN: "2"})
    body = filter_(client, p, node_names)
    assert not body["NodeNames"] and COSCHED in body["Error"] and VOLCANO in body["Error"]
    assert group(client, "vision/a") is None and group(client, "vision/b") is None


def test_hard_timeout_releases_everything_and_the_gang_is_placed_again(
    client: httpx.Client, made: Made, node_names: list[str]
) -> None:
    pg = f"hard-{made.run}"
    ann = {MIN: "2", "topogang.io/gang-timeout-seconds": "1"}
    first, second = (made.pod(f"hard-{i}", gpus=8, labels={COSCHED: pg}, annotations=ann) for i in range(2))
    assert schedule(client, first, node_names) is not None
    assert first["metadata"]["uid"] in bindings(client)
    eventually(lambda: group(client, f"vision/{pg}") is None)
    assert first["metadata"]["uid"] not in bindings(client)  # the bound member was evicted
    first_answer = filter_(client, second, node_names)  # within a TTL of its expiry it waits
    assert not first_answer["NodeNames"] and "[Expired]" in str(first_answer), first_answer

    def placed_again() -> bool:
        filter_(client, second, node_names)
        doc = group(client, f"vision/{pg}")  # a waiting gang is shown too, holding no slots
        return doc is not None and bool(doc["status"].get("slots"))

    eventually(placed_again)  # a TTL later it is placed again, whole
    doc = group(client, f"vision/{pg}")
    assert doc is not None and shape(doc) == [8, 8] and doc["status"]["allocatedPods"] == []


def test_soft_timeout_lets_the_rest_run_as_ordinary_pods(
    client: httpx.Client, made: Made, node_names: list[str]
) -> None:
    app = f"soft-{made.run}"
    ann = {
        "yunikorn.apache.org/task-group-name": "w",
        "yunikorn.apache.org/task-groups": task_groups(("w", 3, 2)),
        "yunikorn.apache.org/schedulingPolicyParameters": (
            "placeholderTimeoutInSeconds=1 gangSchedulingStyle=Soft"
        ),
    }
    pods = [made.pod(f"soft-{i}", gpus=2, labels={"applicationId": app}, annotations=ann) for i in range(3)]
    assert schedule(client, pods[0], node_names) is not None
    eventually(lambda: shape(group(client, f"vision/{app}")) == [2])
    doc = group(client, f"vision/{app}")
    assert doc is not None and doc["status"]["state"] == "Allocated"
    assert pods[0]["metadata"]["uid"] in bindings(client)  # nothing evicted
    for p in pods[1:]:
        assert schedule(client, p, node_names) is not None
        solo = group(client, f"vision/{app}/solo/{p['metadata']['name']}")
        assert solo is not None and shape(solo) == [2]


def test_an_elastic_gang_starts_at_min_member_and_grows_in_its_domain(
    client: httpx.Client, made: Made, node_names: list[str]
) -> None:
    pg = f"elastic-{made.run}"
    ann = {MIN: "2"}
    pods = [made.pod(f"el-{i}", gpus=4, labels={COSCHED: pg}, annotations=ann) for i in range(4)]
    core_nodes = {schedule(client, p, node_names) for p in pods[:2]}
    core = group(client, f"vision/{pg}")
    assert core is not None and core["status"]["state"] == "Allocated" and shape(core) == [4, 4]
    rack = {n.rsplit("-", 1)[0] for n in core_nodes if n}
    assert len(rack) == 1
    for p in pods[2:]:
        node = schedule(client, p, node_names)
        assert node is not None and node.rsplit("-", 1)[0] in rack  # in the core's domain
        extra = group(client, f"vision/{pg}/extra/{p['metadata']['name']}")
        assert extra is not None and shape(extra) == [4]
    after = group(client, f"vision/{pg}")
    assert after is not None and after["status"]["slots"] == core["status"]["slots"]  # core untouched
    # an extra whose domain has no room waits instead of going elsewhere
    outside = [n for n in node_names if n.rsplit("-", 1)[0] not in rack]
    late = made.pod("el-late", gpus=4, labels={COSCHED: pg}, annotations=ann)
    body = filter_(client, late, outside)
    assert body["NodeNames"] == [] and bind(client, late, outside[0]) != ""
