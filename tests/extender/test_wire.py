"""The extender wire format: what kube-scheduler sends parses, anything else names its problem."""

from __future__ import annotations

import pytest

from extender.http import replies, wire

POD = {"metadata": {"name": "w-0", "namespace": "ml", "uid": "u-1"}, "spec": {}, "status": {}}


def test_filter_args_in_names_form_and_lower_case_keys() -> None:
    a = wire.parse_extender_args({"Pod": POD, "Nodes": None, "NodeNames": ["n1", "n2"]})
    assert a.names == ("n1", "n2") and a.pod.key == "u-1(ml/w-0)"
    b = wire.parse_extender_args({"pod": POD, "nodes": None, "nodenames": ["n1"]})
    assert b.names == ("n1",)


def test_filter_args_in_node_list_form_are_answered_in_the_same_form() -> None:
    nodes = {"metadata": {}, "items": [{"metadata": {"name": "n1"}}, {"metadata": {"name": "n2"}}]}
    a = wire.parse_extender_args({"Pod": POD, "Nodes": nodes, "NodeNames": None})
    assert a.names == ("n1", "n2")
    r = replies.filter_result(a, ["n2"], {}, {"n1": "no"})
    assert r["NodeNames"] is None
    assert r["Nodes"] == {"metadata": {}, "items": [{"metadata": {"name": "n2"}}]}


def test_responses_are_pascal_case_with_explicit_nulls() -> None:
    a = wire.parse_extender_args({"Pod": POD, "NodeNames": ["n1"]})
    assert replies.filter_result(a, ["n1"]) == {
        "Nodes": None,
        "NodeNames": ["n1"],
        "FailedNodes": {},
        "FailedAndUnresolvableNodes": {},
        "Error": "",
    }
    assert replies.host_priorities([("n1", 10)]) == [{"Host": "n1", "Score": 10}]
    assert replies.binding_result() == {"Error": ""}
    assert replies.preemption_result(None) == {"NodeNameToMetaVictims": None}
    assert replies.preemption_result({"n1": ["v"]}) == {
        "NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": "v"}], "NumPDBViolations": 0}}
    }


def test_binding_and_preemption_args() -> None:
    b = wire.parse_binding_args({"PodName": "p", "PodNamespace": "ns", "PodUID": "u", "Node": "n1"})
    assert (b.pod_name, b.pod_namespace, b.pod_uid, b.node) == ("p", "ns", "u", "n1")
    p = wire.parse_preemption_args(
        {
            "Pod": POD,
            "NodeNameToVictims": None,
            "NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": "v1"}, {"UID": "v2"}], "NumPDBViolations": 1}},
        }
    )
    assert p.victims == {"n1": ("v1", "v2")}
    full = wire.parse_preemption_args(
        {
            "Pod": POD,
            "NodeNameToVictims": {"n2": {"Pods": [POD], "NumPDBViolations": 0}},
            "NodeNameToMetaVictims": None,
        }
    )
    assert full.victims == {"n2": ("u-1",)}


@pytest.mark.parametrize(
    ("doc", "path"),
    [
        ([], ""),
        ({}, ""),
        ({"NodeNames": ["n1"]}, "Pod"),
        ({"Pod": "x", "NodeNames": []}, "Pod"),
        ({"Pod": {"metadata": {"name": "a"}}, "NodeNames": []}, "Pod.metadata.uid"),
        ({"Pod": POD}, "NodeNames"),
        ({"Pod": POD, "NodeNames": "n1"}, "NodeNames"),
        ({"Pod": POD, "NodeNames": ["n1", 7]}, "NodeNames[1]"),
        ({"Pod": POD, "NodeNames": ["x" * 300]}, "NodeNames[0]"),
        ({"Pod": POD, "Nodes": {"items": [{"metadata": {}}]}}, "Nodes.items[0].metadata.name"),
    ],
)
def test_malformed_extender_args_name_the_path(doc: object, path: str) -> None:
    with pytest.raises(wire.WireError) as exc:
        wire.parse_extender_args(doc)
    assert exc.value.path == path


@pytest.mark.parametrize(
    ("doc", "path"),
    [
        ({"PodName": "p", "PodNamespace": "ns", "PodUID": "u"}, "Node"),
        ({"PodName": "p", "PodNamespace": "ns", "PodUID": 5, "Node": "n"}, "PodUID"),
        ({"PodName": "", "PodNamespace": "ns", "PodUID": "u", "Node": "n"}, "PodName"),
    ],
)
def test_malformed_binding_args_name_the_key(doc: object, path: str) -> None:
    with pytest.raises(wire.WireError) as exc:
        wire.parse_binding_args(doc)
    assert exc.value.path == path


def test_malformed_preemption_args() -> None:
    with pytest.raises(wire.WireError, match=r"NodeNameToMetaVictims\.n1\.Pods"):
        wire.parse_preemption_args({"Pod": POD, "NodeNameToMetaVictims": {"n1": {"Pods": 3}}})
    with pytest.raises(wire.WireError, match="UID"):
        wire.parse_preemption_args({"Pod": POD, "NodeNameToMetaVictims": {"n1": {"Pods": [{}]}}})


def test_bodies_that_are_not_json() -> None:
    with pytest.raises(wire.WireError, match="empty"):
        wire.loads(b"  ")
    with pytest.raises(wire.WireError, match="not JSON"):
        wire.loads(b"{nope")
