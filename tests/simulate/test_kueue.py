"""kueue-like on hand-made traces whose outcome is known: borrowing, reclaim, TAS placement."""

from __future__ import annotations

from loadtest.simulate.kueue import KueueLikePolicy
from tests.simulate.helpers import jobs, run, starts, tiny


def test_a_lender_reclaims_from_the_newest_borrower_only() -> None:
    # a fills its node and borrows b's idle node with two 4-GPU jobs; b's 4-GPU job reclaims half of
    # it: the newest borrower (job 2) goes, the older one (job 1) keeps running
    js = jobs(("a", 0, 100, 8), ("a", 1, 100, 4), ("a", 2, 100, 4), ("b", 10, 100, 4))
    r = run("kueue-like", tiny({"a": 1, "b": 1}), js)
    assert starts(r) == {0: 0, 1: 1, 2: 100, 3: 10}
    assert r.records[2].preempted == 1 and r.records[1].preempted == 0 and r.preemptions == 1
    assert r.records[2].lost_gpu_seconds == 8 * 4  # ran 2..10 on 4 GPUs
    assert r.records[3].placement is not None and r.records[3].placement.nodes == (1,)


def test_a_borrower_waits_and_never_preempts() -> None:
    # the cohort is full (each VC on its own node): a's over-quota job may only borrow, so it waits
    # for a's own job to end instead of taking anything from b
    js = jobs(("a", 0, 50, 8), ("b", 0, 100, 8), ("a", 1, 10, 8))
    r = run("kueue-like", tiny({"a": 1, "b": 1}), js)
    assert starts(r) == {0: 0, 1: 0, 2: 50}
    assert r.preemptions == 0


def test_tas_puts_a_gang_in_the_smallest_domain_and_gpus_by_index() -> None:
    c = tiny({"a": 4}, nodes=4, rack_size=2)  # racks {0, 1} and {2, 3}
    js = jobs(("a", 0, 100, 2), ("a", 1, 100, 16), ("a", 2, 100, 4))
    r = run("kueue-like", c, js)
    place = [r.records[j].placement for j in range(3)]
    assert place[0] is not None and place[0].pods == ((0, (0, 1)),)
    assert place[1] is not None and place[1].nodes == (2, 3)  # rack 0 has no two whole nodes left
    # the fullest node that holds it, and the lowest free GPUs there (the device plugin's choice):
    # the 4-GPU job straddles the node's two halves, which topogang never does
    assert place[2] is not None and place[2].pods == ((0, (2, 3, 4, 5)),)


def test_tas_takes_the_fullest_rack_that_holds_the_gang() -> None:
    c = tiny({"a": 6}, nodes=6, rack_size=3)  # racks {0, 1, 2} and {3, 4, 5}
    js = jobs(("a", 0, 100, 1), ("a", 1, 100, 16))
    r = run("kueue-like", c, js)
    p = r.records[1].placement
    assert p is not None and p.nodes == (1, 2)  # rack 0 (23 free GPUs) before rack 1 (24)
    assert isinstance(KueueLikePolicy(c), KueueLikePolicy)
