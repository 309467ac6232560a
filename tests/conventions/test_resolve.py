"""The resolver with plain dicts: each convention, the precedence order, conflicts, the opt-in."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client
from pydantic import ValidationError

from extender.conventions.common import ObjRef
from extender.conventions.resolve import Resolved, references, resolve
from extender.gangs.podspec import is_enabled
from tests.conventions.manifests import (
    coscheduling_podgroup,
    pod,
    podgroup,
    task_groups,
    volcano_podgroup,
    workload,
)
from topology.decisions import GangRequest, Member, UserError

VCS = {"vision": "vision", "nlp": "nlp"}
COSCHED = "scheduling.x-k8s.io/pod-group"
VOLCANO = "scheduling.k8s.io/group-name"


def run(p: dict[str, Any], objects: dict[ObjRef, Any] | None = None, **kw: Any) -> Resolved:
    m = p["metadata"]
    got = resolve(p, m["uid"], m["namespace"], m["name"], namespace_vcs=VCS, objects=objects or {}, **kw)
    assert got is not None
    return got


def test_coscheduling_podgroup_gives_size_and_timeout() -> None:
    p = pod("w-0", gpus=8, labels={COSCHED: "llm"})
    assert references(p, "vision") == [ObjRef("coscheduling", "vision", "llm")]
    pg = coscheduling_podgroup("llm", "vision", 4, scheduleTimeoutSeconds=90)
    r = run(p, {ObjRef("coscheduling", "vision", "llm"): pg})
    req = r.request.request
    assert (req.name, req.vc, req.members, req.ttl_seconds) == ("vision/llm", "vision", (Member(4, 8),), 90)
    assert (r.source, r.soft, r.request.leaf_number) == ("coscheduling", False, 8)


def test_podgroup_min_resources_leave_out_a_launcher_without_gpus() -> None:
    p = pod("w-0", gpus=8, labels={COSCHED: "mpi"})
    pg = coscheduling_podgroup("mpi", "vision", 5, minResources={"cpu": "10", "nvidia.com/gpu": "32"})
    assert run(p, {ObjRef("coscheduling", "vision", "mpi"): pg}).request.request.members == (Member(4, 8),)


def test_standalone_fallback_annotation_and_unreadable_podgroup() -> None:
    p = pod("w-0", gpus=2, labels={COSCHED: "g"}, annotations={"topogang.io/min-member": "3"})
    assert run(p).request.request.members == (Member(3, 2),)
    bare = pod("w-0", gpus=2, labels={COSCHED: "g"})
    with pytest.raises(UserError, match="cannot be read"):
        run(bare, {ObjRef("coscheduling", "vision", "g"): None})  # Kubernetes mode, no PodGroup
    with pytest.raises(UserError, match="size of group g is unknown"):
        run(bare)


def test_volcano_podgroup() -> None:
    p = pod("job-worker-0", "nlp", gpus=4, annotations={VOLCANO: "job-pg"})
    r = run(p, {ObjRef("volcano", "nlp", "job-pg"): volcano_podgroup("job-pg", "nlp", 2)})
    assert (r.request.gang, r.request.request.vc, r.request.request.members) == (
        "nlp/job-pg",
        "nlp",
        (Member(2, 4),),
    )
    assert r.source == "volcano"


def test_yunikorn_task_groups_and_policy() -> None:
    ann = {
        "yunikorn.apache.org/task-group-name": "worker",
        "yunikorn.apache.org/task-groups": task_groups(("launcher", 1, 0), ("worker", 3, 4), ("ps", 2, 2)),
        "yunikorn.apache.org/schedulingPolicyParameters": (
            "placeholderTimeoutInSeconds=30 gangSchedulingStyle=Hard"
        ),
    }
    r = run(pod("w", gpus=4, labels={"applicationId": "app-1"}, annotations=ann))
    req = r.request.request
    assert (req.name, set(req.members), req.ttl_seconds) == ("vision/app-1", {Member(3, 4), Member(2, 2)}, 30)
    assert (r.source, r.soft) == ("yunikorn", False)
    ann["yunikorn.apache.org/schedulingPolicyParameters"] = "placeholderTimeoutInSeconds=30"
    soft = run(pod("w", gpus=4, labels={"applicationId": "app-1"}, annotations=ann))
    assert soft.soft and soft.timeout == 30 and soft.request.request.ttl_seconds == 60  # backstop
    with pytest.raises(UserError, match="requests 2 GPUs"):
        run(pod("w", gpus=2, labels={"applicationId": "app-1"}, annotations=ann))


def test_spark_driver_reserves_the_application_and_executors_follow_it() -> None:
    labels = {"spark-app-selector": "spark-123", "spark-role": "driver"}
    drv = pod(
        "pi-driver",
        gpus=1,
        labels=labels,
        args=[
            "driver",
            "--conf",
            "spark.executor.instances=3",
            "--conf=spark.executor.resource.gpu.amount=2",
        ],
    )
    r = run(drv)
    assert (r.request.gang, r.request.request.members, r.source) == (
        "vision/spark-123",
        (Member(1, 1), Member(3, 2)),
        "spark",
    )
    ex = pod(
        "pi-exec-1",
        gpus=2,
        labels={"spark-app-selector": "spark-123", "spark-role": "executor"},
    )
    ex["metadata"]["ownerReferences"] = [{"kind": "Pod", "name": "pi-driver", "apiVersion": "v1"}]
    assert references(ex, "vision") == [ObjRef("pod", "vision", "pi-driver")]
    from_driver = run(ex, {ObjRef("pod", "vision", "pi-driver"): drv})
    assert from_driver.request.request.members == r.request.request.members
    joined = run(ex, existing=lambda name: r.request.request if name == "vision/spark-123" else None)
    assert joined.request.request.members == r.request.request.members
    alone = run(ex)  # no conf anywhere, no driver gang: an ordinary pod of the app
    assert (alone.request.gang, alone.request.request.members) == (
        "vision/spark-123/pi-exec-1",
        (Member(1, 2),),
    )


def test_spark_env_and_dynamic_allocation() -> None:
    env = [
        {"name": "SPARK_EXECUTOR_INSTANCES", "value": "8"},
        {"name": "spark.dynamicAllocation.enabled", "value": "true"},
        {"name": "spark.dynamicAllocation.minExecutors", "value": "2"},
    ]
    drv = pod("d", gpus=4, labels={"spark-app-selector": "a", "spark-role": "driver"}, env=env)
    assert run(drv).request.request.members == (Member(3, 4),)  # driver + 2 executors of 4 GPUs


def test_workload_api() -> None:
    p = pod("w-1", gpus=8, spec={"workloadRef": {"name": "train", "podGroup": "workers"}})
    ref = ObjRef("workload", "vision", "train")
    assert references(p, "vision") == [ref]
    r = run(p, {ref: workload("train", "vision", "workers", 2)})
    assert (r.request.gang, r.request.request.members, r.source) == (
        "vision/train/workers",
        (Member(2, 8),),
        "workload",
    )
    rep = pod(
        "w-1",
        gpus=8,
        spec={"workloadRef": {"name": "train", "podGroup": "workers", "podGroupReplicaKey": "1"}},
    )
    assert run(rep, {ref: workload("train", "vision", "workers", 2)}).request.gang == "vision/train/workers/1"


def test_plain_gpu_pod_and_what_is_left_to_podspec() -> None:
    r = run(pod("job-abc", "nlp", gpus=2))
    assert (r.request.gang, r.request.request.members, r.source, r.elastic) == (
        "nlp/pod:job-abc",
        (Member(1, 2),),
        "pod",
        False,
    )
    m = pod("x", enable=True)["metadata"]
    assert resolve(pod("x", enable=True), m["uid"], "vision", "x") is None  # no GPUs: podspec's error
    spec = pod("x", gpus=2, labels={COSCHED: "g"}, annotations={"topogang.io/pod-scheduling-spec": "{}"})
    assert resolve(spec, "u", "vision", "x") is None  # an explicit spec wins over every convention
    fc = dict.fromkeys(
        (
            "FC_FRAMEWORK_NAMESPACE",
            "FC_FRAMEWORK_NAME",
            "FC_FRAMEWORK_ATTEMPT_INSTANCE_UID",
            "FC_TASKROLE_NAME",
        ),
        "v",
    )
    fc["FC_FRAMEWORK_NAMESPACE"] = "vision"  # the pod's own: FrameworkController creates it there
    assert resolve(pod("x", gpus=2, annotations={**fc, "FC_TASK_INDEX": "0"}), "u", "vision", "x") is None


def test_vc_from_label_else_namespace_else_error() -> None:
    assert (
        run(pod("p", "nlp", gpus=1, labels={"topogang.io/virtual-cluster": "research"})).request.request.vc
        == "research"
    )
    with pytest.raises(UserError, match="namespace team-x has no VC"):
        run(pod("p", "team-x", gpus=1))
    # a VC name that is no label value travels in its label form (config/names.py) or the annotation
    coded = {"topogang.io/virtual-cluster": "b32.ORSWC3JAMEQQ"}
    assert run(pod("p", "nlp", gpus=1, labels=coded)).request.request.vc == "team a!"
    free = {"topogang.io/virtual-cluster": "team a!"}
    assert run(pod("p", "nlp", gpus=1, annotations=free)).request.request.vc == "team a!"


def test_conflicting_conventions_name_both() -> None:
    p = pod("w", gpus=8, labels={COSCHED: "a"}, annotations={VOLCANO: "b", "topogang.io/min-member": "2"})
    with pytest.raises(UserError) as err:
        run(p)
    text = f"{err.value.field}: {err.value.message}"
    assert COSCHED in text and VOLCANO in text and "=a" in text and "=b" in text
    sizes = {
        ObjRef("coscheduling", "vision", "a"): coscheduling_podgroup("a", "vision", 2),
        ObjRef("volcano", "vision", "a"): volcano_podgroup("a", "vision", 4),
    }
    same_name = pod("w", gpus=8, labels={COSCHED: "a"}, annotations={VOLCANO: "a"})
    with pytest.raises(UserError, match=r"2 pods.*4 pods"):
        run(same_name, sizes)
    sizes[ObjRef("volcano", "vision", "a")] = volcano_podgroup("a", "vision", 2)
    assert run(same_name, sizes).source == "coscheduling"  # they agree: the higher one answers


def test_precedence_workload_over_coscheduling_over_yunikorn() -> None:
    p = pod(
        "w",
        gpus=8,
        labels={COSCHED: "train/workers", "applicationId": "train/workers"},
        annotations={
            "topogang.io/min-member": "2",
            "yunikorn.apache.org/task-group-name": "w",
            "yunikorn.apache.org/task-groups": task_groups(("w", 2, 8)),
        },
        spec={"workloadRef": {"name": "train", "podGroup": "workers"}},
    )
    assert run(p).source == "workload"
    del p["spec"]["workloadRef"]
    assert run(p).source == "coscheduling"


def test_malformed_convention_fields_are_user_errors() -> None:
    with pytest.raises(UserError, match="task-groups"):
        run(
            pod(
                "w",
                gpus=1,
                labels={"applicationId": "a"},
                annotations={"yunikorn.apache.org/task-group-name": "w"},
            )
        )
    bad = {"yunikorn.apache.org/task-group-name": "w", "yunikorn.apache.org/task-groups": "[{"}
    with pytest.raises(UserError, match="not JSON"):
        run(pod("w", gpus=1, labels={"applicationId": "a"}, annotations=bad))
    with pytest.raises(UserError, match="min-member"):
        run(pod("w", gpus=1, labels={COSCHED: "g"}, annotations={"topogang.io/min-member": "many"}))
    with pytest.raises(UserError, match="Soft or Hard"):
        run(pod("w", gpus=1, annotations={"topogang.io/gang-scheduling-style": "Maybe"}))
    with pytest.raises(UserError, match="requests no GPUs"):
        run(pod("w", labels={COSCHED: "g"}, annotations={"topogang.io/min-member": "2"}, enable=True))


def test_gpu_pods_of_topogangs_profile_opt_in() -> None:
    assert is_enabled(pod("p", gpus=1))
    assert not is_enabled(pod("p", gpus=1, scheduler="default-scheduler"))
    assert not is_enabled(pod("p"))
    assert is_enabled(pod("p", enable=True, scheduler="default-scheduler"))
    init = pod("p")
    init["spec"]["initContainers"] = [{"name": "i", "resources": {"requests": {"nvidia.com/gpu": 2}}}]
    assert is_enabled(init)


def test_existing_gang_shape_is_used_when_the_size_is_unknown() -> None:
    known = GangRequest("vision/g", "vision", (Member(3, 2),))
    r = run(pod("w", gpus=2, labels={COSCHED: "g"}), existing=lambda n: known if n == "vision/g" else None)
    assert r.request.request.members == (Member(3, 2),)
    assert json.dumps(r.size) == "3"


def member_of(group: str, gpus: int = 8, **spec: Any) -> dict[str, Any]:
    return pod(f"{group}-0", gpus=gpus, spec={"schedulingGroup": {"podGroupName": group}, **spec})


def test_beta_podgroup_is_one_gang_of_min_count_pods_at_its_priority() -> None:
    p = member_of("train-0")
    ref = ObjRef("podgroup", "vision", "train-0")
    assert references(p, "vision") == [ref]
    r = run(p, {ref: podgroup("train-0", "vision", 4, priority=100)})
    req = r.request.request
    assert (req.name, req.members, req.priority, req.within_level, r.source) == (
        "vision/train-0",
        (Member(4, 8),),
        100,
        None,
        "workload",
    )
    # the alpha (1.36) object reads the same; a basic policy is pods one by one
    alpha = podgroup("train-0", "vision", 4, version="scheduling.k8s.io/v1alpha2")
    assert run(p, {ref: alpha}).request.request.members == (Member(4, 8),)
    assert run(p, {ref: podgroup("train-0", "vision", None)}).request.request.members == (Member(1, 8),)


@pytest.mark.parametrize(
    ("podgroup_priority", "pod_priority", "gang_priority"),
    [(None, 7, 7), (None, None, 0), (5000, 7, 1000), (-20, 7, 0), (2_000_000_000, None, 1000)],
)
def test_podgroup_priority_comes_into_topogangs_guaranteed_range(
    podgroup_priority: int | None, pod_priority: int | None, gang_priority: int
) -> None:
    extra = {} if pod_priority is None else {"priority": pod_priority}
    p = member_of("g", **extra)
    pg = podgroup("g", "vision", 2, priority=podgroup_priority)
    assert run(p, {ObjRef("podgroup", "vision", "g"): pg}).request.request.priority == gang_priority


@pytest.mark.parametrize(
    ("key", "level"),
    [
        ("topology.kubernetes.io/rack", "rack"),
        ("kubernetes.io/hostname", "hostname"),
        ("topogang.io/A100-RACK", "A100-RACK"),
        ("rack", "rack"),
    ],
)
def test_podgroup_topology_key_is_a_required_level(key: str, level: str) -> None:
    pg = podgroup("g", "vision", 2, topology=[key])
    r = run(member_of("g"), {ObjRef("podgroup", "vision", "g"): pg})
    assert (r.request.request.within_level, r.topology_key) == (level, key)


def test_malformed_podgroup_topology_is_a_user_error_naming_the_field() -> None:
    ref = ObjRef("podgroup", "vision", "g")
    two = podgroup("g", "vision", 2, topology=["kubernetes.io/hostname", "topology.kubernetes.io/rack"])
    with pytest.raises(UserError, match="2 topology constraints") as err:
        run(member_of("g"), {ref: two})
    assert err.value.field == "PodGroup vision/g spec.schedulingConstraints.topology"
    bad = podgroup("g", "vision", 2)
    bad["spec"]["schedulingConstraints"] = {"topology": [{"key": ""}]}
    with pytest.raises(UserError, match="expected a node label key"):
        run(member_of("g"), {ref: bad})
    zero = podgroup("g", "vision", 0)
    with pytest.raises(UserError, match="at least 1") as err:
        run(member_of("g"), {ref: zero})
    assert err.value.field == "PodGroup vision/g spec.schedulingPolicy.gang.minCount"


def test_the_podgroups_read_here_are_kubernetes_1_37s_own_types() -> None:
    """The PodGroups and pods these tests read are the real 1.37 API types: the Kubernetes client's
    models, generated from 1.37's OpenAPI, forbid any field they do not know and keep every one."""

    def to_dict(obj: Any) -> Any:
        return client.ApiClient().sanitize_for_serialization(obj)  # type: ignore[no-untyped-call]

    for pg in (
        podgroup("g-0", "vision", 4, topology=["topology.kubernetes.io/rack"], priority=100),
        podgroup("g-1", "vision", None),
    ):
        assert to_dict(client.V1beta1PodGroup.model_validate(pg)) == pg
    member = member_of("g-0")
    assert to_dict(client.V1Pod.model_validate(member))["spec"]["schedulingGroup"] == {"podGroupName": "g-0"}
    wrong = podgroup("g", "vision", 2)
    wrong["spec"]["schedulingPolicy"]["gang"]["minMember"] = 2  # coscheduling's word, not this API's
    with pytest.raises(ValidationError):
        client.V1beta1PodGroup.model_validate(wrong)


# ------------------------------------------------------------------------ names are per namespace
def _conventions(ns: str) -> list[tuple[dict[str, Any], dict[ObjRef, Any]]]:
    """One pod of each convention in `ns`, all naming the group `shared`, with what it reads."""
    yk = {
        "yunikorn.apache.org/task-group-name": "w",
        "yunikorn.apache.org/task-groups": task_groups(("w", 2, 4)),
    }
    return [
        (
            pod("a", ns, gpus=4, labels={COSCHED: "shared"}),
            {ObjRef("coscheduling", ns, "shared"): coscheduling_podgroup("shared", ns, 2)},
        ),
        (
            pod("b", ns, gpus=4, annotations={VOLCANO: "shared"}),
            {ObjRef("volcano", ns, "shared"): volcano_podgroup("shared", ns, 2)},
        ),
        (pod("c", ns, gpus=4, labels={"applicationId": "shared"}, annotations=yk), {}),
        (pod("d", ns, gpus=4), {}),  # a plain GPU pod: its one-pod gang
    ]


@pytest.mark.parametrize("i", range(4))
def test_every_convention_names_its_gang_in_the_pods_namespace(i: int) -> None:
    """The same group name in two namespaces is two gangs; a group name that spells another
    namespace's gang is read in the pod's own (the object a convention reads is the pod's
    namespace's too: `references`)."""
    gangs = set()
    for ns in ("vision", "nlp"):
        p, objects = _conventions(ns)[i]
        gang = run(p, objects).request.gang
        assert gang.startswith(f"{ns}/"), gang
        assert all(ref.namespace == ns for ref in references(p, ns))
        gangs.add(gang)
    assert len(gangs) == 2


def test_a_convention_group_may_not_take_the_one_pod_form() -> None:
    ann = {
        "yunikorn.apache.org/task-group-name": "w",
        "yunikorn.apache.org/task-groups": task_groups(("w", 1, 4)),
    }
    with pytest.raises(UserError, match="reserved for one-pod gangs"):
        run(pod("squat", "vision", gpus=4, labels={"applicationId": "pod:d"}, annotations=ann))
    assert run(pod("d", "vision", gpus=4)).request.gang == "vision/pod:d"
