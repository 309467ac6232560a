"""Promotion end to end: `promoteWhenQuota` behind the real kube-scheduler and API server.

nlp (3 nodes of quota) is full with a guaranteed gang; an opportunistic gang that asked for promotion
and one that did not run beside it as guests. When the guaranteed gang ends, the first is promoted:
the extender patches its pod's bind info to name nlp's quota cells (the API server must accept the
merge patch and the extender's RBAC must allow it), a restart brings it back guaranteed, and nlp's
next 3-node gang waits for quota it holds; the guest that did not ask stays a guest.
"""

from __future__ import annotations

import pytest
from kubernetes import client

from extender.gangs.bindinfo import pod_bind_info
from tests.e2e.conftest import E2ECluster, Extender
from tests.e2e.helpers import (
    delete_pods,
    hold_for,
    none_bound,
    pods_of,
    seen_by_scheduler,
    submit_gang,
    wait_gone,
    wait_running,
    wait_until,
)

pytestmark = pytest.mark.e2e


def cell_types(core: client.CoreV1Api, ns: str, name: str) -> tuple[str, ...]:
    info = pod_bind_info(pods_of(core, ns, [name])[name].annotations)
    assert info is not None, name
    return tuple(t for p in info.placements if p.node == info.node for t in p.preassigned_cell_types)


def test_promoted_gang_is_written_back_and_comes_back_guaranteed(
    e2e_cluster: E2ECluster, extender: Extender, gang_ns: str
) -> None:
    core = e2e_cluster.core
    big = submit_gang(core, gang_ns, "big", 3, 8, "nlp")
    wait_running(core, gang_ns, big)
    opp = submit_gang(core, gang_ns, "opp", 1, 8, "nlp", priority=-1, spec_extra={"promoteWhenQuota": True})
    stay = submit_gang(core, gang_ns, "stay", 1, 8, "nlp", priority=-1)
    wait_running(core, gang_ns, [*opp, *stay])
    assert cell_types(core, gang_ns, opp[0]) == ("",) * 8

    delete_pods(core, gang_ns, big)
    wait_gone(core, gang_ns, big)
    wait_until(
        "the promoted gang's bind info to name nlp's quota cells",
        lambda: all(cell_types(core, gang_ns, opp[0])) or None,
        30,
    )
    assert cell_types(core, gang_ns, stay[0]) == ("",) * 8
    assert extender.summary()["virtualClusters"]["nlp"]["used"] == 8

    extender.restart()
    assert extender.summary()["virtualClusters"]["nlp"]["used"] == 8, "not back guaranteed"
    nxt = submit_gang(core, gang_ns, "next", 3, 8, "nlp")
    wait_until("gang next to be filtered", lambda: seen_by_scheduler(core, gang_ns, nxt[0]), 30)
    hold_for("nlp holds 8 GPUs for opp: gang next must not bind", lambda: none_bound(core, gang_ns, nxt), 3)
    delete_pods(core, gang_ns, opp)
    wait_running(core, gang_ns, nxt, timeout=90)
    assert extender.summary()["virtualClusters"]["nlp"]["used"] == 24  # stay is still a guest
