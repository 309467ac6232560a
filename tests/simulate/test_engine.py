"""The event-driven replay, on tiny clusters with hand-computed answers."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from loadtest.simulate.engine import simulate
from loadtest.simulate.policies import CorePolicy, Policy
from tests.simulate.helpers import jobs, run, starts, tiny

# a: 8-GPU job at 0 for 100 s; a: 4-GPU job at 10 for 50 s; b: 8-GPU job at 20 for 10 s
BORROW = jobs(("a", 0, 100, 8), ("a", 10, 50, 4), ("b", 20, 10, 8))


@pytest.mark.parametrize("policy", ["hived-like", "first-fit"])
def test_quota_policies_make_the_second_job_wait_for_the_first(policy: str) -> None:
    r = run(policy, tiny({"a": 1, "b": 1}), BORROW)
    assert starts(r) == {0: 0.0, 1: 100.0, 2: 20.0}
    assert [r.records[i].queueing for i in range(3)] == [0.0, 90.0, 0.0]
    assert r.preemptions == 0


def _check_borrow_and_preempt(p: Policy) -> None:
    # j1 borrows b's idle node at 10; b's own job preempts it at 20; j1 runs again when b's job
    # ends at 30 (its VC's quota is still full, so opportunistically again)
    r = simulate(p, BORROW)
    assert starts(r) == {0: 0.0, 1: 30.0, 2: 20.0}
    j1 = r.records[1]
    assert (j1.queueing, j1.waited, j1.first_start, j1.preempted) == (20.0, 10.0, 10.0, 1)
    assert j1.lost_gpu_seconds == 40.0  # 10 s on 4 GPUs
    assert j1.placement is not None and j1.placement.opportunistic
    assert r.preemptions == 1
    assert r.records[2].queueing == 0.0


@pytest.mark.parametrize("policy", ["topogang", "kueue-like"])
def test_a_job_that_saves_loses_only_the_run_since_its_last_save(policy: str) -> None:
    # as above, but every job saves every 4 s: j1's 10 s run before the preemption keeps 8 s, loses
    # 2 s on 4 GPUs, and its next run (from 30) is 42 s; its queueing counts the 8 s saved as
    # running (30 - 10 - 8), the 2 s lost as waiting
    saving = [replace(j, checkpoint_seconds=4) for j in BORROW]
    r = run(policy, tiny({"a": 1, "b": 1}), saving)
    j1 = r.records[1]
    assert (j1.start, j1.end, j1.preempted, j1.lost_gpu_seconds) == (30.0, 72.0, 1, 8.0)
    assert (j1.queueing, j1.waited, j1.saved, j1.kept_run) == (12.0, 10.0, 8.0, 8.0)
    again = run(policy, tiny({"a": 1, "b": 1}), BORROW)  # the same week without saves: nothing kept
    assert (again.records[1].end, again.records[1].lost_gpu_seconds) == (80.0, 40.0)


def test_topogang_borrows_idle_cells_and_gives_them_back_by_preemption() -> None:
    _check_borrow_and_preempt(CorePolicy(tiny({"a": 1, "b": 1}), borrowing=True))


def test_simulator_what_if_preemption_gives_the_same_answer() -> None:
    p = CorePolicy(tiny({"a": 1, "b": 1}), borrowing=True)
    p.core_preempts = False  # as with a core that names no victims
    _check_borrow_and_preempt(p)
    assert p.fallback_preemptions == 1


def test_preemption_takes_only_the_gangs_in_the_way() -> None:
    # b's node is borrowed by a 4-GPU gang in one half and two 2-GPU gangs in the other; b's 4-GPU
    # job needs one half, so exactly the gangs of one half go and the others keep running
    js = jobs(
        ("a", 0, 1000, 8),
        ("a", 1, 1000, 4),
        ("a", 2, 1000, 2),
        ("a", 3, 1000, 2),
        ("b", 10, 5, 4),
    )
    for core_preempts in (True, False):
        p = CorePolicy(tiny({"a": 1, "b": 1}), borrowing=True)
        p.core_preempts = core_preempts  # False: the simulator's what-if, which takes all three off
        r = simulate(p, js)
        assert r.records[4].queueing == 0.0
        preempted = {i for i, rec in r.records.items() if rec.preempted}
        assert preempted in ({1}, {2, 3}), (core_preempts, preempted)
        assert r.preemptions == len(preempted)
        for i in {1, 2, 3} - preempted:
            assert r.records[i].runs == 1 and r.records[i].start == r.records[i].first_start


def test_fifo_per_vc_head_blocks_its_own_vc_only() -> None:
    # a's 8-GPU head (quota full until 100) blocks a's 1-GPU job behind it; b is not blocked
    js = jobs(("a", 0, 100, 4), ("a", 1, 10, 8), ("a", 2, 5, 1), ("b", 3, 5, 1))
    for policy in ("hived-like", "first-fit", "topogang"):
        r = run(policy, tiny({"a": 1, "b": 1}), js)
        first = {i: rec.first_start for i, rec in r.records.items()}
        assert first[3] == 3.0, policy
        assert first[2] is not None and first[1] is not None
        assert first[2] >= first[1], policy  # never overtakes the head of its own VC
    assert starts(run("hived-like", tiny({"a": 1, "b": 1}), js)) == {0: 0.0, 1: 100.0, 2: 110.0, 3: 3.0}
    # topogang: the head borrows b's node at 1, so the 1-GPU job starts at 2 in a's quota; b's job
    # takes its node back at 3 and the borrower runs again when it ends at 8 (the borrower has run
    # 2 s: far less than `topology.room.MIN_LOSS_HOURS`, so b's job preempts rather than start as a
    # guest in the free GPUs of a's node)
    assert starts(run("topogang", tiny({"a": 1, "b": 1}), js)) == {0: 0.0, 1: 8.0, 2: 2.0, 3: 3.0}


def test_waiting_heads_start_oldest_first_when_capacity_frees() -> None:
    # no quota binds (elastic first-fit): both nodes busy, then one frees at 50; of the two VC
    # heads waiting for it, the one submitted first gets it, whatever its VC's name
    for first, second in (("b", "a"), ("a", "b")):
        js = jobs(("a", 0, 100, 8), ("b", 0, 50, 8), (first, 5, 10, 8), (second, 6, 10, 8))
        r = run("first-fit-elastic", tiny({"a": 1, "b": 1}), js)
        assert starts(r) == {0: 0.0, 1: 0.0, 2: 50.0, 3: 60.0}


def test_jobs_larger_than_their_quota_are_dropped_for_every_policy() -> None:
    js = jobs(("a", 0, 10, 16), ("a", 1, 10, 1), ("zzz", 2, 10, 1))
    for policy in ("topogang", "hived-like", "first-fit"):
        r = run(policy, tiny({"a": 1, "b": 1}), js)
        assert r.dropped == {"larger than its VC's quota": [0], "VC without quota": [2]}
        assert starts(r) == {1: 1.0}


def test_skipping_retries_for_independent_vcs_changes_no_decision() -> None:
    rng = random.Random(3)
    specs = []
    t = 0.0
    for _ in range(300):
        t += rng.expovariate(1 / 30)
        specs.append((rng.choice("abc"), t, rng.expovariate(1 / 600), rng.choice([1, 1, 1, 2, 4, 8, 16])))
    js = jobs(*specs)
    cluster = tiny({"a": 3, "b": 3, "c": 2}, nodes=8, rack_size=4)
    fast = CorePolicy(cluster, borrowing=False)
    slow = CorePolicy(cluster, borrowing=False)
    slow.vcs_independent = False
    a, b = simulate(fast, js), simulate(slow, js)
    assert starts(a) == starts(b)
    assert a.attempts < b.attempts


def test_progress_is_reported_up_to_the_total() -> None:
    seen: list[tuple[int, int]] = []
    js = jobs(("a", 0, 10, 1), ("a", 5, 10, 1), ("b", 50, 10, 1))
    simulate(
        CorePolicy(tiny({"a": 1, "b": 1}), borrowing=True), js, progress=lambda d, n: seen.append((d, n))
    )
    assert seen[-1] == (3, 3)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)
