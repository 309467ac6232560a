"""`framework_from_gang` on a gang that is no FrameworkController framework: the Framework proxy serves
any Ready gang by name, and a plain affinity group's members carry `taskIndex: null` (this answered 500)."""

from __future__ import annotations

from extender.gangs.barrier import framework_from_gang


def test_members_without_task_index_are_numbered_in_order() -> None:
    gang = {
        "namespace": "nlp",
        "name": "plain",
        "members": [
            {"taskRole": None, "taskIndex": None, "rank": None, "podIP": "10.0.0.2"},
            {"taskRole": None, "taskIndex": None, "rank": None, "podIP": "10.0.0.1"},
        ],
    }
    f = framework_from_gang(gang)
    (role,) = f["status"]["attemptStatus"]["taskRoleStatuses"]
    assert role["name"] == "default"
    assert [(t["index"], t["attemptStatus"]["podIP"]) for t in role["taskStatuses"]] == [
        (0, "10.0.0.2"),
        (1, "10.0.0.1"),
    ]


def test_task_indices_order_the_tasks() -> None:
    gang = {
        "namespace": "vision",
        "name": "fw",
        "members": [
            {"taskRole": "worker", "taskIndex": 1, "rank": 1, "podIP": "10.0.0.2"},
            {"taskRole": "worker", "taskIndex": 0, "rank": 0, "podIP": "10.0.0.1"},
        ],
    }
    (role,) = framework_from_gang(gang)["status"]["attemptStatus"]["taskRoleStatuses"]
    assert [(t["index"], t["attemptStatus"]["podIP"]) for t in role["taskStatuses"]] == [
        (0, "10.0.0.1"),
        (1, "10.0.0.2"),
    ]
