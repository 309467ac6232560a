"""A hostile pod cannot block the cluster (issue 23, item 5), end to end: pods whose annotations are
built to crash, stall or confuse a reader are created while the extender is down (it must list them,
recover past them and still become ready) and after it started (its watch must go on). Each stays
Pending with a Warning Event naming the annotation and the reason, and a gang created afterwards
is scheduled as usual.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest
from kubernetes import client

from tests.e2e.conftest import E2ECluster, Extender
from tests.e2e.helpers import (
    BIND_INFO,
    ENABLE,
    GPU,
    PROFILE,
    SPEC,
    assert_whole_gang,
    hold_for,
    none_bound,
    object_names,
    pod_events,
    seen_by_scheduler,
    submit_gang,
    wait_running,
    wait_until,
)

pytestmark = pytest.mark.e2e

HOLD_SECONDS = 3.0  # how long "the hostile pods stay unbound" is checked, repeatedly
LAUGHS = 'a: &a ["x","x","x","x","x","x","x","x","x"]\n' + "".join(
    f"{c}: &{c} [{','.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True)
)
# name -> (scheduling spec, what the Event must say); every one opts in to a GPU of VC nlp
BEFORE = {
    "deep": ("[" * 30_000 + "]" * 30_000, "nested more than 8 levels deep"),
    "huge": ("[" * 50_000 + "]" * 50_000, "is 100000 bytes; at most 65536"),
    "laughs": (LAUGHS, "YAML anchors (&a) are not accepted"),
}
AFTER = {
    "recursive": ("&a [*a]", "YAML anchors (&a) are not accepted"),
    "nul": ('{"virtualCluster": "nlp", "leafCellNumber": 1}\x00', "#x0000"),
    "surrogate": ('{"virtualCluster": "\\ud800", "leafCellNumber": 1}', "is not valid Unicode"),
}


def hostile_pod(name: str, text: str, *, node: str | None = None, bind_info: str | None = None) -> Any:
    """A pod of topogang's profile asking for a GPU, its spec annotation `text`. With `node`: created
    bound (as another scheduler would leave it), its bind info `bind_info`, and no GPU (nothing of
    the cluster's is taken by a pod the extender cannot account for)."""
    annotations = {SPEC: text}
    limits = {ENABLE: "1", GPU: "1"}
    if bind_info is not None:
        annotations[BIND_INFO] = bind_info
    spec: dict[str, Any] = {
        "schedulerName": PROFILE,
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "main", "image": "fake.invalid/train:1", "resources": {"limits": limits}}],
    }
    if node is not None:
        limits.pop(GPU)
        spec["nodeName"] = node
    return client.V1Pod.model_validate({"metadata": {"name": name, "annotations": annotations}, "spec": spec})


def told(core: client.CoreV1Api, ns: str, pod: str, reason: str, why: str) -> str | None:
    """The extender's Event on `pod` with `reason` naming the annotation and `why`, once it is there."""
    for line in pod_events(core, ns, pod):
        if f": {reason}: annotation " in line and why in line:
            return line
    return None


def test_hostile_pods_before_and_after_start_are_skipped_with_an_event(
    e2e_cluster: E2ECluster, extender: Extender, gang_ns: str
) -> None:
    core = e2e_cluster.core
    node = object_names(core.list_node().items)[0]
    extender.stop()
    for name, (text, _) in BEFORE.items():
        core.create_namespaced_pod(gang_ns, hostile_pod(name, text))
    # bound before the restart, its bind info rewritten by its owner: recovery must get past it
    deep = "[" * 50_000 + "]" * 50_000
    core.create_namespaced_pod(gang_ns, hostile_pod("bound", deep, node=node, bind_info=deep))
    extender.start()  # fails the test unless /readyz turns 200

    for name, (text, _) in AFTER.items():
        core.create_namespaced_pod(gang_ns, hostile_pod(name, text))
    for name, (_, why) in {**BEFORE, **AFTER}.items():
        wait_until(
            f"an InvalidSchedulingSpec Event on {name}",
            partial(told, core, gang_ns, name, "InvalidSchedulingSpec", why),
            60,
        )
    wait_until(
        "an InvalidBindInfo Event on the bound pod",
        lambda: told(core, gang_ns, "bound", "InvalidBindInfo", "nested more than 32 levels deep"),
        60,
    )
    hostile = [*BEFORE, *AFTER]
    wait_until(
        "kube-scheduler to try the last one", lambda: seen_by_scheduler(core, gang_ns, "surrogate"), 30
    )
    hold_for(
        "the hostile pods stay Pending",
        lambda: none_bound(core, gang_ns, hostile),
        HOLD_SECONDS,
    )

    # every other pod is still scheduled: a gang created now runs whole
    names = submit_gang(core, gang_ns, "after", 2, 8, "nlp")
    assert_whole_gang(wait_running(core, gang_ns, names), 8)
    assert extender.process is not None and extender.process.alive()
