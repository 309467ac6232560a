"""kueue-like on hand-made traces whose outcome is known: borrowing, reclaim, TAS placement."""

from __future__ import annotations

from loadtest.simulate.engine import simulate
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


def test_best_effort_fifo_starts_a_later_job_that_fits_while_the_head_waits() -> None:
    # a holds 4 GPUs of its only node; its 8-GPU job cannot start (the cohort's other node is b's,
    # busy), but the 2-GPU job submitted after it fits: Kueue's BestEffortFIFO starts it at once,
    # where a StrictFIFO queue would hold it behind the head until time 100
    js = jobs(("a", 0, 100, 4), ("b", 0, 200, 8), ("a", 1, 50, 8), ("a", 2, 10, 2))
    r = run("kueue-like", tiny({"a": 1, "b": 1}), js)
    assert starts(r) == {0: 0, 1: 0, 2: 100, 3: 2}
    assert r.preemptions == 0


def test_in_one_round_the_job_within_its_quota_goes_before_an_older_borrower() -> None:
    # a's job 0 ends at 10 and frees a's node; waiting then: b's job 2 (b is at its quota, so it
    # would borrow; submitted first) and a's job 3 (within a's quota). Kueue orders a round's heads
    # by "borrows" before age: a's job takes the node and b's waits, with nothing preempted
    js = jobs(("a", 0, 10, 8), ("b", 0, 100, 8), ("b", 1, 30, 8), ("a", 2, 30, 8))
    r = run("kueue-like", tiny({"a": 1, "b": 1}), js)
    assert starts(r) == {0: 0, 1: 0, 3: 10, 2: 40}
    assert r.preemptions == 0


def test_reclaim_puts_back_a_candidate_whose_return_still_lets_the_job_fit() -> None:
    # b borrows node 2 with an older 4-GPU job (2: GPUs 0-3) and a newer 2-GPU job (3: GPUs 4-5);
    # a's 6-GPU job finds the cohort full. Newest first: job 3 off is not enough quota, job 2 off
    # is; then job 3 is put back, as the 6 GPUs still fit beside it (Kueue's fill-back), so only
    # job 2 goes, and the device plugin gives a's pod the lowest free GPUs around job 3's
    c = tiny({"a": 1, "b": 2}, nodes=3, rack_size=3)
    js = jobs(("b", 0, 100, 8), ("b", 0, 100, 8), ("b", 1, 100, 4), ("b", 2, 100, 2), ("a", 5, 100, 6))
    r = run("kueue-like", c, js)
    assert r.records[2].preempted == 1 and r.records[3].preempted == 0
    p = r.records[4].placement
    assert r.records[4].start == 5 and p is not None and p.pods == ((2, (0, 1, 2, 3, 6, 7)),)


def _tas_on(free: list[list[int]], rack_size: int, pods: tuple[int, ...]) -> tuple[int, ...]:
    policy = KueueLikePolicy(tiny({"a": len(free)}, nodes=len(free), rack_size=rack_size))
    policy.free = free
    got = policy._tas(pods)
    assert got is not None
    return tuple(n for n, _ in got)


def test_a_lone_pod_goes_to_the_node_that_holds_fewest_pods_of_its_size() -> None:
    # 6 and 5 free GPUs each hold one 4-GPU pod: Kueue's LeastFreeCapacity profile counts pods,
    # not GPUs, so the tie goes to the first node by name, not to the fuller node 1
    assert _tas_on([[2, 3, 4, 5, 6, 7], [3, 4, 5, 6, 7]], 2, (4,)) == (0,)
    # a 2-GPU pod: node 1 holds 2 of them, node 0 holds 3
    assert _tas_on([[2, 3, 4, 5, 6, 7], [3, 4, 5, 6, 7]], 2, (2,)) == (1,)


def test_a_gang_takes_the_rack_with_the_fewest_whole_free_nodes_that_hold_it() -> None:
    # rack 0 (nodes 0-2): 2 whole free nodes and 7 free GPUs on node 0; rack 1 (nodes 3-5): 2 whole
    # free nodes and 1 free GPU on node 3. Kueue's BestFit counts the pods a rack holds: a tie, so
    # the first rack by name, where a count of free GPUs would take the fuller rack 1
    whole = list(range(8))
    assert _tas_on([list(range(1, 8)), whole, whole, [7], whole, whole], 3, (8, 8)) == (1, 2)
    # rack 0 holds the gang with no node to spare, rack 1 with one: rack 0
    assert _tas_on([[], whole, whole, whole, whole, whole], 3, (8, 8)) == (1, 2)


def test_a_gang_no_rack_holds_fills_the_rack_with_most_room_then_the_best_fit() -> None:
    # racks of 2 with 1, 1 and 2 whole free nodes: a 3-node gang takes rack 2 whole, then the first
    # rack that holds the last pod (rack 0): 2 racks, where the lowest free nodes would span 3
    whole = list(range(8))
    assert _tas_on([whole, [], whole, [], whole, whole], 2, (8, 8, 8)) == (4, 5, 0)


def test_a_requeue_delay_holds_set_aside_jobs_while_new_arrivals_take_the_room() -> None:
    # a's job 2 waits (a borrower while a's job 0 runs). Job 0 ends at 10: at once, job 2 starts
    # then. With Kueue's requeue batch period (5 s here) job 2 is retried only at 15; b's job 3,
    # arriving at 12, is not set aside, borrows the free node first, and job 2 reclaims it at 15
    js = jobs(("a", 0, 10, 8), ("b", 0, 100, 8), ("a", 1, 10, 8), ("b", 12, 10, 8))
    c = tiny({"a": 1, "b": 1})
    r = run("kueue-like", c, js)
    assert starts(r) == {0: 0, 1: 0, 2: 10, 3: 20} and r.preemptions == 0
    r = simulate(KueueLikePolicy(c, requeue_delay=5.0), js)
    assert starts(r) == {0: 0, 1: 0, 2: 15, 3: 30}  # job 2 ends at 25, job 3 is retried 5 s later
    assert r.records[3].preempted == 1 and r.records[3].first_start == 12
