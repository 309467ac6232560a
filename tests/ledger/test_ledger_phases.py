"""`extender.gangs.ledger` on its own: phases, counts, attempts, tombstones, wake-ups, over a real core."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from extender.gangs.ledger import GangLedger
from extender.gangs.ledger_records import Phase, Record, newer, parse_phase, reached, rfc3339
from extender.gangs.podspec import PodRequest, pod_request
from extender.gangs.waiting import Waiting
from tests.extender.helpers import Clock, example
from tests.ledger.fc import fc_pod, members
from topology.core import Core
from topology.decisions import Released, Wait, WaitCode


def ph(rec: Record) -> Phase:
    return rec.phase  # read through a call: mypy would keep the narrowing of an attribute


class World:
    """A core, a ledger and the pods of one framework, driven by hand."""

    def __init__(self) -> None:
        self.clock = Clock(1000.0)
        self.core = Core(example().spec)
        self.ledger = GangLedger(clock=self.clock, wall=lambda: self.clock.t + 1.7e9)
        self.waiting: dict[str, Waiting] = {}

    def wait_of(self, gang: str) -> Waiting | None:
        return self.waiting.get(gang)

    def req(self, pod: dict[str, Any]) -> PodRequest:
        m = pod["metadata"]
        return pod_request(pod, m["uid"], m["namespace"], m["name"], ttl_seconds=60.0)

    def seen(self, pod: dict[str, Any]) -> PodRequest:
        pr = self.req(pod)
        self.ledger.seen(pr, pod)
        return pr

    def place(self, pr: PodRequest) -> None:
        got = self.core.reserve(pr.request, self.clock())
        assert not isinstance(got, Wait)
        self.ledger.placed(self.core, pr.gang, self.wait_of)

    def bind(self, pr: PodRequest, ip: str | None = "10.0.0.1", *, finish: bool = True) -> None:
        self.core.claim(pr.gang, pr.uid, pr.leaf_number, self.clock(), slot_key=pr.slot_key, pod_name=pr.name)
        self.ledger.binding(self.core, pr.gang, pr.uid, self.wait_of)
        if finish:
            self.bound(pr, ip)

    def bound(self, pr: PodRequest, ip: str | None = "10.0.0.1") -> None:
        if ip is not None:
            self.ledger.set_ip(pr.uid, ip)
        self.ledger.bound(self.core, pr.gang, pr.uid, self.wait_of)

    def rec(self, pr: PodRequest) -> Record:
        return self.ledger.records[pr.gang]

    def doc(self, pr: PodRequest) -> dict[str, Any]:
        return self.ledger.status(self.core, self.rec(pr), self.wait_of)


def test_phase_order_and_names() -> None:
    assert parse_phase("ready") is Phase.READY and parse_phase("Bound") is Phase.BOUND
    assert parse_phase("Running") is None
    assert reached(Phase.READY, Phase.BOUND) and not reached(Phase.BINDING, Phase.BOUND)
    assert reached(Phase.BROKEN, Phase.READY) and reached(Phase.EXPIRED, Phase.PENDING)
    assert reached(Phase.BROKEN, Phase.BROKEN) and not reached(Phase.READY, Phase.EXPIRED)
    assert newer("1_b", "0_a") and not newer("0_a", "1_b") and newer("x", "y")
    assert rfc3339(0.0) == "1970-01-01T00:00:00Z" and rfc3339(None) is None


def test_a_gang_walks_pending_reserved_binding_bound_ready() -> None:
    w = World()
    ps, w0, w1 = (w.req(p) for p in members("ml", "tf"))
    w.seen(members("ml", "tf")[2])
    rec = w.rec(w1)
    assert ph(rec) is Phase.PENDING and w.doc(w1)["members"][0]["state"] == "Pending"
    w.place(w1)
    assert ph(rec) is Phase.RESERVED
    doc = w.doc(w1)
    assert (doc["expected"], doc["reserved"], doc["bound"]) == (3, 3, 0)
    assert [(m["taskRole"], m["taskIndex"], m["rank"]) for m in doc["members"]] == [
        ("ps", 0, 0),
        ("worker", 0, 1),
        ("worker", 1, 2),
    ]
    assert doc["gang"] == {
        "namespace": "ml",
        "name": "tf",
        "frameworkUID": "uid-tf",
        "attemptInstanceUID": "0_cm-a",
        "gang": "ml/tf/0_cm-a",
    }
    assert doc["placement"]["virtualCluster"] == "vision" and doc["expiresAt"] is not None
    for p in members("ml", "tf"):
        w.seen(p)
    w.bind(w1, finish=False)
    assert ph(rec) is Phase.BINDING and w.doc(w1)["members"][2]["state"] == "Binding"
    w.bound(w1, ip="10.0.0.3")
    assert ph(rec) is Phase.RESERVED and w.doc(w1)["bound"] == 1
    w.bind(ps, ip=None)
    w.bind(w0, ip="10.0.0.2")
    assert ph(rec) is Phase.BOUND and w.doc(w0)["withPodIP"] == 2
    assert w.doc(w0)["boundAt"] is not None and w.doc(w0)["readyAt"] is None
    v = rec.version
    w.ledger.set_ip(ps.uid, "10.0.0.1")
    w.ledger.touch(w.core, ps.gang, w.wait_of)
    doc = w.doc(ps)
    assert ph(rec) is Phase.READY and doc["ready"] and doc["withPodIP"] == 3 and rec.version > v
    assert [m["podIP"] for m in doc["members"]] == ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    assert doc["readyAt"] is not None and doc["expiresAt"] is None


def test_a_member_lost_after_bound_breaks_the_gang_until_its_retry_is_bound() -> None:
    w = World()
    prs = [w.seen(p) for p in members("ml", "tf")]
    w.place(prs[0])
    for pr in prs:
        w.bind(pr)
    rec = w.rec(prs[0])
    assert ph(rec) is Phase.READY
    node = w.doc(prs[0])["members"][2]["node"]
    w.core.release_pod(prs[2].uid, w.clock())
    w.ledger.pod_gone(w.core, prs[2].uid, w.wait_of)
    assert ph(rec) is Phase.BROKEN and w.doc(prs[0])["members"][2]["state"] == "Free"
    retry = w.seen(fc_pod("ml", "tf", "worker", 1, uid="retry"))
    w.bind(retry, finish=False)
    assert ph(rec) is Phase.BINDING
    w.bound(retry)
    doc = w.doc(retry)
    assert ph(rec) is Phase.READY and doc["members"][2]["podUID"] == "retry"
    assert doc["members"][2]["node"] == node


def test_a_deletion_pending_member_is_not_ready() -> None:
    w = World()
    prs = [w.seen(p) for p in members("ml", "tf")]
    w.place(prs[0])
    for pr in prs:
        w.bind(pr)
    pod = fc_pod("ml", "tf", "worker", 0)
    pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    pod["status"]["podIP"] = "10.0.0.2"
    w.ledger.observe(w.core, pod, w.wait_of)
    assert w.rec(prs[0]).phase is Phase.BROKEN
    assert w.doc(prs[0])["members"][1]["state"] == "Deleting"


def test_the_kube_edge_learns_identity_and_ips_of_a_recovered_gang() -> None:
    w = World()
    pods = members("ml", "tf")
    prs = [w.req(p) for p in pods]
    w.core.reserve(prs[0].request, w.clock())
    for pr in prs:
        w.core.claim(pr.gang, pr.uid, pr.leaf_number, w.clock(), slot_key=pr.slot_key, pod_name=pr.name)
    for i, p in enumerate(pods):
        p["status"]["podIP"] = f"10.1.0.{i}"
        w.ledger.observe(w.core, p, w.wait_of)
    got = w.ledger.resolve(w.core, "ml", "tf", "0_cm-a")
    assert isinstance(got, Record) and got.phase is Phase.READY
    assert w.ledger.resolve(w.core, "ml", "tf", "1_new") is None  # newer, not seen yet: unknown


def test_a_newer_attempt_supersedes_and_an_older_one_is_stale() -> None:
    w = World()
    old = w.seen(fc_pod("ml", "tf", "ps", 0, attempt="1_a"))
    w.place(old)
    event = w.rec(old).phase_changed
    seen = w.ledger.seen(w.req(fc_pod("ml", "tf", "ps", 0, attempt="2_b")), fc_pod("ml", "tf", "ps", 0))
    assert seen.superseded == old.gang and seen.stale is None
    released = w.core.delete_gang(old.gang)
    assert released is not None
    w.ledger.released(w.core, released, w.wait_of)
    assert event.is_set() and old.gang not in w.ledger.records
    stale = w.ledger.resolve(w.core, "ml", "tf", "1_a")
    assert isinstance(stale, str) and "superseded by attempt 2_b" in stale
    again = w.ledger.seen(w.req(fc_pod("ml", "tf", "ps", 0, attempt="1_a")), fc_pod("ml", "tf", "ps", 0))
    assert again.stale is not None


def test_an_expired_reservation_leaves_a_tombstone() -> None:
    w = World()
    pr = w.seen(fc_pod("ml", "tf", "ps", 0))
    w.place(pr)
    w.bind(pr)
    for r in w.core.expire(w.clock() + 61):
        w.ledger.released(w.core, r, w.wait_of)
    rec = w.rec(pr)
    doc = w.doc(pr)
    assert ph(rec) is Phase.EXPIRED and doc["phase"] == "Expired" and not doc["ready"]
    assert len(doc["members"]) == 3 and doc["members"][0]["podUID"] == pr.uid
    assert rec.last_gang is None  # the tombstone keeps its document, not the core's gang (memory)
    assert w.ledger.resolve(w.core, "ml", "tf", None) is rec
    w.clock.t += 5000  # past the tombstone's time
    w.ledger.prune()
    assert w.ledger.resolve(w.core, "ml", "tf", None) is None


def test_pending_says_why_and_whether_it_can_ever_fit() -> None:
    w = World()
    pod = fc_pod("ml", "big", "ps", 0, vc="research", gpus=8, roles={"ps": 1, "worker": 2})
    pr = w.seen(pod)
    wait = w.core.reserve(pr.request, w.clock())  # 24 GPUs, research's whole quota is 16
    assert isinstance(wait, Wait) and wait.reason.code is WaitCode.INSUFFICIENT_QUOTA
    w.waiting[pr.gang] = Waiting(pr.gang, "research", 0, 3, wait.reason, 0.0, 0.0)
    w.ledger.touch(w.core, pr.gang, w.wait_of)
    doc = w.doc(pr)
    assert doc["phase"] == "Pending" and doc["neverFits"] and "can never run" in doc["reason"]
    bad = fc_pod("ml", "bad", "ps", 0)
    w.ledger.user_error(bad, "ml", None, "topogang: User Error: leafCellNumber: is non-positive")
    got = w.ledger.resolve(w.core, "ml", "bad", None)
    assert isinstance(got, Record) and got.never_fits and "User Error" in got.reason


def test_phase_changes_wake_phase_waiters_and_any_change_wakes_version_waiters() -> None:
    w = World()
    prs = [w.seen(p) for p in members("ml", "tf")]
    w.place(prs[0])
    rec = w.rec(prs[0])
    phase_ev, any_ev = rec.phase_changed, rec.changed
    w.bind(prs[0])  # Binding then back to Reserved: two phase changes
    assert phase_ev.is_set() and any_ev.is_set()
    phase_ev, any_ev = rec.phase_changed, rec.changed
    w.ledger.touch(w.core, prs[0].gang, w.wait_of)  # a change that moves no phase
    assert any_ev.is_set() and not phase_ev.is_set()


def test_other_releases_forget_the_gang() -> None:
    w = World()
    pr = w.seen(fc_pod("ml", "tf", "ps", 0))
    w.place(pr)
    w.ledger.released(w.core, Released(pr.gang, "all members gone"), w.wait_of)
    assert w.ledger.resolve(w.core, "ml", "tf", None) is None


@pytest.mark.parametrize("name", ["team/llm", "llm"])
def test_affinity_groups_resolve_with_and_without_their_namespace_prefix(name: str) -> None:
    w = World()
    pod = fc_pod("team", "x", "ps", 0)
    del pod["metadata"]["annotations"]["FC_FRAMEWORK_NAME"]  # not a FrameworkController pod
    pod["metadata"]["annotations"]["topogang.io/pod-scheduling-spec"] = (
        '{"virtualCluster": "vision", "leafCellNumber": 4, "affinityGroup": {"name": "'
        + name
        + '", "members": [{"podNumber": 2, "leafCellNumber": 4}]}}'
    )
    pr = w.seen(pod)
    w.place(pr)
    got = w.ledger.resolve(w.core, "team", "llm", None)
    assert isinstance(got, Record) and got.gang == "team/llm" and got.phase is Phase.RESERVED
    assert w.ledger.resolve(w.core, "team", "team/llm", None) is got
    assert w.ledger.resolve(w.core, "other", "llm", None) is None
    assert w.ledger.resolve(w.core, "other", "team/llm", None) is None
    assert [r.gang for r in w.ledger.all(w.core)] == ["team/llm"]


def test_a_pod_seen_in_another_gang_leaves_the_first_ones_record() -> None:
    """An elastic member is first an extra (its own one-pod gang), then takes a slot of the core
    when one opens: the extra's record must let it go, or it keeps a pod that no longer comes and
    is never pruned."""
    w = World()
    pr = w.seen(fc_pod("ml", "tf", "ps", 0))
    extra = replace(pr, request=replace(pr.request, name=f"{pr.gang}/extra/{pr.name}"))
    w.ledger.seen(extra, fc_pod("ml", "tf", "ps", 0))
    assert pr.uid in w.ledger.records[extra.gang].pods
    w.ledger.seen(pr, fc_pod("ml", "tf", "ps", 0))  # filtered again: a member of the core now
    assert pr.uid not in w.ledger.records[extra.gang].pods
    w.ledger.pod_gone(w.core, pr.uid, w.wait_of)
    w.clock.t += 5000
    w.ledger.prune()
    assert extra.gang not in w.ledger.records and pr.gang not in w.ledger.records


def test_a_record_whose_gang_the_core_dropped_unheard_is_pruned() -> None:
    """The core lets a reservation go by itself when a preemptor outbids it, and the ledger is not
    told: the record stays in its last phase (Reserved). Once its gang is gone from the core and no
    member has been seen for a while, pruning drops it as it drops a forgotten Pending one."""
    w = World()
    pr = w.seen(fc_pod("ml", "tf", "ps", 0))
    w.place(pr)
    assert ph(w.rec(pr)) is Phase.RESERVED
    w.core.delete_gang(pr.gang)  # as an outbid reservation goes: the ledger hears nothing
    w.ledger.pod_gone(w.core, pr.uid, w.wait_of)
    w.clock.t += 5000
    w.ledger.prune(w.core)
    assert pr.gang not in w.ledger.records and ("ml", "tf") not in w.ledger.frameworks
    kept = w.seen(fc_pod("ml", "tf", "ps", 0, attempt="1_b"))  # a placed gang's record stays
    w.place(kept)
    w.clock.t += 5000
    w.ledger.prune(w.core)
    assert kept.gang in w.ledger.records
