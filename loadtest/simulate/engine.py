"""Event-driven replay of a trace through one policy, in simulated time (nothing sleeps).

Rules:
- Each VC has a FIFO queue; only its head may start (no backfilling), and it starts only when its
  whole gang is placed. A started job holds its GPUs for its whole duration.
- Events at one instant are taken together: finishes first (they free GPUs), then arrivals, then
  one scheduling pass. The pass offers a start to every VC head, oldest submit first, and repeats
  while anything changed (a preemption frees GPUs and puts its victims back at the front of their
  queues, so heads that failed may fit now).
- A head that failed is not asked again until GPUs have been freed somewhere (a finish or a
  preemption): starts and arrivals only take capacity away, so asking again could not succeed.
  This keeps a pass at O(VCs) placement attempts instead of rescanning queues.
- A policy may ask for Kueue's `BestEffortFIFO` instead (`Policy.queueing`): a head that cannot
  start steps aside until GPUs are freed somewhere, and the VC's next job is offered a start; each
  round offers one job per VC, the jobs that would stay within their VC's quota first, then the
  oldest (Kueue's scheduling cycle, `best_effort_pass`). Only there, and only for the calibration's
  what-if of a live control plane, a policy may also delay its queueing, space its starts and
  requeue after a release with a delay (`Policy.arrival_delay`, `admission_gap`, `requeue_delay`;
  all 0 by default).
- A preempted job restarts from scratch: its queueing delay runs from submit to the start of the
  run that completes (lost runs count as waiting), and the GPU time it lost is reported. A job
  that saves its work (`Job.checkpoint_seconds`, a what-if: `--checkpoint-every`; counted from the
  start of each run) restarts from its last save instead: it loses only the run since then, and its
  next run is that much shorter.
- Jobs that can never start are dropped at arrival, identically for every policy: a gang larger than
  its VC's whole quota (quota policies could never place it, and it would block its VC's FIFO
  forever), or a job of a VC without quota.
"""

from __future__ import annotations

import heapq
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from config.schema import BEST_EFFORT_FIFO
from loadtest.simulate.cluster import SimCluster, private_cluster
from loadtest.simulate.policies import Placement, Policy
from loadtest.simulate.slowdown import Slowdown, spread_level
from loadtest.simulate.trace import Job

DEFAULT_BIN_SECONDS = 600.0


@dataclass(slots=True)
class JobRecord:
    job: Job
    start: float | None = None  # start of the run that completed
    end: float | None = None
    first_start: float | None = None
    placement: Placement | None = None
    runs: int = 0
    preempted: int = 0
    lost_gpu_seconds: float = 0.0
    waited: float = 0.0  # time in queue, lost runs excluded
    queued_at: float = 0.0
    run_seconds: float = 0.0  # length of the run that completed, stretched by the locality model
    saved: float = 0.0  # traced seconds of work kept by earlier runs' saves (`checkpoint_seconds`)
    kept_run: float = 0.0  # run seconds of earlier runs up to their last save: not queueing
    stretch: float = 1.0  # the current run's locality factor: run seconds per traced second

    @property
    def jct(self) -> float:
        """Job completion time: submit to the end of the run that completed."""
        assert self.end is not None
        return self.end - self.job.submit

    @property
    def queueing(self) -> float:
        """Submit to the start of the run that completed, less what earlier runs kept by saving
        (a lost run counts as waiting, a saved one as running)."""
        assert self.start is not None
        return self.start - self.job.submit - self.kept_run


@dataclass(slots=True)
class Timeline:
    """Allocated and stranded GPUs as step functions of time, kept as time-weighted integrals over
    the measuring window and as per-bin averages for plots."""

    window: tuple[float, float]
    bin_seconds: float
    total_gpus: int
    _t: float = 0.0
    _alloc: int = 0
    _stranded: int = 0
    area_alloc: float = 0.0
    area_stranded: float = 0.0
    bins_alloc: list[float] = field(default_factory=list)
    bins_stranded: list[float] = field(default_factory=list)

    def advance(self, t: float) -> None:
        """Integrate the current levels from the last change up to `t`."""
        if t <= self._t:
            return
        lo, hi = self.window
        a, b = max(self._t, lo), min(t, hi)
        if b > a:
            self.area_alloc += self._alloc * (b - a)
            self.area_stranded += self._stranded * (b - a)
        # per-bin areas from time 0 to the end of the run
        start = self._t
        while start < t:
            k = int(start // self.bin_seconds)
            while len(self.bins_alloc) <= k:
                self.bins_alloc.append(0.0)
                self.bins_stranded.append(0.0)
            end = min(t, (k + 1) * self.bin_seconds)
            self.bins_alloc[k] += self._alloc * (end - start)
            self.bins_stranded[k] += self._stranded * (end - start)
            start = end
        self._t = t

    def set(self, allocated: int, stranded: int) -> None:
        self._alloc, self._stranded = allocated, stranded

    def mean_allocated(self) -> float:
        span = self.window[1] - self.window[0]
        return self.area_alloc / span if span > 0 else float(self._alloc)

    def mean_stranded(self) -> float:
        span = self.window[1] - self.window[0]
        return self.area_stranded / span if span > 0 else float(self._stranded)

    def series(self) -> tuple[list[float], list[float], list[float]]:
        """(bin start hours, mean allocated GPUs, mean stranded GPUs) per bin."""
        w = self.bin_seconds
        hours = [k * w / 3600 for k in range(len(self.bins_alloc))]
        return hours, [a / w for a in self.bins_alloc], [s / w for s in self.bins_stranded]


@dataclass(slots=True)
class Eviction:
    """One job preempted: by which job, when, after how long a run, and the GPU-seconds it lost (its
    run since its last save). `losses` groups them by preemptor and victim size."""

    by: int
    victim: int
    at: float
    ran: float
    lost_gpu_seconds: float


@dataclass(slots=True)
class RunResult:
    policy: str
    cluster: SimCluster
    records: dict[int, JobRecord]
    dropped: dict[str, list[int]]  # reason -> job ids
    timeline: Timeline
    preemptions: int = 0
    attempts: int = 0
    first_refusal_allocation: float | None = None  # allocated share at the first fragmentation refusal
    first_refusal_time: float | None = None
    refusals_tracked: bool = True  # False for merged private replays (one cluster per VC)
    end_time: float = 0.0
    wall_seconds: float = 0.0
    evictions: list[Eviction] = field(default_factory=list)  # every preemption, in order

    def completed(self) -> list[JobRecord]:
        return [r for r in self.records.values() if r.start is not None]


def unschedulable_reason(cluster: SimCluster, job: Job) -> str | None:
    """Why `job` can never start on `cluster` under any policy (the drop rule), or None."""
    if job.vc not in cluster.quotas or cluster.quotas[job.vc] <= 0:
        return "VC without quota"
    if job.held_gpus > cluster.quota_gpus(job.vc):
        return "larger than its VC's quota"
    return None


ProgressFn = Callable[[int, int], None]


def simulate(
    policy: Policy,
    jobs: Sequence[Job],
    *,
    window: tuple[float, float] | None = None,
    bin_seconds: float = DEFAULT_BIN_SECONDS,
    progress: ProgressFn | None = None,
    slowdown: Slowdown | None = None,
) -> RunResult:
    """Replay `jobs` (in submit order) through `policy` until every admitted job has finished.

    `window` is the time span over which time averages are taken (default: first to last submit).
    `progress(done, total)` is called now and then with the number of finished or dropped jobs.
    `slowdown` stretches each run by how spread its placement is (None: run times as traced)."""
    wall = time.perf_counter()
    cluster = policy.cluster
    if window is None:
        window = (jobs[0].submit, jobs[-1].submit) if jobs else (0.0, 0.0)
    timeline = Timeline(window, bin_seconds, cluster.total_gpus)
    result = RunResult(policy.name, cluster, {}, {}, timeline)
    records = result.records
    queues: dict[str, deque[Job]] = {}
    blocked: dict[str, int] = {}  # VC -> release epoch at which its head last failed
    epochs: dict[str, int] = {}  # per-VC release epochs (policies whose VCs are independent)
    shared_epoch = 0

    def epoch(vc: str) -> int:
        return epochs.get(vc, 0) if policy.vcs_independent else shared_epoch

    best_effort = policy.queueing == BEST_EFFORT_FIFO
    delay = policy.requeue_delay if best_effort else 0.0
    lag = policy.arrival_delay if best_effort else 0.0
    gap = policy.admission_gap if best_effort else 0.0
    # (time, requeue): a pass at that time; with requeue, the jobs set aside are offered a start again
    wakes: list[tuple[float, bool]] = []
    next_admit = float("-inf")  # with an admission gap: the earliest time of the next start

    def released(vc: str, now: float) -> None:
        nonlocal shared_epoch
        if delay > 0:
            heapq.heappush(wakes, (now + delay, True))
            return
        shared_epoch += 1
        epochs[vc] = epochs.get(vc, 0) + 1

    finishes: list[tuple[float, int, int]] = []  # (time, job id, run number)
    total = len(jobs)
    done = 0
    next_arrival = 0
    last_report = -1

    def report() -> None:
        nonlocal last_report
        if progress is not None and done != last_report:
            last_report = done
            progress(done, total)

    def start(job: Job, placement: Placement, now: float) -> None:
        rec = records[job.id]
        rec.start = now
        if rec.first_start is None:
            rec.first_start = now
        rec.placement = placement
        rec.runs += 1
        rec.waited += now - rec.queued_at
        run = job.duration - rec.saved
        if slowdown is not None and not slowdown.off:
            rec.stretch = slowdown.stretch(
                cluster, job.held_gpus, spread_level(cluster, placement.pods, job.held_gpus)
            )
            run *= rec.stretch
        rec.run_seconds = run
        heapq.heappush(finishes, (now + run, job.id, rec.runs))

    def requeue(jid: int, now: float, by: int) -> None:
        rec = records[jid]
        assert rec.start is not None
        rec.preempted += 1
        ran = now - rec.start
        every = rec.job.checkpoint_seconds
        kept = ran - ran % every if every else 0.0
        if kept:
            rec.saved += kept / rec.stretch
            rec.kept_run += kept
        lost = (ran - kept) * rec.job.held_gpus
        rec.lost_gpu_seconds += lost
        result.evictions.append(Eviction(by, jid, now, ran, lost))
        rec.start = None
        rec.placement = None
        rec.queued_at = now
        result.preemptions += 1
        queues[rec.job.vc].appendleft(rec.job)
        blocked.pop(rec.job.vc, None)

    def schedule(now: float) -> None:
        if policy.queueing == BEST_EFFORT_FIFO:
            best_effort_pass(now)
            return
        changed = True
        while changed:
            changed = False
            heads = sorted(
                (q[0].id, vc) for vc, q in queues.items() if q and blocked.get(vc, -1) != epoch(vc)
            )
            for _, vc in heads:
                q = queues[vc]
                while q and blocked.get(vc, -1) != epoch(vc):
                    job = q[0]
                    result.attempts += 1
                    placement = policy.try_start(job, now)
                    if placement is None:
                        blocked[vc] = epoch(vc)
                        _note_refusal(result, policy, job, now)
                        break
                    q.popleft()
                    blocked.pop(vc, None)
                    start(job, placement, now)
                    if placement.preempted:
                        changed = True
                        for jid in placement.preempted:
                            released(records[jid].job.vc, now)
                            requeue(jid, now, job.id)
            timeline.set(policy.allocated, policy.stranded)

    set_aside: dict[int, int] = {}  # job id -> release epoch at which it could not start (BestEffortFIFO)

    def best_effort_pass(now: float) -> None:
        """Kueue's BestEffortFIFO: rounds of one job per VC (its oldest job not set aside since the
        last release), ordered within the round as Kueue's scheduler orders its heads: those that
        stay within their VC's quota first, then the oldest. A job that cannot start is set aside
        until GPUs are freed (Kueue requeues its inadmissible workloads on a release), so the next
        job of its VC is offered a start. Jobs of one VC and shape share their answer while nothing
        has started or been released (the policy decides from the VC, the shape and the cluster)."""
        nonlocal next_admit
        version = 0  # bumped by every start: a failed shape's answer holds until then
        failed: dict[tuple[str, tuple[int, ...]], tuple[int, int]] = {}
        while True:
            waiting = {
                vc: iter([j for j in q if set_aside.get(j.id, -1) != epoch(vc)])
                for vc, q in queues.items()
                if q
            }
            heads = {vc: next(it, None) for vc, it in waiting.items()}
            released_now = False
            while not released_now and any(j is not None for j in heads.values()):
                order = sorted((policy.borrows(j), j.id, vc) for vc, j in heads.items() if j is not None)
                for _, _, vc in order:
                    if now < next_admit:  # the admission gap: come back when it has passed
                        heapq.heappush(wakes, (next_admit, False))
                        timeline.set(policy.allocated, policy.stranded)
                        return
                    job = heads[vc]
                    assert job is not None
                    heads[vc] = next(waiting[vc], None)
                    key = (vc, job.pods)
                    if failed.get(key) == (version, epoch(vc)):
                        set_aside[job.id] = epoch(vc)
                        continue
                    result.attempts += 1
                    placement = policy.try_start(job, now)
                    if placement is None:
                        set_aside[job.id] = epoch(vc)
                        failed[key] = (version, epoch(vc))
                        _note_refusal(result, policy, job, now)
                        continue
                    version += 1
                    next_admit = now + gap if gap > 0 else next_admit
                    queues[vc].remove(job)
                    set_aside.pop(job.id, None)
                    start(job, placement, now)
                    if placement.preempted:
                        for jid in placement.preempted:
                            released(records[jid].job.vc, now)
                            requeue(jid, now, job.id)
                        released_now = True  # every job set aside may fit now: new rounds
                        break
            timeline.set(policy.allocated, policy.stranded)
            if not released_now:
                return

    now = jobs[0].submit if jobs else 0.0
    while next_arrival < total or finishes or wakes:
        t_arr = jobs[next_arrival].submit + lag if next_arrival < total else float("inf")
        t_fin = finishes[0][0] if finishes else float("inf")
        now = min(t_arr, t_fin, wakes[0][0] if wakes else float("inf"))
        timeline.advance(now)
        while finishes and finishes[0][0] <= now:
            _, jid, run = heapq.heappop(finishes)
            rec = records[jid]
            if rec.runs != run or rec.start is None:
                continue  # a run that was preempted
            rec.end = now
            policy.finish(rec.job, now)
            released(rec.job.vc, now)
            done += 1
        while wakes and wakes[0][0] <= now:
            if heapq.heappop(wakes)[1]:
                shared_epoch += 1
        while next_arrival < total and jobs[next_arrival].submit + lag <= now:
            job = jobs[next_arrival]
            next_arrival += 1
            why = unschedulable_reason(cluster, job)
            if why is not None:
                result.dropped.setdefault(why, []).append(job.id)
                done += 1
                continue
            records[job.id] = JobRecord(job, queued_at=job.submit)
            q = queues.setdefault(job.vc, deque())
            if not q:
                blocked.pop(job.vc, None)
            q.append(job)
        schedule(now)
        report()
    timeline.advance(max(now, window[1]))
    result.end_time = now
    result.wall_seconds = time.perf_counter() - wall
    stuck = [j.id for q in queues.values() for j in q]
    if stuck:
        raise RuntimeError(f"{policy.name}: {len(stuck)} jobs never started (first: j{stuck[0]})")
    return result


def _note_refusal(result: RunResult, policy: Policy, job: Job, now: float) -> None:
    """FGD's "allocation rate at the first refusal", for whole-node pods refused by fragmentation:
    the first time a job with 8-GPU pods is refused although its VC has quota for it and the cluster
    has enough free GPUs in total, but fewer wholly free nodes than it has pods. Records the
    allocated share of the cluster at that moment (None: it never happened)."""
    if result.first_refusal_allocation is not None:
        return
    cluster = policy.cluster
    whole = sum(1 for g in job.pods if g >= cluster.gpus_per_node)
    if not whole or not policy.within_quota(job):
        return
    free = cluster.total_gpus - policy.allocated
    if free >= job.held_gpus and policy.whole_free_nodes < whole:
        result.first_refusal_allocation = policy.allocated / cluster.total_gpus
        result.first_refusal_time = now


PolicyFactory = Callable[[SimCluster], Policy]


def simulate_private(
    jobs: Sequence[Job],
    shared: SimCluster,
    factory: PolicyFactory,
    *,
    name: str = "private",
    window: tuple[float, float] | None = None,
    bin_seconds: float = DEFAULT_BIN_SECONDS,
    progress: ProgressFn | None = None,
    slowdown: Slowdown | None = None,
) -> RunResult:
    """Each VC alone on a private cluster of exactly its quota (`factory` builds its scheduler),
    replayed separately; the results are merged as if the private clusters were one (allocated and
    stranded GPUs add up, per-job records keep their ids). Jobs `shared` would drop are dropped."""
    wall = time.perf_counter()
    if window is None:
        window = (jobs[0].submit, jobs[-1].submit) if jobs else (0.0, 0.0)
    merged = RunResult(name, shared, {}, {}, Timeline(window, bin_seconds, shared.total_gpus))
    merged.refusals_tracked = False
    by_vc: dict[str, list[Job]] = {}
    for job in jobs:
        why = unschedulable_reason(shared, job)
        if why is not None:
            merged.dropped.setdefault(why, []).append(job.id)
        else:
            by_vc.setdefault(job.vc, []).append(job)
    done = sum(len(v) for v in merged.dropped.values())
    for vc in sorted(by_vc):
        policy = factory(private_cluster(vc, shared.quotas[vc], shared.rack_size))
        base = done

        def step(k: int, _n: int, base: int = base) -> None:
            if progress is not None:
                progress(base + k, len(jobs))

        r = simulate(
            policy, by_vc[vc], window=window, bin_seconds=bin_seconds, progress=step, slowdown=slowdown
        )
        done += len(by_vc[vc])
        merged.records.update(r.records)
        merged.preemptions += r.preemptions
        merged.attempts += r.attempts
        merged.end_time = max(merged.end_time, r.end_time)
        _add_timeline(merged.timeline, r.timeline)
    merged.wall_seconds = time.perf_counter() - wall
    return merged


def _add_timeline(into: Timeline, other: Timeline) -> None:
    into.area_alloc += other.area_alloc
    into.area_stranded += other.area_stranded
    for k in range(len(other.bins_alloc)):
        while len(into.bins_alloc) <= k:
            into.bins_alloc.append(0.0)
            into.bins_stranded.append(0.0)
        into.bins_alloc[k] += other.bins_alloc[k]
        into.bins_stranded[k] += other.bins_stranded[k]
