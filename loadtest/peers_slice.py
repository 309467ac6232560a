"""The jobs `make bench-peers` replays: a slice of the Philly week, warm-started and compressed in time.

A slice that starts on an empty cluster never fills it: the Philly week's GPUs are held mostly by
jobs that run for days, so twelve hours of submissions from an empty start keep 640 GPUs only
10-30% busy, quotas never fill and nothing is borrowed or reclaimed (`topogang simulate` on such
slices shows no preemption at all). The slice is therefore *warm-started*: every job submitted
before the slice and still running at its start (by its traced submit and run time) is submitted
at time 0 with the run time it has left. These warm jobs load the cluster as the week had it
(about 630 of 640 GPUs held at the default start, most VCs at or above their quota), they count
in utilisation and stranded GPUs, and they are left out of every per-job figure: those are taken
over the jobs submitted inside the slice.

Default slice (`DEFAULT_START_HOURS`, `DEFAULT_HOURS`, `DEFAULT_FACTOR`): the 12 hours from hour
96 of the shipped week (2017-10-27 00:01), compressed 120x: one trace hour passes in 30 s, the
slice's submissions in 6 minutes, and an arm ends at most `DEFAULT_DRAIN_HOURS` (6 trace hours,
3 minutes) after the last one. Why these: hour 96 is where the week's warm load is highest (633
GPUs held by jobs from before it, 18 multi-node gangs submitted in the following day), so quotas
are full from the start and the VCs that borrow are reclaimed from; 120x keeps a control-plane
second (kube-scheduler's backoff, a Kueue admission cycle, KWOK's status updates) at 2 trace
minutes, small against the hours the trace's multi-GPU jobs queue, while three arms and their
control planes fit in about 35 minutes on two shared cores. A job of the slice that has not
started when its arm ends is reported as unstarted, not given a made-up delay.

Jobs that can never start are left out before any arm runs, by the simulator's rule
(`engine.unschedulable_reason`: a gang larger than its VC's quota, a VC without quota).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from loadtest.simulate.cluster import SimCluster
from loadtest.simulate.engine import unschedulable_reason
from loadtest.simulate.trace import Job, load_trace

DEFAULT_START_HOURS = 96.0
DEFAULT_HOURS = 12.0
DEFAULT_FACTOR = 120.0
DEFAULT_DRAIN_HOURS = 6.0


@dataclass(frozen=True, slots=True)
class PeerSlice:
    """The jobs of one bench run. Times are trace seconds from the slice's start; `warm` holds
    the ids of the jobs that were already running then (submitted at 0 with their remaining run)."""

    jobs: tuple[Job, ...]
    warm: frozenset[int]
    start_hours: float
    hours: float
    factor: float
    drain_hours: float
    dropped: dict[str, int]
    source: str

    @property
    def horizon(self) -> float:
        """Trace seconds after which an arm stops: the slice plus its drain."""
        return (self.hours + self.drain_hours) * 3600

    def real_seconds(self, trace_seconds: float) -> float:
        return trace_seconds / self.factor

    def measured(self) -> list[Job]:
        """The jobs every per-job figure is taken over: those submitted inside the slice."""
        return [j for j in self.jobs if j.id not in self.warm]


def cut_slice(
    trace: Path,
    cluster: SimCluster,
    *,
    start_hours: float = DEFAULT_START_HOURS,
    hours: float = DEFAULT_HOURS,
    factor: float = DEFAULT_FACTOR,
    drain_hours: float = DEFAULT_DRAIN_HOURS,
    limit: int | None = None,
    warm: bool = True,
) -> PeerSlice:
    """The slice of `trace` from `start_hours` (after its first submit) for `hours`, warm-started
    unless `warm` is False; `limit` keeps only the first jobs of the slice (and the warm jobs of
    the VCs those belong to), for smoke runs."""
    if hours <= 0 or factor <= 0 or drain_hours < 0 or start_hours < 0:
        raise ValueError(
            "--hours and --factor must be positive, --start-hours and --drain-hours not negative"
        )
    full = load_trace(trace)
    begin = start_hours * 3600
    end = begin + hours * 3600
    inside = [j for j in full.jobs if begin <= j.submit < end]
    if limit is not None:
        inside = inside[:limit]
    running = [j for j in full.jobs if j.submit < begin < j.submit + j.duration] if warm else []
    if limit is not None:
        vcs = {j.vc for j in inside}
        running = [j for j in running if j.vc in vcs][: max(1, limit // 2)]
    out: list[Job] = []
    warm_ids: set[int] = set()
    dropped: dict[str, int] = {}

    def add(vc: str, submit: float, duration: float, gpus: int, pods: tuple[int, ...], is_warm: bool) -> None:
        job = Job(len(out), vc, submit, duration, gpus, pods)
        why = unschedulable_reason(cluster, job)
        if why is not None:
            dropped[why] = dropped.get(why, 0) + 1
            return
        if is_warm:
            warm_ids.add(job.id)
        out.append(job)

    for j in running:
        add(j.vc, 0.0, j.submit + j.duration - begin, j.gpus, j.pods, True)
    for j in inside:
        add(j.vc, j.submit - begin, j.duration, j.gpus, j.pods, False)
    if full.start is not None:
        at = full.start + timedelta(seconds=begin)
        source = f"{Path(trace).name} from {at:%Y-%m-%d %H:%M} for {hours:g} h"
    else:
        source = Path(trace).name
    return PeerSlice(
        tuple(out), frozenset(warm_ids), start_hours, hours, factor, drain_hours, dropped, source
    )
