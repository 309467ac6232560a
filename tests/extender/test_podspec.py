"""The pod contract: opt-in, HiveD's spec fields and defaults, FrameworkController identity, errors."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from extender.gangs import podspec
from extender.gangs.podspec import (
    PodRequest,
    framework_members,
    framework_task,
    is_enabled,
    pod_request,
    positive_quantity,
)
from tests.extender.helpers import fc_annotations, pod
from topology.decisions import Member, UserError

HIVED_SPEC = "hivedscheduler.microsoft.com/pod-scheduling-spec"
G = "virtualCluster: a\nleafCellNumber: 1\naffinityGroup: {name: g, members: "


def req(p: dict[str, Any], **kw: Any) -> PodRequest:
    m = p["metadata"]
    return pod_request(p, m["uid"], m["namespace"], m["name"], **kw)


@pytest.mark.parametrize(
    ("value", "on"),
    [("1", True), (1, True), ("500m", True), ("0", False), (0, False), ("-1", False), ("x", False)],
)
def test_positive_quantity(value: object, on: bool) -> None:
    assert positive_quantity(value) is on


def test_opt_in_through_any_container_or_init_container_and_either_key() -> None:
    p = pod("u", enabled=False)
    assert not is_enabled(p)
    p["spec"]["initContainers"] = [
        {"name": "i", "resources": {"limits": {"hivedscheduler.microsoft.com/pod-scheduling-enable": 1}}}
    ]
    assert is_enabled(p)
    assert is_enabled(pod("u"))
    assert not is_enabled({"spec": "x"})


def test_hived_defaults_and_a_single_pod_gang() -> None:
    r = req(pod("u1", "solo", "team", "virtualCluster: nlp\nleafCellNumber: 2\n", key=HIVED_SPEC))
    assert r.request.name == "team/pod:solo"
    assert r.request.members == (Member(1, 2),)
    assert (r.request.priority, r.request.leaf_type, r.request.pinned_cell_id) == (0, None, None)
    assert not r.request.lazy_preemption and not r.ignore_suggested_nodes
    assert r.spec_annotation == HIVED_SPEC and r.leaf_number == 2


@pytest.mark.parametrize(
    ("extra", "promote"),
    [("", False), ("promoteWhenQuota: true\n", True), ("promoteWhenQuota: false\n", False)],
)
def test_promote_when_quota_is_read_for_opportunistic_gangs(extra: str, promote: bool) -> None:
    text = "virtualCluster: nlp\nleafCellNumber: 2\npriority: -1\n" + extra
    r = req(pod("u1", "solo", "team", text))
    assert r.request.opportunistic and r.request.promote_when_quota is promote
    doc = {"virtualCluster": "nlp", "leafCellNumber": 2, "priority": -1, "promoteWhenQuota": True}
    as_json = json.dumps(doc)
    assert req(pod("u2", "other", "team", as_json)).request.promote_when_quota


@pytest.mark.parametrize("priority", ["", "priority: 5\n"])
def test_promote_when_quota_is_read_for_guaranteed_gangs(priority: str) -> None:
    # a guaranteed gang that opts in may start as a guest in free room rather than preempt
    text = "virtualCluster: nlp\nleafCellNumber: 2\n" + priority + "promoteWhenQuota: true\n"
    r = req(pod("u1", "solo", "team", text))
    assert not r.request.opportunistic and r.request.promote_when_quota


def test_yaml_group_with_legacy_keys_and_merged_members() -> None:
    text = """
virtualCluster: vision
priority: 100
gpuType: A100
gpuNumber: 4
lazyPreemptionEnable: true
affinityGroup:
  name: job/default
  members:
  - {podNumber: 2, leafCellNumber: 4}
  - {podNumber: 1, leafCellNumber: 8}
  - {podNumber: 1, leafCellNumber: 4}
"""
    r = req(pod("u", "p", "vision", text))
    assert r.request.name == "vision/job/default" and r.request.leaf_type == "A100"
    assert r.request.members == (Member(3, 4), Member(1, 8))
    assert r.request.priority == 100 and r.request.lazy_preemption


def test_namespace_vc_fallback() -> None:
    r = req(pod("u", "p", "nlp", '{"leafCellNumber": 1}'), namespace_vcs={"nlp": "nlp-vc"})
    assert r.request.vc == "nlp-vc"


def test_framework_tasks_form_one_gang_per_attempt_with_named_slots() -> None:
    text = (
        '{"virtualCluster": "vision", "leafCellNumber": 8, "affinityGroup": {"name": "ignored", "members": '
        '[{"podNumber": 1, "leafCellNumber": 4, "taskRole": "ps"}, {"podNumber": 3, "leafCellNumber": 8, '
        '"taskRole": "worker"}]}}'
    )
    p = pod("u", "llm-worker-2", "ml", text, annotations=fc_annotations("ml", "llm", "0_abc", "worker", 2))
    r = req(p)
    assert r.request.name == "ml/llm/0_abc"
    assert r.request.slot_keys == ("ps/0", "worker/0", "worker/1", "worker/2")
    assert r.slot_key == "worker/2" and r.task is not None and r.task.index == 2
    bad = pod("u", "llm-worker-5", "ml", text, annotations=fc_annotations("ml", "llm", "0_abc", "worker", 5))
    with pytest.raises(UserError, match="worker/5 is not a slot"):
        req(bad)


def test_framework_without_group_takes_its_shape_from_the_framework_object() -> None:
    def role(name: str, n: int, gpus: int | None) -> dict[str, Any]:
        template = pod(
            "t",
            spec_text=None if gpus is None else f'{{"virtualCluster": "vision", "leafCellNumber": {gpus}}}',
        )
        return {"name": name, "taskNumber": n, "task": {"pod": template}}

    fw = {"spec": {"taskRoles": [role("worker", 2, 8), role("ps", 1, 1), role("cpu", 3, None)]}}
    assert framework_members(fw) == [("worker", 2, 8), ("ps", 1, 1)]
    p = pod(
        "u",
        "x",
        "vision",
        '{"virtualCluster": "vision", "leafCellNumber": 1}',
        annotations=fc_annotations("vision", "x", "1_z", "ps", 0),
    )
    assert framework_task(p) is not None
    r = req(p, framework=fw)
    assert r.request.name == "vision/x/1_z" and r.slot_key == "ps/0"
    assert r.request.members == (Member(2, 8), Member(1, 1))
    assert req(p).request.name == "vision/pod:x"  # no Framework: a one-pod gang


@pytest.mark.parametrize(
    ("text", "field", "message"),
    [
        (None, "pod-scheduling-spec", "does not exist or is empty"),
        ("[1, 2]", "pod-scheduling-spec", "expected a mapping"),
        ("a: [", "pod-scheduling-spec", "YAML syntax error"),
        ("leafCellNumber: 1", "virtualCluster", "VirtualCluster is empty"),
        ("virtualCluster: a\nleafCellNumber: 0", "leafCellNumber", "non-positive"),
        ("virtualCluster: a\nleafCellNumber: two", "leafCellNumber", "expected an integer"),
        ("virtualCluster: a\nleafCellNumber: 1\npriority: -2", "priority", "less than -1"),
        ("virtualCluster: a\nleafCellNumber: 1\npriority: 1001", "priority", "greater than 1000"),
        (
            "virtualCluster: a\nleafCellNumber: 1\nlazyPreemptionEnable: maybe",
            "lazyPreemptionEnable",
            "true or false",
        ),
        (
            "virtualCluster: a\nleafCellNumber: 1\npriority: -1\npromoteWhenQuota: later",
            "promoteWhenQuota",
            "true or false",
        ),
        (
            "virtualCluster: a\nleafCellNumber: 1\naffinityGroup: {members: []}",
            "affinityGroup.name",
            "Name is empty",
        ),
        ("virtualCluster: a\nleafCellNumber: 1\naffinityGroup: {name: g}", "affinityGroup.members", "empty"),
        (
            G + "[{podNumber: 0, leafCellNumber: 1}]}",
            "affinityGroup.members[0].podNumber",
            "non-positive PodNumber",
        ),
        (
            G + "[{podNumber: 1, leafCellNumber: 2}]}",
            "affinityGroup.members",
            "does not contains current Pod",
        ),
        (
            G + "[{podNumber: 1, leafCellNumber: 1, taskRole: w}, {podNumber: 1, leafCellNumber: 1}]}",
            "affinityGroup.members[1].taskRole",
            "every member or none",
        ),
    ],
)
def test_every_bad_spec_names_its_field(text: str | None, field: str, message: str) -> None:
    with pytest.raises(UserError) as exc:
        req(pod("u", "p", "nowhere", text))
    assert exc.value.field.endswith(field) and message in exc.value.message


@settings(max_examples=200, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=8),
        lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=12), kids, max_size=4),
        max_leaves=12,
    ),
    st.sampled_from(["virtualCluster", "leafCellNumber", "priority", "affinityGroup", "members", "name"]),
)
def test_any_spec_document_is_a_request_or_a_user_error(junk: object, key: str) -> None:
    for doc in (
        junk,
        {key: junk, "virtualCluster": "v", "leafCellNumber": 1},
        {"affinityGroup": {key: junk}},
    ):
        try:
            text = json.dumps(doc)
        except (TypeError, ValueError):
            continue
        try:
            r = req(pod("u", "p", "ns", text))
        except UserError as err:
            assert err.field and err.message
        else:
            assert r.leaf_number > 0 and r.request.members


# ------------------------------------------------------------------------ names are per namespace
@pytest.mark.parametrize(
    ("ns", "name", "gang"),
    [
        ("vision", "train", "vision/train"),
        ("vision", "vision/train", "vision/train"),  # HiveD's habit: its own namespace, the same gang
        ("evil", "vision/train", "evil/vision/train"),  # another namespace's name: a gang of its own
        ("evil", "vision/llm/0_a", "evil/vision/llm/0_a"),  # a FrameworkController gang id, likewise
        ("evil", "vision/pod:solo", "evil/vision/pod:solo"),
    ],
)
def test_a_group_name_is_read_in_the_pods_own_namespace(ns: str, name: str, gang: str) -> None:
    text = json.dumps(
        {
            "virtualCluster": "a",
            "leafCellNumber": 1,
            "affinityGroup": {"name": name, "members": [{"podNumber": 1, "leafCellNumber": 1}]},
        }
    )
    assert req(pod("u", "p", ns, text)).request.name == gang


@pytest.mark.parametrize("name", ["pod:solo", "vision/pod:solo", "pod:"])
def test_the_one_pod_form_is_no_name_a_group_may_take(name: str) -> None:
    text = json.dumps(
        {
            "virtualCluster": "a",
            "leafCellNumber": 1,
            "affinityGroup": {"name": name, "members": [{"podNumber": 1, "leafCellNumber": 1}]},
        }
    )
    with pytest.raises(UserError) as err:
        req(pod("u", "squat", "vision", text))
    assert err.value.field == "affinityGroup.name" and "reserved for one-pod gangs" in err.value.message
    assert req(pod("u", "solo", "vision", '{"virtualCluster": "a", "leafCellNumber": 1}')).request.name == (
        "vision/pod:solo"
    )


def test_a_framework_pod_of_another_namespace_is_a_user_error_naming_the_annotation() -> None:
    text = json.dumps(
        {
            "virtualCluster": "a",
            "leafCellNumber": 1,
            "affinityGroup": {
                "name": "x",
                "members": [{"podNumber": 2, "leafCellNumber": 1, "taskRole": "w"}],
            },
        }
    )
    p = pod("u", "w-0", "evil", text, annotations=fc_annotations("vision", "llm", "0_a", "w", 0))
    with pytest.raises(UserError) as err:
        req(p)
    assert err.value.field == "FC_FRAMEWORK_NAMESPACE" and "'evil'" in err.value.message
    assert framework_task(p) is None  # nor is it that framework's task anywhere else
    own = pod("u", "w-0", "vision", text, annotations=fc_annotations("vision", "llm", "0_a", "w", 0))
    assert req(own).request.name == "vision/llm/0_a"


def test_a_gang_part_read_once_serves_every_member_with_its_own_checks() -> None:
    """The gang's part of a request is kept per spec text and gang; what belongs to each pod (its
    task's slot, its role's leaf cells, its namespace, its identity) is still checked per pod, with
    the error a first read would give, and the answer equals a fresh read's."""
    podspec._parts.clear()
    text = json.dumps(
        {
            "virtualCluster": "vision",
            "leafCellNumber": 8,
            "affinityGroup": {
                "name": "g",
                "members": [
                    {"podNumber": 1, "leafCellNumber": 4, "taskRole": "ps"},
                    {"podNumber": 2, "leafCellNumber": 8, "taskRole": "worker"},
                ],
            },
        }
    )

    def member(uid: str, ns: str, role: str, i: int, spec: str = text) -> dict[str, Any]:
        return pod(uid, f"{role}-{i}", ns, spec, annotations=fc_annotations("ml", "llm", "0_a", role, i))

    first = req(member("u0", "ml", "worker", 0))
    assert len(podspec._parts) == 1
    second = req(member("u1", "ml", "worker", 1))
    assert len(podspec._parts) == 1 and second.request is first.request  # read once, shared
    assert (second.uid, second.name, second.slot_key) == ("u1", "worker-1", "worker/1")
    podspec._parts.clear()
    assert req(member("u1", "ml", "worker", 1)) == second  # as a fresh read makes it
    with pytest.raises(UserError, match="worker/2 is not a slot"):
        req(member("u2", "ml", "worker", 2))
    with pytest.raises(UserError, match="task role ps has leafCellNumber 4"):
        req(member("u3", "ml", "ps", 0))  # the spec's 8 GPUs, but its role's member has 4
    with pytest.raises(UserError) as err:
        req(member("u4", "evil", "worker", 0))  # another namespace claiming the framework's
    assert err.value.field == "FC_FRAMEWORK_NAMESPACE"
    bad = text.replace('"virtualCluster"', '"ignoreK8sSuggestedNodes": "maybe", "virtualCluster"')
    for _ in range(2):  # a bad spec is not kept: refused alike every time, after the slot checks
        with pytest.raises(UserError, match="worker/3 is not a slot"):
            req(member("u5", "ml", "worker", 3, bad))
        with pytest.raises(UserError) as err:
            req(member("u6", "ml", "worker", 0, bad))
        assert err.value.field == "ignoreK8sSuggestedNodes"
    plain = G + "[{podNumber: 2, leafCellNumber: 1}]}\n"
    a, b = req(pod("ua", "a", "vision", plain)), req(pod("ub", "b", "team", plain))
    assert (a.request.name, b.request.name) == ("vision/g", "team/g")  # per namespace
    assert req(pod("uc", "c", "vision", plain), ttl_seconds=60.0).request.ttl_seconds == 60.0


def test_members_asked_with_one_node_list_share_the_narrowed_request() -> None:
    podspec._parts.clear()
    text = G + "[{podNumber: 2, leafCellNumber: 1}]}\n"
    a, b = req(pod("ua", "a", "vision", text)), req(pod("ub", "b", "vision", text))
    nodes, other = frozenset({"n1", "n2"}), frozenset({"n1", "n2"})
    first = a.narrowed_to(nodes)
    assert first.suggested_nodes is nodes and b.narrowed_to(nodes) is first  # the same gang and list
    again = b.narrowed_to(other)  # an equal list that is not the shared one: a copy of its own
    assert again is not first and again == first and again.suggested_nodes is other
    lone = req(pod("uc", "c", "vision", "virtualCluster: vision\nleafCellNumber: 1\n"))
    assert lone.narrowed_to(other).name == "vision/pod:c" and b.narrowed_to(other) is not again
