"""A tenant-written gang timeout (`topogang.io/gang-timeout-seconds`, a PodGroup's
`scheduleTimeoutSeconds`, YuniKorn's `placeholderTimeoutInSeconds`) is at most coscheduling's
int32 of seconds: a larger one would become a reservation deadline that neither the durable
reservation object (`reservation_objects.encode`) nor the gang ledger (`ledger_status.document`,
`rfc3339`) can write, so the pod's filter would answer an internal error after its gang was
reserved, every later sync of GangReservations (every tenant's) would fail while that gang exists,
and `/v1/gangs` would fail for every namespace. It is the pod's error, and changes nothing."""

from __future__ import annotations

from typing import Any

import pytest

from extender.conventions.common import ObjRef
from extender.conventions.resolve import resolve
from extender.kube import reservation_sync as reservations
from extender.kube.client import pod_path
from tests.conventions.manifests import pod as convention_pod
from tests.extender.helpers import Clock, run, spec
from tests.extender.helpers import pod as spec_pod
from tests.extender.test_kube_durable import COLLECTION, cluster, start
from topology.decisions import UserError

VOLCANO = "scheduling.k8s.io/group-name"
COSCHED = "scheduling.x-k8s.io/pod-group"
MIN = "topogang.io/min-member"
TIMEOUT = "topogang.io/gang-timeout-seconds"
STYLE = "topogang.io/gang-scheduling-style"
YK_GROUP, YK_GROUPS = "yunikorn.apache.org/task-group-name", "yunikorn.apache.org/task-groups"
YK_POLICY = "yunikorn.apache.org/schedulingPolicyParameters"


def hostile(name: str, timeout: str, style: str = "Hard") -> dict[str, Any]:
    ann = {VOLCANO: "squat", MIN: "2", TIMEOUT: timeout, STYLE: style}
    return convention_pod(name, "nlp", gpus=1, annotations=ann, uid=f"uid-{name}")


@pytest.mark.parametrize("timeout", ["1e15", "1e308"])
@pytest.mark.parametrize("style", ["Hard", "Soft"])
def test_a_timeout_no_deadline_can_hold_is_a_user_error(timeout: str, style: str) -> None:
    with pytest.raises(UserError, match="gang-timeout-seconds"):
        resolve(hostile("w0", timeout, style), "u", "nlp", "w0", namespace_vcs={"nlp": "nlp"})


def test_a_huge_pod_group_or_placeholder_timeout_is_a_user_error() -> None:
    p = convention_pod("w0", "nlp", gpus=1, labels={COSCHED: "pg"})
    pg = {"spec": {"minMember": 2, "scheduleTimeoutSeconds": 10**15}}
    with pytest.raises(UserError, match="scheduleTimeoutSeconds"):
        resolve(
            p,
            "u",
            "nlp",
            "w0",
            namespace_vcs={"nlp": "nlp"},
            objects={ObjRef("coscheduling", "nlp", "pg"): pg},
        )
    groups = '[{"name": "w", "minMember": 2, "minResource": {"nvidia.com/gpu": 1}}]'
    ann = {YK_GROUP: "w", YK_GROUPS: groups, YK_POLICY: "placeholderTimeoutInSeconds=1e15"}
    p = convention_pod("w0", "nlp", gpus=1, labels={"applicationId": "a"}, annotations=ann)
    with pytest.raises(UserError, match="placeholderTimeoutInSeconds"):
        resolve(p, "u", "nlp", "w0", namespace_vcs={"nlp": "nlp"})


def test_the_hostile_pods_filter_is_a_clear_error_and_reserves_nothing() -> None:
    async def go() -> None:
        kube, clock = cluster(), Clock()
        a = await start(kube, clock)
        try:
            bad = kube.server.put(pod_path("nlp", "w0"), hostile("w0", "1e15"))
            r = await a.verb("filter", bad)
            assert "gang-timeout-seconds" in r["Error"], r["Error"]
            assert a.s.core.gang("nlp/squat") is None
        finally:
            await a.stop()

    run(go())


def test_one_tenants_timeout_stops_neither_other_tenants_reservations_nor_the_ledger(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Kubernetes mode. nlp's pod with a huge timeout; then vision's lone pod, reserved and not yet
    bound, which only the periodic sync writes (`test_kube_durable`: a restart finds it there)."""
    monkeypatch.setattr(reservations, "SYNC_SECONDS", 3600.0)  # the first sync runs at start only

    async def go() -> None:
        kube, clock = cluster(), Clock()
        a = await start(kube, clock)
        try:
            bad = kube.server.put(pod_path("nlp", "w0"), hostile("w0", "1e15"))
            await a.verb("filter", bad)  # whatever it answers
            solo = kube.server.put(
                pod_path("vision", "solo"), spec_pod("s0", "solo", "vision", spec("vision", 8))
            )
            assert (await a.verb("filter", solo))["NodeNames"]
            kube.server.add_token("t-viewer", "viewer", audiences=("topogang",))
            kube.server.grant("viewer", "gangs", "list")
            got = await a.http.get("/v1/gangs", headers={"Authorization": "Bearer t-viewer"})
            ledger_ok = got.status_code
        finally:
            await a.stop()
        for fn in a.service.on_stop:  # the same sync that runs every second
            await fn()
        written = sorted(o["spec"]["gang"] for o in kube.server.list(COLLECTION)[0])
        assert "vision/pod:solo" in written, written
        assert ledger_ok == 200, got.text[:300]

    run(go())
