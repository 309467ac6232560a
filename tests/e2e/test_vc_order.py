"""A VC's gangs in the order they were created (`topogang.vcQueueing: StrictFIFO`), behind the real
kube-scheduler: a later gang that would fit waits [Queued] behind the VC's older gang, binds nothing
meanwhile, and is requeued in kube-scheduler (it sits in its unschedulable queue) once that gang is
placed and, later, once room frees for it. The cluster is the example config (nlp: 3 nodes)."""

from __future__ import annotations

import pytest
from kubernetes import client

from tests.e2e.conftest import E2ECluster, Extender
from tests.e2e.helpers import (
    delete_pods,
    hold_for,
    none_bound,
    pod_events,
    seen_by_scheduler,
    submit_gang,
    wait_gone,
    wait_running,
    wait_until,
)

pytestmark = pytest.mark.e2e

HOLD_SECONDS = 4.0


def one_running_and_big_filtered(core: client.CoreV1Api, ns: str) -> tuple[list[str], list[str]]:
    """Gang `one` runs on one of nlp's three nodes; gang `big` (nlp's whole quota) has been filtered
    and waits for it. The pods of both."""
    one = submit_gang(core, ns, "one", 1, 8, "nlp")
    wait_running(core, ns, one)
    big = submit_gang(core, ns, "big", 3, 8, "nlp")
    wait_until("gang big to be filtered", lambda: seen_by_scheduler(core, ns, big[0]), 30)
    return one, big


def small_waits_behind_big(core: client.CoreV1Api, ns: str) -> list[str]:
    """Gang `small` (it would fit on a free nlp node) waits [Queued] behind big and binds nothing."""
    small = submit_gang(core, ns, "small", 1, 8, "nlp")

    def queued() -> str | None:
        return next((e for e in pod_events(core, ns, small[0]) if "[Queued]" in e), None)

    event = wait_until("gang small to wait behind big", queued, 30)
    assert f"gang {ns}/big" in event, event
    hold_for("small must not bind while big waits", lambda: none_bound(core, ns, small), HOLD_SECONDS)
    return small


def test_a_later_gang_waits_behind_the_vcs_older_gang_and_starts_after_it(
    e2e_cluster: E2ECluster, extender: Extender, gang_ns: str
) -> None:
    core = e2e_cluster.core
    one, big = one_running_and_big_filtered(core, gang_ns)
    small = small_waits_behind_big(core, gang_ns)
    usage = extender.summary()["virtualClusters"]["nlp"]
    assert usage["quota"] - usage["used"] == 16, f"two nlp nodes stay free for big: {usage}"

    wait_gone(core, gang_ns, delete_pods(core, gang_ns, one))
    wait_running(core, gang_ns, big)  # big goes first; small now waits for nlp's quota, big's
    hold_for("small must not bind while big runs", lambda: none_bound(core, gang_ns, small), HOLD_SECONDS)
    wait_gone(core, gang_ns, delete_pods(core, gang_ns, big))
    wait_running(core, gang_ns, small)


def test_a_restart_keeps_the_older_gang_ahead(
    e2e_cluster: E2ECluster, extender: Extender, gang_ns: str
) -> None:
    """The extender restarts while `big` waits: the new process notes it `[Unasked]` from the pod
    list (`extender.kube.pending`), so a younger gang created right after the restart, which
    kube-scheduler tries first (its pod is new), waits behind big instead of taking nlp's quota."""
    core = e2e_cluster.core
    one, big = one_running_and_big_filtered(core, gang_ns)
    extender.restart()
    assert "1 gangs pending at the start of the lead" in extender.log()  # big, noted at the start
    status = extender.get(f"/v1/inspect/affinitygroups/{gang_ns}/big")["status"]
    # [Unasked], or already the core's answer: its pods were marked, so kube-scheduler asks at once
    assert status["waitReason"]["code"] in ("Unasked", "InsufficientQuota"), status
    small = small_waits_behind_big(core, gang_ns)
    wait_gone(core, gang_ns, delete_pods(core, gang_ns, one))
    wait_running(core, gang_ns, big)
    wait_gone(core, gang_ns, delete_pods(core, gang_ns, big))
    wait_running(core, gang_ns, small)
