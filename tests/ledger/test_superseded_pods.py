"""The pods of a superseded attempt, as the tenant door asks after them (`ledger_api.gang_of_pod`).

A newer attempt lets the old attempt's gang go: its pods are in no gang any more, but their
barriers may still be polling. Until each pod is gone the ledger names its own framework for it (in
its own namespace, under its own name and UID), so the door lets it reach its framework's route,
which answers its stale attempt with 409. A pod whose attempt was released (not expired) but not
superseded is named nothing, as before; the pods kept are bounded, the oldest go first.
"""

from __future__ import annotations

from extender.gangs.ledger_records import Identity, Parked, ParkedPod, PodFacts, Record
from extender.http.doors import GangRef, PodRef
from extender.http.ledger_api import gang_of_pod
from tests.ledger.fc import fc_pod
from tests.ledger.test_ledger_phases import World


def released(w: World, gang: str) -> None:
    got = w.core.delete_gang(gang)
    assert got is not None
    w.ledger.released(w.core, got, w.wait_of)


def test_a_superseded_attempts_pod_names_its_own_framework_until_it_is_gone() -> None:
    w = World()
    old = w.seen(fc_pod("ml", "tf", "ps", 0, attempt="0_a"))
    w.place(old)
    w.bind(old)
    me = PodRef("ml", old.name, old.uid)
    assert gang_of_pod(w.ledger, me) == GangRef("ml", "tf", True)
    new = fc_pod("ml", "tf", "ps", 0, attempt="1_b", uid="ps-0-of-1_b")
    assert w.ledger.seen(w.req(new), new).superseded == old.gang
    released(w, old.gang)
    assert old.uid not in w.ledger.pods
    assert gang_of_pod(w.ledger, me) == GangRef("ml", "tf", True)  # the door: its own framework
    assert isinstance(w.ledger.resolve(w.core, "ml", "tf", "0_a"), str)  # the route: 409
    for other in (
        PodRef("nlp", old.name, old.uid),
        PodRef("ml", "tf-ps-1", old.uid),
        PodRef("ml", old.name, "x"),
    ):
        assert gang_of_pod(w.ledger, other) is None  # not that pod: nothing
    w.ledger.pod_gone(w.core, old.uid, w.wait_of)
    assert gang_of_pod(w.ledger, me) is None


def test_a_released_attempt_nothing_superseded_is_named_nothing() -> None:
    w = World()
    pr = w.seen(fc_pod("ml", "tf", "ps", 0, attempt="0_a"))
    w.place(pr)
    w.bind(pr)
    released(w, pr.gang)  # let go, say because every pod of it was deleted: no newer attempt
    assert gang_of_pod(w.ledger, PodRef("ml", pr.name, pr.uid)) is None


def test_a_pod_of_an_expired_attempt_filtered_again_is_a_member_again() -> None:
    """An expired attempt's pods are kept aside too (a newer attempt may supersede it while they
    live, and until then they read their gang's tombstone, `test_expired_pods`); one filtered again
    joins its gang placed afresh, and is no longer kept aside."""
    w = World()
    ps, worker = (w.seen(fc_pod("ml", "tf", r, 0, attempt="0_a")) for r in ("ps", "worker"))
    w.place(ps)
    w.bind(ps)
    for r in w.core.expire(w.clock() + 61):
        w.ledger.released(w.core, r, w.wait_of)
    assert {ps.uid, worker.uid} <= set(w.ledger.parked.pods)
    assert gang_of_pod(w.ledger, PodRef("ml", worker.name, worker.uid)) == GangRef("ml", "tf", True)
    w.seen(fc_pod("ml", "tf", "worker", 0, attempt="0_a"))
    assert worker.uid not in w.ledger.parked.pods and worker.uid in w.ledger.pods
    assert gang_of_pod(w.ledger, PodRef("ml", worker.name, worker.uid)) == GangRef("ml", "tf", True)


def test_the_pods_kept_are_bounded_and_go_with_their_framework() -> None:
    parked = Parked(limit=2)
    for i in range(3):
        fw = "tf" if i else "lm"
        rec = Record(f"ml/{fw}/0_a", Identity("ml", fw, None, "0_a"), "vision", 1)
        parked.park(f"u{i}", PodFacts(f"u{i}", "ml", f"p{i}", rec.gang), rec)
    assert list(parked.pods) == ["u1", "u2"]  # the oldest went first
    assert parked.of("u1", "ml", "p1") == ParkedPod("ml", "p1", "tf", "ml/tf/0_a", True)
    assert parked.of("u1", "ml", "p2") is None
    parked.keep({("ml", "lm")}, {})
    assert not parked.pods
